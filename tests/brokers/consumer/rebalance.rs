//! What a rebalance stops, seen from the records. Under the cooperative protocol a member keeps
//! processing the partitions it keeps while the group rebalances (the round runs on its
//! membership thread); under the eager protocol everything stops, from the revocation of every
//! partition until the new assignment (the poll thread runs the round).
//!
//! Observed by order of events, never by a timing bound: member A bootstraps through a proxy
//! that reports A's group requests and answers into the same log where A's handler records every
//! record it is handed and completes. A third member C, behind a proxy the test holds, keeps the
//! rebalance open: the coordinator waits for C's JoinGroup until C's session runs out, so A's
//! JoinGroup stays at the coordinator for seconds, with plenty of records waiting on A's
//! partitions.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use rebalance_guard::consumer::{Consumer, ConsumerError};
use support::consumer::{config, produce_to_each_partition, wait_until};
use support::ours::{OurMember, OurMemberSpec};
use support::proxy::{Proxy, Traffic};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(90);
const PARTITIONS: i32 = 6;

/// One entry of the shared log, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    /// A's request of this api key left A (seen by A's proxy).
    Request(i16),
    /// The answer to A's request of this api key is about to reach A.
    Response(i16),
    /// A's handler was handed this record (partition, offset).
    Handed(i32, i64),
    /// A's handler completed it.
    Completed(i32, i64),
    /// Member B is being started: the rebalance under test begins after this.
    SecondMemberStarts,
}

type Log = Arc<Mutex<Vec<Event>>>;

fn push(log: &Log, event: Event) {
    log.lock().unwrap().push(event);
}

/// The positions in `log` of the rebalance under test: (the last OffsetCommit request before A's
/// first JoinGroup after B started, A's last JoinGroup request before its SyncGroup answer, that
/// SyncGroup answer).
fn rebalance_window(log: &[Event]) -> Option<(usize, usize, usize)> {
    let start = log.iter().position(|e| *e == Event::SecondMemberStarts)?;
    let join = ApiKey::JoinGroup as i16;
    let sync = ApiKey::SyncGroup as i16;
    let first_join = (start..log.len()).find(|&i| log[i] == Event::Request(join))?;
    let synced = (first_join..log.len()).find(|&i| log[i] == Event::Response(sync))?;
    let last_join = (first_join..synced)
        .rev()
        .find(|&i| log[i] == Event::Request(join))?;
    let last_commit = (0..first_join)
        .rev()
        .find(|&i| log[i] == Event::Request(ApiKey::OffsetCommit as i16))
        .unwrap_or(start);
    Some((last_commit, last_join, synced))
}

fn around(log: &[Event], from: usize, to: usize) -> String {
    let lo = from.saturating_sub(5);
    let hi = (to + 5).min(log.len());
    log[lo..hi]
        .iter()
        .enumerate()
        .map(|(i, e)| format!("  {}: {e:?}", lo + i))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the scenario: C, then A, settle on 3 partitions each; C's proxy is held and B joins.
/// Returns the log and A's assignment at the end.
fn run(kind: BrokerKind, strategy: &str) -> (Vec<Event>, BTreeSet<i32>) {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = kind.start();
    let bootstrap = broker.bootstrap();
    let topic = unique_name("orders");
    broker.create_topic(&topic, PARTITIONS as u32);
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 3000);
    let group = unique_name("group");

    let c_proxy = Proxy::start(&bootstrap);
    let c = OurMember::start(OurMemberSpec::new(c_proxy.addr(), &group, &topic, strategy));
    c.wait_for("C owns every partition", WAIT, |_, owned| {
        owned.len() == PARTITIONS as usize
    })
    .unwrap();

    let log: Log = Arc::default();
    let a_proxy = Proxy::start(&bootstrap);
    let observed = log.clone();
    a_proxy.observe(move |traffic| {
        push(
            &observed,
            match traffic {
                Traffic::Request(key) => Event::Request(key),
                Traffic::Response(key) => Event::Response(key),
            },
        )
    });
    let stop = Arc::new(AtomicBool::new(false));
    let a_config = config(
        a_proxy.addr(),
        &group,
        &[
            ("partition.assignment.strategy", strategy),
            ("max.poll.records", "20"),
        ],
    );
    let (a_log, a_stop, a_topic) = (log.clone(), stop.clone(), topic.clone());
    let a = thread::spawn(move || {
        let mut consumer = Consumer::subscribe(a_config, &[&a_topic]).expect("subscribe");
        while !a_stop.load(Ordering::SeqCst) {
            {
                let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
                while let Some(delivery) = batch.next() {
                    let (p, o) = (delivery.record.partition, delivery.record.offset);
                    push(&a_log, Event::Handed(p, o));
                    thread::sleep(Duration::from_millis(2));
                    batch.complete(delivery);
                    push(&a_log, Event::Completed(p, o));
                }
            }
            match consumer.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(e) => panic!("A: {e}"),
            }
        }
        consumer
    });

    // C and A settle on three partitions each, and A is processing its three.
    wait_until("C and A split the partitions", WAIT, || {
        let c_owned: BTreeSet<i32> = c.owned().iter().map(|(_, p)| *p).collect();
        c_owned.len() == 3 && {
            let recent: BTreeSet<i32> = {
                let log = log.lock().unwrap();
                let len = log.len();
                log[len.saturating_sub(200)..]
                    .iter()
                    .filter_map(|e| match e {
                        Event::Handed(p, _) => Some(*p),
                        _ => None,
                    })
                    .collect()
            };
            recent.len() == 3 && recent.is_disjoint(&c_owned)
        }
    });

    // C goes silent; B joins. The coordinator holds the round until C's session runs out.
    c_proxy.hold();
    push(&log, Event::SecondMemberStarts);
    let b = OurMember::start(OurMemberSpec::new(&bootstrap, &group, &topic, strategy));
    b.wait_for("B owns partitions", WAIT, |_, owned| !owned.is_empty())
        .unwrap();
    wait_until("A processes again after its SyncGroup answer", WAIT, || {
        let log = log.lock().unwrap();
        rebalance_window(&log).is_some_and(|(_, _, synced)| {
            log[synced..]
                .iter()
                .any(|e| matches!(e, Event::Completed(..)))
        })
    });

    stop.store(true, Ordering::SeqCst);
    let a = a.join().expect("A's thread");
    let assignment: BTreeSet<i32> = a.assignment().iter().map(|tp| tp.partition).collect();
    a.close().expect("close A");
    c_proxy.release();
    drop(c);
    drop(b);
    let log = log.lock().unwrap().clone();
    (log, assignment)
}

/// Cooperative: between A's JoinGroup and the SyncGroup answer that ends the rebalance, A is
/// handed records of a partition it keeps and completes them.
fn kept_partitions_flow_while_the_group_rebalances(kind: BrokerKind) {
    let (log, kept) = run(kind, "cooperative-sticky");
    let (_, joined, synced) = rebalance_window(&log).expect("the rebalance is in the log");
    let inside: Vec<(i32, i64)> = log[joined..synced]
        .iter()
        .filter_map(|e| match e {
            Event::Handed(p, o) if kept.contains(p) => Some((*p, *o)),
            _ => None,
        })
        .filter(|&(p, o)| log[joined..synced].contains(&Event::Completed(p, o)))
        .collect();
    assert!(
        !inside.is_empty(),
        "{kind:?}: no record of a kept partition ({kept:?}) was handed out and completed while \
         A's JoinGroup was at the coordinator:\n{}",
        around(&log, joined, synced)
    );
}

crate::on_brokers! {
    mock {
        kept_partitions_flow_while_the_group_rebalances,
    }
}

mod kafka {
    use super::*;

    crate::on_brokers!(
        kafka:
        kept_partitions_flow_while_the_group_rebalances,
    );

    /// Eager: from the last commit before the rebalance's JoinGroup (the revocation of everything
    /// comes after it) to the SyncGroup answer, not one record is handed out; before and after, A
    /// processes, so the stop is the rebalance's and not an idle consumer's.
    #[test]
    fn an_eager_rebalance_stops_every_partition_until_the_new_assignment() {
        let (log, _) = run(BrokerKind::Kafka, "range");
        let (revoked, _, synced) = rebalance_window(&log).expect("the rebalance is in the log");
        let handed_inside: Vec<&Event> = log[revoked..synced]
            .iter()
            .filter(|e| matches!(e, Event::Handed(..)))
            .collect();
        assert!(
            handed_inside.is_empty(),
            "records handed out during an eager rebalance: {handed_inside:?}\n{}",
            around(&log, revoked, synced)
        );
        assert!(log[..revoked]
            .iter()
            .any(|e| matches!(e, Event::Handed(..))));
        assert!(log[synced..].iter().any(|e| matches!(e, Event::Handed(..))));
    }
}

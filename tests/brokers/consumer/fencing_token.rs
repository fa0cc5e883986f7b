//! The fencing token on real Kafka (issue 37): every assignment of a partition raises its token
//! through the group's committed metadata before a record of it is handed out, so the token
//! only grows as partitions move between members (both group protocols, Kafka 4.4 and 3.9),
//! and a static member's new process, which the classic protocol gives the old process's
//! generation, takes a larger token than the process it replaced. Needs `scripts/setup-test-env`.
//!
//! The sink-side half (a database that refuses a smaller token) is tested with PostgreSQL
//! through `examples/order_book_pg`.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rebalance_guard::consumer::{Consumer, ConsumerConfig, ConsumerError};
use support::consumer::{
    committed_with_metadata, config, consumer_protocol_config, produce_to_each_partition,
    wait_until,
};
use support::{unique_name, BrokerKind};

const PARTITIONS: i32 = 4;
const WAIT: Duration = Duration::from_secs(90);

/// Every record a member was handed: (member, partition, offset, token), in the order handed.
type Handed = Arc<Mutex<Vec<(String, i32, i64, u64)>>>;

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Classic,
    Consumer,
}

fn member_config(
    protocol: Protocol,
    bootstrap: &str,
    group: &str,
    extra: &[(&str, &str)],
) -> ConsumerConfig {
    let mut all = vec![("max.poll.records", "20")];
    all.extend_from_slice(extra);
    match protocol {
        Protocol::Classic => {
            all.push(("partition.assignment.strategy", "cooperative-sticky"));
            config(bootstrap, group, &all)
        }
        Protocol::Consumer => consumer_protocol_config(bootstrap, group, &all),
    }
}

/// One member on its own thread: poll, record, commit, until stopped (then close) or frozen
/// (then it stops polling and never closes, as a stalled process).
struct Member {
    stop: Arc<AtomicBool>,
    freeze: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Member {
    fn start(name: &str, config: ConsumerConfig, topic: &str, handed: &Handed) -> Member {
        let (stop, freeze) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (s, f, h, topic, name) = (
            stop.clone(),
            Arc::clone(&freeze),
            handed.clone(),
            topic.to_string(),
            name.to_string(),
        );
        let thread = thread::spawn(move || -> Result<(), String> {
            let mut consumer = Consumer::subscribe(config, &[&topic]).map_err(|e| e.to_string())?;
            while !s.load(Ordering::SeqCst) {
                if f.load(Ordering::SeqCst) {
                    // A stalled process: no poll, no close; the consumer is dropped when the
                    // test ends the thread.
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                {
                    let mut batch = match consumer.poll(Duration::from_millis(100)) {
                        Ok(batch) => batch,
                        Err(error) => return Err(error.to_string()),
                    };
                    while let Some(delivery) = batch.next() {
                        h.lock().unwrap().push((
                            name.clone(),
                            delivery.record.partition,
                            delivery.record.offset,
                            delivery.fencing_token(),
                        ));
                        batch.complete(delivery);
                    }
                }
                match consumer.commit() {
                    Ok(_) | Err(ConsumerError::Commit(_)) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            if f.load(Ordering::SeqCst) {
                return Ok(());
            }
            consumer.close().map_err(|e| e.to_string())
        });
        Member {
            stop,
            freeze,
            thread: Some(thread),
        }
    }

    fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .expect("member thread")
                .expect("member ran cleanly");
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn distinct_records(handed: &Handed) -> usize {
    let seen: std::collections::BTreeSet<(i32, i64)> = handed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p, o, _)| (*p, *o))
        .collect();
    seen.len()
}

/// Per partition, in the order records were handed out: tokens never go down; a token is never
/// 0 and belongs to one member; a member's next assignment of the partition has a larger token.
/// Returns each partition's owners with their tokens, in order.
fn assert_tokens_only_grow(handed: &Handed) -> BTreeMap<i32, Vec<(String, u64)>> {
    let mut runs: BTreeMap<i32, Vec<(String, u64)>> = BTreeMap::new();
    let mut holder: BTreeMap<(i32, u64), String> = BTreeMap::new();
    for (member, partition, offset, token) in handed.lock().unwrap().iter() {
        assert!(
            *token > 0,
            "{member} handed {partition}@{offset} without a token"
        );
        let owner = holder.entry((*partition, *token)).or_insert(member.clone());
        assert_eq!(
            owner, member,
            "token {token} of partition {partition} carried by two members"
        );
        let run = runs.entry(*partition).or_default();
        match run.last() {
            Some((_, last)) if last == token => {}
            Some((last_member, last)) => assert!(
                token > last,
                "partition {partition}: {member}'s token {token} after {last_member}'s {last}"
            ),
            None => {}
        }
        if run.last().map(|(_, t)| t) != Some(token) {
            run.push((member.clone(), *token));
        }
    }
    runs
}

/// A joins and reads everything; B joins (some partitions move to it); A leaves (they all
/// move to B). Each move gives the partition a larger token, and the group's committed
/// metadata carries the last owner's.
fn tokens_grow_as_partitions_move(kind: BrokerKind, protocol: Protocol) {
    let broker = kind.start();
    let bootstrap = broker.bootstrap();
    let topic = unique_name("token-moves");
    broker.create_topic(&topic, PARTITIONS as u32);
    let group = unique_name("token-moves");
    let handed = Handed::default();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 10);
    let a = Member::start(
        "a",
        member_config(protocol, &bootstrap, &group, &[]),
        &topic,
        &handed,
    );
    wait_until("a read everything", WAIT, || {
        distinct_records(&handed) == 40
    });
    let b = Member::start(
        "b",
        member_config(protocol, &bootstrap, &group, &[]),
        &topic,
        &handed,
    );
    wait_until("b owns some partitions", WAIT, || {
        handed.lock().unwrap().iter().any(|(m, ..)| m == "b") || {
            produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 1);
            false
        }
    });
    a.close();
    let before = distinct_records(&handed);
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 5);
    wait_until("b read the rest", WAIT, || {
        distinct_records(&handed) >= before + 20
    });
    b.close();
    let runs = assert_tokens_only_grow(&handed);
    let moved = runs.values().filter(|owners| owners.len() > 1).count();
    assert!(moved > 0, "no partition changed hands: {runs:?}");
    for (partition, (_, metadata)) in
        committed_with_metadata(&bootstrap, &group, &topic, PARTITIONS)
    {
        let last = runs[&partition].last().map(|(_, t)| *t).unwrap_or(0);
        let text = metadata.unwrap_or_default();
        assert!(
            text.starts_with(&format!("rgc2;{last};")),
            "{kind:?} {protocol:?}: partition {partition}'s commit carries {text:?}, the last \
             owner's token is {last}"
        );
    }
}

/// A static member's process is replaced by a new one under its `group.instance.id`: under the
/// classic protocol the old one stalls (no poll, no close) and the coordinator gives the new
/// one the old generation at once (the generation cannot tell them apart); under KIP-848 the
/// old one leaves as a static member first. The new process's token is larger than every token
/// the old one used.
fn a_static_restart_takes_a_larger_token(kind: BrokerKind, protocol: Protocol) {
    let broker = kind.start();
    let bootstrap = broker.bootstrap();
    let topic = unique_name("token-static");
    broker.create_topic(&topic, PARTITIONS as u32);
    let group = unique_name("token-static");
    let handed = Handed::default();
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 10);
    let instance = [("group.instance.id", "static-0")];
    let old = Member::start(
        "old",
        member_config(protocol, &bootstrap, &group, &instance),
        &topic,
        &handed,
    );
    wait_until("old read everything", WAIT, || {
        distinct_records(&handed) == 40
    });
    // Classic: the old process stalls, its heartbeats go on (a stalled poll loop) and the new
    // process replaces it at once. KIP-848 refuses a second live member under an instance id
    // (UNRELEASED_INSTANCE_ID) until the first left or its session ended: it leaves (epoch -2,
    // a static member's restart) before the new process starts.
    let old = match protocol {
        Protocol::Classic => {
            old.freeze.store(true, Ordering::SeqCst);
            Some(old)
        }
        Protocol::Consumer => {
            old.close();
            None
        }
    };
    let new = Member::start(
        "new",
        member_config(protocol, &bootstrap, &group, &instance),
        &topic,
        &handed,
    );
    produce_to_each_partition(&bootstrap, &topic, PARTITIONS, 5);
    wait_until("the new process read the new records", WAIT, || {
        distinct_records(&handed) == 60
    });
    new.close();
    drop(old);
    let runs = assert_tokens_only_grow(&handed);
    let old_max = handed
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, ..)| m == "old")
        .map(|(.., t)| *t)
        .max()
        .unwrap_or(0);
    for (member, partition, offset, token) in handed.lock().unwrap().iter() {
        if member == "new" {
            assert!(
                *token > old_max,
                "{kind:?} {protocol:?}: the new process's {partition}@{offset} carries {token}, \
                 the stalled one used up to {old_max}: {runs:?}"
            );
        }
    }
}

crate::on_brokers! {
    kafka {
        tokens_grow_as_partitions_move => super::tokens_grow_as_partitions_move(BrokerKind::Kafka, Protocol::Classic),
        tokens_grow_as_partitions_move_kip848 => super::tokens_grow_as_partitions_move(BrokerKind::Kafka, Protocol::Consumer),
        a_static_restart_takes_a_larger_token => super::a_static_restart_takes_a_larger_token(BrokerKind::Kafka, Protocol::Classic),
        a_static_restart_takes_a_larger_token_kip848 => super::a_static_restart_takes_a_larger_token(BrokerKind::Kafka, Protocol::Consumer),
    }

    kafka3 {
        tokens_grow_as_partitions_move => super::tokens_grow_as_partitions_move(BrokerKind::Kafka3, Protocol::Classic),
        a_static_restart_takes_a_larger_token => super::a_static_restart_takes_a_larger_token(BrokerKind::Kafka3, Protocol::Classic),
    }
}

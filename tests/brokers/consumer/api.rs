//! The calls a Java or rust-rdkafka user looks for, on real Kafka (the run's shared 4.x broker):
//! positions and lookups, seeks (guard events), the group-less `assign`, the waker, the batch's
//! own commit, and the rebalance listener under the classic cooperative protocol and KIP-848.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_guard::consumer::{
    AssignedContext, Consumer, ConsumerConfig, ConsumerRebalanceListener, RevokedPartition,
};
use rebalance_guard::guard::BoxError;
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord};
use rebalance_guard::TopicPartition;
use support::consumer::{
    committed, config, consumer_protocol_config, produce_until_accepted, wait_until,
};
use support::{unique_name, Broker, Kafka, KafkaVersion};

const WAIT: Duration = Duration::from_secs(60);

fn kafka() -> &'static Kafka {
    Kafka::shared(KafkaVersion::Newest)
}

/// A new topic of `partitions` partitions with `count` records in each, the record at offset
/// `i` stamped `BASE_TIME + i` seconds.
fn topic_with(partitions: u32, count: i64) -> String {
    let topic = unique_name("api");
    kafka().create_topic(&topic, partitions);
    let mut client =
        Client::connect(ClientConfig::from_bootstrap_str(kafka().bootstrap())).expect("client");
    for p in (0..partitions as i32).filter(|_| count > 0) {
        let records: Vec<ProduceRecord> = (0..count)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("{p}-{i}"))),
                value: Some(Bytes::from_static(b"order")),
                headers: Vec::new(),
                timestamp: Some(BASE_TIME + i * 1000),
            })
            .collect();
        produce_until_accepted(
            &mut client,
            &TopicPartition::new(topic.as_str(), p),
            &records,
            "produce",
        );
    }
    topic
}

const BASE_TIME: i64 = 1_700_000_000_000;

/// Polls, completing every record, until `done(records seen as (partition, offset))`.
fn consume_until(
    consumer: &mut Consumer,
    what: &str,
    seen: &mut Vec<(i32, i64)>,
    mut done: impl FnMut(&[(i32, i64)]) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    while !done(seen) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {seen:?}"
        );
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        while let Some(d) = batch.next() {
            seen.push((d.record.partition, d.record.offset));
            batch.complete(d);
        }
    }
}

#[test]
fn positions_lookups_and_seeks_on_owned_partitions() {
    let topic = topic_with(2, 20);
    let group = unique_name("api-group");
    let mut consumer = Consumer::subscribe(
        config(
            kafka().bootstrap(),
            &group,
            &[("commit.interval.ms", "3600000")],
        ),
        &[&topic],
    )
    .expect("subscribe");
    let tps = [
        TopicPartition::new(topic.as_str(), 0),
        TopicPartition::new(topic.as_str(), 1),
    ];
    let mut seen = Vec::new();
    consume_until(&mut consumer, "the first records", &mut seen, |s| {
        s.len() >= 10
    });
    assert_eq!(
        consumer.beginning_offsets(&tps).expect("beginning")[&tps[0]],
        0
    );
    assert_eq!(consumer.end_offsets(&tps).expect("end")[&tps[1]], 20);
    let found = consumer
        .offsets_for_times(&[(tps[0].clone(), BASE_TIME + 7_500)])
        .expect("offsets for times");
    assert_eq!(
        found[&tps[0]],
        Some(8),
        "the first record at or after 7.5 s"
    );
    let late = consumer
        .offsets_for_times(&[(tps[1].clone(), BASE_TIME + 3_600_000)])
        .expect("offsets for times");
    assert_eq!(late[&tps[1]], None, "no record that late");
    consume_until(&mut consumer, "all forty", &mut seen, |s| s.len() >= 40);
    assert_eq!(consumer.position(&tps[0]), Some(20));
    // A seek back on an owned partition: read again from there, and committed there.
    consumer.seek(&tps[0], 15).expect("seek");
    assert_eq!(consumer.position(&tps[0]), Some(15));
    let mut again = Vec::new();
    consume_until(
        &mut consumer,
        "the records after the seek",
        &mut again,
        |s| s.len() >= 5,
    );
    assert_eq!(again, (15..20).map(|o| (0, o)).collect::<Vec<_>>());
    consumer.commit().expect("commit");
    let committed_now = consumer.committed(&tps).expect("committed");
    assert_eq!(committed_now[&tps[0]], Some(20));
    assert_eq!(committed_now[&tps[1]], Some(20));
    consumer.seek(&tps[1], 5).expect("seek back");
    consumer.commit().expect("commit the seek point");
    assert_eq!(
        consumer.committed(&tps).expect("committed")[&tps[1]],
        Some(5),
        "Java's seek then commitSync"
    );
    consumer.seek_to_end(&tps).expect("seek to end");
    assert_eq!(consumer.position(&tps[1]), Some(20));
    // A partition this member does not own is refused, and nothing moved.
    let foreign = TopicPartition::new(topic.as_str(), 7);
    assert!(consumer.seek(&foreign, 0).is_err());
    consumer.close().expect("close");
    let after = committed(kafka().bootstrap(), &group, &topic, 2);
    assert_eq!(after[&1], Some(20), "close committed the end");
}

#[test]
fn assign_reads_without_a_group_and_commits_only_when_asked() {
    let topic = topic_with(2, 10);
    let group = unique_name("api-assign");
    let tp = TopicPartition::new(topic.as_str(), 1);
    let mut consumer = Consumer::assign(
        config(
            kafka().bootstrap(),
            &group,
            &[("commit.interval.ms", "100")],
        ),
        std::slice::from_ref(&tp),
    )
    .expect("assign");
    assert!(
        consumer.assignment().is_empty(),
        "handed out at the first poll"
    );
    let mut seen = Vec::new();
    consume_until(&mut consumer, "partition 1", &mut seen, |s| s.len() >= 10);
    assert!(seen.iter().all(|(p, _)| *p == 1), "only what was assigned");
    assert_eq!(consumer.assignment(), vec![tp.clone()]);
    assert_eq!(consumer.generation().generation_id, -1, "no group joined");
    // Paced commits are off: nothing is committed by itself.
    thread::sleep(Duration::from_millis(300));
    let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
    while let Some(d) = batch.next() {
        batch.complete(d);
    }
    drop(batch);
    assert_eq!(committed(kafka().bootstrap(), &group, &topic, 2)[&1], None);
    // Seek (a replay from offset 4), then a commit the application asks for.
    consumer.seek(&tp, 4).expect("seek");
    let mut replay = Vec::new();
    consume_until(&mut consumer, "the replay", &mut replay, |s| s.len() >= 6);
    assert_eq!(replay.first(), Some(&(1, 4)));
    consumer.commit().expect("commit from outside a group");
    assert_eq!(
        committed(kafka().bootstrap(), &group, &topic, 2)[&1],
        Some(10)
    );
    consumer.seek(&tp, 2).expect("seek back");
    consumer.close().expect("close");
    assert_eq!(
        committed(kafka().bootstrap(), &group, &topic, 2)[&1],
        Some(10),
        "close commits nothing outside a group"
    );
}

#[test]
fn the_waker_ends_a_blocked_poll_and_run_at_once() {
    let topic = topic_with(1, 0);
    let group = unique_name("api-wake");
    // A fetch that would wait 20 s at the broker, and a poll allowed a minute.
    let mut consumer = Consumer::subscribe(
        config(
            kafka().bootstrap(),
            &group,
            &[("fetch.max.wait.ms", "20000")],
        ),
        &[&topic],
    )
    .expect("subscribe");
    wait_until("the assignment", WAIT, || {
        drop(consumer.poll(Duration::from_millis(100)).expect("poll"));
        !consumer.assignment().is_empty()
    });
    let waker = consumer.waker();
    let waking = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        waker.wake();
    });
    let started = Instant::now();
    let batch = consumer.poll(Duration::from_secs(60)).expect("poll");
    let took = started.elapsed();
    drop(batch);
    waking.join().expect("waking thread");
    assert!(
        took < Duration::from_secs(10),
        "the wake did not end the poll blocked in its fetch ({took:?})"
    );
    // `run`: set the flag, wake, and it returns without waiting for the 20 s fetch.
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, waker) = (stop.clone(), consumer.waker());
    let stopping = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        flag.store(true, Ordering::SeqCst);
        waker.wake();
    });
    let started = Instant::now();
    consumer
        .run(&stop, |_, _| -> Result<(), std::io::Error> { Ok(()) })
        .expect("run");
    stopping.join().expect("stopping thread");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "run waited for its fetch ({:?})",
        started.elapsed()
    );
    consumer.close().expect("close");
}

#[test]
fn a_handler_commits_in_the_middle_of_a_batch() {
    let topic = topic_with(1, 50);
    let group = unique_name("api-batch-commit");
    let mut consumer = Consumer::subscribe(
        config(
            kafka().bootstrap(),
            &group,
            &[
                ("commit.interval.ms", "3600000"),
                ("max.poll.records", "50"),
            ],
        ),
        &[&topic],
    )
    .expect("subscribe");
    let deadline = Instant::now() + WAIT;
    let mut done = 0;
    let mut committed_mid_batch = None;
    while done < 50 {
        assert!(Instant::now() < deadline, "timed out after {done} records");
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        while let Some(d) = batch.next() {
            let offset = d.record.offset;
            batch.complete(d);
            done += 1;
            if offset == 24 {
                let committed = batch.commit().expect("commit inside the batch");
                committed_mid_batch = committed.first().map(|c| c.next_offset);
                assert!(batch.stats().partitions.len() == 1);
            }
        }
    }
    assert_eq!(committed_mid_batch, Some(25));
    assert_eq!(
        committed(kafka().bootstrap(), &group, &topic, 1)[&0],
        Some(25)
    );
    consumer.close().expect("close");
}

/// A revoked partition, and the group's committed offset when `on_revoked` ran.
type RevokedThen = (RevokedPartition, Option<i64>);

/// What a listener heard, with the group's committed offset read (on a client of its own) at
/// the moment `on_revoked` ran.
#[derive(Clone)]
struct Heard {
    calls: Arc<Mutex<Vec<String>>>,
    revoked: Arc<Mutex<Vec<RevokedThen>>>,
    group: String,
}

impl ConsumerRebalanceListener for Heard {
    fn on_assigned(
        &mut self,
        partitions: &[TopicPartition],
        _context: &mut AssignedContext<'_>,
    ) -> Result<(), BoxError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("assigned {}", partitions.len()));
        Ok(())
    }

    fn on_revoked(&mut self, partitions: &[RevokedPartition]) -> Result<(), BoxError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("revoked {}", partitions.len()));
        let mut client = Client::connect(ClientConfig::from_bootstrap_str(kafka().bootstrap()))?;
        let tps: Vec<TopicPartition> = partitions.iter().map(|r| r.tp.clone()).collect();
        let now = client.offset_fetch(&self.group, &tps)?;
        let mut revoked = self.revoked.lock().unwrap();
        for r in partitions {
            let at = now.iter().find(|c| c.tp == r.tp).and_then(|c| c.offset);
            revoked.push((r.clone(), at));
        }
        Ok(())
    }

    fn on_lost(&mut self, partitions: &[TopicPartition]) -> Result<(), BoxError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("lost {}", partitions.len()));
        Ok(())
    }
}

/// `a` consumes everything, then `b` joins: `a`'s listener hears the revocation of what moves,
/// drained, before its commit (the group holds nothing for those partitions while it runs: no
/// paced commits), and right after, the group holds `committing` = last finished + 1.
fn listener_hears_the_handoff(config_of: impl Fn(&str) -> ConsumerConfig) {
    let topic = topic_with(4, 10);
    let group = unique_name("api-listener");
    let heard = Heard {
        calls: Arc::default(),
        revoked: Arc::default(),
        group: group.clone(),
    };
    let mut a = Consumer::subscribe(config_of(&group), &[&topic])
        .expect("subscribe a")
        .with_rebalance_listener(heard.clone());
    let mut seen = Vec::new();
    consume_until(&mut a, "a's forty", &mut seen, |s| s.len() >= 40);
    let b_config = config_of(&group);
    let b_topic = topic.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let b_stop = stop.clone();
    let b = thread::spawn(move || {
        let mut b = Consumer::subscribe(b_config, &[&b_topic]).expect("subscribe b");
        while !b_stop.load(Ordering::SeqCst) {
            let mut batch = b.poll(Duration::from_millis(100)).expect("poll b");
            while let Some(d) = batch.next() {
                batch.complete(d);
            }
        }
        b.close().expect("close b");
    });
    let deadline = Instant::now() + WAIT;
    while heard.revoked.lock().unwrap().is_empty() || a.assignment().len() > 2 {
        assert!(Instant::now() < deadline, "no handoff: {:?}", heard.calls);
        let mut batch = a.poll(Duration::from_millis(100)).expect("poll a");
        while let Some(d) = batch.next() {
            batch.complete(d);
        }
    }
    let revoked = heard.revoked.lock().unwrap().clone();
    let after = committed(kafka().bootstrap(), &group, &topic, 4);
    for (r, committed_then) in &revoked {
        assert_eq!(r.last_finished, Some(9), "{r:?}");
        assert_eq!(r.committing, Some(10), "{r:?}");
        assert_eq!(
            *committed_then, None,
            "on_revoked ran after its commit: {r:?}"
        );
        assert_eq!(after[&r.tp.partition], Some(10), "{r:?}");
    }
    let calls = heard.calls.lock().unwrap().clone();
    assert_eq!(
        calls.first().map(String::as_str),
        Some("assigned 4"),
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c.starts_with("lost")), "{calls:?}");
    a.close().expect("close a");
    stop.store(true, Ordering::SeqCst);
    b.join().expect("b");
}

#[test]
fn the_listener_hears_a_cooperative_handoff_before_its_commit() {
    listener_hears_the_handoff(|group| {
        config(
            kafka().bootstrap(),
            group,
            &[
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("commit.interval.ms", "3600000"),
            ],
        )
    });
}

#[test]
fn the_listener_hears_a_kip848_revocation_before_its_commit() {
    listener_hears_the_handoff(|group| {
        consumer_protocol_config(
            kafka().bootstrap(),
            group,
            &[("commit.interval.ms", "3600000")],
        )
    });
}

#[test]
fn the_listener_hears_an_eager_revocation_before_its_commit() {
    listener_hears_the_handoff(|group| {
        config(
            kafka().bootstrap(),
            group,
            &[
                ("partition.assignment.strategy", "range"),
                ("commit.interval.ms", "3600000"),
            ],
        )
    });
}

//! `commit.interval.ms`: a member frozen in the middle of a long batch costs its next owner about
//! one commit interval of repeated work, not the whole batch.
//!
//! On real Kafka 4.x. A proxy between the frozen member and the broker holds all of its traffic
//! from the moment of the freeze (as a SIGSTOP, a stall or a partition would: nothing more is
//! applied, committed or heartbeated); a second member joins directly, and Kafka gives it the
//! partition once the frozen member's session expires. The second member starts from the last
//! offset the frozen one committed, so what it redoes is what the frozen one applied after its
//! last commit.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rebalance_guard::consumer::Consumer;
use support::consumer::{config, produce_to_each_partition};
use support::proxy::Proxy;
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);
/// What one record's side effect takes.
const RECORD_TIME: Duration = Duration::from_millis(10);
/// Records applied in the batch before the freeze: about 3 s of work.
const APPLIED_BEFORE_FREEZE: usize = 300;

/// Freezes a member mid-batch after [`APPLIED_BEFORE_FREEZE`] records and returns how many of
/// the records it applied the next owner applied again.
fn redone_after_a_freeze_mid_batch(interval_ms: &str) -> usize {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("freeze");
    let group = unique_name("freeze-group");
    broker.create_topic(&topic, 1);
    produce_to_each_partition(&broker.bootstrap(), &topic, 1, 600);
    let proxy = Proxy::start(&broker.bootstrap());
    let settings = [
        ("session.timeout.ms", "3000"),
        ("heartbeat.interval.ms", "300"),
        ("commit.interval.ms", interval_ms),
    ];
    let mut frozen =
        Consumer::subscribe(config(proxy.addr(), &group, &settings), &[&topic]).expect("subscribe");
    let mut applied_by_frozen: BTreeSet<i64> = BTreeSet::new();
    let deadline = Instant::now() + WAIT;
    'work: loop {
        assert!(Instant::now() < deadline, "no records through the proxy");
        let mut batch = frozen.poll(Duration::from_millis(200)).expect("poll");
        while let Some(delivery) = batch.next() {
            std::thread::sleep(RECORD_TIME);
            assert!(batch.is_current(&delivery));
            applied_by_frozen.insert(delivery.record.offset);
            batch.complete(delivery);
            if applied_by_frozen.len() == APPLIED_BEFORE_FREEZE {
                // Frozen: from here nothing of this member reaches the broker, and it applies
                // nothing more.
                proxy.hold();
                break 'work;
            }
        }
        // A batch that ended early (the first ones, while the fetch warms up) is committed as
        // after every batch; the freeze comes in the middle of a later, long one.
        drop(batch);
        let _ = frozen.commit();
    }

    let mut next_owner =
        Consumer::subscribe(config(&broker.bootstrap(), &group, &settings), &[&topic])
            .expect("subscribe");
    let mut applied_by_next: BTreeSet<i64> = BTreeSet::new();
    let deadline = Instant::now() + WAIT;
    while applied_by_next.last() != Some(&599) {
        assert!(
            Instant::now() < deadline,
            "the next owner did not reach the end: {:?}",
            applied_by_next.first()
        );
        let mut batch = next_owner.poll(Duration::from_millis(100)).expect("poll");
        while let Some(delivery) = batch.next() {
            applied_by_next.insert(delivery.record.offset);
            batch.complete(delivery);
        }
    }
    drop(next_owner.close());
    proxy.release();
    drop(frozen.close());
    let redone = applied_by_frozen.intersection(&applied_by_next).count();
    let all: BTreeSet<i64> = applied_by_frozen.union(&applied_by_next).copied().collect();
    assert_eq!(
        all,
        (0..600).collect(),
        "every record applied by one of the two"
    );
    eprintln!(
        "commit.interval.ms={interval_ms}: frozen after {APPLIED_BEFORE_FREEZE} records of \
         {RECORD_TIME:?}; the next owner redid {redone} (from offset {:?})",
        applied_by_next.first()
    );
    redone
}

mod kafka {
    use super::*;

    /// With the default 100 ms interval the next owner redoes about ten 10 ms records (one
    /// interval, plus the record in hand and a commit's round trip), not the ~3 s the batch had
    /// applied.
    #[test]
    fn a_member_frozen_mid_batch_costs_its_next_owner_about_one_commit_interval() {
        let redone = redone_after_a_freeze_mid_batch("100");
        let one_interval = (100 / RECORD_TIME.as_millis()) as usize;
        assert!(
            redone <= 3 * one_interval,
            "redid {redone} records, more than about one 100 ms interval ({one_interval})"
        );
    }
    /// The same freeze with commits paced out of the way (an interval longer than the batch): the
    /// position moved only after batches, and the next owner redoes the frozen batch's work. This
    /// is what the interval saves, measured in the same scenario.
    #[test]
    fn without_commits_during_the_batch_the_next_owner_redoes_the_frozen_batch() {
        let redone = redone_after_a_freeze_mid_batch("600000");
        assert!(
            redone >= APPLIED_BEFORE_FREEZE / 2,
            "redid only {redone}: was the batch committed during its course?"
        );
    }
}

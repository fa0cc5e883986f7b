//! An offset reset discards the committed completed-offsets map of the log that is gone.
//!
//! On real Kafka 4.x. The group's committed state is what an earlier owner left after a
//! truncation (an unclean leader election): position 100 with a map saying 101..=104 finished,
//! on a partition whose log now ends at 50. The consumer starts at 100, the fetch answers
//! OFFSET_OUT_OF_RANGE, `auto.offset.reset=earliest` moves it back to 0, and the records written
//! afterwards at 100..=109 are new records: every one of them is processed, none skipped as
//! finished.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rebalance_guard::consumer::Consumer;
use rebalance_guard::guard::{CommitOffset, GuardConfig, RebalanceGuard};
use rebalance_guard::wire::{Client, ClientConfig, CommitIdentity, OffsetCommitEntry};
use rebalance_guard::TopicPartition;
use support::consumer::{config, produce_until_accepted, value_records, wait_until};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);

/// The metadata an earlier owner committed with position 100: 101..=104 finished, 100 not.
fn map_of_the_old_log(tp: &TopicPartition) -> String {
    let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(GuardConfig {
        completed_map_max_bytes: 4096,
        ..GuardConfig::default()
    })
    .expect("valid config");
    guard.assign(std::slice::from_ref(tp));
    guard.resume_at(tp, 100, None);
    let leases: Vec<_> = (100..=104)
        .map(|offset| {
            guard
                .process_message(tp, offset, None, ())
                .expect("admitted")
        })
        .collect();
    for lease in &leases[1..] {
        guard.complete(lease).expect("completed");
    }
    let mut sent: Vec<CommitOffset> = Vec::new();
    guard
        .commit_progress(&mut |offsets| {
            sent.extend_from_slice(offsets);
            Ok(())
        })
        .expect("commit");
    assert_eq!(sent[0].next_offset, 100);
    sent[0].metadata.clone().expect("a completed-offsets map")
}

mod kafka {
    use super::*;

    #[test]
    fn records_at_offsets_an_old_map_named_are_processed_after_a_reset() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("reset-map");
        let group = unique_name("reset-map-group");
        broker.create_topic(&topic, 1);
        let tp = TopicPartition::new(topic.as_str(), 0);
        let mut client =
            Client::connect(ClientConfig::from_bootstrap_str(&broker.bootstrap())).expect("client");
        let values = |range: std::ops::Range<i64>| value_records(range.map(|i| format!("v-{i}")));
        produce_until_accepted(
            &mut client,
            &tp,
            &values(0..50),
            "the log after the truncation",
        );
        // The earlier owner's commit, above the log end now.
        let who = CommitIdentity {
            group_id: &group,
            generation_id_or_member_epoch: -1,
            member_id: "",
            group_instance_id: None,
        };
        let entry = OffsetCommitEntry {
            tp: tp.clone(),
            offset: 100,
            leader_epoch: None,
            metadata: Some(map_of_the_old_log(&tp)),
        };
        let results = client.offset_commit(&who, &[entry]).expect("OffsetCommit");
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");

        let processed: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let member = {
            let config = config(
                &broker.bootstrap(),
                &group,
                &[("auto.offset.reset", "earliest")],
            );
            let (topic, processed, stop) = (topic.clone(), processed.clone(), stop.clone());
            thread::spawn(move || {
                let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
                consumer
                    .run(&stop, |record, _ctx| {
                        processed.lock().unwrap().insert(record.offset);
                        Ok::<(), std::io::Error>(())
                    })
                    .expect("run");
                consumer.close().expect("close");
            })
        };
        wait_until("the member read the log from its beginning", WAIT, || {
            processed.lock().unwrap().len() >= 50
        });
        // New records at the offsets the old map named.
        produce_until_accepted(&mut client, &tp, &values(50..110), "new records");
        let everything: BTreeSet<i64> = (0..110).collect();
        let outcome = std::panic::catch_unwind(|| {
            wait_until("every record processed", Duration::from_secs(20), || {
                *processed.lock().unwrap() == everything
            })
        });
        stop.store(true, Ordering::SeqCst);
        member.join().expect("member");
        let processed = processed.lock().unwrap().clone();
        let missing: Vec<i64> = everything.difference(&processed).copied().collect();
        assert!(
            outcome.is_ok() && missing.is_empty(),
            "records of the new log never processed (skipped as finished by the old map): {missing:?}"
        );
    }
}

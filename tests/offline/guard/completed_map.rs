//! Rule 6 of the guard, in memory: what finished beyond the first unfinished offset travels in the
//! commit's metadata, the next owner skips it, the map never outgrows its limit (admission waits
//! instead), and a revocation of a partition worked out of order cancels without waiting for what
//! never started. The same, end to end on Kafka, is in tests/brokers/consumer/workers.rs.

use std::sync::Mutex;

use rebalance_guard::guard::{
    AdmitError, BoxError, CommitFailure, CommitOffset, FlushBatch, GuardConfig, Lease,
    RebalanceGuard,
};
use rebalance_guard::TopicPartition;

type Guard = RebalanceGuard<String, ()>;

fn tp() -> TopicPartition {
    TopicPartition::new("orders", 0)
}

fn guard_with_limit(limit: usize) -> Guard {
    RebalanceGuard::new(GuardConfig {
        completed_map_max_bytes: limit,
        ..GuardConfig::default()
    })
    .expect("valid config")
}

/// A guard that owns the partition and reads it from `start` with the committed `metadata`.
fn owner(start: i64, metadata: Option<&str>) -> Guard {
    let guard = guard_with_limit(4096);
    guard.assign(&[tp()]);
    guard.resume_at(&tp(), start, metadata);
    guard
}

fn admit(guard: &Guard, offset: i64) -> Result<Lease, AdmitError> {
    guard.process_message(&tp(), offset, None, ())
}

fn commit(guard: &Guard) -> Vec<CommitOffset> {
    let sent = Mutex::new(Vec::new());
    guard
        .commit_progress(&mut |offsets: &[CommitOffset]| {
            sent.lock().unwrap().extend_from_slice(offsets);
            Ok(())
        })
        .expect("commit succeeds");
    sent.into_inner().unwrap()
}

#[test]
fn the_next_owner_redoes_only_the_unfinished_offset_and_skips_what_finished_beyond_it() {
    let a = owner(100, None);
    let leases: Vec<Lease> = (100..=110).map(|o| admit(&a, o).unwrap()).collect();
    a.complete(&leases[0]).unwrap();
    for lease in &leases[2..] {
        a.complete(lease).unwrap();
    }
    let sent = commit(&a);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].next_offset, 101, "101 is still running");
    let metadata = sent[0].metadata.clone().expect("a map");
    assert!(metadata.starts_with("rgc2;0;101;"), "{metadata}");
    assert!(
        commit(&a).is_empty(),
        "nothing moved: nothing to commit again"
    );

    let b = owner(101, Some(&metadata));
    let redo = admit(&b, 101).expect("101 never finished: B does it");
    for offset in 102..=110 {
        assert_eq!(
            admit(&b, offset),
            Err(AdmitError::AlreadyCompleted { tp: tp(), offset })
        );
    }
    assert!(
        commit(&b).is_empty(),
        "B's map is the committed one until 101 finishes"
    );
    b.complete(&redo).unwrap();
    let sent = commit(&b);
    assert_eq!(
        sent[0].next_offset, 111,
        "101 done, 102..110 skipped as done"
    );
    assert_eq!(
        sent[0].metadata.as_deref(),
        Some("rgc2;0;111;r"),
        "an empty map"
    );
    let snapshot = b.snapshot();
    assert_eq!(snapshot.partitions[0].skipped_completed, 9);
}

#[test]
fn the_map_carries_inherited_offsets_the_new_owner_has_not_reached_yet() {
    let a = owner(0, None);
    let leases: Vec<Lease> = (0..10).map(|o| admit(&a, o).unwrap()).collect();
    for lease in &leases[5..] {
        a.complete(lease).unwrap();
    }
    let first = commit(&a)[0].clone();
    assert_eq!(
        first.next_offset, 0,
        "nothing finished in order: the start, with its map"
    );
    // B finishes 0..3, commits 3, and hands over before reaching 5..9: C must still skip them.
    let b = owner(0, first.metadata.as_deref());
    for offset in 0..3 {
        let lease = admit(&b, offset).unwrap();
        b.complete(&lease).unwrap();
    }
    let second = commit(&b)[0].clone();
    assert_eq!(second.next_offset, 3);
    let c = owner(3, second.metadata.as_deref());
    for offset in 3..5 {
        admit(&c, offset).expect("never finished");
    }
    for offset in 5..10 {
        assert!(matches!(
            admit(&c, offset),
            Err(AdmitError::AlreadyCompleted { .. })
        ));
    }
}

#[test]
fn metadata_written_by_another_client_or_for_another_position_is_ignored() {
    for metadata in ["written by the java client", "rgc1;55;rAQ", "rgc1;101;r!"] {
        let b = owner(101, Some(metadata));
        for offset in 101..=103 {
            admit(&b, offset).unwrap_or_else(|e| panic!("{metadata}: {e}"));
        }
    }
}

#[test]
fn a_map_that_could_outgrow_the_limit_holds_admission_until_the_gap_closes() {
    let guard = guard_with_limit(64);
    guard.assign(&[tp()]);
    guard.resume_at(&tp(), 0, None);
    let gap = admit(&guard, 0).unwrap();
    let mut admitted = vec![];
    let held_at = loop {
        let offset = admitted.len() as i64 + 1;
        match admit(&guard, offset) {
            Ok(lease) => {
                guard.complete(&lease).unwrap();
                admitted.push(offset);
            }
            Err(AdmitError::CompletedMapFull {
                offset, position, ..
            }) => {
                assert_eq!(position, 0, "held at the unfinished offset");
                break offset;
            }
            Err(other) => panic!("{other}"),
        }
    };
    assert!(
        held_at > 100,
        "a 64-character map covers hundreds of offsets: {held_at}"
    );
    let sent = commit(&guard);
    let metadata = sent[0].metadata.as_deref().unwrap();
    assert!(
        metadata.len() <= 64,
        "{} characters: {metadata}",
        metadata.len()
    );
    assert!(
        matches!(
            admit(&guard, held_at),
            Err(AdmitError::CompletedMapFull { .. })
        ),
        "still held while 0 runs"
    );
    guard.complete(&gap).unwrap();
    admit(&guard, held_at).expect("the gap closed: admission resumes");
    assert_eq!(commit(&guard)[0].next_offset, held_at);
}

#[test]
fn revoking_a_partition_worked_out_of_order_cancels_its_unstarted_records_and_maps_the_rest() {
    let guard = owner(0, None);
    let leases: Vec<Lease> = (0..5).map(|o| admit(&guard, o).unwrap()).collect();
    guard.take_buffered(&tp());
    for i in [0, 2, 4] {
        assert!(guard.start(&leases[i]));
        guard.complete(&leases[i]).unwrap();
    }
    // 1 and 3 are queued, never started.
    let committed = Mutex::new(Vec::new());
    let mut flush = |batch: FlushBatch<()>| -> Result<(), BoxError> {
        assert_eq!(guard.cancel_unstarted(&batch.tp), 2);
        assert_eq!(guard.unfinished(&batch.tp), 0, "nothing to wait for");
        Ok(())
    };
    let mut commit = |offsets: &[CommitOffset]| -> Result<(), CommitFailure> {
        committed.lock().unwrap().extend_from_slice(offsets);
        Ok(())
    };
    guard
        .revoke(&[tp()], &mut flush, Some(&mut commit))
        .expect("handed off");
    let committed = committed.into_inner().unwrap();
    assert_eq!(committed[0].next_offset, 1, "1 was cancelled, not done");
    let next = owner(1, committed[0].metadata.as_deref());
    admit(&next, 1).expect("cancelled: redone");
    assert!(matches!(
        admit(&next, 2),
        Err(AdmitError::AlreadyCompleted { .. })
    ));
    admit(&next, 3).expect("cancelled: redone");
    assert!(matches!(
        admit(&next, 4),
        Err(AdmitError::AlreadyCompleted { .. })
    ));
}

#[test]
fn without_a_map_limit_no_metadata_is_written() {
    let mapped = owner(0, None);
    let leases: Vec<Lease> = (0..2).map(|o| admit(&mapped, o).unwrap()).collect();
    mapped.complete(&leases[1]).unwrap();
    let map = commit(&mapped)[0].metadata.clone().unwrap();
    assert!(matches!(
        owner(0, Some(&map)).process_message(&tp(), 1, None, ()),
        Err(AdmitError::AlreadyCompleted { .. })
    ));
    let guard = guard_with_limit(0);
    guard.assign(&[tp()]);
    guard.resume_at(&tp(), 0, Some(&map));
    let lease = admit(&guard, 0).unwrap();
    admit(&guard, 1).expect("the map is not read back either");
    guard.complete(&lease).unwrap();
    let sent = commit(&guard);
    assert_eq!((sent[0].next_offset, sent[0].metadata.clone()), (1, None));
}

/// A fetch position reset before anything was admitted (the log was truncated under the
/// committed offset, or the topic recreated): the committed map describes the old log, so the
/// records now at the offsets it names are new records and are processed. The reset used to
/// return early when nothing had been admitted, keeping the map, and those records were skipped
/// as finished.
#[test]
fn a_reset_before_anything_was_admitted_discards_the_map_of_the_old_log() {
    let a = owner(100, None);
    let leases: Vec<Lease> = (100..=104).map(|o| admit(&a, o).unwrap()).collect();
    for lease in &leases[1..] {
        a.complete(lease).unwrap();
    }
    let metadata = commit(&a)[0].metadata.clone().expect("a map of 101..=104");

    let b = owner(100, Some(&metadata));
    // OFFSET_OUT_OF_RANGE: the log now ends below 100; reading restarts at its beginning.
    assert_eq!(b.reposition(&tp(), 0), None, "nothing admitted yet");
    for offset in 0..=104 {
        assert!(
            admit(&b, offset).is_ok(),
            "offset {offset} of the new log must be processed"
        );
    }
}

/// A new owner whose `commit.metadata.max.bytes` is smaller than the earlier owner's (lowered in
/// a rolling deploy) inherits a map longer than its own limit allows: it still admits the gap
/// record and the offsets inside the inherited span (none of them lengthens the map), so the
/// partition moves on. It used to refuse every admission, the gap record included, forever.
#[test]
fn a_new_owner_with_a_smaller_map_limit_still_admits_the_gap_record() {
    let a = owner(0, None);
    let leases: Vec<Lease> = (0..=2000).map(|o| admit(&a, o).unwrap()).collect();
    // Every other offset finished beyond the gap at 0: a long bitset.
    for lease in leases.iter().skip(2).step_by(2) {
        a.complete(lease).unwrap();
    }
    let metadata = commit(&a)[0].metadata.clone().expect("a map");
    assert!(metadata.len() > 200, "{} bytes", metadata.len());

    let b = guard_with_limit(100);
    b.assign(&[tp()]);
    assert_eq!(b.resume_at(&tp(), 0, Some(&metadata)), 1000);
    let gap = admit(&b, 0).expect("the gap record is admitted");
    let mut redo = vec![gap];
    for offset in 1..=2000 {
        match admit(&b, offset) {
            Ok(lease) => redo.push(lease),
            Err(AdmitError::AlreadyCompleted { .. }) => {}
            Err(other) => panic!("offset {offset}: {other}"),
        }
    }
    assert_eq!(redo.len(), 1001, "0 and the 1000 unfinished odd offsets");
    for lease in &redo {
        b.complete(lease).unwrap();
    }
    assert_eq!(commit(&b)[0].next_offset, 2001);
    admit(&b, 2001).expect("and on past the inherited span");
}

/// An aborted transaction (the transactional mode): the guard goes back to what committed, the
/// committed position and its map. What the map names finished in a transaction that did
/// commit (its outputs are visible) and is skipped; what finished only in the aborted
/// transaction is done again; a handler still running under the abort sees its lease not
/// current. Without the map, the abort had 597-599 done again (outputs twice, found by the
/// exactly-once demo).
#[test]
fn an_aborted_transaction_goes_back_to_the_committed_position_and_keeps_its_map() {
    let a = owner(100, None);
    let leases: Vec<Lease> = (100..=110).map(|o| admit(&a, o).unwrap()).collect();
    // Committed (the first transaction): 100, and 102..=104 beyond the running 101.
    a.complete(&leases[0]).unwrap();
    for lease in &leases[2..=4] {
        a.complete(lease).unwrap();
    }
    let committed = commit(&a);
    let metadata = committed[0].metadata.clone().expect("a map of 102..=104");
    assert_eq!(committed[0].next_offset, 101);
    // The next transaction: 101 and 105..=107 finish, 108 is still running; then it aborts.
    a.complete(&leases[1]).unwrap();
    for lease in &leases[5..=7] {
        a.complete(lease).unwrap();
    }
    a.rewind_aborted(&tp(), 101, Some(&metadata))
        .expect("an owned partition goes back");
    assert!(
        !a.is_current(&leases[8]),
        "108 ran under the aborted transaction"
    );
    admit(&a, 101).expect("101 finished only in the aborted transaction: done again");
    for offset in 102..=104 {
        assert_eq!(
            admit(&a, offset),
            Err(AdmitError::AlreadyCompleted { tp: tp(), offset }),
            "{offset} committed with its output: skipped"
        );
    }
    for offset in 105..=107 {
        admit(&a, offset).unwrap_or_else(|e| panic!("{offset} must be done again: {e:?}"));
    }
    // 108 comes again once the handler that ran it under the abort returned (never twice at
    // once); its completion does not count.
    assert!(matches!(
        admit(&a, 108),
        Err(AdmitError::SeekedWhileRunning { .. })
    ));
    assert!(
        a.complete(&leases[8]).is_err(),
        "a completion under the aborted transaction"
    );
    admit(&a, 108).expect("108 is done again");
}

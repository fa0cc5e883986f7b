//! The transaction requests of the wire layer (`wire/client/produce/txn.rs`) driven by hand
//! against real Apache Kafka, the newest 4.x (`kafka`) and the last 3.x (`kafka3`): the
//! transaction version each cluster runs, a committed and an aborted transaction as
//! read_committed and read_uncommitted readers see them, the committed offsets of a transaction,
//! fencing by a second InitProducerId, and KIP-447's refusal of a zombie's offsets.
//!
//! The shared brokers are formatted by `scripts/kafka_broker.py` with `kafka-storage format`
//! and no `--release-version`/`--feature`, so each takes its version's default feature levels:
//! 4.4 finalizes `transaction.version` 2 (checked here, not assumed), 3.9 does not finalize it
//! (level 0: transaction version 1). Every request here is one attempt by design (the producer's
//! transaction manager owns the retries), so the tests ask again on a bounded clock where Kafka
//! says "not yet" (a coordinator loading `__transaction_state`, a transaction still completing).

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    self as msg, join_group_request, sync_group_request, ApiKey, GroupId,
};
use kafka_protocol::protocol::StrBytes;
use rebalance_guard::wire::{
    Client, ClientConfig, CommitIdentity, FetchConfig, FetchPosition, IsolationLevel, KafkaCode,
    OffsetCommitEntry, OffsetSpec, ProduceRecord, ProducerIdentity, TransactionVersion, WireError,
    TRANSACTION_VERSION_FEATURE,
};
use rebalance_guard::TopicPartition;
use support::fetch::fetch_answered;
use support::{unique_name, BrokerKind};

/// How long a test asks again while Kafka says "not yet".
const SETTLE: Duration = Duration::from_secs(60);

/// The transaction timeout the tests' producers register.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

fn client(kind: BrokerKind) -> (Box<dyn support::Broker>, Client) {
    let broker = kind.start();
    let mut cfg = ClientConfig::from_bootstrap_str(&broker.bootstrap());
    cfg.connection.request_timeout = Duration::from_secs(15);
    let c = Client::connect(cfg).unwrap_or_else(|e| panic!("{kind:?}: connect: {e}"));
    (broker, c)
}

/// The transaction protocol the shared broker of `kind` is expected to run (see the module
/// notes on how it was formatted).
fn expected_version(kind: BrokerKind) -> TransactionVersion {
    match kind {
        BrokerKind::Kafka => TransactionVersion::V2,
        _ => TransactionVersion::V1,
    }
}

fn code_of(e: &WireError) -> Option<KafkaCode> {
    e.kafka_code()
}

/// Whether `e` is Kafka's "not yet": the coordinator is loading or moving, or the previous
/// transaction of the id is still completing.
fn not_yet(e: &WireError) -> bool {
    code_of(e).is_some_and(|c| {
        c == KafkaCode::CONCURRENT_TRANSACTIONS
            || c == KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
            || c.is_coordinator_moved()
    }) || e.retriable()
}

/// `op` again while it fails with [`not_yet`], within [`SETTLE`]; panics with `what` otherwise.
fn settled<T>(what: &str, mut op: impl FnMut() -> Result<T, WireError>) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        match op() {
            Ok(v) => return v,
            Err(e) if not_yet(&e) && Instant::now() < deadline => {
                eprintln!("{what}: not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

fn record(value: &str) -> ProduceRecord {
    ProduceRecord {
        key: None,
        value: Some(Bytes::from(value.to_string())),
        headers: Vec::new(),
        timestamp: None,
    }
}

/// A producer of `txn_id` with a fresh epoch.
fn init(c: &mut Client, txn_id: &str) -> ProducerIdentity {
    settled("InitProducerId", || {
        c.init_transactional_producer(txn_id, TXN_TIMEOUT, None)
    })
}

/// One transaction's partition, batch and (optionally) group offsets, up to (not including)
/// EndTxn. V1 adds the partition and the group itself; V2 leaves that to the brokers.
fn write_in_transaction(
    c: &mut Client,
    txn_id: &str,
    id: ProducerIdentity,
    tv: TransactionVersion,
    tp: &TopicPartition,
    value: &str,
    base_sequence: i32,
) -> i64 {
    if tv == TransactionVersion::V1 {
        let added = settled("AddPartitionsToTxn", || {
            let r = c.add_partitions_to_txn(txn_id, id, std::slice::from_ref(tp))?;
            match r.iter().find_map(|(_, code)| *code) {
                Some(code) => Err(WireError::kafka(
                    ApiKey::AddPartitionsToTxn,
                    code,
                    tp.to_string(),
                )),
                None => Ok(r),
            }
        });
        assert_eq!(added, vec![(tp.clone(), None)]);
    }
    settled("transactional Produce", || {
        c.produce_transactional_once(txn_id, id, tv, tp, &[record(value)], base_sequence)
    })
}

fn commit_offsets(
    c: &mut Client,
    txn_id: &str,
    id: ProducerIdentity,
    tv: TransactionVersion,
    who: &CommitIdentity<'_>,
    offsets: &[OffsetCommitEntry],
) -> Vec<(TopicPartition, Result<(), WireError>)> {
    if tv == TransactionVersion::V1 {
        settled("AddOffsetsToTxn", || {
            c.add_offsets_to_txn(txn_id, id, who.group_id)
        });
    }
    // A partition answered "not yet" (the group coordinator loading its offsets partition on
    // first use, COORDINATOR_LOAD_IN_PROGRESS, or moving) is asked again; any other answer,
    // a refusal included, is the caller's to judge.
    let deadline = Instant::now() + SETTLE;
    loop {
        let r = c
            .txn_offset_commit(txn_id, id, tv, who, offsets)
            .expect("TxnOffsetCommit");
        let again = r
            .iter()
            .find_map(|(_, r)| r.as_ref().err().filter(|e| not_yet(e)));
        match again {
            Some(e) if Instant::now() < deadline => {
                eprintln!("TxnOffsetCommit: not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            _ => return r,
        }
    }
}

fn values(records: &[rebalance_guard::wire::Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Every record of `tp` from offset 0 as a reader of `isolation` sees it, once no transaction
/// is open on the partition (the last stable offset reached the high watermark).
fn read_all(c: &mut Client, tp: &TopicPartition, isolation: IsolationLevel) -> Vec<String> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let hw = c
            .list_offsets(
                std::slice::from_ref(tp),
                OffsetSpec::Latest,
                IsolationLevel::ReadUncommitted,
            )
            .expect("high watermark")[tp];
        let lso = c
            .list_offsets(
                std::slice::from_ref(tp),
                OffsetSpec::Latest,
                IsolationLevel::ReadCommitted,
            )
            .expect("last stable offset")[tp];
        if lso == hw {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{tp}: the last stable offset stays at {lso}, the high watermark is {hw}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let cfg = FetchConfig {
        max_wait: Duration::from_millis(100),
        isolation,
        ..FetchConfig::default()
    };
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = fetch_answered(
            c,
            &[FetchPosition {
                tp: tp.clone(),
                offset,
            }],
            &cfg,
        );
        let p = &f[0];
        assert!(p.error.is_none(), "{tp}: {:?}", p.error);
        out.extend(values(&p.records));
        if p.next_offset >= p.high_watermark || p.next_offset == offset {
            return out;
        }
        offset = p.next_offset;
    }
}

/// The group's committed offset of `tp`; `None` also while a transaction's offset of it is not
/// committed or aborted yet (UNSTABLE_OFFSET_COMMIT to our stable-offset fetch).
fn committed_offset(c: &mut Client, group: &str, tp: &TopicPartition) -> Option<i64> {
    match c.offset_fetch(group, std::slice::from_ref(tp)) {
        Ok(found) => found[0].offset,
        Err(e) if e.kafka_code() == Some(KafkaCode::UNSTABLE_OFFSET_COMMIT) => None,
        Err(e) => panic!("OffsetFetch: {e:?}"),
    }
}

fn transaction_version_is_the_clusters(kind: BrokerKind) {
    let (_broker, mut c) = client(kind);
    let txn_id = unique_name("txn-version");
    let tv = settled("transaction version", || c.transaction_version(&txn_id));
    eprintln!("{kind:?}: {TRANSACTION_VERSION_FEATURE} gives {tv:?}");
    assert_eq!(tv, expected_version(kind), "{kind:?}");
}

fn a_committed_transaction_is_read_committed_and_an_aborted_one_is_not(kind: BrokerKind) {
    let (broker, mut c) = client(kind);
    let topic = unique_name("txn");
    broker.create_topic(&topic, 1);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let group = unique_name("txn-group");
    let txn_id = unique_name("txn-id");
    let tv = settled("transaction version", || c.transaction_version(&txn_id));
    assert_eq!(tv, expected_version(kind), "{kind:?}");
    let mut id = init(&mut c, &txn_id);
    eprintln!("{kind:?}: {tv:?}, producer {id:?}");

    // Transaction 1: one record and the group's offset, committed.
    let offset = write_in_transaction(&mut c, &txn_id, id, tv, &tp, "committed", 0);
    assert_eq!(offset, 0);
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let offsets = [OffsetCommitEntry {
        tp: tp.clone(),
        offset: 1,
        leader_epoch: None,
        metadata: Some("txn 1".to_string()),
    }];
    let results = commit_offsets(&mut c, &txn_id, id, tv, &who, &offsets);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.is_ok(), "{kind:?}: {results:?}");
    // KIP-447: our OffsetFetch asks for stable offsets, so while the transaction holds an
    // offset of the partition the coordinator answers UNSTABLE_OFFSET_COMMIT (retried until
    // the client's retries run out) instead of the older offset.
    let pending = c
        .offset_fetch(&group, std::slice::from_ref(&tp))
        .expect_err("a transaction's offset read before it commits");
    assert_eq!(
        pending.kafka_code(),
        Some(KafkaCode::UNSTABLE_OFFSET_COMMIT),
        "{kind:?}: {pending}"
    );
    let ended = settled("EndTxn commit", || c.end_txn(&txn_id, id, tv, true));
    match tv {
        TransactionVersion::V1 => assert_eq!(ended, None, "{kind:?}: EndTxn v4- bumps nothing"),
        TransactionVersion::V2 => {
            let bumped = ended.expect("EndTxn v5 answers with the bumped epoch");
            assert_eq!(bumped.producer_id, id.producer_id, "{kind:?}");
            assert_eq!(
                bumped.epoch,
                id.epoch + 1,
                "{kind:?}: {bumped:?} after {id:?}"
            );
            id = bumped;
        }
    }
    let deadline = Instant::now() + SETTLE;
    while committed_offset(&mut c, &group, &tp) != Some(1) {
        assert!(
            Instant::now() < deadline,
            "{kind:?}: the committed transaction's offset never became visible"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Transaction 2: one record, aborted. V1 keeps the epoch, so the sequence goes on; V2's
    // bumped epoch starts its sequences at 0.
    let sequence = match tv {
        TransactionVersion::V1 => 1,
        TransactionVersion::V2 => 0,
    };
    let offset = write_in_transaction(&mut c, &txn_id, id, tv, &tp, "aborted", sequence);
    assert_eq!(
        offset, 2,
        "{kind:?}: after one record and its commit marker"
    );
    let ended = settled("EndTxn abort", || c.end_txn(&txn_id, id, tv, false));
    assert_eq!(ended.is_some(), tv == TransactionVersion::V2, "{kind:?}");

    let committed = read_all(&mut c, &tp, IsolationLevel::ReadCommitted);
    assert_eq!(committed, vec!["committed"], "{kind:?}: read_committed");
    let uncommitted = read_all(&mut c, &tp, IsolationLevel::ReadUncommitted);
    assert_eq!(
        uncommitted,
        vec!["committed", "aborted"],
        "{kind:?}: read_uncommitted"
    );
    assert_eq!(committed_offset(&mut c, &group, &tp), Some(1), "{kind:?}");
}

fn a_second_init_fences_the_first_producer(kind: BrokerKind) {
    let (broker, mut c) = client(kind);
    let topic = unique_name("txn-fence");
    broker.create_topic(&topic, 1);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let txn_id = unique_name("txn-fence-id");
    let tv = settled("transaction version", || c.transaction_version(&txn_id));
    let old = init(&mut c, &txn_id);
    write_in_transaction(&mut c, &txn_id, old, tv, &tp, "zombie", 0);

    // The new producer: same id, a higher epoch; its init aborts the old open transaction,
    // which the coordinator may still be completing (CONCURRENT_TRANSACTIONS meanwhile).
    let new = init(&mut c, &txn_id);
    assert_eq!(new.producer_id, old.producer_id, "{kind:?}");
    assert!(new.epoch > old.epoch, "{kind:?}: {new:?} after {old:?}");
    eprintln!("{kind:?}: {tv:?}: {old:?} fenced by {new:?}");

    let end = c.end_txn(&txn_id, old, tv, true);
    let end_code = end.as_ref().err().and_then(code_of);
    eprintln!("{kind:?}: EndTxn with the old epoch: {end:?}");
    assert!(
        matches!(
            end_code,
            Some(KafkaCode::PRODUCER_FENCED) | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
        ),
        "{kind:?}: EndTxn with the fenced epoch: {end:?}"
    );
    let produced = c.produce_transactional_once(&txn_id, old, tv, &tp, &[record("late")], 1);
    let produce_code = produced.as_ref().err().and_then(code_of);
    eprintln!("{kind:?}: Produce with the old epoch: {produced:?}");
    assert!(
        matches!(
            produce_code,
            Some(KafkaCode::PRODUCER_FENCED)
                | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
                | Some(KafkaCode::INVALID_TXN_STATE)
        ),
        "{kind:?}: Produce with the fenced epoch: {produced:?}"
    );
    let bumped = c.init_transactional_producer(&txn_id, TXN_TIMEOUT, Some(old));
    eprintln!("{kind:?}: InitProducerId bumping the old epoch: {bumped:?}");
    assert!(
        matches!(
            bumped.as_ref().err().and_then(code_of),
            Some(KafkaCode::PRODUCER_FENCED) | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
        ),
        "{kind:?}: a bump of the fenced epoch: {bumped:?}"
    );
    // The new producer works: a transaction of its own commits, and only its record is read
    // (the fenced transaction was aborted by the new producer's InitProducerId).
    write_in_transaction(&mut c, &txn_id, new, tv, &tp, "fresh", 0);
    settled("EndTxn of the new producer", || {
        c.end_txn(&txn_id, new, tv, true)
    });
    let read = read_all(&mut c, &tp, IsolationLevel::ReadCommitted);
    assert_eq!(read, vec!["fresh"], "{kind:?}: read_committed");
}

/// A classic-protocol member of `group` that joined and synced by hand (JoinGroup with the
/// member id Kafka requires, then SyncGroup as leader with no assignment): its member id and
/// generation. No heartbeats: the session outlasts the test.
fn join_by_hand(c: &mut Client, group: &str) -> (String, i32) {
    let coordinator = c.find_coordinator(group).expect("coordinator").node_id;
    let conn = c.connection(coordinator).expect("coordinator connection");
    let version = conn
        .versions()
        .broker_range(ApiKey::JoinGroup)
        .map(|r| r.max.min(5))
        .expect("JoinGroup");
    let mut member_id = String::new();
    let deadline = Instant::now() + SETTLE;
    let (member_id, generation) = loop {
        let req = msg::JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_session_timeout_ms(60_000)
            .with_rebalance_timeout_ms(60_000)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_protocol_type(StrBytes::from_static_str("txn-test"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(StrBytes::from_static_str("only"))
            .with_metadata(Bytes::from_static(b"m"))]);
        let resp = conn.send(&req, version).expect("JoinGroup");
        match KafkaCode::from_code(resp.error_code) {
            None => break (resp.member_id.to_string(), resp.generation_id),
            Some(KafkaCode::MEMBER_ID_REQUIRED) => member_id = resp.member_id.to_string(),
            Some(code) if Instant::now() < deadline && code.retriable() => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Some(code) => panic!("JoinGroup: {code}"),
        }
    };
    let version = conn
        .versions()
        .broker_range(ApiKey::SyncGroup)
        .map(|r| r.max.min(3))
        .expect("SyncGroup");
    let req = msg::SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id(generation)
        .with_member_id(StrBytes::from_string(member_id.clone()))
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(member_id.clone()))
                .with_assignment(Bytes::new()),
        ]);
    let resp = conn.send(&req, version).expect("SyncGroup");
    assert_eq!(KafkaCode::from_code(resp.error_code), None, "SyncGroup");
    (member_id, generation)
}

fn a_zombies_offsets_are_refused(kind: BrokerKind) {
    let (broker, mut c) = client(kind);
    let topic = unique_name("txn-447");
    broker.create_topic(&topic, 1);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let group = unique_name("txn-447-group");
    let txn_id = unique_name("txn-447-id");
    let (member_id, generation) = join_by_hand(&mut c, &group);
    let tv = settled("transaction version", || c.transaction_version(&txn_id));
    let id = init(&mut c, &txn_id);
    write_in_transaction(&mut c, &txn_id, id, tv, &tp, "v", 0);
    let offsets = [OffsetCommitEntry {
        tp: tp.clone(),
        offset: 1,
        leader_epoch: None,
        metadata: None,
    }];
    let mut refusals = Vec::new();
    for (what, member, gen) in [
        ("a stale generation", member_id.as_str(), generation - 1),
        ("an unknown member id", "zombie", generation),
    ] {
        let who = CommitIdentity {
            group_id: &group,
            generation_id_or_member_epoch: gen,
            member_id: member,
            group_instance_id: None,
        };
        let r = commit_offsets(&mut c, &txn_id, id, tv, &who, &offsets);
        let code = r[0].1.as_ref().err().and_then(code_of);
        eprintln!("{kind:?}: TxnOffsetCommit with {what}: {code:?}");
        assert!(
            matches!(
                code,
                Some(KafkaCode::ILLEGAL_GENERATION)
                    | Some(KafkaCode::UNKNOWN_MEMBER_ID)
                    | Some(KafkaCode::FENCED_INSTANCE_ID)
            ),
            "{kind:?}: TxnOffsetCommit with {what} was not refused: {r:?}"
        );
        refusals.push((what, code));
    }
    // No membership at all (generation -1, no member id) is NOT refused for a group with a
    // live member: Kafka's `ClassicGroup.validateOffsetCommit` lets a transactional commit
    // without membership through in any state (what TxnOffsetCommit v0-v2 producers send), so
    // KIP-447's fencing holds only for a producer that sends its consumer's membership.
    let anonymous = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: -1,
        member_id: "",
        group_instance_id: None,
    };
    let r = commit_offsets(&mut c, &txn_id, id, tv, &anonymous, &offsets);
    eprintln!("{kind:?}: TxnOffsetCommit with no membership: {r:?}");
    assert!(
        r[0].1.is_ok(),
        "{kind:?}: Kafka refused a transactional commit without membership: {r:?}"
    );
    // The live member's own identity is accepted, and its offset commits with the transaction.
    let who = CommitIdentity {
        group_id: &group,
        generation_id_or_member_epoch: generation,
        member_id: &member_id,
        group_instance_id: None,
    };
    let r = commit_offsets(&mut c, &txn_id, id, tv, &who, &offsets);
    assert!(r[0].1.is_ok(), "{kind:?}: the member's own commit: {r:?}");
    settled("EndTxn", || c.end_txn(&txn_id, id, tv, true));
    let deadline = Instant::now() + SETTLE;
    while committed_offset(&mut c, &group, &tp) != Some(1) {
        assert!(Instant::now() < deadline, "{kind:?}: offset never visible");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{kind:?}: refusals {refusals:?}");
}

/// Transaction version 2 on Kafka 4.4: no AddPartitionsToTxn, Produce v12 adds the partition
/// itself; version 1's Produce (v11) without AddPartitionsToTxn is refused by the leader's
/// verification (KIP-890 part 1).
fn version_2_adds_the_partition_implicitly(kind: BrokerKind) {
    let (broker, mut c) = client(kind);
    let topic = unique_name("txn-v2");
    broker.create_topic(&topic, 1);
    let tp = TopicPartition::new(topic.as_str(), 0);
    let txn_id = unique_name("txn-v2-id");
    let tv = settled("transaction version", || c.transaction_version(&txn_id));
    assert_eq!(tv, TransactionVersion::V2, "{kind:?}");
    let id = init(&mut c, &txn_id);
    let v1 =
        c.produce_transactional_once(&txn_id, id, TransactionVersion::V1, &tp, &[record("x")], 0);
    eprintln!("{kind:?}: Produce v11 without AddPartitionsToTxn: {v1:?}");
    assert!(
        v1.is_err(),
        "{kind:?}: a v1 batch outside the transaction was written: {v1:?}"
    );
    let offset = settled("Produce v12", || {
        c.produce_transactional_once(&txn_id, id, tv, &tp, &[record("implicit")], 0)
    });
    let ended = settled("EndTxn v5", || c.end_txn(&txn_id, id, tv, true))
        .expect("EndTxn v5 answers with the bumped epoch");
    assert_eq!(ended.epoch, id.epoch + 1, "{kind:?}");
    let read = read_all(&mut c, &tp, IsolationLevel::ReadCommitted);
    assert_eq!(read, vec!["implicit"], "{kind:?}: written at {offset}");
}

crate::on_brokers! {
    kafka {
        transaction_version_is_the_clusters,
        a_committed_transaction_is_read_committed_and_an_aborted_one_is_not,
        a_second_init_fences_the_first_producer,
        a_zombies_offsets_are_refused,
        version_2_adds_the_partition_implicitly,
    }
    kafka3 {
        transaction_version_is_the_clusters,
        a_committed_transaction_is_read_committed_and_an_aborted_one_is_not,
        a_second_init_fences_the_first_producer,
        a_zombies_offsets_are_refused,
    }
}

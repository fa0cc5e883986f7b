//! The transaction error matrix, as Java sorts it, under errors only librdkafka's mock injects
//! on demand (the mock runs transaction version 1: AddPartitionsToTxn, AddOffsetsToTxn):
//!
//! - retried until `max.block.ms`: CONCURRENT_TRANSACTIONS and a coordinator that moved or is
//!   loading, on InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn;
//! - abortable: a record the leader refused for good (the commit is refused, the abort works,
//!   and the next transaction commits);
//! - fatal: PRODUCER_FENCED and INVALID_PRODUCER_EPOCH on Produce or EndTxn end the producer with
//!   [`ProduceError::Fenced`].
//!
//! Each test ends by reading the topic as `read_committed` and `read_uncommitted` readers.

use rebalance_guard::wire::IsolationLevel;
use rebalance_guard::ConsumerGroupMetadata;
use rebalance_guard::TopicPartition;

use super::*;
use crate::support::fetch::read_topic_as;

fn mock_with_topic() -> (MockCluster, String) {
    let mock = MockCluster::start(MockOptions::default());
    let topic = unique_name("txn-matrix");
    mock.must(&format!("create_topic {topic} 2 1"));
    (mock, topic)
}

fn transactional_on(mock: &MockCluster) -> Producer {
    producer(
        mock.bootstrap(),
        &[
            ("transactional.id", &unique_name("txn-matrix-id")),
            ("transaction.timeout.ms", "10000"),
            ("linger.ms", "1"),
            ("max.block.ms", "10000"),
        ],
    )
}

fn visible(mock: &MockCluster, topic: &str, isolation: IsolationLevel) -> Vec<String> {
    read_topic_as(mock.bootstrap(), topic, Duration::from_secs(30), isolation)
        .values()
        .flatten()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn send_all(
    p: &Producer,
    topic: &str,
    prefix: &str,
    n: usize,
) -> Vec<rebalance_guard::DeliveryHandle> {
    (0..n)
        .map(|i| {
            p.send(ProducerRecord::new(topic, format!("{prefix}:{i}")).partition((i % 2) as i32))
                .expect("send")
        })
        .collect()
}

/// CONCURRENT_TRANSACTIONS and coordinator moves on every transaction request are retried:
/// the transaction commits, its records once.
#[test]
fn retriable_coordinator_errors_are_retried_on_every_request() {
    let (mock, topic) = mock_with_topic();
    let p = transactional_on(&mock);
    mock.must("push_errors InitProducerId COORDINATOR_LOAD_IN_PROGRESS CONCURRENT_TRANSACTIONS");
    p.init_transactions()
        .expect("init through retriable errors");
    p.begin_transaction().expect("begin");
    mock.must("push_errors AddPartitionsToTxn CONCURRENT_TRANSACTIONS NOT_COORDINATOR");
    let handles = send_all(&p, &topic, "r", 40);
    mock.must("push_errors AddOffsetsToTxn CONCURRENT_TRANSACTIONS");
    mock.must("push_errors TxnOffsetCommit COORDINATOR_LOAD_IN_PROGRESS");
    let group = unique_name("txn-matrix-group");
    p.send_offsets_to_transaction(
        &[(TopicPartition::new(topic.as_str(), 0), 5)],
        &ConsumerGroupMetadata::without_member(group),
    )
    .expect("offsets through retriable errors");
    mock.must("push_errors EndTxn CONCURRENT_TRANSACTIONS COORDINATOR_NOT_AVAILABLE");
    p.commit_transaction()
        .expect("commit through retriable errors");
    for h in handles {
        h.wait().expect("a committed record");
    }
    let seen = visible(&mock, &topic, IsolationLevel::ReadCommitted);
    assert_eq!(seen.len(), 40, "{seen:?}");
    p.close().expect("close");
}

/// A record refused for good makes the transaction abortable: the commit is refused naming
/// it, the abort works, and the next transaction commits; nothing of the first is visible.
#[test]
fn a_refused_record_makes_the_transaction_abortable() {
    let (mock, topic) = mock_with_topic();
    let p = transactional_on(&mock);
    p.init_transactions().expect("init");
    p.begin_transaction().expect("begin");
    mock.must("push_errors Produce INVALID_RECORD");
    let handles = send_all(&p, &topic, "doomed", 1);
    let refused = p
        .commit_transaction()
        .expect_err("a transaction with a failed record committed");
    assert!(
        matches!(refused, ProduceError::TransactionAbortable { .. }),
        "expected abortable, got {refused:?}"
    );
    assert!(handles[0].wait().is_err());
    p.abort_transaction().expect("abort");
    p.begin_transaction().expect("begin again");
    let handles = send_all(&p, &topic, "after", 10);
    p.commit_transaction()
        .expect("the next transaction commits");
    for h in handles {
        h.wait().expect("written");
    }
    let seen = visible(&mock, &topic, IsolationLevel::ReadCommitted);
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert!(seen.iter().all(|v| v.starts_with("after:")), "{seen:?}");
    p.close().expect("close");
}

/// PRODUCER_FENCED on a Produce answer ends the producer: the commit fails as fenced, and so
/// does every later call.
#[test]
fn a_fenced_produce_ends_the_producer() {
    let (mock, topic) = mock_with_topic();
    let p = transactional_on(&mock);
    p.init_transactions().expect("init");
    p.begin_transaction().expect("begin");
    mock.must("push_errors Produce PRODUCER_FENCED");
    let handles = send_all(&p, &topic, "zombie", 1);
    let error = handles[0]
        .wait()
        .expect_err("a fenced record was acknowledged");
    assert!(matches!(error, ProduceError::Fenced { .. }), "{error:?}");
    let commit = p
        .commit_transaction()
        .expect_err("a fenced producer committed");
    assert!(matches!(commit, ProduceError::Fenced { .. }), "{commit:?}");
    let begin = p
        .begin_transaction()
        .expect_err("a fenced producer began again");
    assert!(matches!(begin, ProduceError::Fenced { .. }), "{begin:?}");
    assert!(visible(&mock, &topic, IsolationLevel::ReadCommitted).is_empty());
}

/// INVALID_PRODUCER_EPOCH on EndTxn (a newer epoch of the id exists) is fatal too.
#[test]
fn a_fenced_end_txn_ends_the_producer() {
    let (mock, topic) = mock_with_topic();
    let p = transactional_on(&mock);
    p.init_transactions().expect("init");
    p.begin_transaction().expect("begin");
    send_all(&p, &topic, "x", 4);
    mock.must("push_errors EndTxn INVALID_PRODUCER_EPOCH");
    let commit = p
        .commit_transaction()
        .expect_err("committed with a stale epoch");
    assert!(matches!(commit, ProduceError::Fenced { .. }), "{commit:?}");
    assert_eq!(commit.kind(), ErrorKind::GenerationOver);
}

/// Calls out of order are refused with the state they were made in, and nothing is sent.
#[test]
fn calls_out_of_order_are_refused() {
    let (mock, topic) = mock_with_topic();
    let p = transactional_on(&mock);
    let early = p.begin_transaction().expect_err("begin before init");
    assert!(
        matches!(early, ProduceError::TransactionState { .. }),
        "{early:?}"
    );
    p.init_transactions().expect("init");
    let outside = p
        .send(ProducerRecord::new(&topic, "outside"))
        .expect_err("send outside");
    assert!(
        matches!(outside, ProduceError::TransactionState { .. }),
        "{outside:?}"
    );
    let commit = p.commit_transaction().expect_err("commit outside");
    assert!(
        matches!(commit, ProduceError::TransactionState { .. }),
        "{commit:?}"
    );
    p.begin_transaction().expect("begin");
    let twice = p.begin_transaction().expect_err("begin twice");
    assert!(
        matches!(twice, ProduceError::TransactionState { .. }),
        "{twice:?}"
    );
    // An empty transaction commits without a request to end it.
    p.commit_transaction().expect("empty commit");
    let plain = producer(mock.bootstrap(), &[]);
    let not_transactional = plain.begin_transaction().expect_err("plain producer began");
    assert!(
        matches!(not_transactional, ProduceError::TransactionState { .. }),
        "{not_transactional:?}"
    );
}

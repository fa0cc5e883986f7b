//! The sender's retry rules under errors only librdkafka's mock injects on demand: Produce
//! answers of NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS and REQUEST_TIMED_OUT, connections
//! cut with requests on the wire (`_TRANSPORT`), and the errors after which the sequence cannot
//! continue (OUT_OF_ORDER_SEQUENCE_NUMBER on the oldest batch, UNKNOWN_PRODUCER_ID), which bump
//! a new producer id (KIP-360's reset). Each test sends over several partitions, then reads every
//! partition back: every record once, in order per key, every handle acknowledged.
//!
//! Where the mock differs from Kafka: it deduplicates an idempotent producer's retries, but it
//! accepts a sequence gap (seen here: with sequence 1 refused by an injected error, it wrote
//! the next batch, sequence 58, where Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER), and it takes
//! any sequence as a producer's first on a partition. So on the mock a later request in flight
//! behind a refused one is written out of order by the broker itself, whatever the client does;
//! these tests therefore keep one request in flight per connection
//! (`max.in.flight.requests.per.connection=1`) and test the retry and reset rules, and the
//! pipelined case (five in flight) is tested against Kafka's own sequence checks on the
//! three-node cluster (`clusters::producer`).

use super::*;

/// Sends `keys x per_key` records while `errors` are pushed for the next Produce requests, then
/// checks the log.
fn survives(errors: &str, keys: usize, per_key: usize) {
    let mock = MockCluster::start(MockOptions::default());
    let topic = unique_name("produce-faults");
    mock.must(&format!("create_topic {topic} 4 1"));
    let producer = producer(
        mock.bootstrap(),
        &[
            ("batch.size", "1024"),
            ("linger.ms", "2"),
            ("max.in.flight.requests.per.connection", "1"),
        ],
    );
    // The producer id and one batch per partition first, so that the errors hit requests with
    // sequences the mock already tracks.
    for p in 0..4 {
        producer
            .send_and_wait(
                ProducerRecord::new(&topic, "warm-up")
                    .key("acct-999")
                    .partition(p),
            )
            .expect("warm-up");
    }
    mock.must(&format!("push_errors Produce {errors}"));
    let handles = send_keyed(&producer, &topic, keys, per_key);
    producer.flush().expect("flush");
    for (k, h) in &handles {
        if let Err(e) = h.wait() {
            panic!("{errors}: a record of key {k} failed: {e}");
        }
    }
    let mut records = read_all(mock.bootstrap(), &topic);
    for rs in records.values_mut() {
        rs.retain(|r| r.value.as_deref() != Some(&b"warm-up"[..]));
    }
    assert_once_in_order(errors, &records, keys, per_key);
    producer.close().expect("close");
}

#[test]
fn leaders_that_moved_are_retried_in_order() {
    survives(
        "NOT_LEADER_OR_FOLLOWER NOT_LEADER_OR_FOLLOWER NOT_ENOUGH_REPLICAS REQUEST_TIMED_OUT",
        40,
        50,
    );
}

#[test]
fn a_cut_connection_is_retried_without_duplicates() {
    survives("_TRANSPORT _TRANSPORT", 40, 50);
}

#[test]
fn a_lost_producer_state_takes_a_new_producer_id() {
    survives("UNKNOWN_PRODUCER_ID", 40, 50);
}

#[test]
fn a_sequence_gap_takes_a_new_producer_id() {
    survives("OUT_OF_ORDER_SEQUENCE_NUMBER", 40, 50);
}

/// A leader that does not answer: each request ends at `request.timeout.ms`, each record at
/// `delivery.timeout.ms` (its handle fails with `DeliveryTimeout`, which says the last request
/// may have been written); once the leader answers again the producer goes on, on a new
/// producer id (the expired batch left its partition's sequence with a gap).
#[test]
fn an_unanswered_record_fails_at_its_delivery_timeout() {
    let mock = MockCluster::start(MockOptions::default());
    let topic = unique_name("produce-expire");
    mock.must(&format!("create_topic {topic} 1 1"));
    let producer = producer(
        mock.bootstrap(),
        &[
            ("linger.ms", "0"),
            ("request.timeout.ms", "1000"),
            ("delivery.timeout.ms", "2500"),
        ],
    );
    producer
        .send_and_wait(ProducerRecord::new(&topic, "before"))
        .expect("warm-up");
    mock.must("rtt 1 20000");
    let sent = Instant::now();
    let handle = producer
        .send(ProducerRecord::new(&topic, "unanswered"))
        .expect("send");
    let failed = handle
        .wait()
        .expect_err("no answer within the delivery timeout");
    let took = sent.elapsed();
    assert!(
        matches!(failed, ProduceError::DeliveryTimeout { .. }),
        "{failed}"
    );
    assert_eq!(failed.kind(), ErrorKind::Network);
    // The bound (the sender's rule 6): the delivery timeout, plus the request on the wire when
    // it ran out, plus the metadata request the sender waits for then (one attempt per address:
    // here the broker and the bootstrap entry, each a connection and a request of 1 s), plus a
    // margin for a loaded machine.
    assert!(
        took >= Duration::from_millis(2500)
            && took < Duration::from_millis(2500 + 1000 + 3000 + 1500),
        "failed after {took:?}"
    );
    mock.must("rtt 1 0");
    let after = producer
        .send_and_wait(ProducerRecord::new(&topic, "after"))
        .expect("the producer goes on");
    assert!(after.offset >= 1);
    let values: Vec<Vec<u8>> = read_all(mock.bootstrap(), &topic)[&0]
        .iter()
        .map(|r| r.value.as_deref().unwrap_or_default().to_vec())
        .collect();
    assert_eq!(values.first().map(Vec::as_slice), Some(&b"before"[..]));
    assert_eq!(values.last().map(Vec::as_slice), Some(&b"after"[..]));
    assert!(
        values.len() <= 3,
        "at most the unanswered one between: {values:?}"
    );
    producer.close().expect("close");
}

//! A broker that is down or slow holds only its own partitions: the records of partitions led by
//! another broker keep flowing through the whole consumer (poll, intake, fetch lanes), on
//! librdkafka's mock cluster with two brokers (each test starts its own: a broker down or slow is
//! down or slow for every client of the mock).
//!
//! What this guards: `scripts/bench --faults` showed our untouched partitions flowing in bursts
//! 0.3-1 s apart for the ~12 s until the cluster fenced a dead node, because each fetch round
//! waited for the dead broker's job (backing off before its next connect, or its request in
//! flight) although the healthy broker had answered with records.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_guard::consumer::Consumer;
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord};
use rebalance_guard::TopicPartition;
use support::consumer::config;
use support::{unique_name, MockCluster, MockOptions};

/// Records of partition 0 (led by the healthy broker), one batch each: the mock answers a fetch
/// with one batch per partition, so the partition still has records to fetch for the whole
/// measurement and the healthy broker answers every fetch at once, with records.
const BACKLOG: usize = 400;
/// The fetch wait: a round that waited for the other broker would stand still this long
/// (plus the answer margin); the longest gap allowed is half of it.
const FETCH_WAIT_MS: u64 = 2000;
const LONGEST_GAP: Duration = Duration::from_millis(1000);

/// Reads a topic whose partition 0 is led by broker 1 and partition 1 by broker 2, applies
/// `fault` (the mock command; `what` names it in the failure) to broker 2 once both partitions
/// were read from, and asserts that partition 0's backlog then comes without any gap of
/// [`LONGEST_GAP`] or more (then `undo`, if any).
fn the_healthy_brokers_records_keep_flowing(what: &str, fault: &str, undo: Option<&str>) {
    let topic = unique_name("held");
    let group = unique_name("held-group");
    let mock = MockCluster::start(MockOptions {
        brokers: 2,
        topics: vec![(topic.clone(), 2)],
        ..MockOptions::default()
    });
    mock.must(&format!("leader {topic} 0 1"));
    mock.must(&format!("leader {topic} 1 2"));
    mock.must(&format!("coordinator group {group} 1"));
    let (healthy, faulty) = (
        TopicPartition::new(topic.as_str(), 0),
        TopicPartition::new(topic.as_str(), 1),
    );
    let mut producer = Client::connect(ClientConfig::from_bootstrap_str(mock.bootstrap()))
        .expect("connect the producing client");
    let record = |i: usize| ProduceRecord {
        key: None,
        value: Some(Bytes::from(format!("{i:0100}"))),
        ..ProduceRecord::default()
    };
    producer
        .produce(&faulty, &(0..5).map(record).collect::<Vec<_>>())
        .expect("produce to partition 1");
    for i in 0..BACKLOG {
        producer
            .produce(&healthy, &[record(i)])
            .expect("produce to partition 0");
    }
    let wait = FETCH_WAIT_MS.to_string();
    let settings = [
        ("fetch.max.wait.ms", wait.as_str()),
        // Broker 2's lane waits 2 s before it connects again after a failure: a round that
        // waited for it would show.
        ("retry.backoff.ms", "2000"),
        ("reconnect.backoff.max.ms", "2000"),
    ];
    let mut consumer = Consumer::assign(
        config(mock.bootstrap(), &group, &settings),
        &[healthy.clone(), faulty.clone()],
    )
    .expect("assign");

    // Both brokers serve: read until partition 1's records came (and some of partition 0's).
    let (mut read_healthy, mut read_faulty) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_faulty < 5 {
        assert!(
            Instant::now() < deadline,
            "before the fault: {read_faulty} of partition 1's 5 records within 30 s"
        );
        let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
        while let Some(d) = batch.next() {
            if d.record.partition == 0 {
                read_healthy += 1;
            } else {
                read_faulty += 1;
            }
            batch.complete(d);
        }
    }
    assert!(
        read_healthy < BACKLOG / 2,
        "most of partition 0 was read before the fault ({read_healthy} of {BACKLOG})"
    );

    mock.must(fault);
    let faulted = Instant::now();
    let mut arrivals = Vec::new();
    let until = faulted + Duration::from_secs(8);
    while read_healthy < BACKLOG && Instant::now() < until {
        let mut batch = consumer.poll(Duration::from_millis(100)).expect("poll");
        while let Some(d) = batch.next() {
            if d.record.partition == 0 {
                read_healthy += 1;
                arrivals.push(Instant::now());
            }
            batch.complete(d);
        }
    }
    let ended = Instant::now();
    if let Some(undo) = undo {
        mock.must(undo);
    }

    let mut points = vec![faulted];
    points.extend(&arrivals);
    if read_healthy < BACKLOG {
        points.push(ended);
    }
    let gaps: Vec<Duration> = points.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().max().copied().unwrap_or_default();
    let mut long: Vec<String> = gaps
        .iter()
        .enumerate()
        .filter(|(_, g)| **g >= Duration::from_millis(200))
        .map(|(i, g)| format!("#{i}: {g:?}"))
        .collect();
    long.truncate(20);
    assert!(
        longest < LONGEST_GAP,
        "after {what}, partition 0 (led by the healthy broker, a backlog to fetch) stood \
         still {longest:?} (gaps of 200 ms or more, by arrival: {long:?}; {read_healthy} of \
         {BACKLOG} read)"
    );
    assert_eq!(
        read_healthy, BACKLOG,
        "partition 0's backlog within 8 s of the fault"
    );
    consumer.close().expect("close");
}

/// Broker 2 closes the connection at every Fetch while it stays in the metadata (a broker that
/// died and is not fenced yet, as Kafka lists it for the ~9 s of its failure detection; the
/// mock's `broker_down` would drop it from the metadata at once): partition 0's records do not
/// wait for its lane, failing and backing off before each connect.
#[test]
fn a_broker_failing_every_fetch_holds_no_other_brokers_records() {
    let errors = vec!["_TRANSPORT"; 200].join(" ");
    the_healthy_brokers_records_keep_flowing(
        "broker 2 closing every fetch connection",
        &format!("broker_push_errors 2 Fetch {errors}"),
        None,
    );
}

/// Broker 2 answers everything 2 s late (a hung or overloaded broker): partition 0's records do
/// not wait for its fetch in flight.
#[test]
fn a_slow_broker_holds_no_other_brokers_records() {
    the_healthy_brokers_records_keep_flowing(
        "broker 2 answering 2 s late",
        "rtt 2 2000",
        Some("rtt 2 0"),
    );
}

/// Broker 2 disconnects and refuses connections (the mock then leaves it out of its metadata,
/// so the consumer learns at its first refresh that partition 1 has no reachable leader):
/// partition 0's records wait neither for the refused connections nor for the refresh.
#[test]
fn a_broker_down_holds_no_other_brokers_records() {
    the_healthy_brokers_records_keep_flowing("broker 2 down", "broker_down 2", Some("broker_up 2"));
}

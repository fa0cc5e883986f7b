//! What comes again after a handler fails: `Batch::fail` (and a batch dropped with records still
//! out) releases the failed record: it comes again, whatever order completions and failures
//! arrive in, the records after it that finished are not repeated, and the committed position
//! never passes the failed record until it finished. Runs on real Kafka (the shared broker) and
//! on tansu.

use crate::support;

use std::time::{Duration, Instant};

use rebalance_guard::consumer::{Consumer, Delivery};
use support::consumer::{committed, config, produce_to_each_partition};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(30);

fn failed_record_comes_again_and_finished_later_ones_do_not(kind: BrokerKind) {
    let broker = kind.start();
    let topic = unique_name("fail");
    let group = unique_name("fail-group");
    broker.create_topic(&topic, 1);
    produce_to_each_partition(&broker.bootstrap(), &topic, 1, 3);
    let mut consumer = Consumer::subscribe(
        config(&broker.bootstrap(), &group, &[("max.poll.records", "3")]),
        &[&topic],
    )
    .expect("subscribe");

    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "{kind:?}: no records within {WAIT:?}"
        );
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        let mut records: Vec<Delivery> = Vec::new();
        while records.len() < 3 {
            match batch.next() {
                Some(d) => records.push(d),
                None => break,
            }
        }
        if records.is_empty() {
            continue; // still joining, or the fetch is on its way
        }
        let offsets: Vec<i64> = records.iter().map(|d| d.record.offset).collect();
        assert_eq!(
            offsets,
            [0, 1, 2],
            "{kind:?}: the three records arrive in one batch"
        );
        let third = records.pop().unwrap();
        let second = records.pop().unwrap();
        let first = records.pop().unwrap();
        batch.complete(third); // a later record finishes first...
        batch.fail(first); // ...then an earlier one fails
        batch.complete(second); // and one in between finishes after the failure
        break;
    }
    consumer.commit().expect("commit");
    assert!(
        matches!(
            committed(&broker.bootstrap(), &group, &topic, 1)[&0],
            None | Some(0)
        ),
        "{kind:?}: the position may not pass the failed record 0 (1 and 2 travel in the map)"
    );

    // The failed record comes again; 1 and 2, whose effects happened, do not.
    let mut again = Vec::new();
    let deadline = Instant::now() + WAIT;
    while again.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{kind:?}: redelivered only {again:?}"
        );
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        while let Some(d) = batch.next() {
            again.push(d.record.offset);
            batch.complete(d);
        }
    }
    assert_eq!(
        again,
        [0],
        "{kind:?}: the failed record, and nothing it did not need"
    );
    consumer.commit().expect("commit");
    assert_eq!(
        committed(&broker.bootstrap(), &group, &topic, 1)[&0],
        Some(3),
        "{kind:?}"
    );
    consumer.close().expect("close");
}

crate::on_brokers! {
    kafka {
        a_failed_record_comes_again_and_finished_later_ones_do_not =>
            failed_record_comes_again_and_finished_later_ones_do_not(BrokerKind::Kafka),
    }

    tansu {
        a_failed_record_comes_again_and_finished_later_ones_do_not =>
            failed_record_comes_again_and_finished_later_ones_do_not(BrokerKind::Tansu),
    }
}

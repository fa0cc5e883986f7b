//! Work skipped because its lease was no longer current is done later, never forgotten: a keyed
//! decoupled member that loses its partitions with records in its queues, and gets them back,
//! applies every order.
//!
//! On real Kafka 4.x. A proxy between the member and the broker holds all of the member's traffic
//! for longer than its session (as a broker fault that holds the coordinator's answers does): the
//! member's leases lapse while its workers still have queued records, its handlers find their
//! leases not current and skip the effect, the coordinator expires the member, and when the
//! traffic flows again the member rejoins and gets the same partitions back. Every order is
//! applied exactly once.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use rebalance_guard::consumer::{Consumer, ConsumerConfig, WorkContext};
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord, Record};
use rebalance_guard::TopicPartition;
use support::consumer::{
    committed, config, consumer_protocol_config, produce_until_accepted, wait_until,
};
use support::proxy::Proxy;
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(90);
const PARTITIONS: i32 = 2;
/// Orders per partition.
const ORDERS: usize = 150;

/// The effect store: per order id, how many times its effect was applied.
type Effects = Arc<Mutex<BTreeMap<String, usize>>>;

fn order_id(record: &Record) -> Option<String> {
    record
        .value
        .as_ref()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// `ORDERS` orders to each partition, with unique order ids as values and five accounts as keys
/// (records of one account stay in order under `processing.order=key`).
fn produce_orders(bootstrap: &str, topic: &str) {
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(bootstrap)).expect("client");
    for p in 0..PARTITIONS {
        let records: Vec<ProduceRecord> = (0..ORDERS)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("acct-{}", i % 5))),
                value: Some(Bytes::from(format!("ord-{p}-{i:04}"))),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        produce_until_accepted(
            &mut client,
            &TopicPartition::new(topic, p),
            &records,
            "orders",
        );
    }
}

/// Runs the scenario for one member configuration; `hold` must exceed the session the broker
/// keeps for the member, so that the coordinator expires it while its traffic is held.
///
/// `handler_time` is how long each handler takes: long enough that the records queued to the 2
/// workers (up to 128) outlast the client's lease bound.
fn stale_skips_are_done_when_the_partitions_come_back(
    make_config: impl Fn(&str, &str) -> ConsumerConfig,
    handler_time: Duration,
    hold: Duration,
) {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("stale");
    let group = unique_name("stale-group");
    broker.create_topic(&topic, PARTITIONS as u32);
    produce_orders(&broker.bootstrap(), &topic);
    let proxy = Proxy::start(&broker.bootstrap());

    let effects: Effects = Arc::default();
    let stale_skips = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let member = {
        let config = make_config(proxy.addr(), &group);
        let topic = topic.clone();
        let (effects, stale_skips, stop) = (effects.clone(), stale_skips.clone(), stop.clone());
        thread::spawn(move || {
            let mut consumer = Consumer::subscribe(config, &[&topic])
                .expect("subscribe")
                .with_idempotency_key(order_id);
            let handler =
                move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
                    thread::sleep(handler_time);
                    // As the README's handler: right before the effect, is this still ours?
                    if ctx.is_current() {
                        let id = order_id(record).expect("an order id");
                        *effects.lock().unwrap().entry(id).or_default() += 1;
                    } else {
                        stale_skips.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(())
                };
            while !stop.load(Ordering::SeqCst) {
                // A run may end in an error when the member hears it was expired; the next run
                // rejoins.
                if let Err(error) = consumer.run_with_workers(&stop, 2, 64, handler.clone()) {
                    eprintln!("run ended: {error}");
                }
            }
            drop(consumer.close());
        })
    };
    wait_until("the member applied some orders", WAIT, || {
        effects.lock().unwrap().len() >= 20
    });
    // Its traffic is held: leases lapse with records queued, then the coordinator expires it.
    proxy.hold();
    thread::sleep(hold);
    proxy.release();

    let total = PARTITIONS as usize * ORDERS;
    let log_end: BTreeMap<i32, Option<i64>> =
        (0..PARTITIONS).map(|p| (p, Some(ORDERS as i64))).collect();
    wait_until("every partition committed to its end", WAIT, || {
        committed(&broker.bootstrap(), &group, &topic, PARTITIONS) == log_end
    });
    stop.store(true, Ordering::SeqCst);
    member.join().expect("member");

    let skipped = stale_skips.load(Ordering::SeqCst);
    assert!(
        skipped > 0,
        "the scenario needs handlers that found their lease not current"
    );
    let effects = effects.lock().unwrap().clone();
    // Every skip was a skip (nothing applied), so nothing needs applying twice either: the member
    // got its own partitions back and its keys stood only for effects that happened.
    let repeats: Vec<(&String, &usize)> = effects.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeats.is_empty(),
        "orders applied more than once: {repeats:?}"
    );
    let missing: Vec<String> = (0..PARTITIONS)
        .flat_map(|p| (0..ORDERS).map(move |i| format!("ord-{p}-{i:04}")))
        .filter(|id| !effects.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {total} orders never applied although the group committed past them \
         ({skipped} handlers skipped a stale lease): {missing:?}",
        missing.len()
    );
}

mod kafka {
    use super::*;

    /// The classic protocol: a 3 s session (the lease bound too), the traffic held for 5 s.
    #[test]
    fn a_keyed_decoupled_member_that_loses_its_queued_partitions_applies_every_order_when_they_come_back(
    ) {
        let settings = [
            ("session.timeout.ms", "3000"),
            ("heartbeat.interval.ms", "300"),
            ("processing.order", "key"),
            ("revoke.drain.timeout.ms", "2000"),
        ];
        stale_skips_are_done_when_the_partitions_come_back(
            |bootstrap, group| config(bootstrap, group, &settings),
            Duration::from_millis(60),
            Duration::from_secs(5),
        );
    }
    /// KIP-848: the shared broker keeps consumer-protocol sessions 6 s with 500 ms heartbeats, so
    /// leases lapse after three heartbeat intervals, long before the coordinator expires the
    /// member; the traffic is held for 8 s.
    #[test]
    fn a_keyed_decoupled_consumer_protocol_member_that_loses_its_queued_partitions_applies_every_order(
    ) {
        let settings = [
            ("processing.order", "key"),
            ("revoke.drain.timeout.ms", "2000"),
        ];
        stale_skips_are_done_when_the_partitions_come_back(
            |bootstrap, group| consumer_protocol_config(bootstrap, group, &settings),
            Duration::from_millis(25),
            Duration::from_secs(8),
        );
    }
}

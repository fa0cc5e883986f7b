//! The warning at subscribe when the lease bound does not outlast the cluster's failure
//! detection (issue 21, item 6), on real Kafka 4.x.
//!
//! A broker that dies or hangs is fenced only after `broker.session.timeout.ms` (9000 on the
//! shared test broker, Kafka's default); until then the coordinator's answers can be held, so a
//! 6 s session expires on every broker failure and the whole group rebalances. `subscribe`
//! reads the broker's value (one DescribeConfigs) and logs one warning naming both settings.
//! The warnings are captured per thread (`support::log_capture`).

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebalance_guard::consumer::Consumer;
use rebalance_guard::ConsumerConfig;
use support::consumer::{config, consumer_protocol_config};
use support::log_capture::observe_this_thread;
use support::{unique_name, BrokerKind};

/// The warnings this thread logs while `subscribe` runs, and the consumer it returned.
fn subscribe_capturing(config: ConsumerConfig, topic: &str) -> (Consumer, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let warnings = seen.clone();
    observe_this_thread(Some(Arc::new(move |level, text: &str| {
        if level == log::Level::Warn {
            warnings.lock().unwrap().push(text.to_string());
        }
        false
    })));
    let consumer = Consumer::subscribe(config, &[topic]).expect("subscribe");
    observe_this_thread(None);
    let warnings = seen.lock().unwrap().clone();
    (consumer, warnings)
}

fn about_failure_detection(warnings: &[String]) -> Vec<&String> {
    warnings
        .iter()
        .filter(|w| w.contains("broker.session.timeout.ms"))
        .collect()
}

#[test]
fn a_six_second_session_warns_once_and_a_twelve_second_one_does_not() {
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("fd");
    broker.create_topic(&topic, 1);

    let short = config(&broker.bootstrap(), &unique_name("g"), &[]);
    assert_eq!(short.session_timeout(), Duration::from_millis(6000));
    let (consumer, warnings) = subscribe_capturing(short, &topic);
    let found = about_failure_detection(&warnings);
    assert_eq!(found.len(), 1, "{warnings:?}");
    let text = found[0];
    assert!(
        text.contains("session.timeout.ms=6000")
            && text.contains("broker.session.timeout.ms=9000")
            && text.contains("whole group rebalances")
            && text.contains("set session.timeout.ms to 12000 or more"),
        "{text}"
    );
    assert_eq!(
        consumer
            .broker_failure_detection()
            .and_then(|d| d.broker_session_timeout),
        Some(Duration::from_millis(9000))
    );
    drop(consumer);

    let long = config(
        &broker.bootstrap(),
        &unique_name("g"),
        &[("session.timeout.ms", "12000")],
    );
    let (consumer, warnings) = subscribe_capturing(long, &topic);
    assert!(
        about_failure_detection(&warnings).is_empty(),
        "{warnings:?}"
    );
    // The check ran (it did not stay silent for want of an answer).
    assert_eq!(
        consumer
            .broker_failure_detection()
            .and_then(|d| d.broker_session_timeout),
        Some(Duration::from_millis(9000))
    );
}

#[test]
fn a_kip848_member_is_warned_about_its_session_bound() {
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("fd");
    broker.create_topic(&topic, 1);

    let short = consumer_protocol_config(
        &broker.bootstrap(),
        &unique_name("g"),
        &[("session.bound.ms", "6000")],
    );
    let (_consumer, warnings) = subscribe_capturing(short, &topic);
    let found = about_failure_detection(&warnings);
    assert_eq!(found.len(), 1, "{warnings:?}");
    assert!(
        found[0].contains("session.bound.ms=6000")
            && found[0].contains("set session.bound.ms to 12000 or more"),
        "{}",
        found[0]
    );

    let long = consumer_protocol_config(
        &broker.bootstrap(),
        &unique_name("g"),
        &[("session.bound.ms", "15000")],
    );
    let (consumer, warnings) = subscribe_capturing(long, &topic);
    assert!(
        about_failure_detection(&warnings).is_empty(),
        "{warnings:?}"
    );
    assert!(consumer.broker_failure_detection().is_some());
}

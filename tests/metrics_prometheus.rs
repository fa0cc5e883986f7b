//! The `metrics` feature: the example's recorder renders Prometheus's text format exactly, and
//! on real Kafka the consumer's signals reach it and its `/metrics` endpoint: the lag gauges
//! fall to 0 once everything is consumed, commits are timed, the assignment counts as a
//! rebalance, fetches are counted, and the close's hand-back is timed as a handoff.

mod support;

#[path = "../examples/prometheus_metrics/recorder.rs"]
mod recorder;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use metrics::{counter, describe_counter, gauge, histogram};
use rebalance_guard::consumer::Consumer;
use rebalance_guard::metrics::names;
use rebalance_guard::wire::{Client, ClientConfig};
use rebalance_guard::{IdempotencyKey, TopicPartition};
use recorder::TextRecorder;
use support::consumer::wait_until;
use support::consumer::{broker_with_topic, config, produce_until_accepted, value_records};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_recorder_renders_prometheus_text_format() {
    let recorder = TextRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        describe_counter!("orders_total", "orders seen\nby \\ everyone");
        counter!("orders_total", "desk" => "fx \"spot\"").increment(3);
        counter!("orders_total", "desk" => "rates").increment(1);
        gauge!("depth").set(1.5);
        histogram!("wait_seconds", "kind" => "a").record(0.02);
        histogram!("wait_seconds", "kind" => "a").record(20.0);
    });
    let expected = "\
# TYPE depth gauge
depth 1.5
# HELP orders_total orders seen\\nby \\\\ everyone
# TYPE orders_total counter
orders_total{desk=\"fx \\\"spot\\\"\"} 3
orders_total{desk=\"rates\"} 1
# TYPE wait_seconds histogram
wait_seconds_bucket{kind=\"a\",le=\"0.005\"} 0
wait_seconds_bucket{kind=\"a\",le=\"0.01\"} 0
wait_seconds_bucket{kind=\"a\",le=\"0.025\"} 1
wait_seconds_bucket{kind=\"a\",le=\"0.05\"} 1
wait_seconds_bucket{kind=\"a\",le=\"0.1\"} 1
wait_seconds_bucket{kind=\"a\",le=\"0.25\"} 1
wait_seconds_bucket{kind=\"a\",le=\"0.5\"} 1
wait_seconds_bucket{kind=\"a\",le=\"1\"} 1
wait_seconds_bucket{kind=\"a\",le=\"2.5\"} 1
wait_seconds_bucket{kind=\"a\",le=\"5\"} 1
wait_seconds_bucket{kind=\"a\",le=\"10\"} 1
wait_seconds_bucket{kind=\"a\",le=\"+Inf\"} 2
wait_seconds_sum{kind=\"a\"} 20.02
wait_seconds_count{kind=\"a\"} 2
";
    assert_eq!(recorder.render(), expected);
}

/// `GET /metrics` from the recorder's endpoint: the body of a 200 answer.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

/// The value of the sample `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        if !(rest.is_empty() || rest.starts_with('{')) {
            return None;
        }
        labels
            .iter()
            .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
            .then(|| value.parse().ok())?
    })
}

/// The process's recorder (the facade takes one per process; every test here shares it, each
/// with groups and topics of its own) and the address of its `/metrics` endpoint.
fn endpoint() -> SocketAddr {
    static ENDPOINT: OnceLock<SocketAddr> = OnceLock::new();
    *ENDPOINT.get_or_init(|| {
        let recorder = TextRecorder::default();
        metrics::set_global_recorder(recorder.clone()).expect("the only global recorder");
        rebalance_guard::metrics::describe();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        recorder.serve(listener);
        addr
    })
}

/// Runs `consumer` on a thread of its own (no-op handler) until `stop` is set.
fn spawn_run(mut consumer: Consumer, stop: &Arc<AtomicBool>) -> JoinHandle<Consumer> {
    let stop = stop.clone();
    thread::spawn(move || {
        consumer
            .run(&stop, |_, _| Ok::<(), std::io::Error>(()))
            .expect("run");
        consumer
    })
}

#[test]
fn the_consumers_signals_reach_the_recorder_and_its_endpoint() {
    let addr = endpoint();

    let (broker, topic) = broker_with_topic(BrokerKind::Kafka, "metrics", 2);
    let bootstrap = broker.bootstrap();
    let produced = [30usize, 50];
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(&bootstrap)).unwrap();
    for (p, count) in produced.iter().enumerate() {
        let records = value_records((0..*count).map(|i| format!("v{i}")));
        let tp = TopicPartition::new(topic.as_str(), p as i32);
        produce_until_accepted(&mut client, &tp, &records, "produce");
    }
    let group = unique_name("metrics-group");
    let settings = config(&bootstrap, &group, &[("commit.interval.ms", "100")]);
    let consumer = Consumer::subscribe(settings, &[&topic]).expect("subscribe");
    let stop = Arc::new(AtomicBool::new(false));
    let runner = spawn_run(consumer, &stop);
    let g = group.as_str();
    let t = topic.as_str();
    let lag = |text: &str, p: &str| {
        sample(
            text,
            names::LAG,
            &[("group", g), ("topic", t), ("partition", p)],
        )
    };
    wait_until("lag 0 on both partitions at /metrics", WAIT, || {
        let text = scrape(addr);
        lag(&text, "0") == Some(0.0) && lag(&text, "1") == Some(0.0)
    });
    let text = scrape(addr);
    assert!(text.contains("# TYPE rebalance_guard_lag gauge"), "{text}");
    assert!(text.contains("# HELP rebalance_guard_lag "), "{text}");
    for p in ["0", "1"] {
        let owned = &[("group", g), ("topic", t), ("partition", p)];
        assert_eq!(sample(&text, names::OWNED, owned), Some(1.0), "{text}");
        assert_eq!(sample(&text, names::FETCH_LAG, owned), Some(0.0), "{text}");
    }
    let paced = &[("group", g), ("kind", "paced")];
    let commits = sample(&text, "rebalance_guard_commit_seconds_count", paced);
    assert!(
        commits.is_some_and(|n| n >= 1.0),
        "a paced commit timed: {text}"
    );
    assert_eq!(sample(&text, names::COMMIT_FAILURES, paced), None, "{text}");
    assert_eq!(
        sample(&text, names::REBALANCES, &[("group", g)]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, names::PARTITIONS_ASSIGNED, &[("group", g)]),
        Some(2.0)
    );
    let fetched = &[("group", g), ("topic", t)];
    let records = sample(&text, names::FETCH_RECORDS, fetched).unwrap_or(0.0);
    assert!(records >= 80.0, "every record fetched ({records}): {text}");
    let bytes = sample(&text, names::FETCH_BYTES, fetched).unwrap_or(0.0);
    assert!(bytes > 80.0 * 2.0, "their bytes ({bytes}): {text}");

    stop.store(true, Ordering::SeqCst);
    let consumer = runner.join().expect("the run thread");
    consumer.close().expect("close");
    let text = scrape(addr);
    let group_only = &[("group", g)];
    assert_eq!(
        sample(&text, names::PARTITIONS_REVOKED, group_only),
        Some(2.0),
        "{text}"
    );
    for p in ["0", "1"] {
        let owned = &[("group", g), ("topic", t), ("partition", p)];
        assert_eq!(
            sample(&text, names::OWNED, owned),
            Some(0.0),
            "handed back: {text}"
        );
    }
    assert_eq!(
        sample(&text, "rebalance_guard_handoff_seconds_count", group_only),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "rebalance_guard_drain_seconds_count", group_only),
        Some(1.0)
    );
}

/// Records whose idempotency key was seen before are refused as duplicates, one count each by
/// topic and reason; a second member joining makes the first hand its partitions back (a
/// handoff, timed from the fence) and wait for its new assignment (a rebalance, timed from the
/// revocation).
#[test]
fn refusals_handoffs_and_rebalances_are_counted() {
    let addr = endpoint();
    let (broker, topic) = broker_with_topic(BrokerKind::Kafka, "metrics-refusals", 2);
    let bootstrap = broker.bootstrap();
    let mut client = Client::connect(ClientConfig::from_bootstrap_str(&bootstrap)).unwrap();
    // Ten records, five keys: the second half repeats the first.
    let records = value_records((0..10).map(|i| format!("order-{}", i % 5)));
    let tp = TopicPartition::new(topic.as_str(), 0);
    produce_until_accepted(&mut client, &tp, &records, "produce");
    let group = unique_name("metrics-refusals-group");
    let (g, t) = (group.as_str(), topic.as_str());
    let settings = config(&bootstrap, g, &[("commit.interval.ms", "100")]);
    let first = Consumer::subscribe(settings.clone(), &[t])
        .expect("subscribe")
        .with_idempotency_key(|record| record.value.as_deref().map(IdempotencyKey::from));
    let stop = Arc::new(AtomicBool::new(false));
    let first = spawn_run(first, &stop);
    let duplicates = &[("group", g), ("topic", t), ("reason", "duplicate")];
    wait_until("five duplicates refused", WAIT, || {
        sample(&scrape(addr), names::REFUSALS, duplicates) == Some(5.0)
    });

    let second = spawn_run(
        Consumer::subscribe(settings, &[t]).expect("subscribe"),
        &stop,
    );
    let group_only = &[("group", g)];
    wait_until("a handoff and a rebalance timed", WAIT, || {
        let text = scrape(addr);
        let count = |name: &str| sample(&text, name, group_only).unwrap_or(0.0);
        count("rebalance_guard_handoff_seconds_count") >= 1.0
            && count("rebalance_guard_rebalance_seconds_count") >= 1.0
            // The first member's two assignments and the second's first.
            && count(names::REBALANCES) >= 3.0
    });
    stop.store(true, Ordering::SeqCst);
    for member in [first, second] {
        member.join().expect("a run thread").close().expect("close");
    }
    let text = scrape(addr);
    assert_eq!(
        sample(&text, names::REFUSALS, duplicates),
        Some(5.0),
        "{text}"
    );
    assert!(
        sample(&text, names::PARTITIONS_REVOKED, group_only).is_some_and(|n| n >= 2.0),
        "{text}"
    );
}

//! What the broker-fault tests (`tests/cluster_*.rs`) share: a consumer on a thread of its own
//! that notes every record its handler processed, and a producer that writes live while nodes
//! fail.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use rebalance_guard::consumer::{Consumer, ConsumerConfig};
use rebalance_guard::wire::Record;

use super::peer;

/// One record a handler processed, and when.
pub struct Processed {
    pub at: Instant,
    /// Wall clock at processing and the record's (producer) timestamp, in ms: how late a
    /// record was processed, whether or not records kept being produced.
    pub wall_ms: i64,
    pub timestamp: i64,
    pub partition: i32,
    pub offset: i64,
    pub key: String,
}

/// Every record a member processed, in the order processed.
pub type Log = Arc<Mutex<Vec<Processed>>>;

/// A consumer running on its own thread until `stop`, then closed.
pub struct FaultMember {
    pub name: &'static str,
    pub group: String,
    pub processed: Log,
    pub stop: Arc<AtomicBool>,
    pub thread: thread::JoinHandle<Result<(), String>>,
}

impl FaultMember {
    /// Classic protocol or KIP-848 by `config`; `workers` selects `run_with_workers` with that
    /// many worker threads (the decoupled mode) over `run`.
    pub fn start(
        name: &'static str,
        config: ConsumerConfig,
        topic: &str,
        workers: Option<usize>,
        stop: Arc<AtomicBool>,
    ) -> FaultMember {
        let group = config.group_id().to_string();
        let processed: Log = Arc::default();
        let (topic, log, halt) = (topic.to_string(), processed.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut consumer = Consumer::subscribe(config, &[&topic]).map_err(|e| e.to_string())?;
            let note = move |record: &Record| {
                let key = record.key.as_deref().unwrap_or_default();
                let wall_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                log.lock().unwrap().push(Processed {
                    at: Instant::now(),
                    wall_ms,
                    timestamp: record.timestamp,
                    partition: record.partition,
                    offset: record.offset,
                    key: String::from_utf8_lossy(key).into_owned(),
                });
            };
            let ran = match workers {
                Some(workers) => consumer.run_with_workers(&halt, workers, 64, move |r, _ctx| {
                    note(r);
                    Ok::<(), std::io::Error>(())
                }),
                None => consumer.run(&halt, |r, _ctx| {
                    note(r);
                    Ok::<(), std::io::Error>(())
                }),
            };
            let closed = consumer.close();
            ran.map_err(|e| format!("run: {e}"))?;
            closed.map_err(|e| format!("close: {e}"))
        });
        FaultMember {
            name,
            group,
            processed,
            stop,
            thread,
        }
    }

    /// How many partitions it processed records of.
    pub fn partitions_seen(&self) -> usize {
        let processed = self.processed.lock().unwrap();
        processed
            .iter()
            .map(|p| p.partition)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Whether it processed a record of every key in `everything`.
    pub fn has_every_key(&self, everything: &BTreeSet<String>) -> bool {
        let processed = self.processed.lock().unwrap();
        let keys: BTreeSet<&str> = processed.iter().map(|p| p.key.as_str()).collect();
        everything.iter().all(|k| keys.contains(k.as_str()))
    }
}

/// Produces `count` records keyed `k-<i>` at `rate` records/s with acks=all (confluent-kafka),
/// on a thread; joining it gives the peer's answer (`produced N`). librdkafka retries a record
/// until `timeout_s` (its message.timeout.ms): longer than any window without a leader in the
/// fault tests, so an outage delays records, never loses them (a retried record may be written
/// twice: the tests count keys, and repeats by offset).
pub fn produce_live(
    bootstrap: &str,
    topic: &str,
    count: usize,
    rate: u32,
    timeout_s: u32,
) -> thread::JoinHandle<String> {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    thread::spawn(move || {
        peer(&[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--count",
            &count.to_string(),
            "--rate",
            &rate.to_string(),
            "--timeout-s",
            &timeout_s.to_string(),
        ])
    })
}

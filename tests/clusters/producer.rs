//! The producer on three-node Kafka 4.x clusters (issue 34, items 5 and 7): a partition leader
//! killed, a leader paused and a rolling restart, each while an idempotent producer keeps
//! sending keyed records.
//!
//! The producer is set up to have the most on the wire when the fault hits: `acks=all`,
//! `enable.idempotence=true`, five requests in flight per broker, `batch.size=2048` and
//! `linger.ms=1` (many small batches per partition), on topics of six partitions with
//! replication 3 and `min.insync.replicas=2`. Each fault outlasts `request.timeout.ms` (5 s),
//! and `delivery.timeout.ms` (120 s) is long enough to ride it out, so nothing may fail.
//!
//! What every test asserts is what the producer promises its users (item 7): every handle
//! acknowledged, and reading the topic back with our own fetch, every record once and in the
//! order it was sent per key (a record's value is `key:sequence`), each handle's offset the
//! record's place in the log. A retry after a lost answer must not write a batch twice
//! (idempotence: the new leader knows the sequence), and a retry must never overtake an earlier
//! batch of its partition (item 5). Each test prints when the acknowledgements of each partition
//! paused and resumed around the fault.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::wire::Record;
use rebalance_guard::{partitioner, Producer, ProducerConfig, ProducerRecord, TopicPartition};
use support::cluster::{KafkaCluster, NodeId};
use support::consumer::wait_until;
use support::{unique_name, venv_python_run};

const PARTITIONS: i32 = 6;
/// Keys per round: record `key:round` of every key is sent each [`ROUND`], so each key's
/// sequence is the round, and each key stays on one partition (murmur2 of `acct-<key>`).
const KEYS: usize = 24;
/// One round every 20 ms: 1200 records/s in all, 200 per partition.
const ROUND: Duration = Duration::from_millis(20);
/// Bytes of padding per value: about a dozen records fill a 2 KiB batch.
const PAD: usize = 120;
/// Bound on how long a stream sends: well past any test's fault, below nextest's 5 minutes.
const MAX_SENDING: Duration = Duration::from_secs(100);
/// Bound on each wait for a cluster condition (new leaders, acknowledgements flowing again).
const WAIT: Duration = Duration::from_secs(60);
/// `request.timeout.ms`: shorter than every fault below.
const REQUEST_TIMEOUT_MS: &str = "5000";
/// `delivery.timeout.ms`: long enough to ride out every fault below.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a handle is waited for: past `delivery.timeout.ms`, by which every handle must be
/// settled (a handle still open then is a broken bound, reported as such).
const SETTLE_BOUND: Duration = Duration::from_secs(150);
/// The paused leader's hang. Kafka fences the node 9-11 s in (`broker.session.timeout.ms`
/// 9 s, a heartbeat every 2 s) and its partitions get new leaders then; the requests on the wire
/// when it hung time out 5 s in, and a request sent to it again before the fencing (the
/// metadata still names it) times out 5 s later. 20 s leaves room for both, so that a producer
/// that moves to the new leaders is told from one that waits for the hung node to come back
/// (with 12 s, both are first acknowledged at about the resume).
const FAULT: Duration = Duration::from_secs(20);
/// Bound on the longest pause in acknowledgements, during a leader's hang, of partitions that
/// neither the hung node leads nor replicates (steady state: one every ~20 ms).
const HEALTHY_GAP_BOUND: Duration = Duration::from_secs(3);
/// Bound on the time from the new leaders' election (as this test sees it) to the first
/// acknowledgement on their partitions, after a kill: the request in flight to the dead node
/// fails within one reconnect backoff (1 s), then fresh metadata sends the batches to the new
/// leader: 0.3-1.0 s measured. Before the sender's rule 7 it queued up to five requests on the
/// dead node's lane, each failing only after a reconnect backoff of its own: 1.2, 2.4 and 4.1 s
/// in three runs. (The paused-leader test tells that apart whenever Kafka fences the hung node
/// after the sender's first retry to it.)
const FAILOVER_BOUND: Duration = Duration::from_secs(3);

/// The producer under test (see the module documentation).
fn producer(bootstrap: &str) -> Producer {
    let config = ProducerConfig::builder()
        .bootstrap_servers([bootstrap])
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("max.in.flight.requests.per.connection", "5")
        .set("batch.size", "2048")
        .set("linger.ms", "1")
        .set("request.timeout.ms", REQUEST_TIMEOUT_MS)
        .set(
            "delivery.timeout.ms",
            &DELIVERY_TIMEOUT.as_millis().to_string(),
        )
        .set("retry.backoff.ms", "100")
        .set("max.block.ms", "60000")
        .build()
        .expect("producer config");
    Producer::new(config).expect("producer")
}

/// One acknowledgement (or failure) as it arrived.
#[derive(Clone, Copy, Debug)]
struct Ack {
    partition: i32,
    at: Instant,
    ok: bool,
}

/// What became of one record sent.
#[derive(Debug)]
struct Delivery {
    key: usize,
    seq: usize,
    /// The partition its handle names.
    partition: i32,
    /// Its offset, or why it failed.
    result: Result<(i32, i64), String>,
}

/// A producer sending `key:round` records of [`KEYS`] keys every [`ROUND`] on a thread, and one
/// thread per partition that waits for that partition's handles in order and notes when each
/// one settled.
struct Stream {
    name: &'static str,
    topic: String,
    producer: Arc<Producer>,
    stop: Arc<AtomicBool>,
    sender: thread::JoinHandle<Result<usize, String>>,
    watchers: Vec<thread::JoinHandle<Vec<Delivery>>>,
    acks: Arc<Mutex<Vec<Ack>>>,
}

/// What a stream did, once stopped.
struct Finished {
    name: &'static str,
    topic: String,
    rounds: usize,
    send_error: Option<String>,
    flush_error: Option<String>,
    deliveries: Vec<Delivery>,
    acks: Vec<Ack>,
}

impl Stream {
    fn start(name: &'static str, bootstrap: &str, topic: &str) -> Stream {
        let producer = Arc::new(producer(bootstrap));
        assert_eq!(
            producer
                .partition_count(topic)
                .expect("the topic's metadata"),
            PARTITIONS
        );
        let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
        let mut queues = Vec::new();
        let mut watchers = Vec::new();
        for partition in 0..PARTITIONS {
            let (tx, rx) = mpsc::channel::<(usize, usize, rebalance_guard::DeliveryHandle)>();
            queues.push(tx);
            let acks = Arc::clone(&acks);
            let watcher = thread::Builder::new()
                .name(format!("{name}-acks-{partition}"))
                .spawn(move || {
                    let mut out = Vec::new();
                    for (key, seq, handle) in rx {
                        let result = match handle.wait_timeout(SETTLE_BOUND) {
                            Some(Ok(m)) => Ok((m.partition, m.offset)),
                            Some(Err(e)) => Err(e.to_string()),
                            None => Err(format!(
                                "not settled {SETTLE_BOUND:?} after the handles before it, \
                                 beyond delivery.timeout.ms ({DELIVERY_TIMEOUT:?})"
                            )),
                        };
                        let at = Instant::now();
                        acks.lock().unwrap().push(Ack {
                            partition,
                            at,
                            ok: result.is_ok(),
                        });
                        out.push(Delivery {
                            key,
                            seq,
                            partition: handle.partition(),
                            result,
                        });
                    }
                    out
                })
                .expect("spawn a watcher");
            watchers.push(watcher);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (producer, stop, topic) =
                (Arc::clone(&producer), Arc::clone(&stop), topic.to_string());
            thread::Builder::new()
                .name(format!("{name}-send"))
                .spawn(move || {
                    let started = Instant::now();
                    let pad = "x".repeat(PAD);
                    let mut round = 0usize;
                    while !stop.load(Ordering::SeqCst) && started.elapsed() < MAX_SENDING {
                        for key in 0..KEYS {
                            let record =
                                ProducerRecord::new(&topic, format!("{key}:{round}:{pad}"))
                                    .key(format!("acct-{key}"));
                            let handle = producer
                                .send(record)
                                .map_err(|e| format!("send of {key}:{round} refused: {e}"))?;
                            let queue = &queues[handle.partition() as usize];
                            queue
                                .send((key, round, handle))
                                .map_err(|_| "a watcher ended early".to_string())?;
                        }
                        round += 1;
                        // Pacing: the next round at its time (no catching up after a blocked send).
                        let next = started + ROUND * round as u32;
                        if let Some(left) = next.checked_duration_since(Instant::now()) {
                            thread::sleep(left);
                        }
                    }
                    Ok(round)
                })
                .expect("spawn the sender")
        };
        Stream {
            name,
            topic: topic.to_string(),
            producer,
            stop,
            sender,
            watchers,
            acks,
        }
    }

    /// Whether every partition of `partitions` had a record acknowledged after `since`.
    fn acked_since(&self, partitions: &[i32], since: Instant) -> bool {
        let acks = self.acks.lock().unwrap();
        partitions.iter().all(|p| {
            acks.iter()
                .any(|a| a.ok && a.partition == *p && a.at > since)
        })
    }

    /// Waits until every partition had a record acknowledged after `since`.
    fn wait_acked_since(&self, partitions: &[i32], since: Instant, what: &str) {
        wait_until(
            &format!("{}: {what} (partitions {partitions:?})", self.name),
            WAIT,
            || self.acked_since(partitions, since),
        );
    }

    /// Stops sending, flushes, waits for every handle and closes the producer.
    fn finish(self) -> Finished {
        self.stop.store(true, Ordering::SeqCst);
        let sent = self.sender.join().expect("the sender thread");
        let flush_error = self.producer.flush().err().map(|e| e.to_string());
        let mut deliveries: Vec<Delivery> = self
            .watchers
            .into_iter()
            .flat_map(|w| w.join().expect("a watcher thread"))
            .collect();
        deliveries.sort_by_key(|d| (d.key, d.seq));
        match Arc::try_unwrap(self.producer) {
            Ok(producer) => producer.close().expect("close"),
            Err(_) => panic!("the producer is still shared"),
        }
        let acks = std::mem::take(&mut *self.acks.lock().unwrap());
        let (rounds, send_error) = match sent {
            Ok(rounds) => (rounds, None),
            Err(e) => (0, Some(e)),
        };
        Finished {
            name: self.name,
            topic: self.topic,
            rounds,
            send_error,
            flush_error,
            deliveries,
            acks,
        }
    }
}

impl Finished {
    /// The first acknowledgement of `partition` after `since`.
    fn first_ack_after(&self, partition: i32, since: Instant) -> Option<Instant> {
        self.acks
            .iter()
            .filter(|a| a.ok && a.partition == partition && a.at > since)
            .map(|a| a.at)
            .min()
    }

    /// Acknowledgements of `partition` within `[from, to]`.
    fn acks_within(&self, partition: i32, from: Instant, to: Instant) -> usize {
        self.acks
            .iter()
            .filter(|a| a.ok && a.partition == partition && a.at >= from && a.at <= to)
            .count()
    }

    /// The longest pause in acknowledgements of `partition` within `[from, to]` (both ends
    /// count, so a partition acknowledged nothing in the window shows the whole window).
    fn longest_gap(&self, partition: i32, from: Instant, to: Instant) -> Duration {
        let mut times: Vec<Instant> = self
            .acks
            .iter()
            .filter(|a| a.ok && a.partition == partition && a.at >= from && a.at <= to)
            .map(|a| a.at)
            .collect();
        times.push(from);
        times.push(to);
        times.sort();
        times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    /// Per partition, the longest pause in acknowledgements within `[from, to]`, in ms.
    fn gaps(&self, from: Instant, to: Instant) -> BTreeMap<i32, u128> {
        (0..PARTITIONS)
            .map(|p| (p, self.longest_gap(p, from, to).as_millis()))
            .collect()
    }

    /// Reads the topic back and asserts the producer's promise (module documentation): every
    /// handle acknowledged, every record once and in order per key, the handles' offsets the
    /// log's.
    fn check(&self, bootstrap: &str) {
        let log = read_all(bootstrap, &self.topic);
        let mut problems: Vec<String> = Vec::new();
        // The log: where each (key, sequence) is, once, and each key's sequences increasing.
        let mut place: HashMap<(usize, usize), (i32, i64)> = HashMap::new();
        let mut last: Vec<Option<usize>> = vec![None; KEYS];
        let (mut duplicates, mut reordered, mut misplaced) = (0usize, 0usize, 0usize);
        for (p, records) in &log {
            for r in records {
                let value = std::str::from_utf8(r.value.as_deref().unwrap_or_default())
                    .expect("utf8 value");
                let mut parts = value.splitn(3, ':');
                let (Some(Ok(key)), Some(Ok(seq))) = (
                    parts.next().map(str::parse::<usize>),
                    parts.next().map(str::parse::<usize>),
                ) else {
                    panic!(
                        "{}: unexpected value {value:?} at {p}-{}",
                        self.name, r.offset
                    )
                };
                assert!(key < KEYS, "{}: key {key} at {p}-{}", self.name, r.offset);
                let want_key = format!("acct-{key}");
                let want_partition =
                    partitioner::partition_for_key(want_key.as_bytes(), PARTITIONS);
                if *p != want_partition || r.key.as_deref() != Some(want_key.as_bytes()) {
                    misplaced += 1;
                    problems.push(format!(
                        "{key}:{seq} at {p}-{} with key {:?} (its key's partition: {want_partition})",
                        r.offset, r.key
                    ));
                }
                if let Some((fp, fo)) = place.insert((key, seq), (*p, r.offset)) {
                    duplicates += 1;
                    problems.push(format!(
                        "{key}:{seq} written twice: at {fp}-{fo} and at {p}-{}",
                        r.offset
                    ));
                } else if last[key].is_some_and(|l| seq < l) {
                    reordered += 1;
                    problems.push(format!(
                        "{key}:{seq} at {p}-{} after {key}:{} (out of order)",
                        r.offset,
                        last[key].unwrap_or_default()
                    ));
                }
                last[key] = last[key].max(Some(seq));
            }
        }
        // The handles against the log.
        let mut failed: Vec<String> = Vec::new();
        let (mut lost, mut wrong_offset) = (0usize, 0usize);
        for d in &self.deliveries {
            match &d.result {
                Ok((partition, offset)) => match place.get(&(d.key, d.seq)) {
                    None => {
                        lost += 1;
                        problems.push(format!(
                            "{}:{} acknowledged at {partition}-{offset} but not in the log",
                            d.key, d.seq
                        ));
                    }
                    Some(&at) if at != (*partition, *offset) || d.partition != *partition => {
                        wrong_offset += 1;
                        problems.push(format!(
                            "{}:{} acknowledged at {partition}-{offset} (handle partition {}) \
                             but at {}-{} in the log",
                            d.key, d.seq, d.partition, at.0, at.1
                        ));
                    }
                    Some(_) => {}
                },
                Err(e) => failed.push(format!(
                    "{}:{} ({}, {}): {e}",
                    d.key,
                    d.seq,
                    d.partition,
                    if place.contains_key(&(d.key, d.seq)) {
                        "in the log"
                    } else {
                        "not in the log"
                    }
                )),
            }
        }
        let sent = self.deliveries.len();
        let written: usize = log.values().map(Vec::len).sum();
        let unsent = place
            .keys()
            .filter(|(k, s)| {
                self.deliveries
                    .binary_search_by_key(&(*k, *s), |d| (d.key, d.seq))
                    .is_err()
            })
            .count();
        eprintln!(
            "{}: {} rounds, {sent} records sent, {} acknowledged, {} failed; {written} in the \
             log ({:?} per partition): {duplicates} duplicates, {reordered} out of order, \
             {misplaced} misplaced, {lost} acknowledged but missing, {wrong_offset} at another \
             offset than their handle's, {unsent} never sent",
            self.name,
            self.rounds,
            sent - failed.len(),
            failed.len(),
            log.iter()
                .map(|(p, r)| (*p, r.len()))
                .collect::<BTreeMap<_, _>>()
        );
        assert_eq!(self.send_error, None, "{}: a send was refused", self.name);
        assert!(
            problems.is_empty(),
            "{}: {} problems in the log, first: {:#?}",
            self.name,
            problems.len(),
            problems.iter().take(20).collect::<Vec<_>>()
        );
        assert_eq!(
            unsent, 0,
            "{}: records in the log that were not sent",
            self.name
        );
        assert!(
            failed.is_empty(),
            "{}: {} records failed (delivery.timeout.ms {DELIVERY_TIMEOUT:?} should ride the \
             fault out), first: {:#?}",
            self.name,
            failed.len(),
            failed.iter().take(20).collect::<Vec<_>>()
        );
        assert_eq!(self.flush_error, None, "{}: flush", self.name);
        assert_eq!(
            written, sent,
            "{}: records in the log against records sent",
            self.name
        );
    }
}

/// Every partition of `topic` from offset 0 to its end, with our fetch.
fn read_all(bootstrap: &str, topic: &str) -> BTreeMap<i32, Vec<Record>> {
    support::fetch::read_topic(bootstrap, topic, WAIT)
}

/// The partitions of `topic` that `node` leads now.
fn led_by(cluster: &KafkaCluster, topic: &str, node: NodeId) -> Vec<i32> {
    cluster
        .leaders(topic)
        .into_iter()
        .filter(|&(_, l)| l == node)
        .map(|(p, _)| p)
        .collect()
}

/// Partition to leader of `topic`, asked of `nodes` only, through librdkafka (it asks a broker
/// it is connected to; [`KafkaCluster::leaders`] and our own client would first wait out a
/// request timeout on a hung node 1).
fn leaders_from(cluster: &KafkaCluster, nodes: &[NodeId], topic: &str) -> String {
    let addrs: Vec<String> = nodes.iter().map(|&n| cluster.addr(n)).collect();
    let code = r#"
import sys
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1], "client.id": "cluster-producer-leaders"})
parts = admin.list_topics(sys.argv[2], timeout=10).topics[sys.argv[2]].partitions
print({p: m.leader for p, m in sorted(parts.items())})
"#;
    venv_python_run(code, &[&addrs.join(","), topic])
        .trim()
        .to_string()
}

/// Waits until every partition of `topic` has all three replicas in its ISR (the node restarted
/// last has caught up), as a rolling restart does before it stops the next node. Returns how
/// long that took.
fn wait_full_isr(cluster: &KafkaCluster, topic: &str) -> String {
    let code = r#"
import sys, time
from confluent_kafka.admin import AdminClient
bootstrap, topic, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "cluster-producer-isr"})
start = time.monotonic()
while True:
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    short = {p: sorted(m.isrs) for p, m in parts.items() if len(m.isrs) < 3}
    if parts and not short:
        print(f"{time.monotonic() - start:.1f} s")
        break
    if time.monotonic() - start > limit:
        sys.exit(f"partitions short of replicas in their ISR after {limit} s: {short}")
    time.sleep(0.2)
"#;
    venv_python_run(
        code,
        &[cluster.bootstrap(), topic, &WAIT.as_secs().to_string()],
    )
    .trim()
    .to_string()
}

/// kill -9 of the leader of partition 0 (and of whatever else it leads) mid-stream. Its
/// connections reset at once, but its partitions get new leaders only once Kafka fences it (9 s),
/// and meanwhile every `acks=all` write waits for it to leave the ISR. The producer must find
/// the new leaders and retry what was unanswered without writing it twice; the killed node then
/// comes back (its unreplicated tail truncated) while the producer goes on.
#[test]
fn a_killed_leader_loses_nothing_and_writes_each_record_once_in_order() {
    support::init_stamped_logs();
    let test_started = Instant::now();
    let cluster = KafkaCluster::start(3);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("produce-kill");
    cluster.create_topic(&topic, PARTITIONS as u32);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let stream = Stream::start("killed leader", &bootstrap, &topic);
    stream.wait_acked_since(&all, Instant::now(), "acknowledgements on every partition");

    let victim = cluster.leader_of(&TopicPartition::new(&*topic, 0));
    let victim_partitions = led_by(&cluster, &topic, victim);
    let killed_at = Instant::now();
    cluster.kill(victim);
    eprintln!(
        "{:?} in: killed node {victim}, leader of {victim_partitions:?}",
        test_started.elapsed()
    );
    wait_until("new leaders for the killed node's partitions", WAIT, || {
        let leaders = cluster.leaders(&topic);
        victim_partitions
            .iter()
            .all(|p| leaders.get(p).is_some_and(|&l| l >= 0 && l != victim))
    });
    let new_leaders_at = Instant::now();
    eprintln!(
        "new leaders {:?} {:?} after the kill",
        cluster.leaders(&topic),
        new_leaders_at - killed_at
    );
    stream.wait_acked_since(
        &victim_partitions,
        new_leaders_at,
        "acknowledgements from the new leaders",
    );
    let restart_at = Instant::now();
    cluster.restart(victim);
    let restarted_at = Instant::now();
    eprintln!("node {victim} back after {:?}", restarted_at - restart_at);
    stream.wait_acked_since(&all, restarted_at, "acknowledgements with the node back");
    let finished = stream.finish();
    eprintln!(
        "{:?} in: stopped; longest pause in acknowledgements per partition from the kill to \
         the restart (ms): {:?}; first acknowledgement of each of {victim_partitions:?} after \
         the kill, from the kill (ms): {:?}",
        test_started.elapsed(),
        finished.gaps(killed_at, restarted_at),
        victim_partitions
            .iter()
            .map(|&p| finished
                .first_ack_after(p, killed_at)
                .map(|at| (at - killed_at).as_millis()))
            .collect::<Vec<_>>()
    );
    finished.check(&bootstrap);
    // Item 5: a moved leader is found and retried at once, not after some longer wait.
    for &p in &victim_partitions {
        let first = finished
            .first_ack_after(p, killed_at)
            .expect("acknowledged after the kill");
        let after_election = first.saturating_duration_since(new_leaders_at);
        assert!(
            after_election <= FAILOVER_BOUND,
            "partition {p}: first acknowledgement {after_election:?} after its new leader was \
             elected (bound {FAILOVER_BOUND:?})"
        );
    }
    eprintln!("{:?} in: done", test_started.elapsed());
}

/// SIGSTOP of a node for 20 s (its sockets open, nothing answered), then SIGCONT, while two
/// producers send: one to a topic replicated on all three nodes (every record once and in
/// order, as in the other tests), and one to a topic whose partitions are on two nodes each,
/// two of them led by the hung node and four on the two healthy nodes only. A hung leader must
/// hold only its own partitions' batches, and only for a request timeout at a time: the healthy
/// partitions of the second topic, whose writes never wait for the hung node in Kafka, keep
/// being acknowledged all through the hang, and the hung node's partitions of the first topic
/// are written to their new leaders before it resumes.
///
/// The hung node is node 1: the one the producer's own client asks first for metadata (the
/// lowest node id), so a metadata refresh that waited on the hung node on the sender's thread
/// would show here as a pause of every partition.
#[test]
fn a_paused_leader_holds_only_its_own_partitions_and_loses_nothing() {
    support::init_stamped_logs();
    let test_started = Instant::now();
    let cluster = KafkaCluster::start(3);
    let bootstrap = cluster.bootstrap().to_string();
    let victim: NodeId = 1;
    let (a, b) = (2, 3);
    let topic = unique_name("produce-pause");
    cluster.create_topic(&topic, PARTITIONS as u32);
    let split = unique_name("produce-pause-split");
    crate::leaders::create_topic_with_replicas(
        &cluster,
        &split,
        &[
            vec![victim, a],
            vec![victim, b],
            vec![a, b],
            vec![b, a],
            vec![a, b],
            vec![b, a],
        ],
    );
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let replicated = Stream::start("paused leader, replication 3", &bootstrap, &topic);
    let isolated = Stream::start("paused leader, split topic", &bootstrap, &split);
    let warm = Instant::now();
    replicated.wait_acked_since(&all, warm, "acknowledgements on every partition");
    isolated.wait_acked_since(&all, warm, "acknowledgements on every partition");
    let victim_partitions = led_by(&cluster, &topic, victim);
    let split_victim = led_by(&cluster, &split, victim);
    let split_healthy: Vec<i32> = all
        .iter()
        .copied()
        .filter(|p| !split_victim.contains(p))
        .collect();
    assert!(
        !victim_partitions.is_empty() && split_victim == [0, 1],
        "node {victim} leads {victim_partitions:?} of {topic} and {split_victim:?} of {split}"
    );

    let paused_at = Instant::now();
    cluster.pause(victim);
    eprintln!(
        "{:?} in: paused node {victim}, leader of {victim_partitions:?} of the replicated \
         topic and {split_victim:?} of the split one",
        test_started.elapsed()
    );
    // The fault itself: the node stays hung for this long.
    thread::sleep(FAULT);
    let leaders_in_pause = leaders_from(&cluster, &[a, b], &topic);
    cluster.resume(victim);
    let resumed_at = Instant::now();
    eprintln!(
        "resumed node {victim} after {:?}; the replicated topic's leaders just before: \
         {leaders_in_pause:?}",
        resumed_at - paused_at
    );
    replicated.wait_acked_since(&all, resumed_at, "acknowledgements after the resume");
    isolated.wait_acked_since(&all, resumed_at, "acknowledgements after the resume");
    let replicated = replicated.finish();
    let isolated = isolated.finish();
    for f in [&replicated, &isolated] {
        eprintln!(
            "{}: longest pause in acknowledgements per partition during the hang (ms): {:?}; \
             acknowledgements during the hang per partition: {:?}; first acknowledgement after \
             the pause per partition (ms from the pause): {:?}",
            f.name,
            f.gaps(paused_at, resumed_at),
            all.iter()
                .map(|&p| (p, f.acks_within(p, paused_at, resumed_at)))
                .collect::<BTreeMap<_, _>>(),
            all.iter()
                .map(|&p| (
                    p,
                    f.first_ack_after(p, paused_at)
                        .map(|at| (at - paused_at).as_millis())
                ))
                .collect::<BTreeMap<_, _>>(),
        );
    }
    replicated.check(&bootstrap);
    isolated.check(&bootstrap);
    // Item 5: the hung leader held its partitions' batches for a request timeout at a time, not
    // until it came back: once it was fenced (9-11 s in) and the requests waiting on it timed
    // out, they went to the new leaders.
    for &p in &victim_partitions {
        let first = replicated.first_ack_after(p, paused_at);
        assert!(
            first.is_some_and(|at| at < resumed_at),
            "{}: partition {p}, led by the hung node {victim}, was first acknowledged {:?} after              the pause began, not before the node resumed {:?} after it (new leaders in the              pause: {leaders_in_pause})",
            replicated.name,
            first.map(|at| at - paused_at),
            resumed_at - paused_at
        );
    }
    // Item 5: the hung leader held only its own partitions' batches.
    let worst = split_healthy
        .iter()
        .map(|&p| (p, isolated.longest_gap(p, paused_at, resumed_at)))
        .max_by_key(|(_, gap)| *gap)
        .expect("healthy partitions");
    assert!(
        worst.1 <= HEALTHY_GAP_BOUND,
        "{}: partition {} (on nodes {a} and {b} only) went {:?} without an acknowledgement \
         while node {victim} was hung (bound {HEALTHY_GAP_BOUND:?}); per partition (ms): {:?}",
        isolated.name,
        worst.0,
        worst.1,
        isolated.gaps(paused_at, resumed_at)
    );
    eprintln!("{:?} in: done", test_started.elapsed());
}

/// A rolling restart: each node in turn stopped with SIGTERM (a controlled shutdown: its
/// leaderships move first, and the producer's batches to it are answered
/// NOT_LEADER_OR_FOLLOWER or lose their connection) and started again, the next one stopped
/// only once the restarted node is back in every ISR. Every node leads partitions at some point,
/// so every partition changes leader at least once.
#[test]
fn a_rolling_restart_loses_nothing_and_writes_each_record_once_in_order() {
    support::init_stamped_logs();
    let test_started = Instant::now();
    let cluster = KafkaCluster::start(3);
    let bootstrap = cluster.bootstrap().to_string();
    let topic = unique_name("produce-rolling");
    cluster.create_topic(&topic, PARTITIONS as u32);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let stream = Stream::start("rolling restart", &bootstrap, &topic);
    stream.wait_acked_since(&all, Instant::now(), "acknowledgements on every partition");
    let began = Instant::now();
    let mut steps = Vec::new();
    for node in 1..=3 {
        let led = led_by(&cluster, &topic, node);
        let at = Instant::now();
        cluster.stop(node);
        let stopped = at.elapsed();
        cluster.restart(node);
        let back = at.elapsed();
        let isr = wait_full_isr(&cluster, &topic);
        stream.wait_acked_since(&all, Instant::now(), "acknowledgements after the restart");
        eprintln!(
            "{:?} in: node {node} (leader of {led:?}) stopped in {stopped:?}, back after \
             {back:?}, in every ISR {isr} later",
            test_started.elapsed()
        );
        steps.push((node, at, at + back));
    }
    let ended = Instant::now();
    let finished = stream.finish();
    for (node, from, to) in &steps {
        eprintln!(
            "node {node} down: longest pause in acknowledgements per partition (ms): {:?}",
            finished.gaps(*from, *to)
        );
    }
    eprintln!(
        "the whole restart ({:?}): longest pause per partition (ms): {:?}",
        ended - began,
        finished.gaps(began, ended)
    );
    finished.check(&bootstrap);
    eprintln!("{:?} in: done", test_started.elapsed());
}

//! A rolling migration of a live consumer group from `group.protocol=classic` to `consumer`
//! (KIP-848) and back, on Kafka 4.4, the way an operator does it: one member at a time is closed
//! gracefully and started again with the other protocol, while records are produced all along.
//!
//! The group: three of our consumers (the whole `Consumer`, its `run` loop, on threads of this
//! process) and one Java consumer (kafka-clients, `scripts/Peer.java`), over a topic of
//! [`PARTITIONS`] partitions. Kafka converts the classic group into a consumer group when the
//! first consumer-protocol member joins it, runs the remaining classic members inside that group
//! (their JoinGroup, SyncGroup and Heartbeat answered from the consumer group's state), and
//! converts it back when the last consumer-protocol member leaves. Both conversions are allowed
//! by `group.consumer.migration.policy=bidirectional`, Kafka 4.x's default, which the shared
//! broker keeps (`scripts/kafka_broker.py` does not set it); the broker settings this test needs
//! otherwise are the shared broker's: `group.initial.rebalance.delay.ms=0`,
//! `group.consumer.heartbeat.interval.ms=500`, `group.consumer.session.timeout.ms=6000`; the
//! classic members use a 6 s (ours) or 3 s (Java) session with 500 ms heartbeats.
//!
//! Steps (the [`Pace::Settled`] tests): all four start classic; each member in turn (ours-1,
//! ours-2, ours-3, java) moves to the consumer protocol; then each in turn (java, ours-1, ours-2,
//! ours-3) moves back to classic, so that our member's join converts the group and our member's
//! leave converts it back; the group's type, as the Admin API describes it, is checked before,
//! after the first step (`consumer`) and after the last (`classic`). After every step the group
//! must be stable (every partition owned exactly once, every member owning some) and the restarted
//! member must have applied records. The first step proves the conversion: Kafka refuses a
//! consumer-protocol member into a classic group it does not convert, so ours-1 owning partitions
//! next to three classic members means the group is a consumer group.
//!
//! What is checked, over every record produced:
//! - **lost = 0**: every produced record was applied by some member.
//! - **repeats = 0**: every restart is a graceful close, and every handover commits before the
//!   partition moves (ours: the revocation's synchronous commit of `last + 1` before the
//!   membership acknowledges it; Java: `commitSync` after every poll and in
//!   `onPartitionsRevoked`), so the next owner starts exactly after the last applied record. The
//!   only repeats allowed are those a reported commit failure (our `HandoffFailure`s, the Java
//!   member's "commit failed" errors) or a loss of the partition after the record was applied
//!   explains, of the member that applied the record first; each is listed. When every restart
//!   waits for the group to settle, the coordinator never takes a partition from our members
//!   (asserted), so the bound is 0 unless a commit was refused or a lease ran out on an
//!   overloaded machine (our consumer-protocol members bound their lease at the broker's 6 s
//!   session, `session.bound.ms`, instead of the default 1.5 s, which a two-core machine under a
//!   load of 40 outlasted). At a deployment's pace ([`Pace::Rolling`]) the coordinator does take
//!   partitions (see `kafka::rolling_migration_unsettled_range`) and each loss explains the
//!   repeats of what its member applied before it.
//! - **one owner at every moment**: the tenures of `support::tenure` (when a member may apply a
//!   partition's records, stamped early at assignment and late after the revocation's commit) of
//!   one partition never overlap on the host's monotonic clock, with no tolerance: a handover is
//!   a chain of causes (the old owner commits and stops, then tells the coordinator, and only then
//!   does the coordinator assign the partition to the next owner), so on one host it shows as a
//!   strictly positive gap. Every applied record lies inside a tenure of the member that applied
//!   it, which ties the tenures to what was really done; no partition is ever lost (a graceful
//!   migration never needs a loss).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rebalance_guard::consumer::Consumer;
use rebalance_guard::group::{ClassicMember, ConsumerGroupMember, Membership};
use rebalance_guard::wire::{Client, ClientConfig, ProduceRecord};
use rebalance_guard::{ErrorChain, TopicPartition};
use support::consumer::{config, consumer_protocol_config, produce_until_accepted};
use support::members::{
    one_topic, wait_until_stable, MemberEventKind, PeerClient, PeerMember, PeerMemberSpec,
    PeerStrategy, Stability, Tp,
};
use support::tenure::{
    check_tenures, monotonic_now, peer_log, recording_lost_hook, Applied, MemberLog, Recording,
    SharedLog,
};
use support::{peer, unique_name, Broker, Kafka, KafkaVersion};

/// Partitions of the topic: two per member.
const PARTITIONS: i32 = 8;
/// The producer's pause between two records (about 150 records/s with the round trip).
const PRODUCE_EVERY: Duration = Duration::from_millis(5);
/// The producer stops after this many records or this long, whichever comes first.
const MAX_RECORDS: usize = 40_000;
const MAX_PRODUCING: Duration = Duration::from_secs(240);
/// How long a step may take to settle (a Java member's JVM starts first).
const SETTLE: Duration = Duration::from_secs(60);
/// How long the ownership must stay unchanged to count as stable.
const SETTLED_FOR: Duration = Duration::from_millis(700);

/// When the next member is restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    /// Once the group is stable (every partition owned exactly once, every member owning some,
    /// unchanged for [`SETTLED_FOR`]) and the restarted member applied records.
    Settled,
    /// As soon as the restarted member applied a record (a deployment's readiness check), so
    /// that the next close and join land in the rebalance the last one started.
    Rolling,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Classic,
    Consumer,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Classic => "classic",
            Protocol::Consumer => "consumer",
        }
    }
}

/// What the producer wrote: (partition, offset) of every record.
struct Producer {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    thread: JoinHandle<Vec<(i32, i64)>>,
}

impl Producer {
    /// Produces one record at a time, round-robin over the partitions, with our own client
    /// (acks=all, one record per request, so every offset is known and none is written twice).
    fn start(bootstrap: &str, topic: &str) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (halt, counter) = (stop.clone(), count.clone());
        let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
        let thread = thread::spawn(move || {
            let mut client =
                Client::connect(ClientConfig::from_bootstrap_str(&bootstrap)).expect("connect");
            let started = Instant::now();
            let mut written = Vec::new();
            while !halt.load(Ordering::SeqCst)
                && written.len() < MAX_RECORDS
                && started.elapsed() < MAX_PRODUCING
            {
                let i = written.len();
                let partition = (i % PARTITIONS as usize) as i32;
                let record = ProduceRecord {
                    key: Some(Bytes::from(format!("order-{i}"))),
                    value: Some(Bytes::from(format!("order_id={i}"))),
                    headers: Vec::new(),
                    timestamp: None,
                };
                let tp = TopicPartition::new(topic.as_str(), partition);
                let offset = produce_until_accepted(&mut client, &tp, &[record], "produce");
                written.push((partition, offset));
                counter.fetch_add(1, Ordering::SeqCst);
                thread::sleep(PRODUCE_EVERY);
            }
            written
        });
        Producer {
            stop,
            count,
            thread,
        }
    }
}

/// (partition, error) of every commit failure a member reported.
type CommitFailures = Vec<(i32, String)>;

/// One of our consumers, running `Consumer::run` on a thread of its own, its membership wrapped
/// in a [`Recording`] so that its tenures are stamped where the poll thread applies them.
struct Ours {
    name: String,
    log: SharedLog,
    stop: Arc<AtomicBool>,
    /// The commit failures of its handoffs, or why it failed.
    thread: Option<JoinHandle<Result<CommitFailures, String>>>,
}

impl Ours {
    fn start(
        name: &str,
        bootstrap: &str,
        group: &str,
        topic: &str,
        protocol: Protocol,
        strategy: PeerStrategy,
    ) -> Ours {
        let _ = env_logger::builder().is_test(true).try_init();
        let config = match protocol {
            Protocol::Classic => config(
                bootstrap,
                group,
                &[("partition.assignment.strategy", strategy.name())],
            ),
            // The lease bound at the broker's session (the shared broker's
            // group.consumer.session.timeout.ms), not the default three heartbeat intervals
            // (1.5 s), which a loaded two-core machine running JVMs beside us outlasts.
            Protocol::Consumer => {
                consumer_protocol_config(bootstrap, group, &[("session.bound.ms", "6000")])
            }
        };
        let log = SharedLog::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (member_log, halt, member, topic) = (
            log.clone(),
            stop.clone(),
            name.to_string(),
            topic.to_string(),
        );
        let thread = thread::spawn(move || {
            let protocol_config = config.consumer_group_config(&[&topic]);
            let client_config = config.client_config();
            let recording_log = member_log.clone();
            let mut consumer = Consumer::with_membership(config, &[&topic], |group, hook| {
                let hook = recording_lost_hook(hook, recording_log.clone());
                let inner: Box<dyn Membership> = match protocol {
                    Protocol::Classic => Box::new(ClassicMember::new(group, client_config, hook)?),
                    Protocol::Consumer => Box::new(ConsumerGroupMember::new(
                        group,
                        protocol_config,
                        client_config,
                        hook,
                    )?),
                };
                Ok(Box::new(Recording::new(&member, inner, recording_log)))
            })
            .map_err(|e| format!("subscribe: {}", ErrorChain(&e)))?;
            let ran = consumer.run(&halt, |record, ctx| {
                // Right before the effect, as an application does: a record whose partition
                // moved meanwhile is released, not applied.
                if ctx.is_current() {
                    member_log.lock().unwrap().applied.push(Applied {
                        member: member.clone(),
                        tp: (record.topic.to_string(), record.partition),
                        offset: record.offset,
                        t: monotonic_now(),
                    });
                }
                Ok::<(), std::io::Error>(())
            });
            let mut failures: CommitFailures = consumer
                .take_handoff_failures()
                .iter()
                .map(|f| (f.tp.partition, ErrorChain(&*f.error).to_string()))
                .collect();
            let closed = consumer.close();
            ran.map_err(|e| format!("run: {}", ErrorChain(&e)))?;
            closed.map_err(|e| format!("close: {}", ErrorChain(&e)))?;
            failures.sort();
            Ok(failures)
        });
        Ours {
            name: name.to_string(),
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes it (revoke with commit, leave) and returns its log and handoff failures.
    fn close(&mut self) -> (MemberLog, CommitFailures) {
        self.stop.store(true, Ordering::SeqCst);
        let ended = self
            .thread
            .take()
            .expect("closed once")
            .join()
            .unwrap_or_else(|_| Err("the consumer thread panicked".into()));
        let failures = ended.unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let mut log = self.log.lock().unwrap().clone();
        log.end_all(monotonic_now());
        (log, failures)
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A member of the group in one of its lives.
enum Running {
    Ours(Ours),
    Java(PeerMember),
    /// Closed, not started again yet.
    Gone,
}

/// One member's place in the group, across its restarts.
struct Slot {
    base: &'static str,
    java: bool,
    lives: usize,
    name: String,
    running: Running,
}

/// Everything a finished life of a member left behind.
struct Life {
    name: String,
    log: MemberLog,
    commit_failures: CommitFailures,
    /// The Java member's event lines, for messages.
    events: String,
}

struct Group {
    pace: Pace,
    /// The assignor of the classic members (ours and Java alike).
    strategy: PeerStrategy,
    bootstrap: String,
    group: String,
    topic: String,
    slots: Vec<Slot>,
    lives: Vec<Life>,
}

impl Group {
    fn start_member(&self, base: &str, java: bool, life: usize, protocol: Protocol) -> Running {
        let name = format!("{base}.{life}-{}", protocol.name());
        if java {
            let spec = PeerMemberSpec::new(
                PeerClient::Java,
                &self.bootstrap,
                &self.group,
                &[&self.topic],
                self.strategy,
                &name,
            );
            let mut spec = match protocol {
                // The session of our classic members, not the peers' shorter default.
                Protocol::Classic => spec.timeouts(6000, 500),
                Protocol::Consumer => spec.consumer_protocol(None),
            };
            spec.consume = true;
            Running::Java(PeerMember::start(spec))
        } else {
            Running::Ours(Ours::start(
                &name,
                &self.bootstrap,
                &self.group,
                &self.topic,
                protocol,
                self.strategy,
            ))
        }
    }

    fn add(&mut self, base: &'static str, java: bool) {
        let running = self.start_member(base, java, 1, Protocol::Classic);
        self.slots.push(Slot {
            base,
            java,
            lives: 1,
            name: format!("{base}.1-classic"),
            running,
        });
    }

    /// Closes the member of `slot` gracefully and starts it again with `protocol`.
    fn restart(&mut self, slot: usize, protocol: Protocol) {
        let (base, java, life) = {
            let s = &self.slots[slot];
            (s.base, s.java, s.lives + 1)
        };
        // Closed first, gracefully (its partitions committed and handed back, LeaveGroup),
        // then started again with the other protocol: a rolling restart.
        let old = std::mem::replace(&mut self.slots[slot].running, Running::Gone);
        let ended = end(&self.slots[slot].name, old);
        self.lives.push(ended);
        self.slots[slot].running = self.start_member(base, java, life, protocol);
        self.slots[slot].lives = life;
        self.slots[slot].name = format!("{base}.{life}-{}", protocol.name());
    }

    fn ownership(&self) -> Vec<(String, BTreeSet<Tp>)> {
        self.slots
            .iter()
            .map(|s| {
                let owned = match &s.running {
                    Running::Ours(o) => o.log.lock().unwrap().owned(),
                    Running::Java(p) => p.owned(),
                    Running::Gone => BTreeSet::new(),
                };
                (s.name.clone(), owned)
            })
            .collect()
    }

    fn applied_by(&self, slot: usize) -> usize {
        match &self.slots[slot].running {
            Running::Ours(o) => o.log.lock().unwrap().applied.len(),
            Running::Java(p) => p
                .events()
                .iter()
                .filter(|e| e.kind == MemberEventKind::Record)
                .count(),
            Running::Gone => 0,
        }
    }

    /// Waits until the group is stable and `slot`'s member applied records.
    fn settle(&self, stage: &str, slot: Option<usize>) -> Duration {
        let started = Instant::now();
        let spawned = monotonic_now();
        if let Some(Running::Java(p)) = slot.map(|s| &self.slots[s].running) {
            p.wait_ready(SETTLE)
                .unwrap_or_else(|e| panic!("{stage}: {e}"));
            // The Java member's `t` and our stamps are one clock (the tenures are compared
            // across the two): it became ready after it was spawned and before we heard of it.
            let ready = p
                .events()
                .iter()
                .find(|e| e.kind == MemberEventKind::Ready)
                .map(|e| e.t)
                .expect("a ready event");
            let heard = monotonic_now();
            assert!(
                spawned < ready && ready < heard,
                "{stage}: the Java member's clock is not ours: ready at {ready}, spawned at \
                 {spawned}, heard at {heard}"
            );
        }
        let owned = match self.pace {
            Pace::Settled => {
                let opts = Stability {
                    settle: SETTLED_FOR,
                    timeout: SETTLE,
                    ..Stability::default()
                };
                wait_until_stable(&one_topic(&self.topic, PARTITIONS), &opts, || {
                    self.ownership()
                })
                .unwrap_or_else(|e| panic!("{stage}: {e}"))
                .0
            }
            Pace::Rolling => Vec::new(),
        };
        let deadline = Instant::now() + SETTLE;
        for s in slot.into_iter() {
            while self.applied_by(s) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "{stage}: {} applied nothing",
                    self.slots[s].name
                );
                thread::sleep(Duration::from_millis(50));
            }
        }
        let took = started.elapsed();
        eprintln!(
            "{stage}: ready in {took:.1?}: {}",
            owned
                .iter()
                .map(|(n, o)| format!("{n}={}", o.len()))
                .collect::<Vec<_>>()
                .join(" ")
        );
        took
    }

    /// The protocol the broker runs the group under now, as its Admin API describes it
    /// (confluent-kafka's `describe_consumer_groups`): `classic` or `consumer`.
    fn group_type(&self) -> String {
        let answer = peer(&[
            "group-type",
            "--bootstrap",
            &self.bootstrap,
            "--group",
            &self.group,
        ]);
        answer
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("group-type answered {answer:?}"))
            .to_string()
    }

    /// Every record applied so far by anyone, as (partition, offset).
    fn applied_now(&self) -> BTreeSet<(i32, i64)> {
        let mut all: BTreeSet<(i32, i64)> = BTreeSet::new();
        for life in &self.lives {
            all.extend(life.log.applied.iter().map(|a| (a.tp.1, a.offset)));
        }
        for s in &self.slots {
            match &s.running {
                Running::Ours(o) => all.extend(
                    o.log
                        .lock()
                        .unwrap()
                        .applied
                        .iter()
                        .map(|a| (a.tp.1, a.offset)),
                ),
                Running::Java(p) => all.extend(
                    p.events()
                        .iter()
                        .filter_map(|e| e.record.as_ref().map(|r| (r.1, r.2))),
                ),
                Running::Gone => {}
            }
        }
        all
    }
}

/// Closes one life of a member and collects what it left.
fn end(name: &str, running: Running) -> Life {
    match running {
        Running::Ours(mut o) => {
            let (log, commit_failures) = o.close();
            Life {
                name: name.to_string(),
                log,
                commit_failures,
                events: String::new(),
            }
        }
        Running::Java(mut p) => {
            p.close().unwrap_or_else(|e| panic!("{name}: {e}"));
            let events = p.events();
            let mut detail = p.event_log();
            if events
                .iter()
                .any(|e| matches!(e.kind, MemberEventKind::Lost | MemberEventKind::Error))
            {
                // The client's own log (its stderr), which the handle deletes when dropped.
                let text = std::fs::read_to_string(p.log_path()).unwrap_or_default();
                let tail = text.len().saturating_sub(8000);
                detail.push_str(&String::from_utf8_lossy(&text.as_bytes()[tail..]));
            }
            let commit_failures = events
                .iter()
                .filter(|e| e.kind == MemberEventKind::Error)
                .filter_map(|e| e.error.as_deref())
                .filter(|text| text.contains("commit"))
                .flat_map(|text| (0..PARTITIONS).map(move |p| (p, text.to_string())))
                .collect();
            Life {
                name: name.to_string(),
                log: peer_log(name, &events),
                commit_failures,
                events: detail,
            }
        }
        Running::Gone => panic!("{name} ended twice"),
    }
}

/// The migration with classic members of `strategy` (ours and Java alike), restarting members
/// at `pace`.
fn rolling_migration(strategy: PeerStrategy, pace: Pace) {
    let started = Instant::now();
    let kafka = Kafka::shared(KafkaVersion::Newest);
    let topic = unique_name("migration");
    kafka.create_topic(&topic, PARTITIONS as u32);
    let mut group = Group {
        pace,
        strategy,
        bootstrap: kafka.bootstrap().to_string(),
        group: unique_name("migration-group"),
        topic: topic.clone(),
        slots: Vec::new(),
        lives: Vec::new(),
    };
    let producer = Producer::start(&group.bootstrap, &topic);

    for (base, java) in [
        ("ours-1", false),
        ("ours-2", false),
        ("ours-3", false),
        ("java", true),
    ] {
        group.add(base, java);
    }
    // Each step: its name, how long it took to be ready, when it began (on the tenures' clock).
    let first_began = monotonic_now();
    let mut steps = vec![(
        "all classic".to_string(),
        group.settle("all classic", Some(3)),
        first_began,
    )];
    // Forward ours first and the Java member last, back the Java member first and ours last:
    // one of ours is the first consumer-protocol member (its join converts the classic group)
    // and one of ours the last (its leave converts the group back).
    for (protocol, order) in [
        (Protocol::Consumer, [0, 1, 2, 3]),
        (Protocol::Classic, [3, 0, 1, 2]),
    ] {
        for slot in order {
            let stage = format!("{} to {}", group.slots[slot].base, protocol.name());
            let began = monotonic_now();
            group.restart(slot, protocol);
            let took = group.settle(&stage, Some(slot));
            steps.push((stage.clone(), took, began));
            // The first consumer-protocol member's join converted the group, the last one's
            // leave converted it back.
            let converted = match (protocol, steps.len()) {
                (Protocol::Consumer, 2) => Some("consumer"),
                (Protocol::Classic, 9) => Some("classic"),
                _ => None,
            };
            if let Some(expected) = converted {
                assert_eq!(group.group_type(), expected, "after {stage}");
            }
        }
    }

    producer.stop.store(true, Ordering::SeqCst);
    let produced = producer.thread.join().expect("producer thread");
    let everything: BTreeSet<(i32, i64)> = produced.iter().copied().collect();
    let deadline = Instant::now() + SETTLE;
    loop {
        let missing = everything.difference(&group.applied_now()).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} records never applied",
            everything.len()
        );
        thread::sleep(Duration::from_millis(100));
    }
    // The Java member closes first, while the group is stable: Java's close reports its
    // partitions lost instead of revoked when the group is rebalancing (which the leaves of the
    // others would start), without a commit. Ours then close one right after the other, the
    // later ones inside the rebalance the earlier leaves started.
    let mut slots = std::mem::take(&mut group.slots);
    slots.rotate_right(1);
    for slot in slots {
        let life = end(&slot.name, slot.running);
        group.lives.push(life);
    }

    // Lost and repeated records.
    let mut applications: BTreeMap<(i32, i64), Vec<(&str, f64)>> = BTreeMap::new();
    for life in &group.lives {
        for a in &life.log.applied {
            applications
                .entry((a.tp.1, a.offset))
                .or_default()
                .push((life.name.as_str(), a.t));
        }
    }
    let lost: Vec<_> = everything
        .iter()
        .filter(|r| !applications.contains_key(r))
        .collect();
    let mut repeats: BTreeMap<String, usize> = BTreeMap::new();
    // Repeats by the step in which the record was applied again.
    let mut repeats_in_step = vec![0usize; steps.len()];
    let mut unexplained = Vec::new();
    for ((partition, offset), mut by) in applications.clone() {
        by.sort_by(|a, b| a.1.total_cmp(&b.1));
        for pair in by.windows(2) {
            let ((first, applied_at), (again, again_at)) = (pair[0], pair[1]);
            *repeats.entry(format!("{first} -> {again}")).or_default() += 1;
            let step = steps.iter().rposition(|s| s.2 <= again_at).unwrap_or(0);
            repeats_in_step[step] += 1;
            // A refused commit of that partition, or its loss after the record was applied.
            let explained = group
                .lives
                .iter()
                .find(|l| l.name == first)
                .is_some_and(|l| {
                    l.commit_failures.iter().any(|(p, _)| *p == partition)
                        || l.log
                            .lost
                            .iter()
                            .any(|loss| loss.tp.1 == partition && loss.t >= applied_at)
                });
            if !explained {
                unexplained.push(format!("{partition}@{offset}: {first} then {again}"));
            }
        }
    }
    let losses: Vec<String> = group
        .lives
        .iter()
        .flat_map(|l| {
            l.log.lost.iter().map(move |loss| {
                format!(
                    "{} lost {}-{} ({})",
                    l.name, loss.tp.0, loss.tp.1, loss.reason
                )
            })
        })
        .collect();
    let logs: Vec<MemberLog> = group.lives.iter().map(|l| l.log.clone()).collect();
    let tenures = check_tenures(&logs);

    eprintln!(
        "migration ({}, {:?}): records={} applied={} lost={} repeats={} handovers={} min_gap_ms={:.1} \
         members_lives={} duration={:.1?}",
        strategy.name(),
        pace,
        everything.len(),
        applications.values().map(Vec::len).sum::<usize>(),
        lost.len(),
        repeats.values().sum::<usize>(),
        tenures.as_ref().map_or(0, |r| r.handovers),
        tenures
            .as_ref()
            .ok()
            .and_then(|r| r.min_gap)
            .unwrap_or(f64::NAN)
            * 1e3,
        group.lives.len(),
        started.elapsed()
    );
    for ((stage, took, _), repeated) in steps.iter().zip(&repeats_in_step) {
        eprintln!("migration: step {stage}: ready in {took:.1?}, repeats {repeated}");
    }
    for (handover, count) in &repeats {
        eprintln!("migration: repeats {handover}: {count}");
    }
    for life in &group.lives {
        for (p, e) in &life.commit_failures {
            eprintln!(
                "migration: {} commit failure on partition {p}: {e}",
                life.name
            );
        }
    }
    assert!(
        producer.count.load(Ordering::SeqCst) > 0,
        "nothing produced"
    );
    assert!(lost.is_empty(), "lost {} records: {lost:?}", lost.len());
    assert!(
        unexplained.is_empty(),
        "{} repeats no commit failure explains: {unexplained:?}",
        unexplained.len()
    );
    let java_logs: String = group.lives.iter().map(|l| l.events.as_str()).collect();
    for loss in &losses {
        eprintln!("migration: {loss}");
    }
    if pace == Pace::Settled {
        // When every step settles, the migration itself takes nothing from our members: a loss
        // may only come from time (a lease that ran out on an overloaded machine), never from
        // the coordinator refusing the member.
        let refused: Vec<&String> = losses
            .iter()
            .filter(|l| !l.contains("(SessionExpired)") && !l.contains("(PollTimeout)"))
            .filter(|l| !l.starts_with("java"))
            .collect();
        assert!(
            refused.is_empty(),
            "partitions taken by the coordinator: {refused:?}\n{java_logs}"
        );
    }
    tenures.unwrap_or_else(|e| panic!("ownership overlaps:\n{e}"));
}

/// The ownership check fails on the overlaps it exists for: a handover whose next tenure starts
/// a microsecond before the previous one ended, one that starts at the very instant it ended, a
/// tenure that never ended, and a record applied after its member's tenure ended.
#[test]
fn tenure_check_fails_on_any_overlap() {
    let tp: Tp = ("t".to_string(), 0);
    let tenure = |member: &str, start: f64, end: Option<f64>| support::tenure::Tenure {
        member: member.to_string(),
        tp: tp.clone(),
        start,
        end,
    };
    let log = |tenures: Vec<support::tenure::Tenure>, applied: Vec<Applied>| MemberLog {
        tenures,
        applied,
        lost: Vec::new(),
    };
    let handover = |b_start: f64| {
        check_tenures(&[
            log(vec![tenure("a", 1.0, Some(2.0))], Vec::new()),
            log(vec![tenure("b", b_start, Some(3.0))], Vec::new()),
        ])
    };
    let report = handover(2.000_001).expect("a strict handover passes");
    assert_eq!(report.handovers, 1);
    assert!(handover(1.999_999).is_err(), "an overlap of 1 µs");
    assert!(handover(2.0).is_err(), "no gap at all");
    assert!(check_tenures(&[
        log(vec![tenure("a", 1.0, None)], Vec::new()),
        log(vec![tenure("b", 2.0, Some(3.0))], Vec::new()),
    ])
    .is_err());
    let late = Applied {
        member: "a".to_string(),
        tp: tp.clone(),
        offset: 7,
        t: 2.000_001,
    };
    assert!(check_tenures(&[log(vec![tenure("a", 1.0, Some(2.0))], vec![late])]).is_err());
}

mod kafka {
    use super::*;

    /// Classic members on the incremental protocol (`cooperative-sticky`): in the mixed group the
    /// broker revokes only what moves from them.
    #[test]
    fn rolling_migration_cooperative_sticky() {
        rolling_migration(PeerStrategy::CooperativeSticky, Pace::Settled);
    }
    /// Classic members on the eager protocol (`range`): each of their rebalances revokes everything
    /// and joins again, inside the consumer group as in the classic one.
    #[test]
    fn rolling_migration_range() {
        rolling_migration(PeerStrategy::Range, Pace::Settled);
    }
    /// Each restart as soon as the restarted member applied a record, eager classic members: the
    /// closes and joins overlap the rebalances the previous ones started. When the last
    /// consumer-protocol member leaves while a classic member has not rejoined for the latest group
    /// epoch yet, Kafka converts the group back with the group's epoch as the classic generation,
    /// so that member's commits are refused with ILLEGAL_GENERATION: it loses its partitions
    /// without a commit (so does Java's consumer, with a CommitFailedException) and the next owner
    /// repeats what it applied since its last commit. Here a loss or a refused commit is allowed,
    /// and every repeat must be explained by one, of the member that applied the record first, on
    /// that partition; nothing may be lost and no partition may ever have two owners.
    #[test]
    fn rolling_migration_unsettled_range() {
        rolling_migration(PeerStrategy::Range, Pace::Rolling);
    }
    /// `kafka::rolling_migration_unsettled_range` with incremental classic members.
    #[test]
    fn rolling_migration_unsettled_cooperative_sticky() {
        rolling_migration(PeerStrategy::CooperativeSticky, Pace::Rolling);
    }
}

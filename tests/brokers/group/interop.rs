//! Our member in one group with real peers: confluent-kafka (librdkafka) and kafka-python members
//! (`scripts/peer_member.py`), for `range`, `roundrobin` and `cooperative-sticky`, with our member
//! elected leader in some runs (it joins first: both brokers make the first member the leader) and
//! a peer elected leader in the others. Our leader's assignment bytes must be read by librdkafka
//! and kafka-python; their assignments must be read by us.
//!
//! After every rebalance every partition is owned by exactly one member (and the assignors
//! balance: 2 partitions each of 6 with three members). Under cooperative-sticky, a partition that
//! does not move is never revoked from its owner, ours or a peer's, and a member gives up only as
//! many partitions as the balance takes from it (see `Group::check_sticky`).
//!
//! Broker and peer coverage, and why (see `tests/brokers/group/peers.rs` for the measurements):
//! - kafka-python 2.3.3 has no cooperative protocol: cooperative groups are ours + confluent.
//! - librdkafka's mock answers INVALID_REQUEST to a follower whose SyncGroup arrives after the
//!   leader's, and kafka-python followers lose that race almost every time; so on the mock a
//!   kafka-python member takes part only as the leader (peer-leads runs), and our-leader runs
//!   there use confluent followers. tansu runs every combination.
//! - Every member uses a 3000 ms session (heartbeat 500 ms): both brokers' rebalance waits grow
//!   with it.
//!
//! On Apache Kafka 4.x (the reference) the groups also hold Kafka's own Java consumer
//! (kafka-clients, `scripts/Peer.java`): ours, Java, confluent-kafka and (eager strategies)
//! kafka-python, with ours, Java, confluent or (eager) kafka-python as the leader. Kafka makes the
//! first member that joins a classic group its leader and keeps it leader while it rejoins every
//! rebalance in time, so the leader is chosen by joining it first, alone, and checked after every
//! join: our member records the generations it led, and the Java member reports every assignment
//! its assignor computed (only the leader's does). Kafka handles the follower SyncGroup race that
//! the mock gets wrong, so kafka-python follows there too. After every join and every leave the
//! ownership must be exactly-once and balanced (member sizes differ by one at most), and the peers'
//! merged event timeline must never show a partition owned twice. A Java-only group on the consumer
//! protocol (KIP-848) checks the peer itself on that protocol, and our classic member also joins a
//! group that a Java consumer-protocol member created (Kafka's mixed groups). Further Kafka runs:
//! mixed subscriptions (ours subscribes to fewer topics than the peers), a SIGKILLed Java member,
//! and static restarts of a Java follower and of our leader.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::members::{
    check_no_double_ownership, fmt_ownership, fmt_tps, merged_log, one_topic, wait_peers_stable,
    wait_until_stable, MemberEventKind, Ownership, PeerClient, PeerMember, PeerMemberSpec,
    PeerStrategy, Stability, Tp,
};
use support::ours::{OurEvent, OurMember, OurMemberSpec};
use support::{unique_name, BrokerKind};

const PARTITIONS: i32 = 6;
const SETTLE: Duration = Duration::from_secs(90);

enum Member {
    Ours(OurMember),
    Peer(PeerMember),
}

impl Member {
    fn owned(&self) -> BTreeSet<Tp> {
        match self {
            Member::Ours(m) => m.owned(),
            Member::Peer(p) => p.owned(),
        }
    }

    fn log(&self) -> String {
        match self {
            Member::Ours(m) => format!("ours: {:?}", m.events()),
            Member::Peer(p) => format!(
                "{}\n  (client log: {})",
                p.event_log(),
                p.log_path().display()
            ),
        }
    }

    /// Partitions revoked from this member so far.
    fn revoked(&self) -> Vec<Tp> {
        match self {
            Member::Ours(m) => m
                .events()
                .into_iter()
                .filter_map(|e| match e {
                    OurEvent::Revoked(p, _) => Some(p),
                    _ => None,
                })
                .flatten()
                .collect(),
            Member::Peer(p) => p
                .events()
                .into_iter()
                .filter(|e| e.kind == MemberEventKind::Revoked)
                .flat_map(|e| e.partitions.clone())
                .collect(),
        }
    }
}

struct Group {
    kind: BrokerKind,
    topic: String,
    /// A second topic that only the peers subscribe to (ours subscribes to `topic` alone).
    peer_only_topic: Option<String>,
    group: String,
    strategy: &'static str,
    /// Peers log their client's group protocol (librdkafka `debug=cgrp,protocol`) into their
    /// log file, which is kept when the test fails.
    peer_debug: bool,
    members: Vec<(String, Member)>,
    // Dropped last: the members talk to it.
    broker: Box<dyn support::Broker>,
}

impl Group {
    fn new(kind: BrokerKind, strategy: &'static str) -> Group {
        let broker = kind.start();
        let topic = unique_name("interop");
        broker.create_topic(&topic, PARTITIONS as u32);
        Group {
            kind,
            topic,
            peer_only_topic: None,
            group: unique_name("interop-group"),
            strategy,
            peer_debug: false,
            members: Vec::new(),
            broker,
        }
    }

    /// A group whose peers also subscribe to a second topic of `PARTITIONS` partitions that our
    /// member does not subscribe to.
    fn with_peer_only_topic(kind: BrokerKind, strategy: &'static str) -> Group {
        let mut g = Group::new(kind, strategy);
        let extra = unique_name("interop-peers-only");
        g.broker.create_topic(&extra, PARTITIONS as u32);
        g.peer_only_topic = Some(extra);
        g
    }

    /// Every topic a member of the group subscribes to, and its partition count.
    fn topics(&self) -> std::collections::BTreeMap<String, i32> {
        let mut topics = one_topic(&self.topic, PARTITIONS);
        let peer_in_group = self
            .members
            .iter()
            .any(|(_, m)| matches!(m, Member::Peer(_)));
        if let (Some(extra), true) = (&self.peer_only_topic, peer_in_group) {
            topics.insert(extra.clone(), PARTITIONS);
        }
        topics
    }

    fn add_ours(&mut self, name: &str) {
        let mut spec = OurMemberSpec::new(
            &self.broker.bootstrap(),
            &self.group,
            &self.topic,
            self.strategy,
        );
        spec.session_timeout_ms = 3000;
        self.members
            .push((name.to_string(), Member::Ours(OurMember::start(spec))));
    }

    fn peer(&self, name: &str) -> &PeerMember {
        self.members
            .iter()
            .find_map(|(n, m)| match m {
                Member::Peer(p) if n == name => Some(p),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no peer {name} in the group"))
    }

    fn has(&self, name: &str) -> bool {
        self.members.iter().any(|(n, _)| n == name)
    }

    fn add_peer(&mut self, client: PeerClient, name: &str) {
        let strategy = match self.strategy {
            "range" => PeerStrategy::Range,
            "roundrobin" => PeerStrategy::RoundRobin,
            _ => PeerStrategy::CooperativeSticky,
        };
        let mut topics = vec![self.topic.as_str()];
        topics.extend(self.peer_only_topic.as_deref());
        let mut spec = PeerMemberSpec::new(
            client,
            &self.broker.bootstrap(),
            &self.group,
            &topics,
            strategy,
            name,
        );
        spec.debug = self.peer_debug;
        self.start_peer(name, spec);
    }

    /// A Java member on the consumer protocol (KIP-848) on this group's topic: the broker
    /// assigns, so its strategy is not passed.
    fn add_java_consumer_protocol(&mut self, name: &str) {
        let spec = PeerMemberSpec::new(
            PeerClient::Java,
            &self.broker.bootstrap(),
            &self.group,
            &[&self.topic],
            PeerStrategy::CooperativeSticky,
            name,
        )
        .consumer_protocol(None);
        self.start_peer(name, spec);
    }

    fn start_peer(&mut self, name: &str, spec: PeerMemberSpec) {
        let member = PeerMember::start(spec);
        member
            .wait_ready(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.members.push((name.to_string(), Member::Peer(member)));
    }

    fn ownership(&self) -> Ownership {
        self.members
            .iter()
            .map(|(name, m)| (name.clone(), m.owned()))
            .collect()
    }

    /// Waits until every partition is owned exactly once, every member owns some, and nothing
    /// changes for a second.
    fn stable(&self, stage: &str) -> Ownership {
        self.wait_stable(stage, &Stability::within(SETTLE))
    }

    /// Waits for the group's final assignment: as [`stable`](Self::stable), and balanced
    /// (member sizes differ by one at most). A cooperative rebalance that moves partitions takes
    /// two rounds, and between them the ownership is exactly-once but leaves the members that
    /// gain partitions short (what moves is withheld until its owner revoked it and rejoined);
    /// on a loaded machine that lasts longer than the settle second, so the settle second alone
    /// cannot tell it from the end. Only for members with equal subscriptions.
    fn settled(&self, stage: &str) -> Ownership {
        let opts = Stability {
            balanced: true,
            ..Stability::within(SETTLE)
        };
        self.wait_stable(stage, &opts)
    }

    fn wait_stable(&self, stage: &str, opts: &Stability) -> Ownership {
        wait_until_stable(&self.topics(), opts, || self.ownership())
            .map(|(owned, _)| owned)
            .unwrap_or_else(|e| {
                let logs: Vec<String> = self.members.iter().map(|(_, m)| m.log()).collect();
                panic!(
                    "{:?} {} {stage}: {e}\n{}",
                    self.kind,
                    self.strategy,
                    logs.join("\n")
                )
            })
    }

    fn close(&mut self, name: &str) {
        let at = self
            .members
            .iter()
            .position(|(n, _)| n == name)
            .expect("member exists");
        match self.members.remove(at).1 {
            Member::Ours(m) => {
                m.close();
            }
            Member::Peer(mut p) => p.close().unwrap_or_else(|e| panic!("{name}: {e}")),
        }
    }

    fn ours(&self) -> &OurMember {
        self.members
            .iter()
            .find_map(|(_, m)| match m {
                Member::Ours(o) => Some(o),
                Member::Peer(_) => None,
            })
            .expect("our member is in the group")
    }

    /// True when our member computed the assignment of its latest generation.
    fn ours_leads(&self) -> bool {
        let events = self.ours().events();
        let last_generation = events.iter().rev().find_map(|e| match e {
            OurEvent::Assigned(_, g) => Some(*g),
            _ => None,
        });
        last_generation.is_some_and(|g| events.contains(&OurEvent::Led(g)))
    }

    /// Under cooperative rebalancing, nothing a member still owns was ever revoked from it
    /// since `since` (an ownership snapshot): only partitions that moved were revoked.
    fn check_only_moved_were_revoked(
        &self,
        before: &Ownership,
        revoked_before: &[(String, usize)],
    ) {
        for (name, member) in &self.members {
            let already = revoked_before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, count)| *count);
            let revoked: BTreeSet<Tp> = member.revoked().into_iter().skip(already).collect();
            let kept: BTreeSet<Tp> = before
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, owned)| owned.intersection(&member.owned()).cloned().collect())
                .unwrap_or_default();
            let wrongly: Vec<_> = revoked.intersection(&kept).collect();
            assert!(
                wrongly.is_empty(),
                "{:?}: {name} kept {wrongly:?} but they were revoked:\n{}",
                self.kind,
                member.log()
            );
        }
    }

    fn revocation_counts(&self) -> Vec<(String, usize)> {
        self.members
            .iter()
            .map(|(n, m)| (n.clone(), m.revoked().len()))
            .collect()
    }

    /// The cooperative-sticky promise over one change of the group (a join or a leave, however
    /// many rounds it took), from `before` (every member's ownership before it) to `after` (the
    /// settled ownership), for members with equal subscriptions:
    /// - every member kept as many of its partitions as its new share allows
    ///   (`|before ∩ after| = min(|before|, |after|)`): the balance takes from a member only what
    ///   exceeds its share;
    /// - the partitions revoked from it since `revoked_before` are exactly those it gave up,
    ///   `before \ after`, each once: nothing it kept was revoked and handed back, nothing it
    ///   gained in between was taken away again.
    ///
    /// The message names who led the rebalance, since the leader's assignor decided it: ours,
    /// or the peer's (librdkafka's).
    fn check_sticky(
        &self,
        stage: &str,
        before: &Ownership,
        after: &Ownership,
        revoked_before: &[(String, usize)],
    ) {
        let leader = if self.ours_leads() { "ours" } else { "a peer" };
        for (name, member) in &self.members {
            let already = revoked_before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, count)| *count);
            let mut revoked: Vec<Tp> = member.revoked().into_iter().skip(already).collect();
            revoked.sort();
            let empty = BTreeSet::new();
            let owned_before = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(&empty, |(_, owned)| owned);
            let owned_after = after
                .iter()
                .find(|(n, _)| n == name)
                .map_or(&empty, |(_, owned)| owned);
            let kept = owned_before.intersection(owned_after).count();
            let gave_up: Vec<Tp> = owned_before.difference(owned_after).cloned().collect();
            let share = owned_before.len().min(owned_after.len());
            let context = || {
                format!(
                    "{:?} {stage} ({leader} led): {name} owned {} before, {} after",
                    self.kind,
                    fmt_tps(owned_before),
                    fmt_tps(owned_after)
                )
            };
            assert!(
                kept == share,
                "{}: it kept {kept} of its partitions where its share allowed {share}: \
                 the assignment moved more than the balance needs\n{}\nours: {:?}",
                context(),
                member.log(),
                self.ours().events()
            );
            assert!(
                revoked == gave_up,
                "{}: revoked since then: {revoked:?}, but it gave up exactly {gave_up:?} \
                 (a partition revoked and then handed back, or revoked twice)\n{}\nours: {:?}",
                context(),
                member.log(),
                self.ours().events()
            );
        }
    }
}

/// Three members (ours and two peers) under an eager assignor: exactly-once ownership after the
/// joins, after a peer leaves, and after our member leaves. `ours_first` makes our member the
/// leader; otherwise a peer leads.
fn eager_interop(kind: BrokerKind, strategy: &'static str, ours_first: bool) {
    let mut g = Group::new(kind, strategy);
    // On the mock a kafka-python member can only be the leader (see the module docs).
    let python_can_follow = kind == BrokerKind::Tansu;
    if ours_first {
        g.add_ours("ours");
        g.stable("ours alone");
        g.add_peer(PeerClient::Confluent, "confluent");
        if python_can_follow {
            g.add_peer(PeerClient::KafkaPython, "python");
        } else {
            g.add_peer(PeerClient::Confluent, "confluent-2");
        }
    } else {
        let first = if kind == BrokerKind::Mock {
            (PeerClient::KafkaPython, "python")
        } else {
            (PeerClient::Confluent, "confluent")
        };
        g.add_peer(first.0, first.1);
        g.stable("peer alone");
        g.add_ours("ours");
        g.stable("peer and ours");
        let second = if first.1 == "python" {
            (PeerClient::Confluent, "confluent")
        } else {
            (PeerClient::KafkaPython, "python")
        };
        g.add_peer(second.0, second.1);
    }
    let three = g.stable("three members");
    assert!(three.iter().all(|(_, owned)| owned.len() == 2), "{three:?}");
    assert_eq!(
        g.ours_leads(),
        ours_first,
        "{kind:?} {strategy}: leadership; ours: {:?}",
        g.ours().events()
    );
    // A follower peer leaves; the two left split the six partitions.
    let follower = g
        .members
        .iter()
        .rev()
        .find(|(n, _)| n != "ours")
        .map(|(n, _)| n.clone())
        .expect("a peer follower");
    g.close(&follower);
    let two = g.stable("after a peer left");
    assert!(two.iter().all(|(_, owned)| owned.len() == 3), "{two:?}");
    // Our member leaves; the remaining peer owns everything.
    g.close("ours");
    let one = g.stable("after ours left");
    assert_eq!(one[0].1.len(), PARTITIONS as usize, "{one:?}");
}

/// Three cooperative-sticky members (ours and two confluent peers): exactly-once ownership after
/// every change, and after every change only the partitions the balance moves are revoked, each
/// once, from members that keep the rest ([`Group::check_sticky`]). Each change is waited out to
/// the group's final assignment ([`Group::settled`]), however many rounds it takes: two for a
/// join that moves partitions, more when a follower lost librdkafka's mock SyncGroup race (see the
/// module docs) and rejoined claiming the partitions of the generation it last completed; those
/// claims are still its own, and it keeps them.
fn cooperative_interop(kind: BrokerKind, ours_first: bool) {
    let mut g = Group::new(kind, "cooperative-sticky");
    g.peer_debug = true;
    if ours_first {
        g.add_ours("ours");
    } else {
        g.add_peer(PeerClient::Confluent, "confluent-1");
    }
    let mut before = g.settled("first member alone");
    let names: [&str; 2] = if ours_first {
        ["confluent-1", "confluent-2"]
    } else {
        ["ours", "confluent-2"]
    };
    for name in names {
        let revoked_before = g.revocation_counts();
        if name == "ours" {
            g.add_ours(name);
        } else {
            g.add_peer(PeerClient::Confluent, name);
        }
        let stage = format!("after {name} joined");
        let after = g.settled(&stage);
        g.check_sticky(&stage, &before, &after, &revoked_before);
        before = after;
    }
    assert!(
        before.iter().all(|(_, owned)| owned.len() == 2),
        "{before:?}"
    );
    assert_eq!(g.ours_leads(), ours_first, "ours: {:?}", g.ours().events());
    // A peer leaves: the survivors only gain partitions (their share grows), so nothing is
    // revoked from them.
    let revoked_before = g.revocation_counts();
    g.close("confluent-2");
    let after = g.settled("after a peer left");
    g.check_sticky("after a peer left", &before, &after, &revoked_before);
    assert!(
        g.ours()
            .events()
            .iter()
            .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Error(_))),
        "{:?}",
        g.ours().events()
    );
}

/// Who joins a Kafka group first, alone, and so leads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leader {
    Ours,
    Java,
    Confluent,
    /// Eager strategies only: kafka-python has no cooperative protocol.
    Python,
}

impl Leader {
    fn name(self) -> &'static str {
        match self {
            Leader::Ours => "ours",
            Leader::Java => "java",
            Leader::Confluent => "confluent",
            Leader::Python => "python",
        }
    }
}

/// Member sizes differ by one at most (range over one topic, roundrobin and cooperative-sticky
/// all balance).
fn assert_balanced(kind: BrokerKind, strategy: &str, stage: &str, owned: &Ownership) {
    let sizes: Vec<usize> = owned.iter().map(|(_, o)| o.len()).collect();
    let (min, max) = (sizes.iter().min(), sizes.iter().max());
    assert!(
        matches!((min, max), (Some(lo), Some(hi)) if hi - lo <= 1),
        "{kind:?} {strategy} {stage}: unbalanced: {}",
        fmt_ownership(
            &owned
                .iter()
                .map(|(n, o)| (n.as_str(), o.clone()))
                .collect::<Vec<_>>()
        )
    );
}

impl Group {
    fn add(&mut self, name: &str) {
        match name {
            "ours" => self.add_ours(name),
            "java" => self.add_peer(PeerClient::Java, name),
            "confluent" => self.add_peer(PeerClient::Confluent, name),
            "python" => self.add_peer(PeerClient::KafkaPython, name),
            other => panic!("unknown member {other}"),
        }
    }

    fn java_led(&self) -> usize {
        if self.has("java") {
            self.peer("java").led_count()
        } else {
            0
        }
    }

    /// The peers' events merged on their shared monotonic clock never show a partition owned by
    /// two peers at once. `gone` holds the events of peers that already left.
    fn check_peers_never_shared(&self, gone: &[support::members::MemberEvent], stage: &str) {
        let peers: Vec<&PeerMember> = self
            .members
            .iter()
            .filter_map(|(_, m)| match m {
                Member::Peer(p) => Some(p),
                Member::Ours(_) => None,
            })
            .collect();
        let mut events: Vec<_> = peers.iter().flat_map(|p| p.events()).collect();
        events.extend(gone.iter().cloned());
        if let Err(e) = check_no_double_ownership(&events) {
            panic!(
                "{:?} {} {stage}: {e}\n{}",
                self.kind,
                self.strategy,
                merged_log(&peers)
            );
        }
    }
}

/// A mixed group on Kafka 4.x: `leader` joins first and alone, then the others one by one (ours,
/// Java, confluent, and kafka-python under the eager strategies: it has no cooperative
/// protocol). After every join: exactly-once and balanced ownership, `leader` led the rebalance
/// (checked on ours and Java, who report it), and under cooperative-sticky nothing a member kept
/// was revoked. Then the last member to join leaves, then the leader (another member takes the
/// lead), then the others until one member owns every partition; after every leave the same
/// checks, and under cooperative-sticky the survivors only gain partitions.
fn kafka_interop(strategy: &'static str, leader: Leader) {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let mut g = Group::new(kind, strategy);
    let cooperative = strategy == "cooperative-sticky";
    assert!(
        !(cooperative && leader == Leader::Python),
        "kafka-python has no cooperative protocol"
    );
    let mut order: Vec<&str> = vec![leader.name()];
    for name in ["ours", "java", "confluent", "python"] {
        if name != leader.name() && !(cooperative && name == "python") {
            order.push(name);
        }
    }
    let mut before: Ownership = Vec::new();
    for name in order.clone() {
        let step = Instant::now();
        let revoked_before = g.revocation_counts();
        let java_led_before = g.java_led();
        g.add(name);
        let stage = format!("after {name} joined");
        let after = g.stable(&stage);
        assert_balanced(kind, strategy, &stage, &after);
        if cooperative {
            g.check_only_moved_were_revoked(&before, &revoked_before);
        }
        // Who led this rebalance: our member records its generations, Java its assignments.
        if g.has("ours") {
            assert_eq!(
                g.ours_leads(),
                leader == Leader::Ours,
                "{kind:?} {strategy} {stage}: did ours lead? ours: {:?}",
                g.ours().events()
            );
        }
        if g.has("java") {
            let java_led = g.java_led() > java_led_before;
            assert_eq!(
                java_led,
                leader == Leader::Java,
                "{kind:?} {strategy} {stage}: did java lead?\n{}",
                g.peer("java").event_log()
            );
        }
        g.check_peers_never_shared(&[], &stage);
        eprintln!(
            "{kind:?} {strategy}: {stage}: stable in {:.1?}: {}",
            step.elapsed(),
            fmt_ownership(
                &after
                    .iter()
                    .map(|(n, o)| (n.as_str(), o.clone()))
                    .collect::<Vec<_>>()
            )
        );
        before = after;
    }
    // Leaves: the last to join, then the leader, then the others but one.
    let mut leaves: Vec<&str> = vec![order[order.len() - 1], order[0]];
    leaves.extend(order[1..order.len() - 1].iter().take(order.len() - 3));
    let mut gone_events = Vec::new();
    for name in leaves {
        let step = Instant::now();
        let revoked_before = g.revocation_counts();
        let at = g
            .members
            .iter()
            .position(|(n, _)| n == name)
            .expect("member exists");
        match g.members.remove(at).1 {
            Member::Ours(m) => {
                m.close();
            }
            Member::Peer(mut p) => {
                p.close()
                    .unwrap_or_else(|e| panic!("{kind:?} {strategy}: {name}: {e}"));
                // A peer that left still counts for the double-ownership replay.
                gone_events.extend(p.events());
            }
        }
        let stage = format!("after {name} left");
        let after = g.stable(&stage);
        assert_balanced(kind, strategy, &stage, &after);
        if cooperative {
            g.check_only_moved_were_revoked(&before, &revoked_before);
            // Kafka, like tansu: when a member leaves, the survivors keep everything they own.
            for (survivor, member) in &g.members {
                let earlier = revoked_before
                    .iter()
                    .find(|(n, _)| n == survivor)
                    .map_or(0, |(_, c)| *c);
                assert_eq!(
                    member.revoked().len(),
                    earlier,
                    "{kind:?}: {survivor} lost partitions when {name} left:\n{}",
                    member.log()
                );
            }
        }
        g.check_peers_never_shared(&gone_events, &stage);
        eprintln!(
            "{kind:?} {strategy}: {stage}: stable in {:.1?}",
            step.elapsed()
        );
        before = after;
    }
    assert_eq!(g.members.len(), 1, "{:?}", g.ownership());
    assert_eq!(
        g.members[0].1.owned().len(),
        PARTITIONS as usize,
        "{:?}",
        g.ownership()
    );
    if g.has("ours") {
        assert!(
            g.ours()
                .events()
                .iter()
                .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Error(_))),
            "{:?}",
            g.ours().events()
        );
    }
    let last = g.members[0].0.clone();
    g.close(&last);
    eprintln!(
        "{kind:?} {strategy} {} leads: done in {:.1?}",
        leader.name(),
        started.elapsed()
    );
}

/// Our member subscribes to one topic, the Java and confluent peers to that topic and a second
/// one, on Kafka 4.x; `leader` joins first. The leader must assign the second topic although our
/// member does not subscribe to it (and ours must never be given any of it): after every join and
/// after the leader leaves, every partition of both topics is owned exactly once, ours owns only
/// partitions of its own topic, and under cooperative-sticky nothing a member kept was revoked.
fn kafka_mixed_subscriptions(strategy: &'static str, leader: Leader) {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let mut g = Group::with_peer_only_topic(kind, strategy);
    let cooperative = strategy == "cooperative-sticky";
    let mut order: Vec<&str> = vec![leader.name()];
    order.extend(
        ["ours", "java", "confluent"]
            .into_iter()
            .filter(|n| *n != leader.name()),
    );
    let check = |g: &Group, stage: &str, before: &Ownership, revoked_before: &[(String, usize)]| {
        let after = g.stable(stage);
        if let Some((_, ours)) = after.iter().find(|(n, _)| n == "ours") {
            assert!(
                ours.iter().all(|(t, _)| *t == g.topic),
                "{kind:?} {strategy} {stage}: ours was given a topic it does not subscribe to: {}",
                support::members::fmt_tps(ours)
            );
        }
        if cooperative {
            g.check_only_moved_were_revoked(before, revoked_before);
        }
        g.check_peers_never_shared(&[], stage);
        eprintln!(
            "{kind:?} {strategy} mixed subscriptions: {stage}: {}",
            fmt_ownership(
                &after
                    .iter()
                    .map(|(n, o)| (n.as_str(), o.clone()))
                    .collect::<Vec<_>>()
            )
        );
        after
    };
    let mut before: Ownership = Vec::new();
    for name in order.clone() {
        let revoked_before = g.revocation_counts();
        let java_led_before = g.java_led();
        g.add(name);
        let stage = format!("after {name} joined");
        before = check(&g, &stage, &before, &revoked_before);
        if g.has("ours") {
            assert_eq!(
                g.ours_leads(),
                leader == Leader::Ours,
                "{stage}: ours: {:?}",
                g.ours().events()
            );
        }
        if g.has("java") {
            assert_eq!(
                g.java_led() > java_led_before,
                leader == Leader::Java,
                "{stage}: {}",
                g.peer("java").event_log()
            );
        }
    }
    // The leader leaves: another member assigns both topics.
    let revoked_before = g.revocation_counts();
    g.close(leader.name());
    let stage = format!("after {} left", leader.name());
    check(&g, &stage, &before, &revoked_before);
    for name in g.members.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>() {
        g.close(&name);
    }
    eprintln!(
        "{kind:?} {strategy} mixed subscriptions, {} leads: done in {:.1?}",
        leader.name(),
        started.elapsed()
    );
}

/// A crash on Kafka 4.x: ours leads, Java and confluent follow; the Java member is killed
/// (SIGKILL, no LeaveGroup), so the broker notices only when its 3 s session expires. Then ours and
/// confluent must own every partition exactly once, balanced, and (cooperative-sticky) keep what
/// they had: nothing they owned is revoked, they only gain the dead member's partitions; ours
/// never reports a loss or an error.
fn kafka_java_member_killed(strategy: &'static str) {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let mut g = Group::new(kind, strategy);
    for name in ["ours", "java", "confluent"] {
        g.add(name);
        g.stable(&format!("after {name} joined"));
    }
    let before = g.stable("three members");
    assert_balanced(kind, strategy, "three members", &before);
    assert!(g.ours_leads(), "ours: {:?}", g.ours().events());
    let revoked_before = g.revocation_counts();
    let at = g
        .members
        .iter()
        .position(|(n, _)| n == "java")
        .expect("java is in the group");
    let mut java = match g.members.remove(at).1 {
        Member::Peer(p) => p,
        Member::Ours(_) => unreachable!("java is a peer"),
    };
    let killed = Instant::now();
    java.kill();
    let after = g.stable("after java was killed");
    eprintln!(
        "{kind:?} {strategy}: stable {:.1?} after the kill",
        killed.elapsed()
    );
    assert_balanced(kind, strategy, "after java was killed", &after);
    if strategy == "cooperative-sticky" {
        for (name, member) in &g.members {
            let earlier = revoked_before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, c)| *c);
            assert_eq!(
                member.revoked().len(),
                earlier,
                "{kind:?}: {name} lost partitions when java died:\n{}",
                member.log()
            );
            let kept = before
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, o)| o.clone())
                .unwrap_or_default();
            assert!(
                kept.is_subset(&member.owned()),
                "{name} had {kept:?}, now {:?}",
                member.owned()
            );
        }
    }
    g.check_peers_never_shared(&java.events(), "after java was killed");
    assert!(
        g.ours()
            .events()
            .iter()
            .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Error(_))),
        "{:?}",
        g.ours().events()
    );
    for name in ["confluent", "ours"] {
        g.close(name);
    }
    eprintln!(
        "{kind:?} {strategy} java killed: done in {:.1?}",
        started.elapsed()
    );
}

/// Static membership across clients on Kafka 4.x: ours leads, a Java member follows, both static
/// (`group.instance.id`, 20 s sessions), next to a dynamic confluent member. `restart` (ours or
/// java) stops without a LeaveGroup (our close of a static member sends none; the Java process
/// is SIGKILLed) and starts again with the same instance id well within its session. Kafka hands
/// it its previous partitions back without a rebalance: the two others see no event at all, and
/// the group's ownership is the same as before.
fn kafka_static_restart(restart: &str) {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let strategy = "cooperative-sticky";
    let mut g = Group::new(kind, strategy);
    const SESSION_MS: u32 = 20_000;
    let ours_instance = unique_name("static-ours");
    let java_instance = unique_name("static-java");
    let ours_spec = |g: &Group| {
        let mut spec = OurMemberSpec::new(&g.broker.bootstrap(), &g.group, &g.topic, strategy);
        spec.instance_id = Some(ours_instance.clone());
        spec.session_timeout_ms = u64::from(SESSION_MS);
        spec
    };
    let java_spec = |g: &Group| {
        PeerMemberSpec::new(
            PeerClient::Java,
            &g.broker.bootstrap(),
            &g.group,
            &[&g.topic],
            PeerStrategy::CooperativeSticky,
            "java",
        )
        .instance_id(&java_instance)
        .timeouts(SESSION_MS, 500)
    };
    let start_java = |g: &Group| {
        let java = PeerMember::start(java_spec(g));
        java.wait_ready(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("java: {e}"));
        java
    };
    let ours = OurMember::start(ours_spec(&g));
    g.members.push(("ours".into(), Member::Ours(ours)));
    g.stable("ours alone");
    let java = start_java(&g);
    g.members.push(("java".into(), Member::Peer(java)));
    g.stable("after java joined");
    g.add_peer(PeerClient::Confluent, "confluent");
    let before = g.stable("three members");
    assert!(g.ours_leads(), "ours: {:?}", g.ours().events());
    let others_events: Vec<(String, usize)> = g
        .members
        .iter()
        .filter(|(n, _)| n != restart)
        .map(|(n, m)| {
            let count = match m {
                Member::Ours(o) => o.events().len(),
                Member::Peer(p) => p.events().len(),
            };
            (n.clone(), count)
        })
        .collect();

    let at = g
        .members
        .iter()
        .position(|(n, _)| n == restart)
        .expect("member exists");
    let restart_began = Instant::now();
    let fresh = match g.members.remove(at).1 {
        Member::Ours(m) => {
            m.close(); // static: no LeaveGroup
            Member::Ours(OurMember::start(ours_spec(&g)))
        }
        Member::Peer(mut p) => {
            p.kill();
            Member::Peer(start_java(&g))
        }
    };
    g.members.insert(at, (restart.to_string(), fresh));
    let after = g.stable(&format!("after {restart} restarted"));
    eprintln!(
        "{kind:?}: {restart} restarted and stable again in {:.1?}",
        restart_began.elapsed()
    );
    assert!(
        restart_began.elapsed() < Duration::from_millis(u64::from(SESSION_MS)),
        "the restart took longer than the session: the test proves nothing"
    );
    assert_eq!(
        after, before,
        "{kind:?}: ownership changed across the static restart"
    );
    for (name, count) in &others_events {
        let (now, log) = match g.members.iter().find(|(n, _)| n == name) {
            Some((_, Member::Ours(o))) => (o.events().len(), format!("{:?}", o.events())),
            Some((_, Member::Peer(p))) => (p.events().len(), p.event_log()),
            None => unreachable!("{name} is in the group"),
        };
        assert_eq!(
            now, *count,
            "{kind:?}: {name} saw a rebalance when the static {restart} restarted:\n{log}"
        );
    }
    // The static members close first (no LeaveGroup: nothing happens), then the dynamic one.
    // The other order makes confluent's LeaveGroup start a rebalance in which Kafka holds our
    // JoinGroup until the silently closed static Java member's session expires (20 s), and our
    // member's poll is blocked in that JoinGroup the whole time (the group layer's requests are
    // synchronous), so its close waits as long.
    for name in ["ours", "java", "confluent"] {
        let closing = Instant::now();
        g.close(name);
        eprintln!("{kind:?}: {name} closed in {:.1?}", closing.elapsed());
    }
    eprintln!(
        "{kind:?} static {restart} restart: done in {:.1?}",
        started.elapsed()
    );
}

/// Our classic member (cooperative-sticky) joins a group that a Java member on the consumer
/// protocol (KIP-848) created, on Kafka 4.x: Kafka runs such a mixed group with its own
/// assignor and speaks the classic protocol to ours. The two split the partitions 3/3, the Java
/// member gives up only what moved, and when it leaves the group is classic again and ours (now
/// its leader) owns everything; ours never reports a loss or an error.
fn kafka_ours_in_java_consumer_protocol_group() {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let mut g = Group::new(kind, "cooperative-sticky");
    g.add_java_consumer_protocol("java");
    let before = g.stable("java alone");
    let revoked_before = g.revocation_counts();
    g.add_ours("ours");
    let two = g.stable("java and ours");
    assert!(two.iter().all(|(_, o)| o.len() == 3), "{two:?}");
    g.check_only_moved_were_revoked(&before, &revoked_before);
    g.close("java");
    let one = g.stable("ours alone");
    assert_eq!(one[0].1.len(), PARTITIONS as usize, "{one:?}");
    assert!(
        g.ours()
            .events()
            .iter()
            .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Error(_))),
        "{:?}",
        g.ours().events()
    );
    assert!(
        g.ours_leads(),
        "back to classic: ours leads; {:?}",
        g.ours().events()
    );
    g.close("ours");
    eprintln!(
        "{kind:?} ours in a consumer-protocol group: done in {:.1?}",
        started.elapsed()
    );
}

/// A mixed group on Kafka 4.x: our member on the consumer protocol (KIP-848), a Java member on
/// the consumer protocol, and our classic member (cooperative-sticky), which Kafka lets join a
/// consumer-protocol group (it speaks the classic protocol to it and assigns with its own
/// assignor). Every partition is owned exactly once with all three in (2/2/2), again after the
/// Java member leaves, and neither of ours reports a loss or an error.
fn kafka_mixed_consumer_protocol_group() {
    let started = Instant::now();
    let kind = BrokerKind::Kafka;
    let mut g = Group::new(kind, "cooperative-sticky");
    let mut ours = OurMemberSpec::new(&g.broker.bootstrap(), &g.group, &g.topic, g.strategy);
    ours.consumer_protocol = true;
    g.members
        .push(("ours-kip848".into(), Member::Ours(OurMember::start(ours))));
    let alone = g.stable("ours (consumer protocol) alone");
    assert_eq!(alone[0].1.len(), PARTITIONS as usize, "{alone:?}");
    g.add_java_consumer_protocol("java");
    let two = g.stable("ours (consumer) and java (consumer)");
    assert!(two.iter().all(|(_, o)| o.len() == 3), "{two:?}");
    g.add_ours("ours-classic");
    let three = g.stable("ours (consumer), java (consumer), ours (classic)");
    assert!(three.iter().all(|(_, o)| o.len() == 2), "{three:?}");
    g.close("java");
    let after = g.stable("java left");
    assert!(after.iter().all(|(_, o)| o.len() == 3), "{after:?}");
    for (name, member) in &g.members {
        if let Member::Ours(m) = member {
            assert!(
                m.events()
                    .iter()
                    .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Error(_))),
                "{name}: {:?}",
                m.events()
            );
        }
    }
    g.close("ours-classic");
    g.close("ours-kip848");
    eprintln!(
        "{kind:?} mixed consumer-protocol group: done in {:.1?}",
        started.elapsed()
    );
}

/// Two Java members on the consumer protocol (KIP-848, broker-side uniform assignor) on Kafka
/// 4.x: the first owns every partition, the two split them 3/3 without the first losing what it
/// keeps and without a partition owned twice on their merged timeline, and when the first
/// leaves the second owns everything.
fn java_consumer_protocol_group(remote_assignor: Option<&str>) {
    let started = Instant::now();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("interop-kip848");
    broker.create_topic(&topic, PARTITIONS as u32);
    let group = unique_name("interop-kip848-group");
    let spec = |name: &str| {
        PeerMemberSpec::new(
            PeerClient::Java,
            &broker.bootstrap(),
            &group,
            &[&topic],
            PeerStrategy::CooperativeSticky, // not passed: the broker assigns
            name,
        )
        .consumer_protocol(remote_assignor)
    };
    let partitions = one_topic(&topic, PARTITIONS);
    let mut a = PeerMember::start(spec("java-a"));
    a.wait_ready(Duration::from_secs(30)).unwrap();
    let (alone, took) = wait_peers_stable(&partitions, &[&a], &Stability::within(SETTLE))
        .unwrap_or_else(|e| panic!("java-a alone: {e}"));
    eprintln!("consumer protocol: java-a alone stable in {took:.1?}");
    assert_eq!(alone[0].1.len(), PARTITIONS as usize, "{alone:?}");
    let b = PeerMember::start(spec("java-b"));
    b.wait_ready(Duration::from_secs(30)).unwrap();
    let (two, took) = wait_peers_stable(&partitions, &[&a, &b], &Stability::within(SETTLE))
        .unwrap_or_else(|e| panic!("java-a and java-b: {e}"));
    eprintln!("consumer protocol: two members stable in {took:.1?}: {two:?}");
    assert!(two.iter().all(|(_, o)| o.len() == 3), "{two:?}");
    // java-a kept three of its six: only the other three were revoked from it.
    let revoked: BTreeSet<Tp> = a
        .events()
        .iter()
        .filter(|e| e.kind == MemberEventKind::Revoked)
        .flat_map(|e| e.partitions.clone())
        .collect();
    assert!(
        revoked.is_disjoint(&a.owned()),
        "java-a kept partitions that were revoked: {revoked:?}\n{}",
        a.event_log()
    );
    assert!(
        a.events()
            .iter()
            .chain(b.events().iter())
            .all(|e| e.kind != MemberEventKind::Led
                && !(e.kind == MemberEventKind::Error && e.fatal)),
        "no client-side assignor runs on the consumer protocol, and no fatal error\n{}",
        merged_log(&[&a, &b])
    );
    a.close().unwrap();
    let (one, took) = wait_peers_stable(&partitions, &[&b], &Stability::within(SETTLE))
        .unwrap_or_else(|e| panic!("java-b after java-a left: {e}"));
    eprintln!("consumer protocol: java-b alone stable in {took:.1?}");
    assert_eq!(one[0].1.len(), PARTITIONS as usize);
    let mut events = a.events();
    events.extend(b.events());
    check_no_double_ownership(&events).unwrap_or_else(|e| panic!("{e}\n{}", merged_log(&[&a, &b])));
    assert!(
        b.events()
            .iter()
            .all(|e| e.kind != MemberEventKind::Revoked && e.kind != MemberEventKind::Lost),
        "java-b lost partitions when java-a left:\n{}",
        b.event_log()
    );
    drop(a);
    let mut b = b;
    b.close().unwrap();
    eprintln!("consumer protocol: done in {:.1?}", started.elapsed());
}

/// The Java peer's `t` (System.nanoTime) and the Python peers' `t` (time.monotonic) are one
/// clock, CLOCK_MONOTONIC, which the merged-timeline check (`check_no_double_ownership`) needs:
/// members started one after the other report their `ready` in that order, and a clock of
/// another origin (wall time, or nanoTime from an arbitrary origin) would be off by far more
/// than the seconds between them.
fn peers_share_one_clock(kind: BrokerKind) {
    let broker = kind.start();
    let topic = unique_name("interop-clock");
    broker.create_topic(&topic, 1);
    let group = unique_name("interop-clock-group");
    let mut ready = Vec::new();
    let mut members = Vec::new();
    for (client, name) in [
        (PeerClient::Confluent, "confluent"),
        (PeerClient::Java, "java"),
        (PeerClient::KafkaPython, "python"),
    ] {
        let spec = PeerMemberSpec::new(
            client,
            &broker.bootstrap(),
            &group,
            &[&topic],
            PeerStrategy::Range,
            name,
        );
        let member = PeerMember::start(spec);
        member
            .wait_ready(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = member
            .events()
            .iter()
            .find(|e| e.kind == MemberEventKind::Ready)
            .map(|e| e.t)
            .expect("a ready event");
        ready.push((name, t));
        members.push(member);
    }
    assert!(
        ready
            .windows(2)
            .all(|w| w[0].1 < w[1].1 && w[1].1 - w[0].1 < 120.0),
        "ready times out of order or far apart: {ready:?}"
    );
    for mut m in members {
        m.close().unwrap();
    }
}

crate::on_brokers! {
    kafka {
        range_ours_leads => kafka_interop("range", Leader::Ours),
        range_java_leads => kafka_interop("range", Leader::Java),
        range_confluent_leads => kafka_interop("range", Leader::Confluent),
        range_python_leads => kafka_interop("range", Leader::Python),
        roundrobin_ours_leads => kafka_interop("roundrobin", Leader::Ours),
        roundrobin_java_leads => kafka_interop("roundrobin", Leader::Java),
        roundrobin_confluent_leads => kafka_interop("roundrobin", Leader::Confluent),
        roundrobin_python_leads => kafka_interop("roundrobin", Leader::Python),
        cooperative_sticky_ours_leads => kafka_interop("cooperative-sticky", Leader::Ours),
        cooperative_sticky_java_leads => kafka_interop("cooperative-sticky", Leader::Java),
        cooperative_sticky_confluent_leads =>
            kafka_interop("cooperative-sticky", Leader::Confluent),
        java_consumer_protocol_members_split_and_take_over => java_consumer_protocol_group(None),
        java_and_python_peers_share_one_clock => peers_share_one_clock(BrokerKind::Kafka),
        range_mixed_subscriptions_ours_leads => kafka_mixed_subscriptions("range", Leader::Ours),
        roundrobin_mixed_subscriptions_ours_leads =>
            kafka_mixed_subscriptions("roundrobin", Leader::Ours),
        cooperative_sticky_mixed_subscriptions_ours_leads =>
            kafka_mixed_subscriptions("cooperative-sticky", Leader::Ours),
        cooperative_sticky_mixed_subscriptions_java_leads =>
            kafka_mixed_subscriptions("cooperative-sticky", Leader::Java),
        range_java_member_killed => kafka_java_member_killed("range"),
        cooperative_sticky_java_member_killed => kafka_java_member_killed("cooperative-sticky"),
        static_java_follower_restart_is_no_rebalance => kafka_static_restart("java"),
        static_ours_leader_restart_is_no_rebalance => kafka_static_restart("ours"),
        classic_ours_joins_a_java_consumer_protocol_group =>
            kafka_ours_in_java_consumer_protocol_group(),
        mixed_group_ours_and_java_on_the_consumer_protocol_with_a_classic_member =>
            kafka_mixed_consumer_protocol_group(),
    }

    mock {
        range_ours_leads => eager_interop(BrokerKind::Mock, "range", true),
        range_peer_leads => eager_interop(BrokerKind::Mock, "range", false),
        roundrobin_ours_leads => eager_interop(BrokerKind::Mock, "roundrobin", true),
        roundrobin_peer_leads => eager_interop(BrokerKind::Mock, "roundrobin", false),
        cooperative_sticky_ours_leads => cooperative_interop(BrokerKind::Mock, true),
        cooperative_sticky_peer_leads => cooperative_interop(BrokerKind::Mock, false),
    }

    tansu {
        range_ours_leads => eager_interop(BrokerKind::Tansu, "range", true),
        range_peer_leads => eager_interop(BrokerKind::Tansu, "range", false),
        roundrobin_ours_leads => eager_interop(BrokerKind::Tansu, "roundrobin", true),
        roundrobin_peer_leads => eager_interop(BrokerKind::Tansu, "roundrobin", false),
        cooperative_sticky_ours_leads => cooperative_interop(BrokerKind::Tansu, true),
        cooperative_sticky_peer_leads => cooperative_interop(BrokerKind::Tansu, false),
    }
}

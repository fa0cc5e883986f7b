//! Partition assignors, run by whichever member the broker elects group leader.
//!
//! In the classic protocol the broker does not assign partitions: it picks one member as leader,
//! hands it every member's subscription, and relays the leader's answer. So when our member leads,
//! our assignor decides for Java, librdkafka and kafka-python members too, and it must give what
//! theirs would: a group whose members disagree about the rules converges on nothing. The three
//! assignors here reproduce the documented results of Java's `RangeAssignor`,
//! `RoundRobinAssignor` and `CooperativeStickyAssignor` for the same input, and are deterministic
//! (no hash-map iteration order leaks into a result).
//!
//! Member order, as in Java: members with a `group.instance.id` (static members) first, ordered by
//! instance id, then the others ordered by member id (Java's `MemberInfo` ordering, used by range
//! and roundrobin). Static members sort by their instance id so that a restarted static member,
//! which gets a new member id, keeps its place and so its partitions. Ordering compares UTF-8
//! bytes; Java compares UTF-16 units, which differs only for characters outside the Basic
//! Multilingual Plane, which member ids (client id + UUID) never contain.
//!
//! Files: this one holds the assignors, the strategy list's rules and the leader's job;
//! `join.rs` the JoinGroup protocol list a member offers.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::subscription::{
    assignment_version, encode_assignment, Assignment, DecodedSubscription, EncodeError,
    Subscription, NO_GENERATION,
};
use crate::TopicPartition;

mod join;

pub use join::JoinProtocolError;
pub(crate) use join::{protocols_for, select_protocol, JoinProtocol, JoinProtocols};

/// A group member id, as the broker issued it.
pub(crate) type MemberId = String;

/// How a rebalance hands partitions over. It decides what the consumer must revoke and when, so
/// every assignor declares it, and a group's members must agree on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RebalanceProtocol {
    /// Every member revokes everything before rejoining; the new assignment is then applied whole.
    /// Simple and safe, but the whole group stops during every rebalance.
    Eager,
    /// KIP-429: members keep their partitions through the rebalance and revoke only those that
    /// move; a moved partition reaches its new owner in a follow-up rebalance, after the old owner
    /// revoked it. Nothing stops that does not have to.
    Cooperative,
}

/// One member's entry in the JoinGroup response the leader receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemberSubscription {
    /// The member id the broker assigned.
    pub member_id: MemberId,
    /// The member's `group.instance.id` (static membership), which orders it before dynamic members.
    pub group_instance_id: Option<String>,
    /// The consumer-protocol version the member wrote; the leader answers in a version every
    /// member can read (see [`assignment_version`]).
    pub version: i16,
    /// What the member subscribed to and owns.
    pub subscription: Subscription,
}

impl MemberSubscription {
    /// Builds an entry from a JoinGroup member and its decoded metadata.
    pub(crate) fn new(
        member_id: impl Into<MemberId>,
        group_instance_id: Option<String>,
        decoded: DecodedSubscription,
    ) -> Self {
        Self {
            member_id: member_id.into(),
            group_instance_id,
            version: decoded.version,
            subscription: decoded.subscription,
        }
    }

    /// The generation in which the member's owned partitions were assigned: the v2+ field, or for
    /// Java members that write v1 (2.4 to 3.3) the 4-byte generation their cooperative-sticky
    /// assignor puts in the user data; [`NO_GENERATION`] when unknown.
    pub(crate) fn owned_generation(&self) -> i32 {
        let sub = &self.subscription;
        if sub.generation_id >= 0 {
            return sub.generation_id;
        }
        if self.version < 2 {
            if let Ok(raw) = <[u8; 4]>::try_from(&sub.user_data[..]) {
                return i32::from_be_bytes(raw);
            }
        }
        NO_GENERATION
    }

    /// Java's `MemberInfo` order: static members first by instance id, then dynamic by member id.
    fn java_order_key(&self) -> (bool, Option<&str>, &str) {
        (
            self.group_instance_id.is_none(),
            self.group_instance_id.as_deref(),
            &self.member_id,
        )
    }
}

/// Why an assignment could not be computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssignError {
    /// Two entries carry the same member id; the result map could not tell them apart.
    DuplicateMember(MemberId),
    /// Metadata reported a negative partition count, which no valid Metadata response produces.
    InvalidPartitionCount {
        /// The topic.
        topic: String,
        /// The count reported.
        count: i32,
    },
    /// A cooperative assignment hands a member a partition that another member still claims, which
    /// would let two members own it at once. Our assignors never do this; the check guards the
    /// protocol's one safety rule (Java's `validateCooperativeAssignment` makes the same check).
    CooperativeViolation(Vec<TopicPartition>),
}

impl fmt::Display for AssignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssignError::DuplicateMember(id) => {
                write!(f, "member id {id:?} appears twice in the group")
            }
            AssignError::InvalidPartitionCount { topic, count } => {
                write!(f, "topic {topic:?} has an invalid partition count {count}")
            }
            AssignError::CooperativeViolation(parts) => {
                write!(
                    f,
                    "cooperative assignment gives away partitions still owned by another member:"
                )?;
                for p in parts {
                    write!(f, " {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl Error for AssignError {}

/// A partition assignment strategy, under the name the group agrees on in JoinGroup.
pub(crate) trait Assignor: fmt::Debug + Send + Sync {
    /// The protocol name sent in JoinGroup; members agree on a strategy by this name, so it must be
    /// exactly Java's and librdkafka's.
    fn name(&self) -> &'static str;
    /// How partitions are handed over when this assignor is in use.
    fn protocol(&self) -> RebalanceProtocol;
    /// Computes each member's partitions. Every member appears in the result, possibly with no
    /// partitions; each list is sorted. Topics absent from `partitions_per_topic` or with zero
    /// partitions are skipped (no metadata yet), as Java does.
    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions_per_topic: &BTreeMap<String, i32>,
    ) -> Result<BTreeMap<MemberId, Vec<TopicPartition>>, AssignError>;
}

/// Java's and librdkafka's name for the range assignor.
pub(crate) const RANGE: &str = "range";
/// Java's and librdkafka's name for the round-robin assignor.
pub(crate) const ROUNDROBIN: &str = "roundrobin";
/// Java's and librdkafka's name for the cooperative sticky assignor.
pub(crate) const COOPERATIVE_STICKY: &str = "cooperative-sticky";

/// Per topic, splits the partitions into contiguous ranges over the members subscribed to it, in
/// member order; the first `partitions % members` members get one extra. Co-partitioned topics
/// land together (partition 0 of every topic on the same member), which joins across topics need.
/// Java's rack-aware variant (KIP-881) applies only when members and partitions carry racks; this
/// is the plain algorithm, which is what Java runs without racks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RangeAssignor;

/// Lays all partitions of all subscribed topics out sorted by topic then partition and deals them
/// round-robin over the members in member order, skipping a member not subscribed to the
/// partition's topic (it loses its turn). Spreads partitions more evenly than range when topics
/// have few partitions each.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RoundRobinAssignor;

/// Sticky and cooperative (KIP-429). Keeps every partition with its current owner when that owner
/// may keep it, balances so that member counts differ by at most one (with equal subscriptions),
/// and gives unowned partitions to the least-loaded members. Then the cooperative rule: a partition
/// that would move from a member still claiming it is left out of this round entirely; its owner
/// revokes it, rejoins, and the follow-up rebalance hands it to the new owner. So no partition is
/// ever owned by two members at once.
///
/// A claim is kept when the partition exists, the member is still subscribed to its topic, and no
/// other member claims the partition in a newer generation or in the same one (two claims of one
/// generation are both discarded: neither can be trusted). A claim of an older generation is not
/// discarded for its age alone: a member that missed a rebalance's SyncGroup rejoins claiming what
/// it still owns, at the generation it last synced (librdkafka) or joined (Java and ours), and
/// nobody was given those partitions meanwhile; discarding the claims would revoke them, and the
/// follow-up round could hand them straight back. Java's assignor has resolved claims this way
/// since 3.6 (KAFKA-14639), and librdkafka's does too.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CooperativeStickyAssignor;

static RANGE_ASSIGNOR: RangeAssignor = RangeAssignor;
static ROUNDROBIN_ASSIGNOR: RoundRobinAssignor = RoundRobinAssignor;
static COOPERATIVE_STICKY_ASSIGNOR: CooperativeStickyAssignor = CooperativeStickyAssignor;

/// Looks an assignor up by its protocol name, for the leader to run the one the coordinator chose.
/// Exact: the coordinator echoes one of the names we sent ([`Strategy::name`]), so this is the
/// inverse of that name, not a second configuration parser (that is [`Strategy::from_name`]).
pub(crate) fn assignor_for(name: &str) -> Option<&'static dyn Assignor> {
    Strategy::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .map(Strategy::assignor)
}

/// A partition assignor as `partition.assignment.strategy` names it: the one place assignor names
/// are parsed, and the typed value the consumer's configuration and the group's settings carry.
///
/// Why a closed enum and not free text: a member must know before it joins whether its assignors
/// are eager or cooperative (that decides whether it revokes everything at the start of each
/// rebalance), and an enum makes an unknown assignor a configuration error instead of a JoinGroup
/// failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Java's `RangeAssignor` (eager): per topic, contiguous ranges of partitions per member, so
    /// co-partitioned topics land together.
    Range,
    /// Java's `RoundRobinAssignor` (eager): partitions of all topics dealt out in turn.
    RoundRobin,
    /// Java's `CooperativeStickyAssignor` (KIP-429): partitions stay with their owner, and only
    /// those that move are revoked.
    CooperativeSticky,
}

impl Strategy {
    /// Every strategy, in the order error messages list them.
    pub const ALL: [Strategy; 3] = [
        Strategy::Range,
        Strategy::RoundRobin,
        Strategy::CooperativeSticky,
    ];

    /// The assignor that runs this strategy when we lead the group.
    pub(crate) fn assignor(self) -> &'static dyn Assignor {
        match self {
            Strategy::Range => &RANGE_ASSIGNOR,
            Strategy::RoundRobin => &ROUNDROBIN_ASSIGNOR,
            Strategy::CooperativeSticky => &COOPERATIVE_STICKY_ASSIGNOR,
        }
    }

    /// The protocol name sent in JoinGroup (also librdkafka's configuration name); the broker
    /// matches members on it byte for byte.
    pub fn name(self) -> &'static str {
        self.assignor().name()
    }

    /// Eager or cooperative: how a rebalance hands partitions over under this strategy.
    pub fn protocol(self) -> RebalanceProtocol {
        self.assignor().protocol()
    }

    /// Java's class name for the assignor, as a Java consumer's configuration writes it.
    pub fn java_class(self) -> &'static str {
        match self {
            Strategy::Range => "org.apache.kafka.clients.consumer.RangeAssignor",
            Strategy::RoundRobin => "org.apache.kafka.clients.consumer.RoundRobinAssignor",
            Strategy::CooperativeSticky => {
                "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
            }
        }
    }

    /// Parses one `partition.assignment.strategy` entry: the protocol name (`range`,
    /// `roundrobin`, `cooperative-sticky`, as librdkafka writes them) or Java's class name, so a
    /// configuration copied from either client works. Surrounding whitespace is ignored.
    ///
    /// Case rule: ASCII case is ignored, for protocol names and class names alike. Java (class
    /// names) and librdkafka (protocol names) compare exactly; ignoring case accepts everything
    /// they accept, matches how every other named value in this crate's configuration is read
    /// (`group.protocol`, `auto.offset.reset`, `isolation.level`), and cannot make two members
    /// disagree, because what goes on the wire is always [`name`](Self::name), never the text
    /// as written.
    pub fn from_name(entry: &str) -> Option<Strategy> {
        let entry = entry.trim();
        Strategy::ALL.into_iter().find(|s| {
            s.name().eq_ignore_ascii_case(entry) || s.java_class().eq_ignore_ascii_case(entry)
        })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a list of strategies cannot be used. The one check of the list rules, made by
/// `check_strategies` for the consumer's configuration and for `select_protocol` alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StrategyError {
    /// The list names no assignor: the broker would refuse a JoinGroup with no protocols.
    Empty,
    /// A strategy is listed twice.
    Duplicate(Strategy),
    /// Eager and cooperative assignors are mixed. Refused, as librdkafka does: the consumer must
    /// know before joining whether to revoke everything, and a mixed list leaves that to the
    /// broker's choice.
    Mixed {
        /// An eager strategy in the list.
        eager: Strategy,
        /// A cooperative strategy in the list.
        cooperative: Strategy,
    },
}

impl fmt::Display for StrategyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrategyError::Empty => {
                f.write_str("names no assignor (allowed: ")?;
                for (i, s) in Strategy::ALL.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{s}")?;
                }
                f.write_str(")")
            }
            StrategyError::Duplicate(strategy) => write!(f, "lists `{strategy}` twice"),
            StrategyError::Mixed { eager, cooperative } => write!(
                f,
                "mixes eager `{eager}` and cooperative `{cooperative}`; the consumer must know \
                 before joining whether a rebalance revokes every partition (eager) or only \
                 those that move (cooperative), so list assignors of one kind only"
            ),
        }
    }
}

impl Error for StrategyError {}

/// Checks a strategy list (in preference order) against the rules every member's list must
/// follow: not empty, no strategy twice, all eager or all cooperative. Returns the rebalance
/// protocol the list implies.
pub(crate) fn check_strategies(
    strategies: &[Strategy],
) -> Result<RebalanceProtocol, StrategyError> {
    let first = *strategies.first().ok_or(StrategyError::Empty)?;
    for (i, s) in strategies.iter().enumerate() {
        if strategies[..i].contains(s) {
            return Err(StrategyError::Duplicate(*s));
        }
    }
    let protocol = first.protocol();
    if let Some(&other) = strategies.iter().find(|s| s.protocol() != protocol) {
        let (eager, cooperative) = match protocol {
            RebalanceProtocol::Eager => (first, other),
            RebalanceProtocol::Cooperative => (other, first),
        };
        return Err(StrategyError::Mixed { eager, cooperative });
    }
    Ok(protocol)
}

impl Assignor for RangeAssignor {
    fn name(&self) -> &'static str {
        RANGE
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions_per_topic: &BTreeMap<String, i32>,
    ) -> Result<BTreeMap<MemberId, Vec<TopicPartition>>, AssignError> {
        validate(members, partitions_per_topic)?;
        let mut result = empty_result(members);
        for (topic, mut subscribers) in subscribers_by_topic(members) {
            let Some(count) = partition_count(partitions_per_topic, topic) else {
                continue;
            };
            subscribers.sort_by(|a, b| a.java_order_key().cmp(&b.java_order_key()));
            let topic: Arc<str> = Arc::from(topic);
            let n = subscribers.len() as i64;
            let per_member = i64::from(count) / n;
            let with_extra = i64::from(count) % n;
            for (i, member) in (0i64..).zip(subscribers) {
                let start = per_member * i + i.min(with_extra);
                let len = per_member + i64::from(i < with_extra);
                let parts = result.entry(member.member_id.clone()).or_default();
                // start + len <= count, which fits in i32.
                parts.extend((start..start + len).map(|p| TopicPartition {
                    topic: topic.clone(),
                    partition: p as i32,
                }));
            }
        }
        Ok(result)
    }
}

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        ROUNDROBIN
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions_per_topic: &BTreeMap<String, i32>,
    ) -> Result<BTreeMap<MemberId, Vec<TopicPartition>>, AssignError> {
        validate(members, partitions_per_topic)?;
        let mut result = empty_result(members);
        let mut ordered: Vec<&MemberSubscription> = members.iter().collect();
        ordered.sort_by(|a, b| a.java_order_key().cmp(&b.java_order_key()));
        let subscribed: Vec<BTreeSet<&str>> = ordered.iter().map(|m| topic_set(m)).collect();
        let by_topic = subscribers_by_topic(members);
        let mut turn = 0usize;
        for topic in by_topic.keys() {
            let Some(count) = partition_count(partitions_per_topic, topic) else {
                continue;
            };
            let shared: Arc<str> = Arc::from(*topic);
            for partition in 0..count {
                // Someone subscribes to `topic` (it came from the subscriptions), so this ends
                // within one lap.
                while !subscribed[turn % ordered.len()].contains(topic) {
                    turn += 1;
                }
                let member = ordered[turn % ordered.len()];
                turn += 1;
                if let Some(parts) = result.get_mut(&member.member_id) {
                    parts.push(TopicPartition {
                        topic: shared.clone(),
                        partition,
                    });
                }
            }
        }
        Ok(result)
    }
}

impl Assignor for CooperativeStickyAssignor {
    fn name(&self) -> &'static str {
        COOPERATIVE_STICKY
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions_per_topic: &BTreeMap<String, i32>,
    ) -> Result<BTreeMap<MemberId, Vec<TopicPartition>>, AssignError> {
        let sticky = sticky_assign(members, partitions_per_topic)?;
        Ok(withhold_claimed_elsewhere(members, sticky))
    }
}

/// Checks that `assignment` obeys the cooperative rule: no member is handed a partition that
/// another member still lists as owned. Returns the offending partitions, sorted.
pub(crate) fn cooperative_violations(
    members: &[MemberSubscription],
    assignment: &BTreeMap<MemberId, Vec<TopicPartition>>,
) -> Vec<TopicPartition> {
    let claims = claimants(members);
    let mut bad: BTreeSet<TopicPartition> = BTreeSet::new();
    for (member, parts) in assignment {
        for p in parts {
            // Claimed by someone, and not by the member it is given to.
            if claims
                .get(p)
                .is_some_and(|owners| !owners.contains(&member.as_str()))
            {
                bad.insert(p.clone());
            }
        }
    }
    bad.into_iter().collect()
}

/// The leader's whole job after JoinGroup, minus the I/O: runs `assignor` and encodes each
/// member's assignment in a version every member can read. For a cooperative assignor it also
/// refuses an assignment that would give away a partition its owner still claims.
pub(crate) fn assign_and_encode(
    assignor: &dyn Assignor,
    members: &[MemberSubscription],
    partitions_per_topic: &BTreeMap<String, i32>,
) -> Result<BTreeMap<MemberId, Bytes>, LeaderError> {
    log_input(assignor, members, partitions_per_topic);
    let assignment = assignor
        .assign(members, partitions_per_topic)
        .map_err(LeaderError::Assign)?;
    if log::log_enabled!(log::Level::Debug) {
        for (member, parts) in &assignment {
            log::debug!("{}: assigns {member} [{}]", assignor.name(), join(parts));
        }
    }
    if assignor.protocol() == RebalanceProtocol::Cooperative {
        let bad = cooperative_violations(members, &assignment);
        if !bad.is_empty() {
            return Err(LeaderError::Assign(AssignError::CooperativeViolation(bad)));
        }
    }
    let version = assignment_version(members.iter().map(|m| m.version));
    let mut out = BTreeMap::new();
    for (member, partitions) in assignment {
        let bytes = encode_assignment(
            &Assignment {
                partitions,
                user_data: Bytes::new(),
            },
            version,
        )
        .map_err(LeaderError::Encode)?;
        out.insert(member, bytes);
    }
    Ok(out)
}

/// Logs (debug) what the leader's assignor is given: each member's claims with their generation
/// decide what a sticky assignor keeps, so a surprising assignment is explained by this input.
fn log_input(
    assignor: &dyn Assignor,
    members: &[MemberSubscription],
    partitions_per_topic: &BTreeMap<String, i32>,
) {
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    log::debug!(
        "{}: assigning {partitions_per_topic:?} over {} members",
        assignor.name(),
        members.len()
    );
    for m in members {
        log::debug!(
            "{}: member {} v{} generation {} owns [{}] topics {:?}",
            assignor.name(),
            m.member_id,
            m.version,
            m.owned_generation(),
            join(&m.subscription.owned_partitions),
            m.subscription.topics
        );
    }
}

/// `t-0 t-1 ...`, for logs.
fn join(parts: &[TopicPartition]) -> String {
    parts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why the leader could not produce the SyncGroup assignments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderError {
    /// The assignor failed.
    Assign(AssignError),
    /// An assignment could not be encoded.
    Encode(EncodeError),
}

impl fmt::Display for LeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The wrapped error is the source, not repeated here.
            LeaderError::Assign(_) => write!(f, "assignment failed"),
            LeaderError::Encode(_) => write!(f, "assignment encoding failed"),
        }
    }
}

impl Error for LeaderError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            LeaderError::Assign(e) => Some(e),
            LeaderError::Encode(e) => Some(e),
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Shared helpers

fn validate(
    members: &[MemberSubscription],
    partitions_per_topic: &BTreeMap<String, i32>,
) -> Result<(), AssignError> {
    let mut seen = BTreeSet::new();
    for m in members {
        if !seen.insert(m.member_id.as_str()) {
            return Err(AssignError::DuplicateMember(m.member_id.clone()));
        }
    }
    if let Some((topic, &count)) = partitions_per_topic.iter().find(|(_, &c)| c < 0) {
        return Err(AssignError::InvalidPartitionCount {
            topic: topic.clone(),
            count,
        });
    }
    Ok(())
}

fn empty_result(members: &[MemberSubscription]) -> BTreeMap<MemberId, Vec<TopicPartition>> {
    members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect()
}

fn topic_set(member: &MemberSubscription) -> BTreeSet<&str> {
    member
        .subscription
        .topics
        .iter()
        .map(String::as_str)
        .collect()
}

/// Topic -> the members subscribed to it (each once), topics sorted.
fn subscribers_by_topic(
    members: &[MemberSubscription],
) -> BTreeMap<&str, Vec<&MemberSubscription>> {
    let mut by_topic: BTreeMap<&str, Vec<&MemberSubscription>> = BTreeMap::new();
    for m in members {
        for topic in topic_set(m) {
            by_topic.entry(topic).or_default().push(m);
        }
    }
    by_topic
}

/// The topic's partition count when it can be assigned: known and positive.
fn partition_count(partitions_per_topic: &BTreeMap<String, i32>, topic: &str) -> Option<i32> {
    match partitions_per_topic.get(topic) {
        Some(&n) if n > 0 => Some(n),
        _ => {
            log::debug!("assignor: skipping topic {topic:?}: no partition metadata");
            None
        }
    }
}

/// Partition -> every member listing it as owned, whatever its generation.
fn claimants(members: &[MemberSubscription]) -> BTreeMap<&TopicPartition, Vec<&str>> {
    let mut claims: BTreeMap<&TopicPartition, Vec<&str>> = BTreeMap::new();
    for m in members {
        for p in &m.subscription.owned_partitions {
            let owners = claims.entry(p).or_default();
            if !owners.contains(&m.member_id.as_str()) {
                owners.push(&m.member_id);
            }
        }
    }
    claims
}

// ----------------------------------------------------------------------------------------------
// Sticky assignment

/// The sticky assignment before the cooperative adjustment: every assignable partition goes to
/// exactly one subscribed member. Members are indexed in member-id order.
pub(crate) fn sticky_assign(
    members: &[MemberSubscription],
    partitions_per_topic: &BTreeMap<String, i32>,
) -> Result<BTreeMap<MemberId, Vec<TopicPartition>>, AssignError> {
    validate(members, partitions_per_topic)?;
    let mut ordered: Vec<&MemberSubscription> = members.iter().collect();
    ordered.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let n = ordered.len();

    // Assignable topics (known, with partitions) and who subscribes to each.
    let mut subscribers: BTreeMap<Arc<str>, (i32, Vec<usize>)> = BTreeMap::new();
    for (i, m) in ordered.iter().enumerate() {
        for topic in topic_set(m) {
            if let Some(count) = partition_count(partitions_per_topic, topic) {
                subscribers
                    .entry(Arc::from(topic))
                    .or_insert_with(|| (count, Vec::new()))
                    .1
                    .push(i);
            }
        }
    }
    let subscribed =
        |i: usize, topic: &str| subscribers.get(topic).is_some_and(|(_, s)| s.contains(&i));
    let exists = |p: &TopicPartition| {
        subscribers
            .get(&p.topic)
            .is_some_and(|(count, _)| (0..*count).contains(&p.partition))
    };

    // Which claims may be kept: per partition, the claim of the highest generation among its
    // valid claims (the partition exists, the claimant still subscribes to its topic), when
    // exactly one member makes it. A claim of an older generation counts like any other until a
    // newer one disputes it: a member that missed a generation's SyncGroup still owns what it
    // claims (it never saw an assignment without it), and nobody was given those partitions
    // meanwhile, since an assignment never hands out what a member still claims. Dropping every
    // claim of an older generation instead revokes partitions from such a member and can hand
    // them back to it in the follow-up round (KAFKA-14639, which changed Java's assignor to
    // this rule in 3.6; librdkafka's sticky assignor resolves claims the same way).
    let generations: Vec<i32> = ordered.iter().map(|m| m.owned_generation()).collect();
    let mut claims: BTreeMap<TopicPartition, Vec<usize>> = BTreeMap::new();
    for (i, m) in ordered.iter().enumerate() {
        let owned: BTreeSet<&TopicPartition> = m.subscription.owned_partitions.iter().collect();
        for p in owned {
            if exists(p) && subscribed(i, &p.topic) {
                claims.entry(p.clone()).or_default().push(i);
            }
        }
    }
    let mut assigned: Vec<BTreeSet<TopicPartition>> = vec![BTreeSet::new(); n];
    let mut kept: Vec<BTreeSet<TopicPartition>> = vec![BTreeSet::new(); n];
    for (p, owners) in claims {
        let newest = owners
            .iter()
            .map(|&i| generations[i])
            .max()
            .unwrap_or(NO_GENERATION);
        let winners: Vec<usize> = owners
            .iter()
            .copied()
            .filter(|&i| generations[i] == newest)
            .collect();
        if let [owner] = winners[..] {
            if owners.len() > 1 {
                log::info!(
                    "cooperative-sticky: {p} is claimed by {} members; {} keeps it (generation {newest}, the newest claim)",
                    owners.len(),
                    ordered[owner].member_id
                );
            }
            assigned[owner].insert(p.clone());
            kept[owner].insert(p);
        } else {
            log::warn!(
                "cooperative-sticky: {p} is claimed by {} members in generation {newest}; none keeps it",
                winners.len()
            );
        }
    }

    // Unowned partitions go to the least-loaded subscriber; the most constrained partitions
    // (fewest subscribers) first, so they do not end up where only they could go.
    let mut unowned: Vec<(usize, TopicPartition)> = Vec::new();
    for (topic, (count, subs)) in &subscribers {
        for partition in 0..*count {
            let p = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            if !assigned.iter().any(|a| a.contains(&p)) {
                unowned.push((subs.len(), p));
            }
        }
    }
    unowned.sort();
    for (_, p) in unowned {
        let subs = &subscribers[&p.topic].1;
        if let Some(&to) = subs.iter().min_by_key(|&&i| (assigned[i].len(), i)) {
            assigned[to].insert(p);
        }
    }

    balance(&mut assigned, &kept, &subscribers);

    Ok(ordered
        .iter()
        .zip(assigned)
        .map(|(m, parts)| (m.member_id.clone(), parts.into_iter().collect()))
        .collect())
}

/// Moves partitions from the most loaded members to less loaded subscribers until no member has
/// two or more partitions more than a member that could take one of them. Each move lowers the sum
/// of squared counts, so this ends. A member gives up first what it did not already own, and only
/// one partition per move, so owned partitions move as little as balance requires.
fn balance(
    assigned: &mut [BTreeSet<TopicPartition>],
    kept: &[BTreeSet<TopicPartition>],
    subscribers: &BTreeMap<Arc<str>, (i32, Vec<usize>)>,
) {
    loop {
        let mut by_load: Vec<usize> = (0..assigned.len()).collect();
        by_load.sort_by_key(|&i| (std::cmp::Reverse(assigned[i].len()), i));
        let mut moved = false;
        for &from in &by_load {
            let load = assigned[from].len();
            // The topic of `from` whose least-loaded other subscriber is lightest.
            let mut best: Option<(usize, usize, Arc<str>)> = None;
            let topics: BTreeSet<&Arc<str>> = assigned[from].iter().map(|p| &p.topic).collect();
            for topic in topics {
                let Some((_, subs)) = subscribers.get(topic) else {
                    continue;
                };
                if let Some(&to) = subs
                    .iter()
                    .filter(|&&i| i != from)
                    .min_by_key(|&&i| (assigned[i].len(), i))
                {
                    let to_load = assigned[to].len();
                    if to_load + 1 < load && best.as_ref().is_none_or(|(l, _, _)| to_load < *l) {
                        best = Some((to_load, to, topic.clone()));
                    }
                }
            }
            if let Some((_, to, topic)) = best {
                let candidates = || assigned[from].iter().filter(|p| p.topic == topic);
                let pick = candidates()
                    .rfind(|p| !kept[from].contains(*p))
                    .or_else(|| candidates().next_back())
                    .cloned();
                if let Some(p) = pick {
                    assigned[from].remove(&p);
                    assigned[to].insert(p);
                    moved = true;
                    break;
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// The cooperative adjustment (KIP-429): drops from each member every partition it does not own
/// yet that another member still claims. That owner revokes it on seeing its new assignment and
/// rejoins; the follow-up rebalance then finds it unowned and hands it over.
fn withhold_claimed_elsewhere(
    members: &[MemberSubscription],
    mut sticky: BTreeMap<MemberId, Vec<TopicPartition>>,
) -> BTreeMap<MemberId, Vec<TopicPartition>> {
    let claims = claimants(members);
    for (member, parts) in sticky.iter_mut() {
        parts.retain(|p| match claims.get(p) {
            None => true,
            Some(owners) if owners.contains(&member.as_str()) => true,
            Some(owners) => {
                log::debug!(
                    "cooperative-sticky: {p} moves from {owners:?} to {member}; withheld until revoked"
                );
                false
            }
        });
    }
    sticky
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::subscription::SUBSCRIPTION_VERSION;
    use crate::group::subscription::{decode_assignment, decode_subscription};
    use proptest::prelude::*;
    // The prelude's `Strategy` is proptest's trait: keep its methods, but the name is ours.
    use super::Strategy;
    use proptest::strategy::Strategy as _;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_string(),
            group_instance_id: None,
            version: SUBSCRIPTION_VERSION,
            subscription: Subscription::new(topics.iter().copied()),
        }
    }

    fn owning(
        mut m: MemberSubscription,
        generation: i32,
        owned: &[TopicPartition],
    ) -> MemberSubscription {
        m.subscription.owned_partitions = owned.to_vec();
        m.subscription.generation_id = generation;
        m
    }

    fn topics(spec: &[(&str, i32)]) -> BTreeMap<String, i32> {
        spec.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn parts(spec: &[(&str, i32)]) -> Vec<TopicPartition> {
        spec.iter().map(|(t, p)| tp(t, *p)).collect()
    }

    // --- range -------------------------------------------------------------------------------

    #[test]
    fn range_three_members_two_topics_three_partitions() {
        let members = [
            member("c0", &["t0", "t1"]),
            member("c1", &["t0", "t1"]),
            member("c2", &["t0", "t1"]),
        ];
        let got = RangeAssignor
            .assign(&members, &topics(&[("t0", 3), ("t1", 3)]))
            .unwrap();
        assert_eq!(got["c0"], parts(&[("t0", 0), ("t1", 0)]));
        assert_eq!(got["c1"], parts(&[("t0", 1), ("t1", 1)]));
        assert_eq!(got["c2"], parts(&[("t0", 2), ("t1", 2)]));
    }

    /// The example in Java's `RangeAssignor` documentation.
    #[test]
    fn range_java_documented_example() {
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let got = RangeAssignor
            .assign(&members, &topics(&[("t0", 3), ("t1", 3)]))
            .unwrap();
        assert_eq!(
            got["C0"],
            parts(&[("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)])
        );
        assert_eq!(got["C1"], parts(&[("t0", 2), ("t1", 2)]));
    }

    #[test]
    fn range_orders_members_by_id_not_by_input_order() {
        let members = [member("b", &["t"]), member("a", &["t"])];
        let got = RangeAssignor
            .assign(&members, &topics(&[("t", 3)]))
            .unwrap();
        assert_eq!(got["a"], parts(&[("t", 0), ("t", 1)]));
        assert_eq!(got["b"], parts(&[("t", 2)]));
    }

    #[test]
    fn range_puts_static_members_first_by_instance_id() {
        let mut z = member("a-dynamic", &["t"]);
        z.group_instance_id = None;
        let mut s1 = member("zz", &["t"]);
        s1.group_instance_id = Some("instance-2".into());
        let mut s2 = member("yy", &["t"]);
        s2.group_instance_id = Some("instance-1".into());
        let got = RangeAssignor
            .assign(&[z, s1, s2], &topics(&[("t", 3)]))
            .unwrap();
        assert_eq!(got["yy"], parts(&[("t", 0)]));
        assert_eq!(got["zz"], parts(&[("t", 1)]));
        assert_eq!(got["a-dynamic"], parts(&[("t", 2)]));
    }

    #[test]
    fn range_with_more_members_than_partitions_leaves_the_last_empty() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let got = RangeAssignor
            .assign(&members, &topics(&[("t", 2)]))
            .unwrap();
        assert_eq!(got["a"], parts(&[("t", 0)]));
        assert_eq!(got["b"], parts(&[("t", 1)]));
        assert_eq!(got["c"], vec![]);
    }

    #[test]
    fn topics_without_metadata_are_skipped_and_every_member_is_listed() {
        let members = [member("a", &["known", "unknown"]), member("b", &["empty"])];
        for assignor in [
            &RANGE_ASSIGNOR as &dyn Assignor,
            &ROUNDROBIN_ASSIGNOR,
            &COOPERATIVE_STICKY_ASSIGNOR,
        ] {
            let got = assignor
                .assign(&members, &topics(&[("known", 1), ("empty", 0)]))
                .unwrap();
            assert_eq!(got["a"], parts(&[("known", 0)]), "{}", assignor.name());
            assert_eq!(got["b"], vec![], "{}", assignor.name());
        }
    }

    #[test]
    fn invalid_input_is_an_error() {
        let members = [member("a", &["t"]), member("a", &["t"])];
        for assignor in [
            &RANGE_ASSIGNOR as &dyn Assignor,
            &ROUNDROBIN_ASSIGNOR,
            &COOPERATIVE_STICKY_ASSIGNOR,
        ] {
            assert_eq!(
                assignor.assign(&members, &topics(&[("t", 1)])),
                Err(AssignError::DuplicateMember("a".into()))
            );
            assert_eq!(
                assignor.assign(&members[..1], &topics(&[("t", -1)])),
                Err(AssignError::InvalidPartitionCount {
                    topic: "t".into(),
                    count: -1
                })
            );
        }
    }

    // --- roundrobin ----------------------------------------------------------------------------

    #[test]
    fn roundrobin_three_members_two_topics_three_partitions() {
        let members = [
            member("c0", &["t0", "t1"]),
            member("c1", &["t0", "t1"]),
            member("c2", &["t0", "t1"]),
        ];
        let got = RoundRobinAssignor
            .assign(&members, &topics(&[("t0", 3), ("t1", 3)]))
            .unwrap();
        assert_eq!(got["c0"], parts(&[("t0", 0), ("t1", 0)]));
        assert_eq!(got["c1"], parts(&[("t0", 1), ("t1", 1)]));
        assert_eq!(got["c2"], parts(&[("t0", 2), ("t1", 2)]));
    }

    /// The first example in Java's `RoundRobinAssignor` documentation.
    #[test]
    fn roundrobin_java_documented_example_equal_subscriptions() {
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let got = RoundRobinAssignor
            .assign(&members, &topics(&[("t0", 3), ("t1", 3)]))
            .unwrap();
        assert_eq!(got["C0"], parts(&[("t0", 0), ("t0", 2), ("t1", 1)]));
        assert_eq!(got["C1"], parts(&[("t0", 1), ("t1", 0), ("t1", 2)]));
    }

    /// The second example in Java's `RoundRobinAssignor` documentation: unequal subscriptions.
    #[test]
    fn roundrobin_java_documented_example_unequal_subscriptions() {
        let members = [
            member("C0", &["t0"]),
            member("C1", &["t0", "t1"]),
            member("C2", &["t0", "t1", "t2"]),
        ];
        let got = RoundRobinAssignor
            .assign(&members, &topics(&[("t0", 1), ("t1", 2), ("t2", 3)]))
            .unwrap();
        assert_eq!(got["C0"], parts(&[("t0", 0)]));
        assert_eq!(got["C1"], parts(&[("t1", 0)]));
        assert_eq!(
            got["C2"],
            parts(&[("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)])
        );
    }

    // --- cooperative-sticky --------------------------------------------------------------------

    #[test]
    fn sticky_fresh_group_is_balanced_and_complete() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let got = CooperativeStickyAssignor
            .assign(&members, &topics(&[("t", 7)]))
            .unwrap();
        let counts: Vec<usize> = got.values().map(Vec::len).collect();
        assert_eq!(counts, vec![3, 2, 2]);
        let all: BTreeSet<_> = got.values().flatten().cloned().collect();
        assert_eq!(all.len(), 7);
    }

    #[test]
    fn sticky_nothing_moves_when_membership_is_unchanged() {
        let members = [
            member("a", &["t", "u"]),
            member("b", &["t", "u"]),
            member("c", &["t", "u"]),
        ];
        let ppt = topics(&[("t", 5), ("u", 4)]);
        let first = CooperativeStickyAssignor.assign(&members, &ppt).unwrap();
        let again: Vec<MemberSubscription> = members
            .iter()
            .map(|m| owning(m.clone(), 1, &first[&m.member_id]))
            .collect();
        let second = CooperativeStickyAssignor.assign(&again, &ppt).unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn sticky_new_member_gets_partitions_in_the_follow_up_round() {
        let ppt = topics(&[("t", 4)]);
        let a = owning(member("a", &["t"]), 3, &parts(&[("t", 0), ("t", 1)]));
        let b = owning(member("b", &["t"]), 3, &parts(&[("t", 2), ("t", 3)]));
        let c = member("c", &["t"]);
        let round1 = CooperativeStickyAssignor
            .assign(&[a.clone(), b.clone(), c.clone()], &ppt)
            .unwrap();
        // One of a or b gives up one partition; it is withheld, not given to c yet.
        assert_eq!(round1["c"], vec![]);
        let total: usize = round1.values().map(Vec::len).sum();
        assert_eq!(total, 3, "the moving partition is withheld: {round1:?}");
        let sticky = sticky_assign(&[a.clone(), b.clone(), c.clone()], &ppt).unwrap();
        assert_eq!(
            sticky["c"].len(),
            1,
            "the sticky plan moves exactly one partition to c"
        );
        assert_eq!(
            sticky["a"],
            parts(&[("t", 0)]),
            "a gives up its last partition"
        );
        assert_eq!(sticky["b"], parts(&[("t", 2), ("t", 3)]));
        assert_eq!(sticky["c"], parts(&[("t", 1)]));

        // Round two: members report what they own after revoking.
        let a2 = owning(a, 4, &round1["a"]);
        let b2 = owning(b, 4, &round1["b"]);
        let c2 = owning(c, 4, &round1["c"]);
        let round2 = CooperativeStickyAssignor
            .assign(&[a2, b2, c2], &ppt)
            .unwrap();
        assert_eq!(round2["a"], parts(&[("t", 0)]));
        assert_eq!(round2["b"], parts(&[("t", 2), ("t", 3)]));
        assert_eq!(round2["c"], parts(&[("t", 1)]));
    }

    #[test]
    fn sticky_departed_member_partitions_are_given_out_immediately() {
        // Nobody claims a departed member's partitions, so nothing needs revoking first.
        let ppt = topics(&[("t", 6)]);
        let a = owning(member("a", &["t"]), 2, &parts(&[("t", 0), ("t", 1)]));
        let b = owning(member("b", &["t"]), 2, &parts(&[("t", 2), ("t", 3)]));
        let got = CooperativeStickyAssignor.assign(&[a, b], &ppt).unwrap();
        assert_eq!(got["a"].len(), 3);
        assert_eq!(got["b"].len(), 3);
        assert!(got["a"].starts_with(&parts(&[("t", 0), ("t", 1)])));
        assert!(got["b"].starts_with(&parts(&[("t", 2), ("t", 3)])));
    }

    #[test]
    fn sticky_stale_claim_loses_only_what_a_newer_generation_claims() {
        let ppt = topics(&[("t", 2)]);
        // `stale` missed rebalances and still claims t-0 and t-1 at generation 1; `fresh`
        // claims t-1 at 5. t-1 stays with `fresh`; t-0, claimed by nobody else, with `stale`.
        let stale = owning(member("stale", &["t"]), 1, &parts(&[("t", 0), ("t", 1)]));
        let fresh = owning(member("fresh", &["t"]), 5, &parts(&[("t", 1)]));
        let sticky = sticky_assign(&[stale.clone(), fresh.clone()], &ppt).unwrap();
        assert_eq!(sticky["fresh"], parts(&[("t", 1)]));
        assert_eq!(sticky["stale"], parts(&[("t", 0)]));
        let got = CooperativeStickyAssignor
            .assign(&[stale, fresh], &ppt)
            .unwrap();
        assert_eq!(got["fresh"], parts(&[("t", 1)]));
        assert_eq!(got["stale"], parts(&[("t", 0)]));
    }

    /// The input our leader saw in an interop run on librdkafka's mock (generation 6 of
    /// `group::interop::mock::cooperative_sticky_ours_leads`): confluent-1 (`b`) missed
    /// generation 5's SyncGroup (the mock refuses a follower's SyncGroup that arrives after the
    /// leader's), so it rejoined claiming t-3, t-4, t-5 at generation 4, while the others
    /// claim at 5. Nobody else claims those partitions, so `b` still owns them and keeps them
    /// all but the one the balance moves, as Java's assignor (since KAFKA-14639) and
    /// librdkafka's do. Discarding its claims for being one generation old made `b` revoke
    /// t-3 and t-5 and take t-2 instead: partitions revoked from a member that should have
    /// kept them, and in other inputs handed back to it in the follow-up round.
    #[test]
    fn sticky_keeps_claims_of_a_member_that_missed_a_generation() {
        let ppt = topics(&[("t", 6)]);
        let a = owning(member("a", &["t"]), 5, &parts(&[("t", 0), ("t", 1)]));
        let b = owning(
            member("b", &["t"]),
            4,
            &parts(&[("t", 3), ("t", 4), ("t", 5)]),
        );
        let c = owning(member("c", &["t"]), 5, &[]);
        let group = [a, b, c];
        let got = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
        let claimed: BTreeSet<TopicPartition> =
            parts(&[("t", 3), ("t", 4), ("t", 5)]).into_iter().collect();
        let b_got: BTreeSet<TopicPartition> = got["b"].iter().cloned().collect();
        assert!(
            b_got.is_subset(&claimed) && b_got.len() == 2,
            "b keeps two of its three partitions and gets nothing else this round: {got:?}"
        );
        assert_eq!(got["a"], parts(&[("t", 0), ("t", 1)]), "{got:?}");
        assert_eq!(got["c"], parts(&[("t", 2)]), "{got:?}");
        // The follow-up round, everyone at generation 6 after applying it: c gets the one
        // partition b revoked, and b loses nothing more.
        let next: Vec<MemberSubscription> = group
            .iter()
            .map(|m| owning(m.clone(), 6, &got[&m.member_id]))
            .collect();
        let round2 = CooperativeStickyAssignor.assign(&next, &ppt).unwrap();
        assert_eq!(round2["b"], got["b"], "{round2:?}");
        assert_eq!(round2["c"].len(), 2, "{round2:?}");
    }

    /// A partition claimed by members of different generations stays with the highest
    /// generation's claimant, whatever the member order; a tie at the highest generation
    /// leaves it to nobody (neither claim can be trusted).
    #[test]
    fn sticky_highest_generation_wins_a_doubly_claimed_partition() {
        let ppt = topics(&[("t", 4)]);
        for (old, new) in [("a", "b"), ("b", "a")] {
            let stale = owning(member(old, &["t"]), 2, &parts(&[("t", 0), ("t", 1)]));
            let fresh = owning(member(new, &["t"]), 3, &parts(&[("t", 1), ("t", 2)]));
            let sticky = sticky_assign(&[stale.clone(), fresh.clone()], &ppt).unwrap();
            assert!(sticky[new].contains(&tp("t", 1)), "{sticky:?}");
            assert!(sticky[new].contains(&tp("t", 2)), "{sticky:?}");
            assert!(sticky[old].contains(&tp("t", 0)), "{sticky:?}");
            let got = CooperativeStickyAssignor
                .assign(&[stale.clone(), fresh.clone()], &ppt)
                .unwrap();
            assert!(!got[old].contains(&tp("t", 1)), "{got:?}");
            assert!(cooperative_violations(&[stale, fresh], &got).is_empty());
        }
        // Three claimants of t-0: two tie at the highest generation, so no claim of it is
        // kept, not even the lone one of the older generation (t-0 is then placed like an
        // unowned partition, and c, already holding t-3, is not the least loaded).
        let a = owning(member("a", &["t"]), 7, &parts(&[("t", 0)]));
        let b = owning(member("b", &["t"]), 7, &parts(&[("t", 0)]));
        let c = owning(member("c", &["t"]), 6, &parts(&[("t", 0), ("t", 3)]));
        let group = [a, b, c];
        let sticky = sticky_assign(&group, &ppt).unwrap();
        assert_eq!(sticky["c"], parts(&[("t", 3)]), "{sticky:?}");
        let got = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
        assert!(cooperative_violations(&group, &got).is_empty(), "{got:?}");
    }

    #[test]
    fn sticky_conflicting_claims_in_one_generation_are_both_dropped() {
        let ppt = topics(&[("t", 2)]);
        let a = owning(member("a", &["t"]), 3, &parts(&[("t", 0)]));
        let b = owning(member("b", &["t"]), 3, &parts(&[("t", 0)]));
        let got = CooperativeStickyAssignor
            .assign(&[a.clone(), b.clone()], &ppt)
            .unwrap();
        // t-0 may go to either claimant (never to a third party); t-1 is free.
        let all: Vec<_> = got.values().flatten().cloned().collect();
        assert!(all.contains(&tp("t", 1)));
        assert!(cooperative_violations(&[a, b], &got).is_empty());
    }

    #[test]
    fn sticky_drops_claims_on_unsubscribed_or_vanished_partitions() {
        let ppt = topics(&[("t", 2)]);
        let a = owning(
            member("a", &["t"]),
            1,
            &parts(&[("gone", 0), ("t", 7), ("t", 0)]),
        );
        let got = CooperativeStickyAssignor.assign(&[a], &ppt).unwrap();
        assert_eq!(got["a"], parts(&[("t", 0), ("t", 1)]));
    }

    #[test]
    fn sticky_reads_the_java_v1_generation_from_user_data() {
        let mut m = member("a", &["t"]);
        m.version = 1;
        m.subscription.user_data = Bytes::copy_from_slice(&9i32.to_be_bytes());
        assert_eq!(m.owned_generation(), 9);
        m.version = 3;
        assert_eq!(
            m.owned_generation(),
            NO_GENERATION,
            "v2+ carries the field itself"
        );
        m.subscription.generation_id = 4;
        assert_eq!(m.owned_generation(), 4);
    }

    #[test]
    fn sticky_unequal_subscriptions_stay_within_what_each_member_may_take() {
        let members = [
            member("a", &["x"]),
            member("b", &["x", "y"]),
            member("c", &["y"]),
        ];
        let got = sticky_assign(&members, &topics(&[("x", 4), ("y", 2)])).unwrap();
        assert!(got["a"].iter().all(|p| &*p.topic == "x"));
        assert!(got["c"].iter().all(|p| &*p.topic == "y"));
        let counts: Vec<usize> = got.values().map(Vec::len).collect();
        assert_eq!(counts.iter().sum::<usize>(), 6);
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{got:?}"
        );
    }

    // --- select_protocol and the leader --------------------------------------------------------

    #[test]
    fn select_protocol_keeps_preference_order_and_one_encoding() {
        let sub = Subscription::new(["t"]);
        let p = select_protocol(&[Strategy::RoundRobin, Strategy::Range], &sub).unwrap();
        assert_eq!(p.rebalance_protocol, RebalanceProtocol::Eager);
        let names: Vec<_> = p.protocols.iter().map(|j| j.name).collect();
        assert_eq!(names, vec![ROUNDROBIN, RANGE]);
        let decoded = decode_subscription(&p.protocols[0].metadata).unwrap();
        assert_eq!(decoded.version, SUBSCRIPTION_VERSION);
        assert_eq!(decoded.subscription, sub);
        assert_eq!(p.protocols[0].metadata, p.protocols[1].metadata);

        let p = select_protocol(&[Strategy::CooperativeSticky], &sub).unwrap();
        assert_eq!(p.rebalance_protocol, RebalanceProtocol::Cooperative);
        assert_eq!(p.protocols[0].name, COOPERATIVE_STICKY);
    }

    #[test]
    fn select_protocol_rejects_bad_lists() {
        let sub = Subscription::new(["t"]);
        assert_eq!(
            select_protocol(&[], &sub),
            Err(JoinProtocolError::Strategies(StrategyError::Empty))
        );
        assert_eq!(
            select_protocol(&[Strategy::Range, Strategy::Range], &sub),
            Err(JoinProtocolError::Strategies(StrategyError::Duplicate(
                Strategy::Range
            )))
        );
        assert_eq!(
            select_protocol(&[Strategy::CooperativeSticky, Strategy::Range], &sub),
            Err(JoinProtocolError::Strategies(StrategyError::Mixed {
                eager: Strategy::Range,
                cooperative: Strategy::CooperativeSticky
            }))
        );
        assert_eq!(
            select_protocol(&[Strategy::Range], &Subscription::new(Vec::<String>::new())),
            Err(JoinProtocolError::NoTopics)
        );
    }

    #[test]
    fn strategy_list_rules_name_the_offending_strategies() {
        use Strategy::{CooperativeSticky, Range, RoundRobin};
        assert_eq!(check_strategies(&[]), Err(StrategyError::Empty));
        assert_eq!(
            check_strategies(&[RoundRobin, Range, RoundRobin]),
            Err(StrategyError::Duplicate(RoundRobin))
        );
        // The first strategy decides the kind; the first one of the other kind is named.
        assert_eq!(
            check_strategies(&[Range, RoundRobin, CooperativeSticky]),
            Err(StrategyError::Mixed {
                eager: Range,
                cooperative: CooperativeSticky
            })
        );
        assert_eq!(
            check_strategies(&[CooperativeSticky, RoundRobin]),
            Err(StrategyError::Mixed {
                eager: RoundRobin,
                cooperative: CooperativeSticky
            })
        );
        assert_eq!(
            check_strategies(&[RoundRobin, Range]),
            Ok(RebalanceProtocol::Eager)
        );
        assert_eq!(
            check_strategies(&[CooperativeSticky]),
            Ok(RebalanceProtocol::Cooperative)
        );
        let msg = StrategyError::Empty.to_string();
        assert!(
            msg.contains("range, roundrobin, cooperative-sticky"),
            "{msg}"
        );
    }

    #[test]
    fn strategy_names_parse_as_librdkafka_and_java_write_them() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::from_name(s.name()), Some(s));
            assert_eq!(Strategy::from_name(s.java_class()), Some(s));
            assert_eq!(s.assignor().name(), s.name());
            assert_eq!(s.to_string(), s.name());
        }
        // Whitespace around an entry and ASCII case are ignored; nothing else is.
        assert_eq!(
            Strategy::from_name(" roundrobin"),
            Some(Strategy::RoundRobin)
        );
        assert_eq!(Strategy::from_name("range "), Some(Strategy::Range));
        assert_eq!(
            Strategy::from_name("ROUNDROBIN"),
            Some(Strategy::RoundRobin)
        );
        assert_eq!(
            Strategy::from_name("org.apache.kafka.clients.consumer.cooperativestickyassignor"),
            Some(Strategy::CooperativeSticky)
        );
        for bad in [
            "",
            " ",
            "sticky",
            "org.apache.kafka.clients.consumer.StickyAssignor",
            "RangeAssignor",
            "cooperative_sticky",
            "range,roundrobin",
        ] {
            assert_eq!(Strategy::from_name(bad), None, "{bad:?}");
        }
        assert_eq!(Strategy::Range.protocol(), RebalanceProtocol::Eager);
        assert_eq!(Strategy::RoundRobin.protocol(), RebalanceProtocol::Eager);
        assert_eq!(
            Strategy::CooperativeSticky.protocol(),
            RebalanceProtocol::Cooperative
        );
    }

    #[test]
    fn assignor_lookup_by_protocol_name() {
        for name in [RANGE, ROUNDROBIN, COOPERATIVE_STICKY] {
            assert_eq!(assignor_for(name).map(|a| a.name()), Some(name));
        }
        assert!(assignor_for("sticky").is_none());
        // The coordinator echoes a name we sent: looked up exactly, not parsed.
        assert!(assignor_for("Range").is_none());
        assert!(assignor_for("org.apache.kafka.clients.consumer.RangeAssignor").is_none());
        assert_eq!(
            assignor_for(COOPERATIVE_STICKY).unwrap().protocol(),
            RebalanceProtocol::Cooperative
        );
    }

    #[test]
    fn leader_encodes_at_the_lowest_member_version() {
        let mut old = member("py", &["t"]);
        old.version = 0; // kafka-python
        let members = [old, member("rs", &["t"])];
        let out = assign_and_encode(&RangeAssignor, &members, &topics(&[("t", 2)])).unwrap();
        for bytes in out.values() {
            assert_eq!(&bytes[..2], &0i16.to_be_bytes());
        }
        assert_eq!(
            decode_assignment(&out["py"]).unwrap().partitions,
            parts(&[("t", 0)])
        );
        assert_eq!(
            decode_assignment(&out["rs"]).unwrap().partitions,
            parts(&[("t", 1)])
        );
        let out = assign_and_encode(&RangeAssignor, &members[1..], &topics(&[("t", 2)])).unwrap();
        assert_eq!(&out["rs"][..2], &3i16.to_be_bytes());
    }

    #[test]
    fn cooperative_violations_are_detected() {
        let a = owning(member("a", &["t"]), 1, &parts(&[("t", 0)]));
        let b = member("b", &["t"]);
        let mut bad = BTreeMap::new();
        bad.insert("a".to_string(), vec![]);
        bad.insert("b".to_string(), parts(&[("t", 0)]));
        assert_eq!(cooperative_violations(&[a, b], &bad), parts(&[("t", 0)]));
    }

    // --- properties ----------------------------------------------------------------------------

    /// Members m0..mN, each subscribed to a non-empty subset of topics t0..t3.
    fn arb_group(
    ) -> impl proptest::strategy::Strategy<Value = (Vec<MemberSubscription>, BTreeMap<String, i32>)>
    {
        let ppt = proptest::collection::vec(0..9i32, 4).prop_map(|counts| {
            counts
                .into_iter()
                .enumerate()
                .map(|(i, n)| (format!("t{i}"), n))
                .collect::<BTreeMap<_, _>>()
        });
        let members =
            proptest::collection::vec(proptest::collection::btree_set(0..4usize, 1..=4), 1..7)
                .prop_map(|subs| {
                    subs.into_iter()
                        .enumerate()
                        .map(|(i, topics)| {
                            let names: Vec<String> =
                                topics.iter().map(|t| format!("t{t}")).collect();
                            MemberSubscription {
                                member_id: format!("m{i}"),
                                group_instance_id: None,
                                version: SUBSCRIPTION_VERSION,
                                subscription: Subscription::new(names),
                            }
                        })
                        .collect::<Vec<_>>()
                });
        (members, ppt)
    }

    /// A group where every member subscribes to the same topics.
    fn arb_equal_group(
    ) -> impl proptest::strategy::Strategy<Value = (Vec<MemberSubscription>, BTreeMap<String, i32>)>
    {
        (1..8usize, proptest::collection::vec(1..10i32, 1..4)).prop_map(|(n, counts)| {
            let ppt: BTreeMap<String, i32> = counts
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("t{i}"), *c))
                .collect();
            let names: Vec<String> = ppt.keys().cloned().collect();
            let members = (0..n)
                .map(|i| MemberSubscription {
                    member_id: format!("m{i}"),
                    group_instance_id: None,
                    version: SUBSCRIPTION_VERSION,
                    subscription: Subscription::new(names.clone()),
                })
                .collect();
            (members, ppt)
        })
    }

    /// Every partition of a topic someone subscribes to is assigned exactly once, to a subscriber.
    fn assert_exactly_once(
        members: &[MemberSubscription],
        ppt: &BTreeMap<String, i32>,
        got: &BTreeMap<MemberId, Vec<TopicPartition>>,
    ) -> Result<(), TestCaseError> {
        let mut seen: BTreeMap<&TopicPartition, usize> = BTreeMap::new();
        for m in members {
            for p in &got[&m.member_id] {
                prop_assert!(
                    m.subscription.topics.iter().any(|t| **t == *p.topic),
                    "{p} to unsubscribed {}",
                    m.member_id
                );
                *seen.entry(p).or_default() += 1;
            }
        }
        prop_assert!(seen.values().all(|&c| c == 1), "duplicates: {seen:?}");
        let expected: usize = ppt
            .iter()
            .filter(|(t, _)| members.iter().any(|m| m.subscription.topics.contains(t)))
            .map(|(_, n)| *n as usize)
            .sum();
        prop_assert_eq!(seen.len(), expected);
        Ok(())
    }

    fn spread(got: &BTreeMap<MemberId, Vec<TopicPartition>>) -> usize {
        let counts: Vec<usize> = got.values().map(Vec::len).collect();
        counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
    }

    /// Random prior ownership (claims may overlap, be stale, or name vanished partitions).
    fn with_random_claims(
        members: &[MemberSubscription],
        claims: &[(usize, usize, i32, i32)],
    ) -> Vec<MemberSubscription> {
        let mut out = members.to_vec();
        for &(m, topic, partition, generation) in claims {
            let m = m % out.len();
            out[m]
                .subscription
                .owned_partitions
                .push(tp(&format!("t{topic}"), partition));
            out[m].subscription.generation_id = generation;
        }
        out
    }

    proptest! {
        #[test]
        fn eager_assignors_assign_every_partition_exactly_once((members, ppt) in arb_group()) {
            for assignor in [&RANGE_ASSIGNOR as &dyn Assignor, &ROUNDROBIN_ASSIGNOR] {
                let got = assignor.assign(&members, &ppt).unwrap();
                assert_exactly_once(&members, &ppt, &got)?;
            }
            let sticky = sticky_assign(&members, &ppt).unwrap();
            assert_exactly_once(&members, &ppt, &sticky)?;
        }

        #[test]
        fn equal_subscriptions_are_balanced((members, ppt) in arb_equal_group()) {
            let rr = RoundRobinAssignor.assign(&members, &ppt).unwrap();
            prop_assert!(spread(&rr) <= 1, "roundrobin {rr:?}");
            let sticky = sticky_assign(&members, &ppt).unwrap();
            prop_assert!(spread(&sticky) <= 1, "sticky {sticky:?}");
        }

        #[test]
        fn sticky_is_locally_balanced_with_unequal_subscriptions((members, ppt) in arb_group()) {
            let got = sticky_assign(&members, &ppt).unwrap();
            // No member could hand a partition to a subscriber with two fewer.
            for from in &members {
                for to in &members {
                    let (nf, nt) = (got[&from.member_id].len(), got[&to.member_id].len());
                    if nf > nt + 1 {
                        let movable = got[&from.member_id]
                            .iter()
                            .any(|p| to.subscription.topics.iter().any(|t| **t == *p.topic));
                        prop_assert!(!movable, "{} ({nf}) could give {} ({nt}) a partition: {got:?}", from.member_id, to.member_id);
                    }
                }
            }
        }

        #[test]
        fn cooperative_round_one_never_double_assigns(
            (members, ppt) in arb_group(),
            claims in proptest::collection::vec((0..7usize, 0..4usize, 0..10i32, 0..3i32), 0..30),
        ) {
            let members = with_random_claims(&members, &claims);
            let got = CooperativeStickyAssignor.assign(&members, &ppt).unwrap();
            let mut seen = BTreeSet::new();
            for parts in got.values() {
                for p in parts {
                    prop_assert!(seen.insert(p.clone()), "{p} assigned twice");
                }
            }
            prop_assert!(cooperative_violations(&members, &got).is_empty());
        }

        #[test]
        fn cooperative_converges_in_two_rounds_and_then_stays_put(
            (members, ppt) in arb_equal_group(),
            claims in proptest::collection::vec((0..8usize, 0..3usize, 0..10i32, 0..1i32), 0..30),
        ) {
            let mut group = with_random_claims(&members, &claims);
            // Round one, then everyone applies it (revoking what it lost) and rejoins.
            let mut generation = 1;
            let round1 = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
            for m in &mut group {
                m.subscription.owned_partitions = round1[&m.member_id].clone();
                m.subscription.generation_id = generation;
            }
            generation += 1;
            let round2 = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
            assert_exactly_once(&group, &ppt, &round2)?;
            prop_assert!(spread(&round2) <= 1, "{round2:?}");
            for m in &group {
                let kept: BTreeSet<_> = round2[&m.member_id].iter().collect();
                prop_assert!(round1[&m.member_id].iter().all(|p| kept.contains(p)), "round two revoked from {}", m.member_id);
            }
            // Unchanged membership: nothing moves any more.
            for m in &mut group {
                m.subscription.owned_partitions = round2[&m.member_id].clone();
                m.subscription.generation_id = generation;
            }
            let round3 = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
            prop_assert_eq!(round3, round2);
        }

        /// Generations only settle conflicting claims: when no two members claim the same
        /// partition, how old each member's claims are changes nothing, so a member that missed
        /// a generation's SyncGroup keeps what it owns like every other member.
        #[test]
        fn sticky_generations_matter_only_for_conflicting_claims(
            (members, ppt) in arb_group(),
            claims in proptest::collection::vec((0..7usize, 0..4usize, 0..10i32), 0..30),
            generations in proptest::collection::vec(-1..4i32, 7),
        ) {
            let mut claimed = BTreeSet::new();
            let disjoint: Vec<(usize, usize, i32, i32)> = claims
                .into_iter()
                .filter(|&(_, topic, partition)| claimed.insert((topic, partition)))
                .map(|(m, topic, partition)| (m, topic, partition, 3))
                .collect();
            let same = with_random_claims(&members, &disjoint);
            let mut mixed = same.clone();
            for (m, generation) in mixed.iter_mut().zip(&generations) {
                m.subscription.generation_id = *generation;
            }
            prop_assert_eq!(
                CooperativeStickyAssignor.assign(&mixed, &ppt).unwrap(),
                CooperativeStickyAssignor.assign(&same, &ppt).unwrap()
            );
        }

        #[test]
        fn cooperative_converges_with_unequal_subscriptions(
            (members, ppt) in arb_group(),
        ) {
            let mut group = members;
            let mut last = BTreeMap::new();
            for generation in 1..=4 {
                let got = CooperativeStickyAssignor.assign(&group, &ppt).unwrap();
                for m in &mut group {
                    m.subscription.owned_partitions = got[&m.member_id].clone();
                    m.subscription.generation_id = generation;
                }
                last = got;
            }
            assert_exactly_once(&group, &ppt, &last)?;
        }
    }
}

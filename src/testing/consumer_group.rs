//! An in-memory consumer group coordinator running the broker's KIP-848 rules, as Kafka's group
//! coordinator applies them: a group epoch bumped by membership and subscription changes, a
//! target assignment per member, and each member's current assignment moved toward its target
//! one heartbeat at a time (revoke first; a partition is assigned only once no other member owns
//! it or still has to revoke it; the member epoch advances only when nothing is left to revoke).
//! Also: epoch validation (the previous epoch is accepted with a subset of the assignment, as for
//! a lost answer), static members (-2 keeps the partitions; an epoch-0 join with the same
//! instance id, under a new member id or the same one, takes them over; UNRELEASED_INSTANCE_ID
//! while the instance id's member has not left with -2, even under the same member id; a -2
//! from another member id is FENCED_INSTANCE_ID, as `GroupMetadataManager` rules), the
//! rebalance timeout (a member that does not revoke in time is removed), session expiry, offset
//! commits checked against the member epoch, and injected errors. Time is passed in.
//!
//! Why here and public: the consumer group machine's unit tests pin the client's side of KIP-848
//! against it, and integration tests driving a whole consumer in memory need the same broker
//! rules, not a second copy of them. Commits can land in an [`InMemoryLog`]'s committed offsets
//! ([`Coordinator::attach_log`], [`Coordinator::commit_offsets`]), so the consumer's next
//! position lookup reads what the group committed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::InMemoryLog;
use crate::group::consumer_group::{
    HeartbeatRequest, HeartbeatResponse, IdAssignment, TopicId, JOIN_EPOCH, LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
};
use crate::wire::{KafkaCode, OffsetCommitEntry};
use crate::TopicPartition;

/// A partition as the coordinator knows it: by topic id, as KIP-848's heartbeats name it.
pub type Partition = (TopicId, i32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reconcile {
    Stable,
    /// Must give up `pending` before anything else happens.
    UnrevokedPartitions,
    /// Some target partitions are still held by other members.
    UnreleasedPartitions,
}

#[derive(Debug)]
struct Member {
    instance_id: Option<String>,
    epoch: i32,
    previous_epoch: i32,
    topics: Vec<String>,
    rebalance_timeout: Duration,
    assigned: BTreeSet<Partition>,
    pending: BTreeSet<Partition>,
    /// The epoch in which each held partition was assigned to this member (KIP-1251).
    assigned_at: BTreeMap<Partition, i32>,
    state: Reconcile,
    revoke_deadline: Option<Instant>,
    last_heard: Instant,
    /// A static member that left with -2: its partitions wait for its return.
    static_left: bool,
}

/// One consumer group at one coordinator.
pub struct Coordinator {
    /// `group.consumer.session.timeout.ms`: a member not heard from this long is removed.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`, sent in every answer.
    pub interval: Duration,
    /// The group epoch, bumped by every membership or subscription change.
    pub group_epoch: i32,
    target_epoch: i32,
    topics: BTreeMap<String, (TopicId, i32)>,
    members: BTreeMap<String, Member>,
    targets: BTreeMap<String, BTreeSet<Partition>>,
    injected: BTreeMap<String, Vec<KafkaCode>>,
    /// Topics whose id Metadata does not name yet (a topic the metadata has not caught up with).
    pub hidden: BTreeSet<TopicId>,
    /// Every accepted commit: (member, partition, epoch). With a log attached, a partition the
    /// log refused is not counted.
    pub commits: Vec<(String, Partition, i32)>,
    /// `group.consumer.max.size`, if limited.
    pub max_size: Option<usize>,
    /// The assignors this broker offers.
    pub assignors: Vec<&'static str>,
    /// Compute a new target only on the heartbeat after the one that bumped the group epoch, as
    /// Kafka 4.4 does (its first answer to a join carries an empty assignment).
    pub lazy_targets: bool,
    /// The group epoch was bumped by the heartbeat being answered.
    bumped_now: bool,
    /// Where [`Coordinator::commit_offsets`] stores offsets, under which group id.
    log: Option<(InMemoryLog, String)>,
}

fn error(code: KafkaCode, message: &str) -> HeartbeatResponse {
    HeartbeatResponse::error(code, message)
}

impl Coordinator {
    /// An empty group over `topics` (name, partition count), each given a fixed topic id, with
    /// Kafka's default session timeout and heartbeat interval.
    pub fn new(topics: &[(&str, i32)]) -> Self {
        let topics = topics
            .iter()
            .enumerate()
            .map(|(i, (name, n))| {
                let id = TopicId([u8::try_from(i + 1).unwrap_or(255); 16]);
                (name.to_string(), (id, *n))
            })
            .collect();
        Coordinator {
            session_timeout: Duration::from_secs(6),
            interval: Duration::from_millis(500),
            group_epoch: 0,
            target_epoch: 0,
            topics,
            members: BTreeMap::new(),
            targets: BTreeMap::new(),
            injected: BTreeMap::new(),
            hidden: BTreeSet::new(),
            commits: Vec::new(),
            max_size: None,
            assignors: vec!["uniform", "range"],
            lazy_targets: false,
            bumped_now: false,
            log: None,
        }
    }

    /// Stores the offsets of accepted commits ([`Coordinator::commit_offsets`]) in `log` under
    /// `group_id`, where a consumer's position lookup reads them: the group's commits and the
    /// records it reads then live in one cluster.
    pub fn attach_log(&mut self, log: InMemoryLog, group_id: &str) {
        self.log = Some((log, group_id.to_string()));
    }

    /// The id of a topic given to [`Coordinator::new`] (panics for another: a test bug).
    pub fn topic_id(&self, name: &str) -> TopicId {
        self.topics[name].0
    }

    /// Metadata by id: the names of `ids` it knows and does not hide.
    pub fn resolve(&self, ids: &[TopicId]) -> Vec<(TopicId, String)> {
        self.topics
            .iter()
            .filter(|(_, (id, _))| ids.contains(id) && !self.hidden.contains(id))
            .map(|(name, (id, _))| (*id, name.clone()))
            .collect()
    }

    /// The next heartbeat of `member_id` is answered `code`.
    pub fn inject(&mut self, member_id: &str, code: KafkaCode) {
        self.injected
            .entry(member_id.to_string())
            .or_default()
            .push(code);
    }

    /// Whether the member has reached the group's current target: its epoch is the group
    /// epoch and nothing is left to revoke or waiting to be released.
    pub fn settled(&self, member_id: &str) -> bool {
        self.members.get(member_id).is_some_and(|m| {
            m.epoch == self.group_epoch
                && self.target_epoch == self.group_epoch
                && m.state == Reconcile::Stable
        })
    }

    /// Whether the group holds `member_id` (it has not left, expired or been removed).
    pub fn is_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// What the coordinator believes each member owns (assigned plus pending revocation).
    pub fn held(&self) -> BTreeMap<String, BTreeSet<Partition>> {
        self.members
            .iter()
            .map(|(id, m)| (id.clone(), m.assigned.union(&m.pending).copied().collect()))
            .collect()
    }

    fn bump(&mut self) {
        self.group_epoch += 1;
        self.bumped_now = true;
    }

    /// The uniform assignor, made deterministic: every subscribed partition, spread over the
    /// members subscribed to its topic, keeping a member's current partitions where it can.
    fn compute_targets(&mut self) {
        if self.target_epoch == self.group_epoch || (self.lazy_targets && self.bumped_now) {
            return;
        }
        if self.lazy_targets {
            // Kafka 4.4 gives the new target an epoch of its own (a join answered with epoch 2
            // and nothing is followed by epoch 3 with the partitions).
            self.group_epoch += 1;
        }
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut targets: BTreeMap<String, BTreeSet<Partition>> =
            ids.iter().map(|id| (id.clone(), BTreeSet::new())).collect();
        for (name, (tid, n)) in &self.topics {
            let subscribers: Vec<&String> = ids
                .iter()
                .filter(|id| self.members[*id].topics.contains(name))
                .collect();
            if subscribers.is_empty() {
                continue;
            }
            let quota = (*n as usize).div_ceil(subscribers.len());
            let mut unassigned = Vec::new();
            for p in 0..*n {
                let keeper = subscribers.iter().find(|id| {
                    let m = &self.members[**id];
                    (m.assigned.contains(&(*tid, p)) || m.pending.contains(&(*tid, p)))
                        && targets[**id].iter().filter(|(t, _)| t == tid).count() < quota
                });
                match keeper {
                    Some(id) => {
                        targets.get_mut(*id).map(|t| t.insert((*tid, p)));
                    }
                    None => unassigned.push(p),
                }
            }
            for p in unassigned {
                let least = subscribers
                    .iter()
                    .min_by_key(|id| targets[**id].iter().filter(|(t, _)| t == tid).count());
                if let Some(id) = least {
                    targets.get_mut(*id).map(|t| t.insert((*tid, p)));
                }
            }
        }
        self.targets = targets;
        self.target_epoch = self.group_epoch;
    }

    fn held_by_others(&self, member_id: &str) -> BTreeSet<Partition> {
        self.members
            .iter()
            .filter(|(id, _)| id.as_str() != member_id)
            .flat_map(|(_, m)| m.assigned.iter().chain(m.pending.iter()).copied())
            .collect()
    }

    /// Moves one member toward its target (Kafka's CurrentAssignmentBuilder).
    fn advance(&mut self, now: Instant, member_id: &str, owned: Option<&BTreeSet<Partition>>) {
        let target = self.targets.get(member_id).cloned().unwrap_or_default();
        let others = self.held_by_others(member_id);
        let target_epoch = self.target_epoch;
        let pending_target = self.target_epoch != self.group_epoch;
        let group_epoch = self.group_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if pending_target && m.epoch == 0 {
            // Joined before the target was computed: an epoch, and nothing yet.
            m.epoch = group_epoch;
            return;
        }
        if m.state == Reconcile::UnrevokedPartitions {
            match owned {
                Some(owned) if owned.is_disjoint(&m.pending) => {
                    for p in &m.pending {
                        m.assigned_at.remove(p);
                    }
                    m.pending.clear();
                    m.revoke_deadline = None;
                    m.state = Reconcile::Stable;
                }
                _ => return,
            }
        }
        if m.epoch == target_epoch && m.state == Reconcile::Stable {
            return;
        }
        let kept: BTreeSet<Partition> = m.assigned.intersection(&target).copied().collect();
        let revoke: BTreeSet<Partition> = m.assigned.difference(&target).copied().collect();
        if !revoke.is_empty() {
            m.assigned = kept;
            m.pending = revoke;
            m.state = Reconcile::UnrevokedPartitions;
            m.revoke_deadline = Some(now + m.rebalance_timeout);
            return;
        }
        let free: BTreeSet<Partition> = target
            .difference(&kept)
            .filter(|p| !others.contains(p))
            .copied()
            .collect();
        let waiting = target.len() - kept.len() - free.len();
        for p in &free {
            m.assigned_at.insert(*p, target_epoch);
        }
        m.assigned = kept.union(&free).copied().collect();
        if m.epoch != target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = target_epoch;
        }
        m.state = if waiting > 0 {
            Reconcile::UnreleasedPartitions
        } else {
            Reconcile::Stable
        };
    }

    fn owned_of(req: &HeartbeatRequest) -> Option<BTreeSet<Partition>> {
        req.owned.as_ref().map(|o| {
            o.iter()
                .flat_map(|(id, ps)| ps.iter().map(move |p| (*id, *p)))
                .collect()
        })
    }

    fn validate(req: &HeartbeatRequest) -> Result<(), HeartbeatResponse> {
        let invalid = |m: &str| Err(error(KafkaCode::INVALID_REQUEST, m));
        match req.member_epoch {
            e if e > 0 || e == LEAVE_EPOCH => {
                if req.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
            }
            JOIN_EPOCH => {
                if req.rebalance_timeout_ms == -1 {
                    return invalid("RebalanceTimeoutMs must be provided in first request.");
                }
                if req.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                    return invalid("TopicPartitions must be empty when (re-)joining.");
                }
                if req
                    .subscribed_topic_names
                    .as_ref()
                    .is_none_or(Vec::is_empty)
                {
                    return invalid("SubscribedTopicNames must be set in first request.");
                }
            }
            STATIC_LEAVE_EPOCH => {
                if req.instance_id.is_none() {
                    return invalid("InstanceId can't be null.");
                }
            }
            _ => return invalid("MemberEpoch is invalid."),
        }
        Ok(())
    }

    /// Answers one heartbeat.
    pub fn heartbeat(&mut self, now: Instant, req: &HeartbeatRequest) -> HeartbeatResponse {
        self.expire(now);
        self.bumped_now = false;
        if let Some(code) = self
            .injected
            .get_mut(&req.member_id)
            .and_then(|codes| (!codes.is_empty()).then(|| codes.remove(0)))
        {
            return error(code, "injected");
        }
        if let Err(resp) = Self::validate(req) {
            return resp;
        }
        if let Some(a) = &req.server_assignor {
            if !self.assignors.contains(&a.as_str()) {
                return error(
                    KafkaCode::UNSUPPORTED_ASSIGNOR,
                    &format!("ServerAssignor {a} is not supported."),
                );
            }
        }
        let owned = Self::owned_of(req);
        match req.member_epoch {
            LEAVE_EPOCH => {
                if self.members.remove(&req.member_id).is_some() {
                    self.bump();
                }
                return self.answer(&req.member_id, LEAVE_EPOCH, false, now);
            }
            STATIC_LEAVE_EPOCH => {
                // Kafka's consumerGroupLeave: the instance id's member, and only under its own
                // member id, is marked -2 (its partitions wait for its return).
                let instance = req.instance_id.as_deref();
                let Some((id, m)) = self
                    .members
                    .iter_mut()
                    .find(|(_, m)| m.instance_id.as_deref() == instance)
                else {
                    return error(KafkaCode::UNKNOWN_MEMBER_ID, "instance id is unknown");
                };
                if *id != req.member_id {
                    return error(
                        KafkaCode::FENCED_INSTANCE_ID,
                        &format!("static member {} was fenced by member {id}", req.member_id),
                    );
                }
                m.static_left = true;
                m.last_heard = now;
                return self.answer(&req.member_id, STATIC_LEAVE_EPOCH, false, now);
            }
            JOIN_EPOCH
                if req.instance_id.is_none() && self.members.contains_key(&req.member_id) =>
            {
                // Kafka validates an epoch-0 heartbeat of a dynamic member it still holds like
                // any other epoch: accepted only as the member's previous epoch (a member whose
                // epoch has not moved since it joined) with a subset of its assignment, and then
                // answered with the epoch and the assignment the member still has. Anything else
                // is FENCED_MEMBER_EPOCH.
                let m = &self.members[&req.member_id];
                let subset = owned.as_ref().is_none_or(|o| o.is_subset(&m.assigned));
                if m.epoch != JOIN_EPOCH && (m.previous_epoch != JOIN_EPOCH || !subset) {
                    return error(KafkaCode::FENCED_MEMBER_EPOCH, "fenced epoch");
                }
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    m.last_heard = now;
                }
            }
            JOIN_EPOCH => {
                if let Err(resp) = self.join(now, req) {
                    return resp;
                }
            }
            epoch => {
                let Some(m) = self.members.get(&req.member_id) else {
                    return error(KafkaCode::UNKNOWN_MEMBER_ID, "unknown member");
                };
                let subset = owned.as_ref().is_none_or(|o| o.is_subset(&m.assigned));
                if epoch > m.epoch || (epoch < m.epoch && (epoch != m.previous_epoch || !subset)) {
                    return error(KafkaCode::FENCED_MEMBER_EPOCH, "fenced epoch");
                }
                let m = self.members.get_mut(&req.member_id).expect("checked above");
                m.last_heard = now;
                if let Some(names) = &req.subscribed_topic_names {
                    if *names != m.topics {
                        m.topics = names.clone();
                        self.bump();
                    }
                }
            }
        }
        self.compute_targets();
        let before = self.members[&req.member_id].assigned.clone();
        self.advance(now, &req.member_id, owned.as_ref());
        // Members waiting for what this one released pick it up on their own next heartbeat,
        // as on Kafka.
        let full = req.is_full();
        let changed = self.members[&req.member_id].assigned != before;
        let epoch = self.members[&req.member_id].epoch;
        self.answer(&req.member_id, epoch, full || changed, now)
    }

    fn join(&mut self, now: Instant, req: &HeartbeatRequest) -> Result<(), HeartbeatResponse> {
        let topics = req.subscribed_topic_names.clone().unwrap_or_default();
        let rebalance_timeout =
            Duration::from_millis(u64::try_from(req.rebalance_timeout_ms).unwrap_or(0));
        if let Some(instance) = &req.instance_id {
            // Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: any member holding the
            // instance id, the joining member id included, must have left with -2.
            let previous = self
                .members
                .iter()
                .find(|(_, m)| m.instance_id.as_ref() == Some(instance))
                .map(|(id, m)| (id.clone(), m.static_left));
            match previous {
                Some((old, false)) => {
                    return Err(error(
                        KafkaCode::UNRELEASED_INSTANCE_ID,
                        &format!(
                            "static member {} with instance id {instance} cannot join the group \
                             because the instance id is owned by {old} member",
                            req.member_id
                        ),
                    ))
                }
                Some((old, true)) => {
                    // The static member returns under a new member id: it takes over the old
                    // one's assignment and epoch, without a rebalance.
                    let mut m = self.members.remove(&old).expect("found above");
                    m.static_left = false;
                    m.last_heard = now;
                    m.topics = topics;
                    m.rebalance_timeout = rebalance_timeout;
                    if let Some(t) = self.targets.remove(&old) {
                        self.targets.insert(req.member_id.clone(), t);
                    }
                    self.members.insert(req.member_id.clone(), m);
                    return Ok(());
                }
                None => {}
            }
        }
        if self.max_size.is_some_and(|max| {
            !self.members.contains_key(&req.member_id) && self.members.len() >= max
        }) {
            return Err(error(KafkaCode::GROUP_MAX_SIZE_REACHED, "group is full"));
        }
        // A new member: it owns nothing.
        self.members.insert(
            req.member_id.clone(),
            Member {
                instance_id: req.instance_id.clone(),
                epoch: 0,
                previous_epoch: 0,
                topics,
                rebalance_timeout,
                assigned: BTreeSet::new(),
                pending: BTreeSet::new(),
                assigned_at: BTreeMap::new(),
                state: Reconcile::Stable,
                revoke_deadline: None,
                last_heard: now,
                static_left: false,
            },
        );
        self.bump();
        Ok(())
    }

    fn answer(
        &self,
        member_id: &str,
        epoch: i32,
        with_assignment: bool,
        _now: Instant,
    ) -> HeartbeatResponse {
        let assignment = with_assignment.then(|| {
            let mut out = IdAssignment::new();
            if let Some(m) = self.members.get(member_id) {
                for (id, p) in &m.assigned {
                    out.entry(*id).or_default().push(*p);
                }
            }
            out
        });
        HeartbeatResponse {
            error: KafkaCode::NONE,
            error_message: None,
            member_id: Some(member_id.to_string()),
            member_epoch: epoch,
            heartbeat_interval_ms: i32::try_from(self.interval.as_millis()).unwrap_or(i32::MAX),
            assignment,
        }
    }

    /// Removes members whose session expired or who did not revoke within the rebalance timeout.
    pub fn expire(&mut self, now: Instant) {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                now.duration_since(m.last_heard) >= self.session_timeout
                    || m.revoke_deadline.is_some_and(|d| now >= d)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.members.remove(&id);
            self.bump();
        }
    }

    /// OffsetCommit with the member epoch, per partition, as Kafka 4.4 checks it (KIP-1251): a
    /// partition the member holds is accepted for any epoch from the one it was assigned in up
    /// to the member's; otherwise only the member's current epoch is accepted, even for a
    /// partition that moved to another member (the broker does not check ownership then, so the
    /// client must commit only what it owns); anything else is STALE_MEMBER_EPOCH.
    pub fn commit(
        &mut self,
        member_id: &str,
        epoch: i32,
        partitions: &[Partition],
    ) -> Vec<(Partition, KafkaCode)> {
        let mut out = Vec::new();
        for p in partitions {
            let code = self.commit_code(member_id, epoch, p);
            if code == KafkaCode::NONE {
                self.commits.push((member_id.to_string(), *p, epoch));
            }
            out.push((*p, code));
        }
        out
    }

    /// OffsetCommit with its offsets, by topic name as the client sends them: each partition
    /// checked as [`Coordinator::commit`] does (a topic this coordinator does not know is
    /// UNKNOWN_TOPIC_OR_PARTITION), the accepted ones stored in the attached log, which may
    /// refuse partitions of its own (see `InMemoryLog::refuse_commits`); without a log they are
    /// accepted and nothing is stored.
    pub fn commit_offsets(
        &mut self,
        member_id: &str,
        epoch: i32,
        offsets: &[OffsetCommitEntry],
    ) -> Vec<(TopicPartition, KafkaCode)> {
        // Each entry's code in the request's order; the accepted ones are settled by the log.
        let mut codes: Vec<KafkaCode> = Vec::with_capacity(offsets.len());
        let mut accepted: Vec<(usize, Partition)> = Vec::new();
        for (i, entry) in offsets.iter().enumerate() {
            let code = match self.topics.get(&*entry.tp.topic) {
                None => KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some((id, _)) => {
                    let p = (*id, entry.tp.partition);
                    let code = self.commit_code(member_id, epoch, &p);
                    if code == KafkaCode::NONE {
                        accepted.push((i, p));
                    }
                    code
                }
            };
            codes.push(code);
        }
        if let Some((log, group_id)) = &self.log {
            let entries: Vec<OffsetCommitEntry> =
                accepted.iter().map(|(i, _)| offsets[*i].clone()).collect();
            for ((i, _), (_, code)) in accepted.iter().zip(log.commit(group_id, &entries)) {
                codes[*i] = code;
            }
        }
        for (i, p) in accepted {
            if codes[i] == KafkaCode::NONE {
                self.commits.push((member_id.to_string(), p, epoch));
            }
        }
        offsets
            .iter()
            .zip(codes)
            .map(|(entry, code)| (entry.tp.clone(), code))
            .collect()
    }

    /// Whether `member_id` may commit `p` with `epoch` (see [`Coordinator::commit`]).
    fn commit_code(&self, member_id: &str, epoch: i32, p: &Partition) -> KafkaCode {
        let Some(m) = self.members.get(member_id) else {
            return KafkaCode::UNKNOWN_MEMBER_ID;
        };
        let held_since = m.assigned_at.get(p).copied();
        let accepted =
            epoch == m.epoch || held_since.is_some_and(|since| since <= epoch && epoch <= m.epoch);
        if accepted {
            KafkaCode::NONE
        } else {
            KafkaCode::STALE_MEMBER_EPOCH
        }
    }
}

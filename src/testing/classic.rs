//! An in-memory classic group coordinator: the classic protocol's group state machine as a Kafka
//! broker runs it (join rounds, generations, a leader that syncs the assignment, heartbeats,
//! commits, session expiry, static members fencing each other), with the clock advanced by the
//! test, never by sleeping.
//!
//! Why here and public: the session's unit tests pin the client's side of the protocol against
//! it, and integration tests driving a whole consumer in memory need the same broker rules, not
//! a second copy of them. Commits can land in an [`InMemoryLog`]'s committed offsets
//! ([`Coordinator::attach_log`], [`Coordinator::commit_offsets`]), so the consumer's next
//! position lookup reads what the group committed.
//!
//! A JoinGroup or SyncGroup that a broker would hold (the round is not complete, the leader has
//! not synced yet) answers `None` here; the test sends the other members' requests and then
//! collects the held answer with [`Coordinator::join_reply`] or [`Coordinator::sync_reply`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::InMemoryLog;
use crate::wire::{KafkaCode, OffsetCommitEntry};
use crate::TopicPartition;

/// The group's state, as Kafka names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    /// No round has completed yet.
    Empty,
    /// A rebalance began: every member must send JoinGroup.
    PreparingRebalance,
    /// The round completed; the leader's SyncGroup is awaited.
    CompletingRebalance,
    /// The leader synced: every member has its assignment.
    Stable,
}

/// A JoinGroup as the coordinator receives it.
#[derive(Clone, Debug)]
pub struct JoinRequest {
    /// The member id the member holds ("" for a first join: the coordinator gives one).
    pub member_id: String,
    /// `group.instance.id` of a static member: a restart with it fences the old member id.
    pub instance_id: Option<String>,
    /// (assignor name, subscription bytes), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
}

/// A JoinGroup answer.
#[derive(Clone, Debug)]
pub struct JoinReply {
    /// [`KafkaCode::NONE`], or why the join was refused (the rest is then meaningless).
    pub error_code: KafkaCode,
    /// The generation the round formed (-1 when refused).
    pub generation_id: i32,
    /// The member's id, given by the coordinator on a first join.
    pub member_id: String,
    /// The member id of the round's leader, who computes the assignment.
    pub leader: String,
    /// The assignor chosen for the round (the leader's first preference).
    pub protocol_name: Option<String>,
    /// Filled for the leader only: (member id, instance id, subscription bytes).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinReply {
    fn refused(code: KafkaCode, member_id: &str) -> Self {
        JoinReply {
            error_code: code,
            generation_id: -1,
            member_id: member_id.to_string(),
            leader: String::new(),
            protocol_name: None,
            members: Vec::new(),
        }
    }
}

struct Known {
    instance_id: Option<String>,
    /// The assignor names of its last JoinGroup.
    protocols: Option<Vec<String>>,
    last_heard: Instant,
    /// The protocols it sent in this round's JoinGroup; None until it joined this round.
    joined: Option<Vec<(String, Bytes)>>,
}

/// One classic consumer group at one coordinator.
pub struct Coordinator {
    now: Instant,
    session_timeout: Duration,
    /// Where the group is in its round; tests read it, and force a state to set up a race.
    pub state: GroupState,
    /// The current generation (0 before the first round completes).
    pub generation: i32,
    members: BTreeMap<String, Known>,
    /// The order in which members joined this round: the first is the leader.
    join_order: Vec<String>,
    /// Member ids replaced by a newer member with the same `group.instance.id`.
    fenced: BTreeSet<String>,
    next_id: u32,
    leader: Option<String>,
    join_replies: BTreeMap<String, JoinReply>,
    assignments: Option<BTreeMap<String, Bytes>>,
    /// Every commit it accepted: (member id, generation). With a log attached, a commit whose
    /// every partition the log refused is not counted.
    pub commits: Vec<(String, i32)>,
    /// True while this broker is no longer the group's coordinator: every group request is
    /// answered NOT_COORDINATOR.
    pub moved: bool,
    /// Where [`Coordinator::commit_offsets`] stores offsets, under which group id.
    log: Option<(InMemoryLog, String)>,
}

impl Coordinator {
    /// An empty group whose clock starts at `now` (moved only by [`Coordinator::advance`]),
    /// evicting members not heard from for `session_timeout`.
    pub fn new(now: Instant, session_timeout: Duration) -> Self {
        Coordinator {
            now,
            session_timeout,
            state: GroupState::Empty,
            generation: 0,
            members: BTreeMap::new(),
            join_order: Vec::new(),
            fenced: BTreeSet::new(),
            next_id: 0,
            leader: None,
            join_replies: BTreeMap::new(),
            assignments: None,
            commits: Vec::new(),
            moved: false,
            log: None,
        }
    }

    /// Stores the offsets of accepted commits ([`Coordinator::commit_offsets`]) in `log` under
    /// `group_id`, where a consumer's position lookup reads them: the group's commits and the
    /// records it reads then live in one cluster.
    pub fn attach_log(&mut self, log: InMemoryLog, group_id: &str) {
        self.log = Some((log, group_id.to_string()));
    }

    /// The coordinator's clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Time passes; members not heard from for the session timeout are evicted, except those the
    /// coordinator is holding in a join round.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        let timeout = self.session_timeout;
        let holding = self.state == GroupState::PreparingRebalance;
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !(holding && m.joined.is_some()))
            .filter(|(_, m)| now.saturating_duration_since(m.last_heard) > timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }

    /// The member ids the group holds now.
    pub fn member_ids(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// A rebalance begins (a member joined, left or was evicted; a topic grew), unless one is
    /// under way already: then the round goes on with the members that joined it.
    pub fn begin_rebalance(&mut self) {
        if self.state != GroupState::PreparingRebalance {
            self.state = GroupState::PreparingRebalance;
            self.join_order.clear();
            self.join_replies.clear();
            for member in self.members.values_mut() {
                member.joined = None;
            }
        }
    }

    fn remove(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.join_order.retain(|id| id != member_id);
            self.begin_rebalance();
            self.complete_round_if_ready();
        }
    }

    fn check(&self, member_id: &str) -> Result<(), KafkaCode> {
        if self.moved {
            return Err(KafkaCode::NOT_COORDINATOR);
        }
        if self.fenced.contains(member_id) {
            return Err(KafkaCode::FENCED_INSTANCE_ID);
        }
        if !self.members.contains_key(member_id) {
            return Err(KafkaCode::UNKNOWN_MEMBER_ID);
        }
        Ok(())
    }

    fn new_member_id(&mut self) -> String {
        self.next_id += 1;
        format!("member-{}", self.next_id)
    }

    /// JoinGroup. `None` while the round waits for other members (a broker would hold the
    /// answer; collect it with [`Coordinator::join_reply`] once the round completes).
    pub fn join(&mut self, request: JoinRequest) -> Option<JoinReply> {
        if self.moved {
            return Some(JoinReply::refused(
                KafkaCode::NOT_COORDINATOR,
                &request.member_id,
            ));
        }
        // Every member must share at least one assignor with the others.
        let offered: BTreeSet<&str> = request.protocols.iter().map(|(n, _)| n.as_str()).collect();
        let inconsistent = self
            .members
            .iter()
            .filter(|(id, _)| **id != request.member_id)
            .filter_map(|(_, m)| m.protocols.as_ref())
            .any(|theirs| !theirs.iter().any(|n| offered.contains(n.as_str())));
        if inconsistent {
            return Some(JoinReply::refused(
                KafkaCode::INCONSISTENT_GROUP_PROTOCOL,
                &request.member_id,
            ));
        }
        let mut member_id = request.member_id.clone();
        if member_id.is_empty() {
            member_id = self.new_member_id();
            match &request.instance_id {
                Some(instance) => {
                    // A static member that restarts takes over its instance id; the old member
                    // id is fenced.
                    let previous: Vec<String> = self
                        .members
                        .iter()
                        .filter(|(_, m)| m.instance_id.as_deref() == Some(instance))
                        .map(|(id, _)| id.clone())
                        .collect();
                    for old in previous {
                        self.members.remove(&old);
                        self.join_order.retain(|id| *id != old);
                        self.fenced.insert(old);
                    }
                }
                None => {
                    // KIP-394: a new dynamic member first gets its id, then joins with it.
                    self.members.insert(
                        member_id.clone(),
                        Known {
                            instance_id: None,
                            protocols: None,
                            last_heard: self.now,
                            joined: None,
                        },
                    );
                    return Some(JoinReply::refused(
                        KafkaCode::MEMBER_ID_REQUIRED,
                        &member_id,
                    ));
                }
            }
            self.members.insert(
                member_id.clone(),
                Known {
                    instance_id: request.instance_id.clone(),
                    protocols: None,
                    last_heard: self.now,
                    joined: None,
                },
            );
        }
        if let Err(code) = self.check(&member_id) {
            return Some(JoinReply::refused(code, &member_id));
        }
        self.begin_rebalance();
        let now = self.now;
        if let Some(member) = self.members.get_mut(&member_id) {
            member.last_heard = now;
            member.protocols = Some(request.protocols.iter().map(|(n, _)| n.clone()).collect());
            member.joined = Some(request.protocols);
        }
        if !self.join_order.contains(&member_id) {
            self.join_order.push(member_id.clone());
        }
        self.complete_round_if_ready();
        self.join_replies.remove(&member_id)
    }

    fn complete_round_if_ready(&mut self) {
        if self.state != GroupState::PreparingRebalance
            || self.members.is_empty()
            || self.members.values().any(|m| m.joined.is_none())
        {
            return;
        }
        self.generation += 1;
        let Some(leader) = self.join_order.first().cloned() else {
            return;
        };
        let protocol = self.members[&leader]
            .joined
            .as_ref()
            .and_then(|p| p.first())
            .map(|(name, _)| name.clone());
        let members: Vec<(String, Option<String>, Bytes)> = self
            .join_order
            .iter()
            .map(|id| {
                let m = &self.members[id];
                let metadata = m
                    .joined
                    .as_ref()
                    .and_then(|p| p.iter().find(|(n, _)| Some(n) == protocol.as_ref()))
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                (id.clone(), m.instance_id.clone(), metadata)
            })
            .collect();
        for id in &self.join_order {
            self.join_replies.insert(
                id.clone(),
                JoinReply {
                    error_code: KafkaCode::NONE,
                    generation_id: self.generation,
                    member_id: id.clone(),
                    leader: leader.clone(),
                    protocol_name: protocol.clone(),
                    members: if *id == leader {
                        members.clone()
                    } else {
                        Vec::new()
                    },
                },
            );
        }
        self.leader = Some(leader);
        self.assignments = None;
        self.state = GroupState::CompletingRebalance;
    }

    /// The answer to a JoinGroup that was held.
    pub fn join_reply(&mut self, member_id: &str) -> Option<JoinReply> {
        self.join_replies.remove(member_id)
    }

    /// SyncGroup: the leader hands in the assignment, every member gets its share. `None` while
    /// a follower waits for the leader (collect it with [`Coordinator::sync_reply`]).
    pub fn sync(
        &mut self,
        member_id: &str,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> Option<(KafkaCode, Bytes)> {
        if let Err(code) = self.check(member_id) {
            return Some((code, Bytes::new()));
        }
        if let Some(member) = self.members.get_mut(member_id) {
            member.last_heard = self.now;
        }
        if self.state == GroupState::PreparingRebalance {
            return Some((KafkaCode::REBALANCE_IN_PROGRESS, Bytes::new()));
        }
        if generation_id != self.generation {
            return Some((KafkaCode::ILLEGAL_GENERATION, Bytes::new()));
        }
        if self.state == GroupState::CompletingRebalance
            && self.leader.as_deref() == Some(member_id)
        {
            self.assignments = Some(assignments.into_iter().collect());
            self.state = GroupState::Stable;
        }
        self.sync_reply(member_id)
    }

    /// The answer to a SyncGroup that was held (once the leader synced).
    pub fn sync_reply(&self, member_id: &str) -> Option<(KafkaCode, Bytes)> {
        let assignments = self.assignments.as_ref()?;
        Some((
            KafkaCode::NONE,
            assignments.get(member_id).cloned().unwrap_or_default(),
        ))
    }

    /// Heartbeat: keeps the member's session, and tells it of a rebalance or a new generation.
    pub fn heartbeat(&mut self, member_id: &str, generation_id: i32) -> KafkaCode {
        if let Err(code) = self.check(member_id) {
            return code;
        }
        if let Some(member) = self.members.get_mut(member_id) {
            member.last_heard = self.now;
        }
        match self.state {
            GroupState::PreparingRebalance => KafkaCode::REBALANCE_IN_PROGRESS,
            _ if generation_id != self.generation => KafkaCode::ILLEGAL_GENERATION,
            _ => KafkaCode::NONE,
        }
    }

    /// OffsetCommit as the generation check sees it (one code for the whole request), with no
    /// offsets stored: for tests of who may commit when. [`Coordinator::commit_offsets`] also
    /// stores them.
    pub fn commit(&mut self, member_id: &str, generation_id: i32) -> KafkaCode {
        let code = self.commit_code(member_id, generation_id);
        if code == KafkaCode::NONE {
            self.commits.push((member_id.to_string(), generation_id));
        }
        code
    }

    /// OffsetCommit with its offsets: refused as a whole by the generation check (every
    /// partition gets the code), else stored in the attached log, which may refuse partitions
    /// of its own (see `InMemoryLog::refuse_commits`); without a log every partition is
    /// accepted and nothing is stored.
    pub fn commit_offsets(
        &mut self,
        member_id: &str,
        generation_id: i32,
        offsets: &[OffsetCommitEntry],
    ) -> Vec<(TopicPartition, KafkaCode)> {
        let code = self.commit_code(member_id, generation_id);
        if code != KafkaCode::NONE {
            return offsets.iter().map(|e| (e.tp.clone(), code)).collect();
        }
        let results = match &self.log {
            Some((log, group_id)) => log.commit(group_id, offsets),
            None => offsets
                .iter()
                .map(|e| (e.tp.clone(), KafkaCode::NONE))
                .collect(),
        };
        if offsets.is_empty() || results.iter().any(|(_, c)| *c == KafkaCode::NONE) {
            self.commits.push((member_id.to_string(), generation_id));
        }
        results
    }

    /// Whether `member_id` may commit in `generation_id` now.
    fn commit_code(&self, member_id: &str, generation_id: i32) -> KafkaCode {
        if let Err(code) = self.check(member_id) {
            return code;
        }
        if generation_id != self.generation {
            return KafkaCode::ILLEGAL_GENERATION;
        }
        // As Kafka's group coordinator: a commit in the current generation is accepted while
        // the group prepares a rebalance (it is how an eager member's revocation commits before
        // its JoinGroup), refused while the round waits for the leader's assignment.
        if self.state == GroupState::CompletingRebalance {
            return KafkaCode::REBALANCE_IN_PROGRESS;
        }
        KafkaCode::NONE
    }

    /// LeaveGroup: the member goes at once (no session to wait out) and a rebalance begins.
    pub fn leave(&mut self, member_id: &str) {
        self.remove(member_id);
    }
}

//! The share-group member as a sans-I/O machine: what to send, when, and what an answer means.
//! No socket, no thread, no clock of its own: time is passed in, so the tests drive it through
//! whole lives (join, new assignments, fencing, coordinator moves, leave) in microseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::group::consumer_group::liveness::session_bound;
use crate::group::heartbeat_errors::{self, share_groups_unsupported};
use crate::group::ids::TopicId;
use crate::group::outcome::{ErrorAction, FatalError, GroupApi};
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// The epoch a share member sends to join (or rejoin after it was fenced).
pub const SHARE_JOIN_EPOCH: i32 = 0;
/// The epoch a share member sends to leave; also the epoch of the empty assignment a member
/// that left (or failed for good) publishes.
pub const SHARE_LEAVE_EPOCH: i32 = -1;

/// How often to heartbeat before the broker said (its `group.share.heartbeat.interval.ms`).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// How many Metadata look-ups may leave a topic id of an assignment unnamed before the named
/// rest of it is published anyway (the unnamed partitions follow once named).
const METADATA_ATTEMPTS: u32 = 3;

/// Partitions by topic id, as the broker names a share assignment.
pub type ShareIdAssignment = BTreeMap<TopicId, Vec<i32>>;

/// The partitions this member may fetch from, and the member epoch that brought them.
///
/// Why the epoch: a caller that waits for a new assignment names the one it has
/// ([`super::ShareMembership::wait_for_assignment_change`]). Epoch 0 with no partitions: joined
/// (or rejoining after a fence) with nothing assigned yet; -1: out of the group (left, or failed
/// for good).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareAssignment {
    /// The member epoch of the heartbeat answer that carried this assignment.
    pub epoch: i32,
    /// The assigned partitions. In a share group another member may be assigned the same ones.
    pub partitions: BTreeSet<TopicPartition>,
    /// How many times the member was fenced (told it is not a member, to rejoin at epoch 0)
    /// before this assignment. Why: a member the group removed may have lost its share sessions
    /// and its records with them (Kafka releases a member's records when its share session
    /// ends), so the fetch side ends its share sessions' leases when this grows; counted, not
    /// flagged, so that a caller that looks only after the rejoin was answered still learns of
    /// the fence.
    pub fenced: u64,
}

/// One ShareGroupHeartbeat to send; `None` fields are "unchanged since the last heartbeat".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareHeartbeat {
    /// The group.
    pub group_id: String,
    /// The member id the client generated, kept across rejoins.
    pub member_id: String,
    /// 0 to join, -1 to leave, the broker's epoch otherwise.
    pub member_epoch: i32,
    /// The rack, on a join or after a failure.
    pub rack_id: Option<String>,
    /// The subscribed topic names: on a join, after a failure, and when they changed.
    pub subscribed_topic_names: Option<Vec<String>>,
}

/// A ShareGroupHeartbeat answer, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareHeartbeatAnswer {
    /// [`KafkaCode::NONE`] on success.
    pub error: KafkaCode,
    /// The broker's explanation of an error (escaped and bounded).
    pub error_message: Option<String>,
    /// The member epoch the broker holds.
    pub member_epoch: i32,
    /// When to heartbeat next, in milliseconds.
    pub heartbeat_interval_ms: i32,
    /// The whole assignment, when it changed; `None`: unchanged.
    pub assignment: Option<ShareIdAssignment>,
}

/// Where the member is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareState {
    /// Joining (epoch 0), first or after a fence.
    Joining,
    /// In the group, heartbeating at the broker's interval.
    Stable,
    /// The leave heartbeat (epoch -1) is due or in flight.
    Leaving,
    /// Out of the group; nothing more is sent.
    Left,
    /// Failed for good ([`ShareGroupMachine::fatal`]); nothing more is sent.
    Fatal,
}

/// What the machine needs, fixed for its life except the topics.
#[derive(Clone, Debug)]
pub struct ShareMachineConfig {
    /// The group.
    pub group_id: String,
    /// The member id (a client-generated UUID string).
    pub member_id: String,
    /// The subscribed topic names.
    pub topics: Vec<String>,
    /// The rack, sent on joining.
    pub rack: Option<String>,
    /// First delay after a retriable error; doubles per failure.
    pub retry_backoff: Duration,
    /// Cap on that delay.
    pub retry_backoff_max: Duration,
}

/// The share-group member's decisions (see the module map in `share/mod.rs`).
#[derive(Debug)]
pub struct ShareGroupMachine {
    config: ShareMachineConfig,
    state: ShareState,
    epoch: i32,
    interval: Duration,
    /// When the next heartbeat is due; `None`: at once.
    next_at: Option<Instant>,
    /// Resend every field (a join, or the last heartbeat's fate is unknown).
    send_full: bool,
    /// The topics changed since the broker last took them.
    topics_dirty: bool,
    needs_coordinator: bool,
    backoff: Duration,
    /// The assignment received but not yet published (some topic ids unnamed).
    target: Option<(i32, ShareIdAssignment)>,
    names: BTreeMap<TopicId, String>,
    metadata_at: Option<Instant>,
    metadata_failures: u32,
    published: ShareAssignment,
    /// How many fences this member had (see [`ShareAssignment::fenced`]).
    fences: u64,
    changed: bool,
    fatal: Option<FatalError>,
    answered: bool,
    /// The send time of the heartbeat in flight (the one the next answer is for).
    sent_at: Option<Instant>,
    /// The send time of the last heartbeat answered without error, and how long the session
    /// is trusted from it: what `SessionBound::renew` takes.
    renewal: Option<(Instant, Duration)>,
}

impl ShareGroupMachine {
    /// A member that has not joined yet: its first heartbeat (epoch 0, full) goes out once the
    /// coordinator is found.
    pub fn new(config: ShareMachineConfig) -> Self {
        let mut config = config;
        config.topics.sort();
        config.topics.dedup();
        let backoff = config.retry_backoff;
        ShareGroupMachine {
            config,
            state: ShareState::Joining,
            epoch: SHARE_JOIN_EPOCH,
            interval: DEFAULT_INTERVAL,
            next_at: None,
            send_full: true,
            topics_dirty: false,
            needs_coordinator: true,
            backoff,
            target: None,
            names: BTreeMap::new(),
            metadata_at: None,
            metadata_failures: 0,
            published: ShareAssignment::default(),
            fences: 0,
            changed: false,
            fatal: None,
            answered: false,
            sent_at: None,
            renewal: None,
        }
    }

    /// The member id, kept for the member's whole life.
    pub fn member_id(&self) -> &str {
        &self.config.member_id
    }

    /// Where the member is.
    pub fn state(&self) -> ShareState {
        self.state
    }

    /// The member epoch the broker gave (0 while joining).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether any heartbeat (the join) was answered without error.
    pub fn has_joined(&self) -> bool {
        self.answered
    }

    /// The reason the membership ended for good, if it did.
    pub fn fatal(&self) -> Option<&FatalError> {
        self.fatal.as_ref()
    }

    /// The latest published assignment.
    pub fn assignment(&self) -> &ShareAssignment {
        &self.published
    }

    /// The published assignment, once after each change.
    pub fn take_assignment_change(&mut self) -> Option<ShareAssignment> {
        std::mem::take(&mut self.changed).then(|| self.published.clone())
    }

    /// The heartbeat interval the broker asked for (a default before its first answer).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The send time of the last heartbeat answered without error and how long the member's
    /// place in the group can be trusted from it (derived from the heartbeat interval as the
    /// consumer group member derives it, `consumer_group/liveness.rs`: the broker keeps
    /// `group.share.session.timeout.ms` to itself): what `SessionBound::renew` takes, so that
    /// the share consumer's leases end when the group may have removed the member.
    pub fn session_renewal(&self) -> Option<(Instant, Duration)> {
        self.renewal
    }

    /// Whether the shell must find the coordinator before anything else is sent.
    pub fn needs_coordinator(&self) -> bool {
        self.needs_coordinator && !self.is_over()
    }

    fn is_over(&self) -> bool {
        matches!(self.state, ShareState::Left | ShareState::Fatal)
    }

    /// The coordinator was found: the next heartbeat (full) goes out at once.
    pub fn coordinator_found(&mut self) {
        self.needs_coordinator = false;
        self.next_at = None;
    }

    /// The subscription changed: sent with the next heartbeat, at once.
    pub fn set_topics(&mut self, topics: Vec<String>) {
        let mut topics = topics;
        topics.sort();
        topics.dedup();
        if topics != self.config.topics {
            self.config.topics = topics;
            self.topics_dirty = true;
            if self.state == ShareState::Stable {
                self.next_at = None;
            }
        }
    }

    /// The subscribed topics.
    pub fn topics(&self) -> &[String] {
        &self.config.topics
    }

    /// Leave the group: the assignment is given up at once (published empty at epoch -1) and
    /// the leave heartbeat is due at once.
    pub fn leave(&mut self) {
        if self.is_over() || self.state == ShareState::Leaving {
            return;
        }
        self.state = ShareState::Leaving;
        self.next_at = None;
        self.target = None;
        self.publish(SHARE_LEAVE_EPOCH, BTreeSet::new());
    }

    /// The leave could not be sent in time: the member counts as out (the broker expires it by
    /// its session).
    pub fn give_up_leaving(&mut self) {
        if self.state == ShareState::Leaving {
            self.state = ShareState::Left;
        }
    }

    /// The coordinator does not speak ShareGroupHeartbeat v1: fatal, naming the missing
    /// feature.
    pub fn on_unsupported(&mut self, detail: &str) {
        self.fail(share_groups_unsupported(detail));
    }

    /// When the machine wants to be called again (a heartbeat or a look-up due), if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_over() {
            return None;
        }
        match (self.next_at, self.metadata_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The heartbeat to send now, if one is due.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ShareHeartbeat> {
        if self.is_over() || self.needs_coordinator {
            return None;
        }
        if self.next_at.is_some_and(|at| now < at) {
            return None;
        }
        // Not again before the answer (the shell feeds it back before it asks again).
        self.next_at = Some(now + self.interval);
        self.sent_at = Some(now);
        let mut hb = ShareHeartbeat {
            group_id: self.config.group_id.clone(),
            member_id: self.config.member_id.clone(),
            member_epoch: self.epoch,
            rack_id: None,
            subscribed_topic_names: None,
        };
        if self.state == ShareState::Leaving {
            hb.member_epoch = SHARE_LEAVE_EPOCH;
            return Some(hb);
        }
        let full = self.send_full || self.epoch == SHARE_JOIN_EPOCH;
        if full {
            hb.rack_id = self.config.rack.clone();
        }
        if full || self.topics_dirty {
            hb.subscribed_topic_names = Some(self.config.topics.clone());
        }
        Some(hb)
    }

    /// The heartbeat's answer arrived at `now`.
    pub fn on_response(&mut self, now: Instant, answer: ShareHeartbeatAnswer) {
        if self.is_over() {
            return;
        }
        if answer.heartbeat_interval_ms > 0 {
            self.interval =
                Duration::from_millis(answer.heartbeat_interval_ms.unsigned_abs().into());
        }
        if self.state == ShareState::Leaving {
            // Answered at all (even UNKNOWN_MEMBER_ID: the broker holds nothing of us): out.
            if classify_leave(answer.error) {
                self.state = ShareState::Left;
            } else {
                self.needs_coordinator = true;
            }
            return;
        }
        if answer.error != KafkaCode::NONE {
            self.on_error(now, answer.error, answer.error_message.as_deref());
            return;
        }
        self.answered = true;
        self.backoff = self.config.retry_backoff;
        self.send_full = false;
        self.topics_dirty = false;
        self.state = ShareState::Stable;
        if answer.member_epoch >= 0 {
            self.epoch = answer.member_epoch;
        }
        if let Some(sent) = self.sent_at.take() {
            self.renewal = Some((sent, session_bound(None, self.interval)));
        }
        self.next_at = Some(now + self.interval);
        if let Some(assignment) = answer.assignment {
            self.target = Some((self.epoch, assignment));
            self.metadata_failures = 0;
            self.try_publish(now);
        }
    }

    fn on_error(&mut self, now: Instant, code: KafkaCode, message: Option<&str>) {
        match classify(code, message) {
            ErrorAction::RediscoverCoordinator => {
                self.needs_coordinator = true;
                self.send_full = true;
            }
            ErrorAction::ResetAndRejoin { .. } => {
                log::info!(
                    "share group {}: member {} answered {}: rejoining at epoch 0 with the same \
                     member id",
                    self.config.group_id,
                    self.config.member_id,
                    code.name()
                );
                self.epoch = SHARE_JOIN_EPOCH;
                self.fences = self.fences.saturating_add(1);
                self.state = ShareState::Joining;
                self.send_full = true;
                self.next_at = None;
                self.target = None;
                self.metadata_at = None;
                self.publish(SHARE_JOIN_EPOCH, BTreeSet::new());
            }
            // The table gives a heartbeat neither Proceed nor Rejoin.
            ErrorAction::Retry | ErrorAction::Proceed | ErrorAction::Rejoin => {
                self.send_full = true;
                self.next_at = Some(now + self.backoff);
                self.backoff = (self.backoff * 2).min(self.config.retry_backoff_max);
            }
            ErrorAction::Fatal(fatal) => self.fail(fatal),
        }
    }

    fn fail(&mut self, fatal: FatalError) {
        log::error!("share group {}: {fatal}", self.config.group_id);
        self.state = ShareState::Fatal;
        self.fatal = Some(fatal);
        self.target = None;
        self.metadata_at = None;
        self.publish(SHARE_LEAVE_EPOCH, BTreeSet::new());
    }

    /// The heartbeat (or the look-up before it) failed on the connection: find the
    /// coordinator again and resend everything.
    pub fn on_transport_error(&mut self, _now: Instant) {
        if self.is_over() {
            return;
        }
        self.needs_coordinator = true;
        self.send_full = true;
    }

    /// The topic ids to name through Metadata now, if any.
    pub fn poll_metadata(&self, now: Instant) -> Option<Vec<TopicId>> {
        let at = self.metadata_at?;
        if now < at {
            return None;
        }
        let (_, target) = self.target.as_ref()?;
        let ids: Vec<TopicId> = target
            .keys()
            .filter(|id| !self.names.contains_key(id))
            .copied()
            .collect();
        (!ids.is_empty()).then_some(ids)
    }

    /// Metadata named these topic ids (or none of them: `named` empty after a failure).
    pub fn on_metadata<'a>(
        &mut self,
        now: Instant,
        named: impl IntoIterator<Item = (TopicId, &'a str)>,
    ) {
        for (id, name) in named {
            self.names.insert(id, name.to_string());
        }
        self.metadata_failures += 1;
        self.try_publish(now);
    }

    /// Publishes the target once every topic id is named, or the named part after
    /// [`METADATA_ATTEMPTS`] look-ups (the rest follows when named); otherwise asks for a
    /// look-up.
    fn try_publish(&mut self, now: Instant) {
        let Some((epoch, target)) = self.target.as_ref() else {
            self.metadata_at = None;
            return;
        };
        let epoch = *epoch;
        let mut partitions = BTreeSet::new();
        let mut unnamed = Vec::new();
        for (id, parts) in target {
            match self.names.get(id) {
                Some(name) => {
                    partitions.extend(parts.iter().map(|p| TopicPartition::new(name.as_str(), *p)))
                }
                None => unnamed.push(*id),
            }
        }
        if unnamed.is_empty() {
            self.target = None;
            self.metadata_at = None;
            self.publish(epoch, partitions);
            return;
        }
        if self.metadata_failures >= METADATA_ATTEMPTS {
            log::warn!(
                "share group {}: topic ids {unnamed:?} of the assignment at epoch {epoch} are not \
                 named by Metadata yet; working on the rest meanwhile",
                self.config.group_id
            );
            self.publish(epoch, partitions);
        }
        self.metadata_at = Some(if self.metadata_failures == 0 {
            now
        } else {
            now + self.backoff
        });
    }

    fn publish(&mut self, epoch: i32, partitions: BTreeSet<TopicPartition>) {
        let next = ShareAssignment {
            epoch,
            partitions,
            fenced: self.fences,
        };
        if next != self.published {
            self.published = next;
            self.changed = true;
        }
    }
}

/// Whether an answer to the leave heartbeat ends the leave: any but the codes that send the
/// member to the coordinator again (the table's), after which the leave goes to the new one.
fn classify_leave(code: KafkaCode) -> bool {
    code == KafkaCode::NONE || !matches!(classify(code, None), ErrorAction::RediscoverCoordinator)
}

/// The ShareGroupHeartbeat column of the heartbeat error table.
fn classify(code: KafkaCode, message: Option<&str>) -> ErrorAction {
    heartbeat_errors::classify(GroupApi::ShareGroupHeartbeat, code, message)
}

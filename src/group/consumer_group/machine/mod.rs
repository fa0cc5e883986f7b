//! The membership itself: [`ConsumerGroupMembership`], fed heartbeat answers, errors, metadata,
//! revocation acknowledgements and the time, and asked for the next heartbeat, the next deadline
//! and the next event. The module documentation (`super`) has the state diagram.
//!
//! Its failure paths are in a child, `machine/failures.rs`: the heartbeat's error answers, the
//! answer to a static member's release, and the loss of the assignment.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use super::liveness::session_bound;
use super::reconcile::{self, by_id, changes, named, resolve, Owned, StaleEpochRetry};
use super::types::{
    ConsumerGroupConfig, Event, HeartbeatRequest, HeartbeatResponse, IdAssignment, RevocationId,
    JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH,
};
use crate::group::heartbeat_errors::{regex_unsupported, REGEX_VERSION};
use crate::group::ids::{generate_member_id, TopicId};
use crate::group::outcome::LostReason;
use crate::wire::KafkaCode;
use crate::TopicPartition;

mod failures;

/// Where the member is in its life; see the diagram in the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Sending epoch 0 until the broker answers with an epoch.
    Joining,
    /// A static member that lost its assignment while the broker may still hold its earlier
    /// incarnation: it sends epoch -2 under its member id first, because Kafka answers an
    /// epoch-0 join with UNRELEASED_INSTANCE_ID while the instance id's member has not left
    /// with -2, whatever the member id. Then it joins.
    Releasing,
    /// A member with nothing left to reconcile.
    Stable,
    /// A member waiting for a revocation to be acknowledged or for topic ids to resolve.
    Reconciling,
    /// Revoking everything before the leave heartbeat.
    PrepareLeaving,
    /// The leave heartbeat is due or in flight.
    Leaving,
    /// Out of the group after a leave; [`ConsumerGroupMembership::rejoin`] joins again.
    Left,
    /// Left after a poll timeout; [`ConsumerGroupMembership::rejoin`] joins again.
    Stale,
    /// Ended by a fatal error.
    Fatal,
}

impl MemberState {
    /// Whether the broker counts us as a member with an epoch.
    fn in_group(self) -> bool {
        matches!(
            self,
            MemberState::Stable | MemberState::Reconciling | MemberState::PrepareLeaving
        )
    }
}

/// The fields of the last heartbeat sent, to send only what changed. `None` means "send it":
/// all `None` after a reset makes the next heartbeat the full one.
#[derive(Debug, Default)]
struct Sent {
    rebalance_timeout_ms: Option<i32>,
    topics: Option<Vec<String>>,
    regex: Option<String>,
    assignor: Option<String>,
    rack: Option<String>,
    owned: Option<IdAssignment>,
}

#[derive(Debug)]
struct InFlight {
    sent_at: Instant,
    /// Bumped whenever the member starts over (loss, leave, rejoin): an answer to a request of
    /// an earlier life is not applied to this one.
    life: u64,
    leave: bool,
    /// The -2 heartbeat of [`MemberState::Releasing`]: its answer decides whether to join.
    release: bool,
}

#[derive(Debug)]
struct Revocation {
    id: RevocationId,
    partitions: Owned,
    deadline: Instant,
}

/// The KIP-848 membership of one consumer, sans I/O. See the module documentation.
#[derive(Debug)]
pub struct ConsumerGroupMembership {
    config: ConsumerGroupConfig,
    /// Our own id (v1: generated once, kept for life; v0: the broker's, once it gave one).
    member_id: String,
    /// v0: the broker assigns the member id; until it did, a join sends "".
    broker_assigns_id: bool,
    /// The member id was given by the broker (v0); a rejoin then sends it again.
    id_from_broker: bool,
    member_epoch: i32,
    state: MemberState,
    /// After the leave heartbeat of a poll timeout, go to `Stale` rather than `Left`.
    stale_after_leave: bool,
    /// The broker may hold an incarnation of this member id (it admitted us, or a heartbeat's
    /// answer was lost): a release can let go of it. Without it, UNRELEASED_INSTANCE_ID is
    /// another process's instance id and fatal at once.
    maybe_admitted: bool,
    /// The broker answered our release since the last loss: an UNRELEASED_INSTANCE_ID now
    /// means another member holds the instance id.
    released: bool,
    life: u64,
    coordinator_known: bool,
    in_flight: Option<InFlight>,
    interval: Option<Duration>,
    next_heartbeat: Option<Instant>,
    /// A heartbeat is due at once: owned partitions changed, or an epoch is awaited.
    urgent: bool,
    backoff: Duration,
    retry_at: Option<Instant>,
    sent: Sent,
    /// The broker's latest target assignment, by topic id.
    target: IdAssignment,
    /// The send time of the heartbeat whose answer carried `target`: the broker started the
    /// rebalance timeout of a revocation it implies no earlier than that.
    target_sent: Option<Instant>,
    names: HashMap<TopicId, Arc<str>>,
    owned: Owned,
    revoking: Option<Revocation>,
    next_revocation: u64,
    metadata_at: Option<Instant>,
    /// The send time of the last answered heartbeat and the session bound it gives.
    renewal: Option<(Instant, Duration)>,
    events: VecDeque<Event>,
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

impl ConsumerGroupMembership {
    /// A member about to join, with a freshly generated member id.
    pub fn new(config: ConsumerGroupConfig) -> Self {
        Self::with_member_id(config, generate_member_id())
    }

    /// A member about to join with the given id (tests, and a shell that persists the id).
    pub(crate) fn with_member_id(mut config: ConsumerGroupConfig, member_id: String) -> Self {
        config.topics.sort();
        config.topics.dedup();
        let backoff = config.retry_backoff;
        ConsumerGroupMembership {
            config,
            member_id,
            broker_assigns_id: false,
            id_from_broker: false,
            member_epoch: JOIN_EPOCH,
            state: MemberState::Joining,
            stale_after_leave: false,
            maybe_admitted: false,
            released: false,
            life: 0,
            coordinator_known: false,
            in_flight: None,
            interval: None,
            next_heartbeat: None,
            urgent: false,
            backoff,
            retry_at: None,
            sent: Sent::default(),
            target: IdAssignment::new(),
            target_sent: None,
            names: HashMap::new(),
            owned: Owned::new(),
            revoking: None,
            next_revocation: 0,
            metadata_at: None,
            renewal: None,
            events: VecDeque::new(),
        }
    }

    /// The member id heartbeats carry.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The epoch the broker last gave us (0 before the first join completed).
    pub fn member_epoch(&self) -> i32 {
        self.member_epoch
    }

    /// The current state.
    pub fn state(&self) -> MemberState {
        self.state
    }

    /// The partitions this member owns (including those being revoked, until acknowledged).
    pub fn owned(&self) -> Vec<TopicPartition> {
        named(&self.owned)
    }

    /// The revocation waiting for [`revocation_done`](Self::revocation_done), if any.
    pub fn pending_revocation(&self) -> Option<RevocationId> {
        self.revoking.as_ref().map(|r| r.id)
    }

    /// The epoch to commit with: the member epoch while in the group, `None` outside it (no
    /// commit may leave then).
    pub fn commit_epoch(&self) -> Option<i32> {
        (self.state.in_group() && self.member_epoch > 0).then_some(self.member_epoch)
    }

    /// The send time of the last answered heartbeat and how long the session is trusted from it:
    /// what `SessionBound::renew` takes.
    pub fn session_renewal(&self) -> Option<(Instant, Duration)> {
        self.renewal
    }

    /// The heartbeat interval the broker returned last.
    pub fn heartbeat_interval(&self) -> Option<Duration> {
        self.interval
    }

    /// Whether the shell must find the coordinator (and call
    /// [`coordinator_found`](Self::coordinator_found)) before anything can be sent.
    pub fn needs_coordinator(&self) -> bool {
        !self.coordinator_known && self.sends_heartbeats()
    }

    fn sends_heartbeats(&self) -> bool {
        !matches!(
            self.state,
            MemberState::Left | MemberState::Stale | MemberState::Fatal
        )
    }

    /// A coordinator connection is up and speaks ConsumerGroupHeartbeat `version`. With v0 the
    /// broker assigns the member id; from v1 the client's own is used. A subscription by
    /// regular expression needs v1 (Kafka 4.0+): on a coordinator that speaks only v0 (after a
    /// failover to an older broker) the membership ends with a fatal error rather than
    /// heartbeat without its subscription.
    pub fn coordinator_found(&mut self, version: i16) {
        if version < REGEX_VERSION {
            if let Some(regex) = &self.config.topic_regex {
                let fatal = regex_unsupported(regex, version);
                self.fail(fatal);
                return;
            }
        }
        self.coordinator_known = true;
        self.broker_assigns_id = version == 0;
    }

    /// The next event for the consumer, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_transmit`](Self::poll_transmit) has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut at: Vec<Instant> = Vec::new();
        if let Some(r) = &self.revoking {
            at.push(r.deadline);
        }
        if let Some(t) = self.session_deadline() {
            at.push(t);
        }
        if let Some(t) = self.metadata_at {
            at.push(t);
        }
        if self.sends_heartbeats() && self.in_flight.is_none() && self.coordinator_known {
            if let Some(t) = self.retry_at {
                at.push(t);
            } else if let Some(t) = self.next_heartbeat {
                at.push(t);
            }
        }
        at.into_iter().min()
    }

    fn session_deadline(&self) -> Option<Instant> {
        if !self.state.in_group() || self.owned.is_empty() {
            return None;
        }
        self.renewal.and_then(|(sent, d)| sent.checked_add(d))
    }

    /// Applies what time alone decides: a revocation past the rebalance timeout (the broker has
    /// fenced us by now) and a session bound passed without an answered heartbeat both lose the
    /// assignment and rejoin.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(r) = &self.revoking {
            if now >= r.deadline {
                warn!(
                    "consumer group {}: revocation {:?} not acknowledged within the rebalance \
                     timeout ({:?}); the broker fences a member that late, so the assignment is lost",
                    self.config.group_id, r.id, self.config.rebalance_timeout
                );
                self.lose(LostReason::RevocationTimedOut);
                return;
            }
        }
        if let Some(deadline) = self.session_deadline() {
            if now >= deadline {
                warn!(
                    "consumer group {}: no heartbeat answered within the session bound; the \
                     broker may have expired the member, so the assignment is lost",
                    self.config.group_id
                );
                self.lose(LostReason::SessionExpired);
            }
        }
    }

    /// The topic ids to look up in Metadata now, if any are unresolved and a lookup is due. They
    /// are asked again after the retry backoff until they resolve.
    pub fn poll_metadata(&mut self, now: Instant) -> Option<Vec<TopicId>> {
        let due = self.metadata_at?;
        if now < due {
            return None;
        }
        let ids = resolve(&self.target, &self.names).unresolved;
        if ids.is_empty() {
            self.metadata_at = None;
            return None;
        }
        self.metadata_at = Some(now + self.config.retry_backoff);
        Some(ids.into_iter().collect())
    }

    /// Names learned from Metadata (or from any metadata the consumer fetched for its
    /// subscription). Ids the broker did not know are simply absent and stay unresolved.
    pub fn on_metadata<'a>(
        &mut self,
        now: Instant,
        topics: impl IntoIterator<Item = (TopicId, &'a str)>,
    ) {
        for (id, name) in topics {
            if id != TopicId::ZERO {
                self.names.insert(id, Arc::from(name));
            }
        }
        self.reconcile(now);
    }

    /// The next heartbeat to send, if one is due at `now`: the join, the acknowledgement of a
    /// reconciliation (at once), the leave, or the periodic one at the broker's interval.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<HeartbeatRequest> {
        if !self.sends_heartbeats() || !self.coordinator_known || self.in_flight.is_some() {
            return None;
        }
        if self.retry_at.is_some_and(|t| now < t) {
            return None;
        }
        let due = match self.state {
            MemberState::Joining | MemberState::Releasing | MemberState::Leaving => true,
            _ => self.urgent || self.next_heartbeat.is_none_or(|t| now >= t),
        };
        if !due {
            return None;
        }
        let req = self.build_request();
        let release = self.state == MemberState::Releasing;
        self.in_flight = Some(InFlight {
            sent_at: now,
            life: self.life,
            leave: req.is_leave() && !release,
            release,
        });
        self.urgent = false;
        self.retry_at = None;
        Some(req)
    }

    fn build_request(&mut self) -> HeartbeatRequest {
        let instance_id = self.config.instance_id.clone();
        if matches!(self.state, MemberState::Leaving | MemberState::Releasing) {
            let epoch = if instance_id.is_some() {
                STATIC_LEAVE_EPOCH
            } else {
                LEAVE_EPOCH
            };
            return HeartbeatRequest {
                instance_id,
                ..HeartbeatRequest::unchanged(&self.config.group_id, &self.member_id, epoch)
            };
        }
        let joining = self.state == MemberState::Joining;
        if joining {
            self.sent = Sent::default();
        }
        let timeout = millis(self.config.rebalance_timeout);
        let rebalance_timeout_ms = if self.sent.rebalance_timeout_ms != Some(timeout) {
            self.sent.rebalance_timeout_ms = Some(timeout);
            timeout
        } else {
            -1
        };
        // A pattern member sends its regular expression instead of names (the broker takes
        // either at the join); each only when it changed, as every field.
        let subscribed_topic_regex = match &self.config.topic_regex {
            Some(regex) if self.sent.regex.as_ref() != Some(regex) => {
                self.sent.regex = Some(regex.clone());
                Some(regex.clone())
            }
            _ => None,
        };
        let subscribed_topic_names = (self.config.topic_regex.is_none()
            && self.sent.topics.as_ref() != Some(&self.config.topics))
        .then(|| {
            self.sent.topics = Some(self.config.topics.clone());
            self.config.topics.clone()
        });
        let assignor = self.config.remote_assignor.map(|a| a.as_str().to_string());
        let server_assignor = match assignor {
            Some(a) if self.sent.assignor.as_ref() != Some(&a) => {
                self.sent.assignor = Some(a.clone());
                Some(a)
            }
            _ => None,
        };
        // As the assignor: sent on joining (and after any full resend), `None` while unchanged.
        let rack_id = match &self.config.rack {
            Some(rack) if self.sent.rack.as_ref() != Some(rack) => {
                self.sent.rack = Some(rack.clone());
                Some(rack.clone())
            }
            _ => None,
        };
        let owned_now = by_id(&self.owned);
        let owned = (self.sent.owned.as_ref() != Some(&owned_now)).then(|| {
            self.sent.owned = Some(owned_now.clone());
            owned_now
        });
        let member_id = if joining && self.broker_assigns_id && !self.id_from_broker {
            String::new()
        } else {
            self.member_id.clone()
        };
        HeartbeatRequest {
            group_id: self.config.group_id.clone(),
            member_id,
            member_epoch: if joining {
                JOIN_EPOCH
            } else {
                self.member_epoch
            },
            instance_id,
            rebalance_timeout_ms,
            subscribed_topic_names,
            subscribed_topic_regex,
            server_assignor,
            rack_id,
            owned,
        }
    }

    /// The heartbeat could not be sent or its answer not read (connection lost, timed out), or
    /// the coordinator connection could not be opened. The coordinator is looked up again after
    /// the backoff and the next heartbeat is the full one; a leave is not retried (the broker
    /// expires the member by its session).
    pub fn on_transport_error(&mut self, now: Instant) {
        let flight = self.in_flight.take();
        if flight.as_ref().is_some_and(|f| !f.leave) {
            // It may have been applied: a join may have admitted us.
            self.maybe_admitted = true;
        }
        self.sent = Sent::default();
        self.coordinator_known = false;
        self.schedule_retry(now);
        if flight.is_some_and(|f| f.leave && f.life == self.life) {
            self.finish_leave();
        }
    }

    fn schedule_retry(&mut self, now: Instant) {
        self.urgent = true;
        self.retry_at = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(self.config.retry_backoff_max);
    }

    /// Feeds the answer to the heartbeat [`poll_transmit`](Self::poll_transmit) returned last.
    pub fn on_response(&mut self, now: Instant, response: HeartbeatResponse) {
        let Some(flight) = self.in_flight.take() else {
            warn!(
                "consumer group {}: a heartbeat answer with no heartbeat in flight is ignored",
                self.config.group_id
            );
            return;
        };
        if flight.release {
            self.on_release_answer(now, flight, response);
            return;
        }
        if flight.leave {
            if flight.life == self.life {
                if response.error != KafkaCode::NONE {
                    debug!(
                        "consumer group {}: leave answered {} (the member is out either way)",
                        self.config.group_id,
                        response.error.name()
                    );
                }
                self.finish_leave();
            }
            return;
        }
        if response.error != KafkaCode::NONE {
            self.on_error(now, flight, response);
            return;
        }
        if flight.life != self.life {
            debug!(
                "consumer group {}: answer to a heartbeat of an earlier membership ignored",
                self.config.group_id
            );
            self.sent = Sent::default();
            return;
        }
        self.backoff = self.config.retry_backoff;
        self.retry_at = None;
        if let Some(id) = response.member_id.as_deref().filter(|id| !id.is_empty()) {
            if id != self.member_id {
                debug!(
                    "consumer group {}: member id {id} (was {:?})",
                    self.config.group_id, self.member_id
                );
                self.member_id = id.to_string();
            }
            self.id_from_broker |= self.broker_assigns_id;
        }
        if response.member_epoch > 0 {
            // Admitted: a later UNRELEASED_INSTANCE_ID may again be our own incarnation.
            self.released = false;
            self.maybe_admitted = true;
            if response.member_epoch != self.member_epoch {
                debug!(
                    "consumer group {}: member epoch {} -> {}",
                    self.config.group_id, self.member_epoch, response.member_epoch
                );
            }
            self.member_epoch = response.member_epoch;
        } else {
            warn!(
                "consumer group {}: a successful heartbeat answer with epoch {} is not adopted",
                self.config.group_id, response.member_epoch
            );
            if self.state == MemberState::Joining {
                // Not joined: send the join again after the backoff.
                self.sent = Sent::default();
                self.schedule_retry(now);
                return;
            }
        }
        if response.heartbeat_interval_ms > 0 {
            let interval =
                Duration::from_millis(response.heartbeat_interval_ms.unsigned_abs().into());
            self.interval = Some(interval);
            self.renewal = Some((
                flight.sent_at,
                session_bound(self.config.session_bound, interval),
            ));
        }
        self.next_heartbeat = self.interval.map(|i| now + i);
        if self.state == MemberState::Joining {
            info!(
                "consumer group {}: joined as {} with epoch {}",
                self.config.group_id, self.member_id, self.member_epoch
            );
            self.state = MemberState::Stable;
        }
        if let Some(assignment) = response.assignment {
            if self.state.in_group() && self.state != MemberState::PrepareLeaving {
                self.target = assignment
                    .into_iter()
                    .map(|(id, mut ps)| {
                        ps.sort_unstable();
                        ps.dedup();
                        (id, ps)
                    })
                    .filter(|(_, ps)| !ps.is_empty())
                    .collect();
                self.target_sent = Some(flight.sent_at);
                self.reconcile(now);
            }
        }
    }

    fn finish_leave(&mut self) {
        self.owned.clear();
        self.target.clear();
        self.target_sent = None;
        self.revoking = None;
        self.member_epoch = JOIN_EPOCH;
        self.sent = Sent::default();
        self.next_heartbeat = None;
        self.renewal = None;
        self.life += 1;
        if self.stale_after_leave {
            self.state = MemberState::Stale;
        } else {
            self.state = MemberState::Left;
            self.events.push_back(Event::Left);
        }
        self.stale_after_leave = false;
    }

    /// Moves the owned set toward the target: revoke first (and wait for the acknowledgement),
    /// then assign; ids not resolvable yet are kept and looked up again.
    fn reconcile(&mut self, now: Instant) {
        if !matches!(self.state, MemberState::Stable | MemberState::Reconciling)
            || self.revoking.is_some()
        {
            return;
        }
        let resolved = resolve(&self.target, &self.names);
        if !resolved.unresolved.is_empty() && self.metadata_at.is_none() {
            debug!(
                "consumer group {}: topic ids {:?} not resolvable yet; asking Metadata",
                self.config.group_id, resolved.unresolved
            );
            // Due at once; `poll_metadata` spaces out the retries.
            self.metadata_at = Some(now);
        }
        let c = changes(&self.owned, &resolved.partitions);
        if !c.revoke.is_empty() {
            // The broker's timer for this revocation started when it handled the heartbeat that
            // brought the target, which is after that heartbeat left, not when its answer came.
            let since = self.target_sent.map_or(now, |sent| sent.min(now));
            self.start_revocation(since, c.revoke);
            return;
        }
        if !c.assign.is_empty() {
            let partitions = named(&c.assign);
            info!(
                "consumer group {}: assigned {:?} in epoch {}",
                self.config.group_id,
                partitions
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
                self.member_epoch
            );
            self.owned.extend(c.assign);
            self.urgent = true;
            self.events.push_back(Event::Assign {
                partitions,
                epoch: self.member_epoch,
            });
        }
        self.state = if resolved.unresolved.is_empty() {
            MemberState::Stable
        } else {
            MemberState::Reconciling
        };
    }

    /// Starts revoking `partitions`, to be acknowledged within the rebalance timeout from
    /// `since`.
    fn start_revocation(&mut self, since: Instant, partitions: Owned) {
        self.next_revocation += 1;
        let id = RevocationId(self.next_revocation);
        let names = named(&partitions);
        info!(
            "consumer group {}: revoking {:?} in epoch {}",
            self.config.group_id,
            names.iter().map(ToString::to_string).collect::<Vec<_>>(),
            self.member_epoch
        );
        self.revoking = Some(Revocation {
            id,
            partitions,
            deadline: since + self.config.rebalance_timeout,
        });
        if self.state != MemberState::PrepareLeaving {
            self.state = MemberState::Reconciling;
        }
        self.events.push_back(Event::Revoke {
            id,
            partitions: names,
            epoch: self.member_epoch,
        });
    }

    /// The poll thread finished revocation `id` (fenced, drained, committed): the partitions are
    /// given up, and the heartbeat that tells the broker goes out at once.
    pub fn revocation_done(&mut self, now: Instant, id: RevocationId) {
        let Some(r) = self.revoking.take_if(|r| r.id == id) else {
            debug!(
                "consumer group {}: acknowledgement of revocation {id:?}, which is no longer \
                 pending, ignored",
                self.config.group_id
            );
            return;
        };
        for k in r.partitions.keys() {
            self.owned.remove(k);
        }
        self.urgent = true;
        if self.state == MemberState::PrepareLeaving {
            if self.owned.is_empty() {
                self.state = MemberState::Leaving;
            } else {
                let rest = self.owned.clone();
                self.start_revocation(now, rest);
            }
            return;
        }
        self.reconcile(now);
    }

    /// Leaves the group: revokes everything owned (so that it is committed), then sends the leave
    /// heartbeat (epoch -1, or -2 for a static member, whose partitions wait for its return).
    pub fn leave(&mut self, now: Instant) {
        match self.state {
            MemberState::Left | MemberState::Stale | MemberState::Fatal | MemberState::Leaving => {}
            MemberState::PrepareLeaving => {}
            MemberState::Releasing => {
                // Owns nothing; the -2 leave is the release itself (or answers it).
                self.state = MemberState::Leaving;
            }
            MemberState::Joining => {
                if self.in_flight.is_some() {
                    // The broker may be adding us right now: say goodbye.
                    self.state = MemberState::Leaving;
                } else {
                    self.finish_leave();
                }
            }
            MemberState::Stable | MemberState::Reconciling => {
                self.state = MemberState::PrepareLeaving;
                if self.revoking.is_some() {
                    return; // the rest is revoked when this revocation is acknowledged
                }
                if self.owned.is_empty() {
                    self.state = MemberState::Leaving;
                } else {
                    let all = self.owned.clone();
                    self.start_revocation(now, all);
                }
            }
        }
    }

    /// The application stayed outside `poll` longer than `max.poll.interval.ms`: the assignment
    /// is lost (no commit: its work did not finish in time) and the member leaves at once, then
    /// waits in [`MemberState::Stale`] for [`rejoin`](Self::rejoin).
    pub fn poll_timed_out(&mut self) {
        if !self.state.in_group()
            && !matches!(self.state, MemberState::Joining | MemberState::Releasing)
        {
            return;
        }
        let epoch = self.member_epoch;
        self.drop_assignment(LostReason::PollTimeout);
        self.member_epoch = epoch;
        self.stale_after_leave = true;
        self.state = MemberState::Leaving;
    }

    /// Joins again after a leave or a poll timeout, with the same member id and epoch 0.
    pub fn rejoin(&mut self) {
        if matches!(self.state, MemberState::Left | MemberState::Stale) {
            self.state = MemberState::Joining;
            self.member_epoch = JOIN_EPOCH;
            self.sent = Sent::default();
            self.life += 1;
        }
    }

    /// The decision for a commit refused with STALE_MEMBER_EPOCH (see
    /// [`reconcile::stale_epoch_retry`]); when the newer epoch is not known yet, a heartbeat is
    /// sent at once to learn it.
    pub fn stale_epoch_retry(
        &mut self,
        attempted_epoch: i32,
        refused: &[TopicPartition],
    ) -> StaleEpochRetry {
        let decision = reconcile::stale_epoch_retry(
            attempted_epoch,
            self.commit_epoch(),
            &self.owned,
            refused,
        );
        if matches!(decision, StaleEpochRetry::AfterHeartbeat { .. }) {
            self.urgent = true;
        }
        decision
    }

    /// Topic ids the target names that are not resolved yet (for diagnostics).
    pub fn unresolved_topic_ids(&self) -> BTreeSet<TopicId> {
        resolve(&self.target, &self.names).unresolved
    }

    /// The broker's latest target, by topic id (for diagnostics and tests).
    pub fn target(&self) -> &BTreeMap<TopicId, Vec<i32>> {
        &self.target
    }
}

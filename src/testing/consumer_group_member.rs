//! A KIP-848 member in memory: the real machine (`ConsumerGroupMembership`) mirrored into the
//! real session by the same code the membership thread runs (`consumer_group/mirror.rs`), the
//! real hand-out of changes and the real commit checks, with the in-memory KIP-848
//! [`Coordinator`] in place of the broker. Each [`Membership::next_change`] takes one step of
//! the membership thread (heartbeats, topic names, the machine's events) and hands out what it
//! decided.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use super::consumer_group::Coordinator;
use super::memory_log::InMemoryLog;
use super::Journal;
use crate::group::assignor::RebalanceProtocol;
use crate::group::commit::commit_offsets;
use crate::group::consumer_group::mirror::Mirror;
use crate::group::consumer_group::{ConsumerGroupConfig, ConsumerGroupMembership};
use crate::group::handout::Handout;
use crate::group::requests::MemberIdentity;
use crate::group::session::{Shared, Timeouts};
use crate::group::{
    Ack, Change, CommitError, CommitKind, CommitResults, FenceHook, GroupConfig, GroupError,
    LostHook, Membership, MembershipView,
};
use crate::guard::SessionBound;
use crate::wire::{CommitIdentity, KafkaCode, OffsetCommitEntry, RecordSource, WireError};
use crate::TopicPartition;

/// The ConsumerGroupHeartbeat version the in-memory coordinator is found with.
const HEARTBEAT_VERSION: i16 = 1;

/// The in-memory KIP-848 group a test's members share: one coordinator and one log.
#[derive(Clone)]
pub struct Kip848Group {
    coordinator: Arc<Mutex<Coordinator>>,
    log: InMemoryLog,
    /// The members' clock: real time, moved ahead to the next heartbeat a member's machine
    /// waits for, so a test never sleeps through the broker's heartbeat interval.
    clock: Arc<Mutex<Instant>>,
}

impl Kip848Group {
    /// A group `group_id` over `log`, whose coordinator knows `topics` (name, partitions) and
    /// stores accepted commits in the log.
    pub fn new(log: InMemoryLog, group_id: &str, topics: &[(&str, i32)]) -> Self {
        let mut coordinator = Coordinator::new(topics);
        coordinator.attach_log(log.clone(), group_id);
        Kip848Group {
            coordinator: Arc::new(Mutex::new(coordinator)),
            log,
            clock: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// The clock's reading for a step whose machine waits until `due`: never behind real time,
    /// and moved ahead to `due` (time passes at once, as in a simulation).
    fn tick(&self, due: Option<Instant>) -> Instant {
        let mut clock = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        *clock = (*clock).max(Instant::now());
        if let Some(due) = due {
            *clock = (*clock).max(due);
        }
        *clock
    }

    /// The coordinator, for a test that injects what only it can (an error, an expiry).
    pub fn coordinator(&self) -> MutexGuard<'_, Coordinator> {
        self.coordinator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A member of this group for `Consumer::with_membership`, and the test's handle on it.
    pub fn member(
        &self,
        config: GroupConfig,
        hook: LostHook,
    ) -> (Box<dyn Membership>, Kip848Handle) {
        let shared = Arc::new(Shared::new(
            hook,
            Timeouts {
                session_timeout: config.session_timeout,
                max_poll_interval: config.max_poll_interval,
            },
        ));
        shared.lock().run_rounds_beside();
        let machine = ConsumerGroupMembership::new(ConsumerGroupConfig {
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            topics: config.topics.clone(),
            rebalance_timeout: config.max_poll_interval,
            remote_assignor: None,
            session_bound: None,
            retry_backoff: Duration::from_millis(1),
            retry_backoff_max: Duration::from_millis(10),
        });
        let inner = Arc::new(Mutex::new(Inner {
            group: self.clone(),
            mirror: Mirror::new(shared.clone(), config.group_id.clone(), machine),
            shared,
            config,
            handout: Handout::default(),
            journal: Arc::default(),
            paced_answer: None,
        }));
        let member = InMemoryKip848Member {
            inner: inner.clone(),
            log: self.log.clone(),
        };
        (Box::new(member), Kip848Handle(inner))
    }
}

/// What a test holds of a KIP-848 member the consumer owns.
#[derive(Clone)]
pub struct Kip848Handle(Arc<Mutex<Inner>>);

impl Kip848Handle {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One step of the membership thread, while the poll thread is inside a batch.
    pub fn step(&self) {
        self.inner().step();
    }

    /// The member's identity now (the member epoch as generation).
    pub fn identity(&self) -> MemberIdentity {
        self.inner().shared.lock().identity().clone()
    }

    /// Everything the member did so far, in order (see [`Journal`]).
    pub fn journal(&self) -> Vec<Journal> {
        self.inner()
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Inner {
    group: Kip848Group,
    mirror: Mirror,
    shared: Arc<Shared>,
    config: GroupConfig,
    handout: Handout,
    journal: Arc<Mutex<Vec<Journal>>>,
    /// A paced commit's answer not taken yet (paced commits are answered at once here).
    paced_answer: Option<Result<CommitResults, CommitError>>,
}

impl Inner {
    /// The membership thread's turn, as `thread.rs` takes it, with the coordinator in memory.
    fn step(&mut self) {
        let now = self.group.tick(self.mirror.machine.poll_timeout());
        if !self.mirror.look_at_the_session(now) {
            return;
        }
        self.mirror.machine.handle_timeout(now);
        self.mirror.take_events();
        self.mirror.sync_session();
        if self.mirror.machine.needs_coordinator() {
            self.mirror.machine.coordinator_found(HEARTBEAT_VERSION);
        }
        if let Some(ids) = self.mirror.machine.poll_metadata(now) {
            let names = self.group.coordinator().resolve(&ids);
            self.mirror
                .machine
                .on_metadata(now, names.iter().map(|(id, name)| (*id, name.as_str())));
        }
        // A few heartbeats: one to send what changed, one more for an acknowledgement due at
        // once.
        for _ in 0..3 {
            let Some(request) = self.mirror.machine.poll_transmit(now) else {
                break;
            };
            let answer = self.group.coordinator().heartbeat(now, &request);
            self.mirror.machine.on_response(now, answer);
            if let Some((at, bound)) = self.mirror.machine.session_renewal() {
                self.shared.lock().renew_bound(at, bound);
            }
            self.mirror.take_events();
            self.mirror.sync_session();
        }
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        let group = self.group.clone();
        let journal = self.journal.clone();
        commit_offsets(
            &mut |who: &CommitIdentity<'_>, offsets: &[OffsetCommitEntry]| {
                let codes = group.coordinator().commit_offsets(
                    who.member_id,
                    who.generation_id_or_member_epoch,
                    offsets,
                );
                let results: CommitResults = codes
                    .into_iter()
                    .map(|(tp, code)| match code {
                        KafkaCode::NONE => (tp, Ok(())),
                        code => (tp, Err(WireError::kafka(ApiKey::OffsetCommit, code, ""))),
                    })
                    .collect();
                journal
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Journal::committed(who, offsets, &results));
                Ok(results)
            },
            &self.shared,
            &self.config.group_id,
            self.config.group_instance_id.as_deref(),
            identity,
            offsets,
            kind,
        )
    }
}

/// The member the consumer owns, and its record source.
struct InMemoryKip848Member {
    inner: Arc<Mutex<Inner>>,
    log: InMemoryLog,
}

impl InMemoryKip848Member {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Membership for InMemoryKip848Member {
    fn next_change(&mut self, _timeout: Duration) -> Result<Option<Change>, GroupError> {
        let mut inner = self.inner();
        let inner = &mut *inner;
        let mut stepped = false;
        loop {
            inner.handout.take_reports(&inner.shared)?;
            if let Some(loss) = inner.handout.next_loss() {
                return Ok(Some(loss));
            }
            if let Some(fatal) = inner.handout.take_fatal() {
                return Err(fatal);
            }
            if let Some(change) = inner.handout.next(&inner.shared) {
                return Ok(Some(change));
            }
            if stepped {
                return Ok(None);
            }
            inner.step();
            stepped = true;
        }
    }

    fn acknowledge(&mut self, ack: Ack) {
        let mut inner = self.inner();
        let inner = &mut *inner;
        inner
            .journal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Journal::acknowledged(&ack));
        inner.handout.acknowledge(&inner.shared, ack);
    }

    fn closing(&mut self) -> Vec<Change> {
        let mut inner = self.inner();
        let inner = &mut *inner;
        inner.handout.closing(&inner.shared)
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        let mut inner = self.inner();
        inner.shared.lock().close();
        // The membership thread's leave heartbeat (epoch -1, or -2 for a static member).
        for _ in 0..5 {
            if inner.mirror.done_leaving() {
                break;
            }
            inner.step();
        }
        Ok(())
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        self.inner().commit_as(identity, offsets, kind)
    }

    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>> {
        // Paced commits are answered at once here: the classic in-memory member holds them
        // when a test asks for a commit in flight.
        let mut inner = self.inner();
        if inner.paced_answer.is_some() {
            return Err(offsets);
        }
        let identity = inner.shared.lock().identity().clone();
        let answer = inner.commit_as(&identity, &offsets, CommitKind::Paced);
        inner.paced_answer = Some(answer);
        Ok(())
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        self.inner().paced_answer.take()
    }

    fn settle_commit(&mut self) {}

    fn commit_in_flight(&self) -> bool {
        self.inner().paced_answer.is_some()
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        &mut self.log
    }

    fn identity(&self) -> MemberIdentity {
        self.inner().shared.lock().identity().clone()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        self.inner().shared.lock().owned().to_vec()
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn may_fetch(&self) -> bool {
        self.inner().shared.lock().may_fetch()
    }

    fn batch_boundary_due(&self) -> bool {
        self.inner().shared.lock().boundary_due()
    }

    fn enter_poll(&self) {
        self.inner().shared.lock().enter_poll();
    }

    fn leave_poll(&self) {
        self.inner().shared.lock().leave_poll(Instant::now());
    }

    fn wait_while_session_lapsed(&self, _bound: &SessionBound, _timeout: Duration) {}

    fn view(&self) -> MembershipView {
        let shared = self.inner().shared.clone();
        MembershipView::new(move || {
            let state = shared.lock();
            (state.identity().clone(), state.owned().to_vec())
        })
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        self.inner().shared.lock().bound_session(bound);
    }

    fn fence_revocations_with(&self, hook: FenceHook) {
        self.inner().shared.lock().fence_revocations_with(hook);
    }

    fn panic_membership_thread(&self) {
        self.inner().shared.request_panic();
    }
}

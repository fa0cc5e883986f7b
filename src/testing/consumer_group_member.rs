//! A KIP-848 member in memory: the real machine (`ConsumerGroupMembership`) mirrored into the
//! real session by the same code the membership thread runs (`consumer_group/mirror.rs`), with
//! the in-memory KIP-848 [`Coordinator`] in place of the broker, over the shell every in-memory
//! member shares (`member.rs`: the hand-out, the commit checks, the journal).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use super::consumer_group::Coordinator;
use super::member::{lock, MemberHandle, Shell, Steps};
use super::memory_log::InMemoryLog;
use crate::group::assignor::RebalanceProtocol;
use crate::group::consumer_group::mirror::Mirror;
use crate::group::consumer_group::{ConsumerGroupConfig, ConsumerGroupMembership};
use crate::group::session::{Shared, Timeouts};
use crate::group::{CommitResults, GroupConfig, LostHook, Membership};
use crate::wire::{CommitIdentity, KafkaCode, OffsetCommitEntry, WireError};

/// The ConsumerGroupHeartbeat version the in-memory coordinator is found with.
const HEARTBEAT_VERSION: i16 = 1;

/// How many leave heartbeats a closing member sends at most (the first is answered).
const LEAVE_TURNS: usize = 5;

/// The in-memory KIP-848 group a test's members share: one coordinator and one log.
#[derive(Clone)]
pub struct Kip848Group {
    coordinator: Arc<Mutex<Coordinator>>,
    log: InMemoryLog,
    /// The members' clock: real time, moved ahead to the next heartbeat a member's machine
    /// waits for, so a test never sleeps through the broker's heartbeat interval.
    clock: Arc<Mutex<Instant>>,
    /// While set, heartbeats never reach the coordinator and no answer comes back (a paused
    /// coordinator broker): each is a lost request to the member.
    held: Arc<AtomicBool>,
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
            held: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Holds every member's heartbeats (`true`) as a paused coordinator would: none reaches the
    /// coordinator and none is answered, so the members' session bounds run out while the
    /// coordinator, whose session timeout is longer, still holds them. `false` lets them through.
    pub fn hold_heartbeats(&self, hold: bool) {
        self.held.store(hold, Ordering::SeqCst);
    }

    /// Moves the members' clock `by` ahead at once (time passing while heartbeats are held).
    pub fn advance(&self, by: Duration) {
        let mut clock = lock(&self.clock);
        *clock = (*clock).max(Instant::now()) + by;
    }

    /// The clock's reading for a step whose machine waits until `due`: never behind real time,
    /// and moved ahead to `due` (time passes at once, as in a simulation).
    fn tick(&self, due: Option<Instant>) -> Instant {
        let mut clock = lock(&self.clock);
        *clock = (*clock).max(Instant::now());
        if let Some(due) = due {
            *clock = (*clock).max(due);
        }
        *clock
    }

    /// The coordinator, for a test that injects what only it can (an error, an expiry).
    pub fn coordinator(&self) -> MutexGuard<'_, Coordinator> {
        lock(&self.coordinator)
    }

    /// A member of this group for `Consumer::with_membership`, and the test's handle on it.
    pub fn member(
        &self,
        config: GroupConfig,
        hook: LostHook,
    ) -> (Box<dyn Membership>, MemberHandle) {
        let shared = Arc::new(Shared::new(hook, Timeouts::of(&config)));
        shared.lock().run_rounds_beside();
        let machine = ConsumerGroupMembership::new(ConsumerGroupConfig {
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            topics: config.topics.clone(),
            topic_regex: None,
            rebalance_timeout: config.max_poll_interval,
            remote_assignor: None,
            rack: config.rack.clone(),
            session_bound: None,
            retry_backoff: Duration::from_millis(1),
            retry_backoff_max: Duration::from_millis(10),
        });
        let steps = Kip848Steps {
            group: self.clone(),
            mirror: Mirror::new(shared.clone(), config.group_id.clone(), machine),
            shared,
            config,
        };
        Shell::member(steps, self.log.clone())
    }
}

/// The KIP-848 side of an in-memory member: the machine, mirrored into the session.
pub(crate) struct Kip848Steps {
    group: Kip848Group,
    mirror: Mirror,
    shared: Arc<Shared>,
    config: GroupConfig,
}

impl Steps for Kip848Steps {
    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Incremental, as cooperative: only what moves is revoked.
    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    /// The membership thread's turn, as `consumer_group/thread.rs` takes it (`Mirror::turn`,
    /// the same code), with the coordinator in memory: what the poll thread did goes in, the
    /// machine's timers run, the coordinator is "found", topic ids named, and the heartbeats due
    /// are answered.
    fn step(&mut self) {
        let now = self.group.tick(self.mirror.machine.poll_timeout());
        if !self.mirror.turn(now) {
            return;
        }
        if self.mirror.machine.needs_coordinator() {
            self.mirror.machine.coordinator_found(HEARTBEAT_VERSION);
        }
        if let Some(ids) = self.mirror.machine.poll_metadata(now) {
            let names = self.group.coordinator().resolve(&ids);
            self.mirror
                .machine
                .on_metadata(now, names.iter().map(|(id, name)| (*id, name.as_str())));
        }
        // One heartbeat for what changed, and the ones due at once after it (an
        // acknowledgement), bounded.
        for _ in 0..3 {
            let Some(request) = self.mirror.machine.poll_transmit(now) else {
                break;
            };
            if self.group.held.load(Ordering::SeqCst) {
                // Never reached the coordinator; the request timed out.
                drop(request);
                self.mirror.machine.on_transport_error(now);
                self.mirror.hand_over();
                break;
            }
            let answer = self.group.coordinator().heartbeat(now, &request);
            self.mirror.machine.on_response(now, answer);
            if let Some((at, bound)) = self.mirror.machine.session_renewal() {
                self.shared.lock().renew_bound(at, bound);
            }
            self.mirror.hand_over();
        }
    }

    /// The coordinator's per-partition epoch check, then the log.
    fn send_commit(
        &self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<CommitResults, WireError> {
        let codes = self.group.coordinator().commit_offsets(
            who.member_id,
            who.generation_id_or_member_epoch,
            offsets,
        );
        Ok(codes
            .into_iter()
            .map(|(tp, code)| match code {
                KafkaCode::NONE => (tp, Ok(())),
                code => (tp, Err(WireError::kafka(ApiKey::OffsetCommit, code, ""))),
            })
            .collect())
    }

    /// The membership thread's leave heartbeat (epoch -1, or -2 for a static member).
    fn leave(&mut self) {
        for _ in 0..LEAVE_TURNS {
            if self.mirror.done_leaving() {
                break;
            }
            self.step();
        }
    }
}

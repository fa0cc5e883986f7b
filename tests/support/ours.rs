//! Our own group member, run on a thread of its own the way a consumer's poll loop runs it, so
//! tests can watch its events and ownership next to peer members.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rebalance_guard::group::consumer_group::ConsumerGroupConfig;
use rebalance_guard::group::{
    close_with, poll_with, ClassicMember, ConsumerGroupMember, GroupConfig, GroupContext,
    GroupError, LostReason, Membership, RebalanceListener,
};
use rebalance_guard::wire::ClientConfig;
use rebalance_guard::{ErrorChain, TopicPartition};

/// One membership event as our listener saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OurEvent {
    /// Partitions assigned (only the new ones under cooperative), with the generation.
    Assigned(Vec<(String, i32)>, i32),
    /// Partitions revoked, with the generation the revocation commits in.
    Revoked(Vec<(String, i32)>, i32),
    /// Partitions lost, with the reason.
    Lost(Vec<(String, i32)>, String),
    /// The lost hook fired (from whichever thread detected the loss).
    Fenced(Vec<(String, i32)>),
    /// We led the rebalance of this generation (computed the assignment).
    Led(i32),
    /// `poll` failed.
    Error(String),
}

fn names(partitions: &[TopicPartition]) -> Vec<(String, i32)> {
    partitions
        .iter()
        .map(|tp| (tp.topic.to_string(), tp.partition))
        .collect()
}

#[derive(Default)]
struct Log {
    events: Vec<OurEvent>,
    /// When each event of `events` was recorded (same index).
    times: Vec<Instant>,
    owned: BTreeSet<(String, i32)>,
}

#[derive(Default)]
struct Observed {
    log: Mutex<Log>,
    changed: Condvar,
}

impl Observed {
    fn push(&self, event: OurEvent) {
        let mut log = self.log.lock().unwrap();
        match &event {
            OurEvent::Assigned(p, _) => log.owned.extend(p.iter().cloned()),
            OurEvent::Revoked(p, _) | OurEvent::Lost(p, _) => {
                for tp in p {
                    log.owned.remove(tp);
                }
            }
            _ => {}
        }
        log.events.push(event);
        log.times.push(Instant::now());
        self.changed.notify_all();
    }
}

struct Listener(Arc<Observed>);

impl RebalanceListener for Listener {
    fn on_partitions_revoked(&mut self, ctx: &mut GroupContext<'_>, partitions: &[TopicPartition]) {
        self.0
            .push(OurEvent::Revoked(names(partitions), ctx.generation_id()));
    }

    fn on_partitions_assigned(
        &mut self,
        ctx: &mut GroupContext<'_>,
        partitions: &[TopicPartition],
    ) {
        if ctx.is_leader() {
            self.0.push(OurEvent::Led(ctx.generation_id()));
        }
        self.0
            .push(OurEvent::Assigned(names(partitions), ctx.generation_id()));
    }

    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], reason: &LostReason) {
        self.0
            .push(OurEvent::Lost(names(partitions), format!("{reason:?}")));
    }
}

/// Settings for [`OurMember::start`].
#[derive(Clone, Debug)]
pub struct OurMemberSpec {
    pub bootstrap: String,
    pub group: String,
    pub topics: Vec<String>,
    pub strategies: Vec<rebalance_guard::group::Strategy>,
    pub instance_id: Option<String>,
    pub session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub max_poll_interval_ms: u64,
    /// `group.protocol=consumer` (KIP-848): the broker assigns; `strategies`,
    /// `session_timeout_ms` and `heartbeat_interval_ms` are then not sent.
    pub consumer_protocol: bool,
}

impl OurMemberSpec {
    /// The group timings of [`FAST_REBALANCE`](super::FAST_REBALANCE).
    pub fn new(bootstrap: &str, group: &str, topic: &str, strategy: &str) -> Self {
        OurMemberSpec {
            bootstrap: bootstrap.to_string(),
            group: group.to_string(),
            topics: vec![topic.to_string()],
            strategies: vec![rebalance_guard::group::Strategy::from_name(strategy)
                .unwrap_or_else(|| panic!("no assignor is named {strategy:?}"))],
            instance_id: None,
            session_timeout_ms: u64::from(super::FAST_REBALANCE.session_timeout_ms),
            heartbeat_interval_ms: u64::from(super::FAST_REBALANCE.heartbeat_interval_ms),
            max_poll_interval_ms: u64::from(super::FAST_REBALANCE.max_poll_interval_ms),
            consumer_protocol: false,
        }
    }
}

/// Our member on its own poll thread.
pub struct OurMember {
    observed: Arc<Observed>,
    stop: Arc<AtomicBool>,
    /// While non-zero, the poll thread does not poll until this instant (ms since `epoch`).
    pause_until_ms: Arc<AtomicU64>,
    epoch: Instant,
    thread: Option<JoinHandle<()>>,
}

impl OurMember {
    pub fn start(spec: OurMemberSpec) -> OurMember {
        let _ = env_logger::builder().is_test(true).try_init();
        let observed = Arc::new(Observed::default());
        let stop = Arc::new(AtomicBool::new(false));
        let pause_until_ms = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let hook_observed = observed.clone();
        let hook = Arc::new(move |partitions: &[TopicPartition], _: &LostReason| {
            hook_observed.push(OurEvent::Fenced(names(partitions)));
        });
        let config = GroupConfig {
            group_id: spec.group.clone(),
            group_instance_id: spec.instance_id.clone(),
            topics: spec.topics.clone(),
            pattern: None,
            exclude_internal_topics: true,
            metadata_max_age: Duration::from_secs(300),
            strategies: spec.strategies.clone(),
            session_timeout: Duration::from_millis(spec.session_timeout_ms),
            heartbeat_interval: Duration::from_millis(spec.heartbeat_interval_ms),
            max_poll_interval: Duration::from_millis(spec.max_poll_interval_ms),
            rack: None,
        };
        let client = ClientConfig::from_bootstrap_str(&spec.bootstrap);
        let (thread_observed, thread_stop, thread_pause) =
            (observed.clone(), stop.clone(), pause_until_ms.clone());
        let thread = thread::spawn(move || {
            let made = if spec.consumer_protocol {
                let protocol = ConsumerGroupConfig {
                    group_id: spec.group.clone(),
                    instance_id: spec.instance_id.clone(),
                    topics: spec.topics.clone(),
                    topic_regex: None,
                    rebalance_timeout: Duration::from_millis(spec.max_poll_interval_ms),
                    remote_assignor: None,
                    rack: None,
                    session_bound: None,
                    retry_backoff: Duration::from_millis(100),
                    retry_backoff_max: Duration::from_secs(1),
                };
                ConsumerGroupMember::new(config, protocol, client, hook)
                    .map(|m| Box::new(m) as Box<dyn Membership>)
            } else {
                ClassicMember::new(config, client, hook).map(|m| Box::new(m) as Box<dyn Membership>)
            };
            let mut member = match made {
                Ok(member) => member,
                Err(e) => {
                    thread_observed.push(OurEvent::Error(ErrorChain(&e).to_string()));
                    return;
                }
            };
            let mut listener = Listener(thread_observed.clone());
            while !thread_stop.load(Ordering::SeqCst) {
                let pause = thread_pause.load(Ordering::SeqCst);
                if pause > 0 && (epoch.elapsed().as_millis() as u64) < pause {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                match poll_with(&mut *member, &mut listener, Duration::from_millis(200)) {
                    Ok(()) => {}
                    Err(GroupError::Closed) => return,
                    Err(e) => {
                        thread_observed.push(OurEvent::Error(ErrorChain(&e).to_string()));
                        return;
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
            if let Err(e) = close_with(&mut *member, &mut listener) {
                thread_observed.push(OurEvent::Error(ErrorChain(&e).to_string()));
            }
        });
        OurMember {
            observed,
            stop,
            pause_until_ms,
            epoch,
            thread: Some(thread),
        }
    }

    /// The partitions our listener believes it owns.
    pub fn owned(&self) -> BTreeSet<(String, i32)> {
        self.observed.log.lock().unwrap().owned.clone()
    }

    pub fn events(&self) -> Vec<OurEvent> {
        self.observed.log.lock().unwrap().events.clone()
    }

    /// Every event with the instant it was recorded, for replaying several members' events on
    /// one clock (all members of a test run in this process).
    pub fn timed_events(&self) -> Vec<(Instant, OurEvent)> {
        let log = self.observed.log.lock().unwrap();
        log.times
            .iter()
            .copied()
            .zip(log.events.iter().cloned())
            .collect()
    }

    /// Waits until `done(events)` holds; the error carries the event log.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&[OurEvent], &BTreeSet<(String, i32)>) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut log = self.observed.log.lock().unwrap();
        loop {
            if done(&log.events, &log.owned) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what}; events: {:?}",
                    log.events
                ));
            }
            log = self
                .observed
                .changed
                .wait_timeout(log, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Simulates a handler stuck for `duration`: the poll thread does not poll.
    pub fn stall(&self, duration: Duration) {
        let until = self.epoch.elapsed() + duration;
        self.pause_until_ms
            .store(until.as_millis() as u64, Ordering::SeqCst);
    }

    /// Ends a [`stall`](Self::stall) now: the poll thread polls again.
    pub fn resume(&self) {
        self.pause_until_ms.store(0, Ordering::SeqCst);
    }

    /// Closes the member (revoke, LeaveGroup unless static) and waits for its thread.
    pub fn close(mut self) -> Vec<OurEvent> {
        self.shut_down();
        self.events()
    }

    /// Like [`close`](Self::close), but keeps the handle so that its events can still be read
    /// (e.g. replayed with the other members' events afterwards).
    pub fn shut_down(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for OurMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A listener for a member driven on the test's own thread (no poll thread of its own): records
/// what it was told, and takes `assign_delay` in each assignment (a consumer's callback looks
/// up positions and may wait for a drain there).
#[derive(Default)]
pub struct Recorder {
    pub assign_delay: Duration,
    pub assigned: Vec<TopicPartition>,
    pub lost: Vec<(Vec<TopicPartition>, String)>,
}

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, _: &mut GroupContext<'_>, partitions: &[TopicPartition]) {
        self.assigned.retain(|tp| !partitions.contains(tp));
    }

    fn on_partitions_assigned(&mut self, _: &mut GroupContext<'_>, partitions: &[TopicPartition]) {
        thread::sleep(self.assign_delay);
        self.assigned.extend(partitions.iter().cloned());
    }

    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], reason: &LostReason) {
        self.assigned.retain(|tp| !partitions.contains(tp));
        self.lost.push((partitions.to_vec(), format!("{reason:?}")));
    }
}

/// A range member of `group` for `topics` with the session of
/// [`FAST_REBALANCE`](super::FAST_REBALANCE) and heartbeats every [`DEADLINE_HEARTBEAT`], to be
/// polled by the test itself; the counter tells how often its lost hook fired. The heartbeat
/// interval of [`direct_member`], shorter than [`FAST_REBALANCE`](super::FAST_REBALANCE)'s: the
/// deadline tests that poll it use `max.poll.interval.ms` of a second, and the heartbeat thread
/// checks that deadline at each tick.
pub const DEADLINE_HEARTBEAT: Duration = Duration::from_millis(100);

pub fn direct_member(
    bootstrap: &str,
    group: &str,
    topics: Vec<String>,
    max_poll_interval: Duration,
) -> (ClassicMember, Arc<AtomicUsize>) {
    let _ = env_logger::builder().is_test(true).try_init();
    let fenced = Arc::new(AtomicUsize::new(0));
    let counter = fenced.clone();
    let config = GroupConfig {
        group_id: group.to_string(),
        group_instance_id: None,
        topics,
        pattern: None,
        exclude_internal_topics: true,
        metadata_max_age: Duration::from_secs(300),
        strategies: vec![rebalance_guard::group::Strategy::Range],
        session_timeout: Duration::from_millis(u64::from(super::FAST_REBALANCE.session_timeout_ms)),
        heartbeat_interval: DEADLINE_HEARTBEAT,
        max_poll_interval,
        rack: None,
    };
    let hook = Arc::new(move |_: &[TopicPartition], _: &LostReason| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let member = ClassicMember::new(config, ClientConfig::from_bootstrap_str(bootstrap), hook)
        .expect("member");
    (member, fenced)
}

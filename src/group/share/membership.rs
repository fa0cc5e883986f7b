//! [`ShareMembership`]: a member of a share group on its own heartbeat thread, the API the
//! share consumer (and the tests) hold.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::machine::{ShareAssignment, ShareGroupMachine, ShareMachineConfig};
use super::thread::{spawn, Shared, State, Stop};
use crate::group::error::GroupError;
use crate::group::ids::generate_member_id;
use crate::guard::{lease_now, SessionBound};
use crate::wire::{ClientConfig, Nudge, WireError};

/// How a share member is set up.
#[derive(Clone)]
pub struct ShareMembershipConfig {
    /// The connection settings (bootstrap, security, backoffs); the heartbeat thread builds
    /// its own client from them.
    pub client: ClientConfig,
    /// The share group's id (a group id no classic, consumer or streams group uses).
    pub group_id: String,
    /// The subscribed topic names (change them later with [`ShareMembership::subscribe`]).
    pub topics: Vec<String>,
    /// `client.rack`, sent on joining.
    pub rack: Option<String>,
    /// The bound of one heartbeat round trip (the client's request timeout): a heartbeat
    /// stuck longer than this counts as lost, and the coordinator is looked up again.
    pub request_timeout: Duration,
    /// How long [`ShareMembership::join`] waits for the first answered heartbeat.
    pub join_timeout: Duration,
    /// How long dropping the membership waits for its leave heartbeat (epoch -1) to be
    /// answered; past it the broker removes the member after its session timeout.
    pub leave_timeout: Duration,
    /// Called (on the heartbeat thread) after each assignment change or fatal error, e.g. to
    /// wake a poll that waits for records (`wire::Nudge`). Must be quick and never block.
    pub on_change: Option<Nudge>,
}

impl ShareMembershipConfig {
    /// A member of `group_id` subscribed to `topics`, with 5 s heartbeat round trips, 30 s to
    /// join and 5 s to leave.
    pub fn new(client: ClientConfig, group_id: &str, topics: &[&str]) -> Self {
        ShareMembershipConfig {
            client,
            group_id: group_id.to_string(),
            topics: topics.iter().map(|t| (*t).to_string()).collect(),
            rack: None,
            request_timeout: Duration::from_secs(5),
            join_timeout: Duration::from_secs(30),
            leave_timeout: Duration::from_secs(5),
            on_change: None,
        }
    }
}

impl fmt::Debug for ShareMembershipConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareMembershipConfig")
            .field("client", &self.client)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("rack", &self.rack)
            .field("request_timeout", &self.request_timeout)
            .field("join_timeout", &self.join_timeout)
            .field("leave_timeout", &self.leave_timeout)
            .field("on_change", &self.on_change.is_some())
            .finish()
    }
}

/// A member of a share group (KIP-932): it owns the heartbeat thread that keeps the
/// membership alive and follows the broker's assignment; dropping it leaves the group (epoch
/// -1), bounded by [`ShareMembershipConfig::leave_timeout`].
///
/// Why a membership of its own: in a share group the broker assigns, there is no revocation
/// handshake and nothing is committed on a rebalance (records are acknowledged one by one
/// under their locks), so the member only has to heartbeat, follow the assignment and rejoin
/// when fenced; the fetch side reads [`assignment`](Self::assignment) whenever it wants.
#[derive(Debug)]
pub struct ShareMembership {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    member_id: String,
    group_id: String,
    leave_timeout: Duration,
}

impl ShareMembership {
    /// Joins the share group and returns once the first heartbeat was answered, or with the
    /// fatal error the broker gave (e.g. `share.version` missing, authorization), or with
    /// [`WireError::Timeout`] after [`ShareMembershipConfig::join_timeout`]. The member id is
    /// generated here (a random UUID in Kafka's text form) and kept across rejoins.
    pub fn join(config: ShareMembershipConfig) -> Result<Self, GroupError> {
        if config.group_id.is_empty() {
            return Err(GroupError::Wire(WireError::Config(
                "a share group needs a non-empty group id".to_string(),
            )));
        }
        let member_id = generate_member_id();
        let mut client = config.client.clone();
        client.connection.request_timeout = config.request_timeout;
        let machine = ShareGroupMachine::new(ShareMachineConfig {
            group_id: config.group_id.clone(),
            member_id: member_id.clone(),
            topics: config.topics.clone(),
            rack: config.rack.clone(),
            retry_backoff: client.retry_backoff,
            retry_backoff_max: client.retry_backoff_max,
        });
        let shared = Arc::new(Shared::new());
        let handle = spawn(
            shared.clone(),
            client,
            machine,
            config.group_id.clone(),
            config.on_change.clone(),
        )
        .map_err(GroupError::Thread)?;
        let mut membership = ShareMembership {
            shared,
            handle: Some(handle),
            member_id,
            group_id: config.group_id.clone(),
            leave_timeout: config.leave_timeout,
        };
        let deadline = Instant::now() + config.join_timeout;
        let mut s = membership.shared.lock();
        loop {
            if s.joined {
                drop(s);
                log::info!(
                    "share group {}: joined as member {}",
                    membership.group_id,
                    membership.member_id
                );
                return Ok(membership);
            }
            if let Some(e) = failure(&s) {
                drop(s);
                membership.stop_and_join(Stop::Abandon, Duration::from_secs(1));
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                drop(s);
                // A join may have reached the broker: leave, bounded, without waiting here.
                membership.signal(Stop::Leave(lease_now() + membership.leave_timeout));
                membership.handle = None;
                return Err(GroupError::Wire(WireError::Timeout {
                    what: format!(
                        "ShareGroupHeartbeat join of share group {:?} (no answer within {:?})",
                        config.group_id, config.join_timeout
                    ),
                }));
            }
            s = membership.shared.wait(s, deadline - now);
        }
    }

    /// The member id (client-generated, kept across rejoins), as the broker and
    /// `kafka-share-groups.sh --describe` show it.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The latest assignment (cheap: one lock and a clone). Epoch 0 with no partitions while
    /// (re)joining; -1 once the member failed for good.
    pub fn assignment(&self) -> ShareAssignment {
        self.shared.lock().assignment.clone()
    }

    /// Waits until the assignment's epoch differs from `since_epoch`, the membership failed,
    /// or `timeout` passed, and returns the assignment then.
    pub fn wait_for_assignment_change(
        &self,
        since_epoch: i32,
        timeout: Duration,
    ) -> ShareAssignment {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.lock();
        loop {
            let now = Instant::now();
            if s.assignment.epoch != since_epoch || s.exited || s.fatal.is_some() || now >= deadline
            {
                return s.assignment.clone();
            }
            s = self.shared.wait(s, deadline - now);
        }
    }

    /// Hands over the session bound the share consumer's leases read (its lock guard's): every
    /// answered heartbeat renews it from its send time, starting with the latest one before
    /// this call, so that a lease ends when the group may have removed this member (see
    /// [`LockGuard::session_bound`](crate::guard::LockGuard::session_bound)).
    pub fn bound_session(&self, bound: Arc<SessionBound>) {
        let mut s = self.shared.lock();
        if let Some((sent, holds)) = s.renewal {
            bound.renew(sent, holds);
        }
        s.bound = Some(bound);
    }

    /// Changes the subscription: the next heartbeat (sent at once) carries the new topic names.
    pub fn subscribe(&self, topics: &[&str]) {
        self.shared.lock().topics = Some(topics.iter().map(|t| (*t).to_string()).collect());
        self.shared.notify();
    }

    /// `Err` with the error that ended the membership (a fatal answer, or the heartbeat thread
    /// died), `Ok` while it lives.
    pub fn status(&self) -> Result<(), GroupError> {
        match failure(&self.shared.lock()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Leaves the group (epoch -1) and waits at most `timeout` for the answer. `Ok` once the
    /// broker answered; the membership's fatal error if it had one; [`WireError::Timeout`]
    /// if no answer came in time (the broker then removes the member after its session).
    pub fn leave(mut self, timeout: Duration) -> Result<(), GroupError> {
        let failed = failure(&self.shared.lock());
        if let Some(e) = failed {
            self.stop_and_join(Stop::Abandon, Duration::from_secs(1));
            return Err(e);
        }
        self.stop_and_join(Stop::Leave(lease_now() + timeout), timeout);
        let s = self.shared.lock();
        if s.left {
            return Ok(());
        }
        if let Some(e) = failure(&s) {
            return Err(e);
        }
        Err(GroupError::Wire(WireError::Timeout {
            what: format!(
                "ShareGroupHeartbeat leave of member {} from share group {:?} (no answer within \
                 {timeout:?})",
                self.member_id, self.group_id
            ),
        }))
    }

    /// Stops the heartbeat thread without a word to the broker, as a crashed process would:
    /// the broker keeps the member (and assigns it partitions) until its session times out.
    /// For tests and tools that show what a crash costs.
    pub fn stop_without_leaving(mut self) {
        self.stop_and_join(Stop::Abandon, Duration::from_secs(1));
    }

    /// Holds the heartbeat thread's requests for `pause` (the thread keeps running, sends
    /// nothing): past the session timeout the broker removes the member, and the next
    /// heartbeat is answered UNKNOWN_MEMBER_ID, after which the member rejoins. For tests.
    #[doc(hidden)]
    pub fn pause_heartbeats(&self, pause: Duration) {
        self.shared.lock().paused_until = Some(lease_now() + pause);
        self.shared.notify();
    }

    fn signal(&self, stop: Stop) {
        self.shared.lock().stop = stop;
        self.shared.notify();
    }

    /// Asks the thread to stop, waits up to `bound` (plus a moment) for it to end, and joins
    /// it if it did; a thread still busy is left to finish its own bounded leave.
    fn stop_and_join(&mut self, stop: Stop, bound: Duration) {
        self.signal(stop);
        let deadline = Instant::now() + bound + Duration::from_millis(200);
        let mut s = self.shared.lock();
        while !s.exited {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self.shared.wait(s, deadline - now);
        }
        let exited = s.exited;
        drop(s);
        if let Some(handle) = self.handle.take() {
            if exited {
                let _ = handle.join();
            }
        }
    }
}

/// The error that ended the membership, if any.
fn failure(s: &State) -> Option<GroupError> {
    if let Some(f) = &s.fatal {
        return Some(GroupError::Fatal(f.clone()));
    }
    if let Some(m) = &s.died {
        return Some(GroupError::MembershipThreadDied(m.clone()));
    }
    if s.exited && s.stop == Stop::No {
        return Some(GroupError::MembershipThreadDied(
            "the share heartbeat thread ended".to_string(),
        ));
    }
    None
}

/// Leaves the group, bounded by the configured leave timeout.
impl Drop for ShareMembership {
    fn drop(&mut self) {
        if self.handle.is_some() {
            let bound = self.leave_timeout;
            self.stop_and_join(Stop::Leave(lease_now() + bound), bound);
        }
    }
}

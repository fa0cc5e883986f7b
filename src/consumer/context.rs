//! The guard as the consumer holds it, and what other code may ask it: a handler through its
//! [`WorkContext`], an observer thread through a [`GuardView`].
//!
//! This file is a leaf of `consumer/`: every other part of the consumer refers to the guard
//! through the [`Guard`] alias defined here, and nothing here refers back to them.

use std::sync::Arc;

use crate::guard::{GuardSnapshot, IdempotencyKey, Lease, RebalanceGuard};

/// The guard as the consumer uses it: idempotency keys are bytes (short ones held inline),
/// nothing stays buffered in it.
pub(crate) type Guard = RebalanceGuard<IdempotencyKey, ()>;

/// What a handler may ask about the record it is processing, on the poll thread (`run`) or on a
/// worker thread (`run_with_workers`).
pub struct WorkContext<'a> {
    guard: &'a Guard,
    lease: &'a Lease,
    attempt: u32,
}

impl<'a> WorkContext<'a> {
    /// The context of the record admitted under `lease`.
    pub(crate) fn new(guard: &'a Guard, lease: &'a Lease) -> Self {
        WorkContext {
            guard,
            lease,
            attempt: 1,
        }
    }

    /// The same context for the `attempt`-th try of the record (see [`WorkContext::attempt`]).
    pub(crate) fn on_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// True while the record's partition is still this member's under the assignment the record
    /// was admitted in. Check it right before an external side effect of a long handler: once it
    /// is false, another member may be processing the same record.
    ///
    /// A handler told `false` skips its effect and returns `Ok`: the record then does not count
    /// as processed (its idempotency key is not remembered, its offset not committed), and it is
    /// delivered again, here if the partition is still this member's, or to its next owner.
    pub fn is_current(&self) -> bool {
        self.guard.is_current(self.lease)
    }

    /// The fencing token of the assignment the record was admitted in: larger in every later
    /// assignment of its partition, to any member. Write it with the effect, and have the sink
    /// refuse a write whose token is below the largest it stored for the partition: a member
    /// that checked [`is_current`](Self::is_current), stalled, and writes after its partition
    /// moved is then refused by the sink itself (see the guide's "Exactly once into a
    /// database"). 0 outside a group.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// The record's lease.
    pub fn lease(&self) -> &'a Lease {
        self.lease
    }

    /// Which try of the record this is: 1 the first time, 2 on the first retry, up to
    /// `processing.retries + 1` (a handler can log it, or give up on a side effect that is
    /// not worth retrying). A record delivered again after a rebalance starts at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Read-only access to a consumer's guard from another thread.
#[derive(Clone)]
pub struct GuardView(Arc<Guard>);

impl GuardView {
    /// A view of `guard`.
    pub(crate) fn new(guard: Arc<Guard>) -> Self {
        GuardView(guard)
    }

    /// A consistent snapshot of every partition's state.
    pub fn snapshot(&self) -> GuardSnapshot {
        self.0.snapshot()
    }
}

impl std::fmt::Debug for GuardView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardView").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::guard::{GuardConfig, Suspender};
    use crate::TopicPartition;

    const SESSION: Duration = Duration::from_secs(45);

    #[test]
    fn a_suspend_of_the_machine_past_the_session_makes_the_work_contexts_lease_stale() {
        // The coordinator's session clock runs on while this machine is suspended; `Instant`
        // does not. The consumer's lease is read on the boot clock, which sees the suspend.
        let suspender = Suspender::new();
        let clock = suspender.clock();
        let guard: Guard = RebalanceGuard::with_clock(GuardConfig::default(), clock.clone())
            .expect("valid config");
        let tp = TopicPartition::new("orders", 0);
        guard.assign(std::slice::from_ref(&tp));
        let lease = guard
            .process_message(&tp, 0, None, ())
            .expect("owned partition admits");
        let bound = guard.session_bound();
        // An answered heartbeat, stamped on the same clock as the membership stamps its sends.
        bound.renew(guard.now(), SESSION);
        let ctx = WorkContext::new(&guard, &lease);
        assert!(ctx.is_current());
        assert!(!bound.is_expired_now());
        let instant_before = Instant::now();

        suspender.suspend(SESSION);

        assert!(
            Instant::now() < instant_before + SESSION,
            "Instant did not see the suspend"
        );
        assert!(
            !ctx.is_current(),
            "the lease outlived the coordinator's session"
        );
        assert!(bound.is_expired_now(), "what the poll loop asks");
        assert!(
            guard.process_message(&tp, 1, None, ()).is_err(),
            "nothing more is admitted"
        );
    }
}

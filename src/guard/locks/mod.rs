//! The lock guard: the sans-IO state machine that keeps a share group's side effects inside the
//! broker's record locks.
//!
//! In a share group (KIP-932) every record a member fetches is acquired under a lock that ends
//! by time (the ShareFetch answer's `AcquisitionLockTimeoutMs`); when it ends, the broker hands
//! the record to any member again. A handler that is still at work then races the next one, and
//! both apply the effect. The lock guard makes sure an effect is never applied once the lock
//! *may* have ended: each acquired record gets a [`LockLease`] whose deadline is the request's
//! send time plus the lock minus a safety margin ([`LockGuardConfig::margin`]), or the member's
//! session bound ([`LockGuard::session_bound`], renewed by the share membership's answered
//! heartbeats) if that comes first, and the handler asks the lease right before it acts.
//!
//! The decisions it owns, all with times passed in (no I/O, no threads):
//! 1. **Acquire** ([`LockGuard::acquired`]): a lease to run under, or a refusal: a key this
//!    member already applied is acknowledged ACCEPT without running (its earlier ACCEPT was
//!    lost), a key being processed right now is released. The same record acquired again while
//!    an earlier acquisition of it is held (only after that lease ran out and the broker
//!    redelivered) voids the earlier lease: it never reads current again, and its finish
//!    acknowledges nothing.
//! 2. **Finish** ([`LockGuard::finished`]): what to acknowledge, at most once per acquisition:
//!    ACCEPT only for an effect applied while the lease was current (the key is then
//!    remembered, a bounded number of them); RELEASE for a skipped record, an ended lease, and
//!    a retryable failure while retries remain; REJECT for a poison record or after the
//!    retries.
//! 3. **Renew** ([`LockGuard::due_for_renewal`], [`LockGuard::renewed`]): records still running
//!    past half their lock, when the broker supports RENEW; an answered renewal moves the
//!    deadline forward (never back), which the worker holding the lease sees at once.
//! 4. **Acknowledgement answers** ([`LockGuard::ack_result`]): counted by type; a refused
//!    ACCEPT means the lock was lost, and is never sent again as ACCEPT.
//!
//! The guard is one value that the caller owns (`&mut self`; share it behind a mutex if workers
//! report their finishes themselves); only the leases are shared, lock-free.
//!
//! # Map
//!
//! - `mod.rs` (this file): the [`LockGuard`] and its decisions.
//! - `lease.rs`: the [`LockLease`] a worker holds: the deadline in one atomic, read against the
//!   lease clock (it counts suspended time) together with the member's session bound (and why
//!   Kafka makes that needed), and the [`Grant`] a lease is made from (the lock an answer
//!   granted, and the session scope that acquired it).
//! - `scope.rs`: the [`SessionScope`]: the share session (and partition) a lease belongs to;
//!   ended once, never revived, read lock-free by every lease of it.
//! - `types.rs`: the vocabulary: [`AckType`], [`Outcome`], [`Acquired`], [`LockGuardConfig`]
//!   (with the margin and why), [`LockStats`].
//! - `tests.rs`: unit tests and a property test of the decisions against a model.

mod lease;
mod scope;
#[cfg(test)]
mod tests;
mod types;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use lease::{Grant, LockLease};
pub use scope::SessionScope;
pub use types::{AckFailures, AckType, Acquired, LockGuardConfig, LockStats, Outcome};

use crate::basics::partition::PartitionMap;
use crate::guard::deadline::Timebase;
use crate::guard::key_set::KeySet;
use crate::guard::{BootClock, Clock, GuardConfigError, IdempotencyKey, SessionBound};
use crate::TopicPartition;

/// Half-way through a lock of `lock` granted in answer to a request sent at `sent_at`.
fn half_way(sent_at: Instant, lock: Duration) -> Instant {
    sent_at.checked_add(lock / 2).unwrap_or(sent_at)
}

/// One acquisition of a record that the guard tracks.
struct Held {
    /// The acquisition's number (unique within the guard).
    acquisition: u64,
    /// The share session (and partition) that acquired it.
    scope: SessionScope,
    /// The idempotency key this acquisition reserves while it runs.
    key: Option<IdempotencyKey>,
    state: State,
}

enum State {
    /// The handler has not finished.
    Running {
        lease: LockLease,
        /// The send time of the request that acquired the record: a renewal sent before it
        /// may have renewed an earlier acquisition's lock.
        acquired_at: Instant,
        /// Half-way through the latest lock granted (by the acquisition or a renewal): renewal
        /// is due from here.
        renew_from: Instant,
        renewal: Renewal,
        /// Already listed by [`LockGuard::expired`].
        reported_expired: bool,
    },
    /// Acknowledged with this type, waiting for the broker's answer until `until` (after which
    /// the lock has run out and the answer no longer matters).
    Acking { ack: AckType, until: Instant },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    Idle,
    /// A RENEW is on its way.
    Sent,
    /// The broker refused one: the lease runs out as it is.
    Stopped,
}

/// The counters of [`LockStats`] that are not read off the table.
#[derive(Debug, Default)]
struct Counters {
    accepted: u64,
    released: u64,
    rejected: u64,
    applied_after_expiry: u64,
    released_expired: u64,
    ack_failures: AckFailures,
    renewals: u64,
    renew_failures: u64,
    refused_already_applied: u64,
    refused_key_in_flight: u64,
    voided: u64,
    applied_session_ended: u64,
    released_session_lapsed: u64,
}

/// The lock guard of one share-group member: which acquired records may run, what each is
/// acknowledged with, which locks to renew (see the module notes).
pub struct LockGuard {
    config: LockGuardConfig,
    time: Timebase,
    /// How long this member's place in the group can be trusted: renewed by the share
    /// membership, read by every lease (see `lease.rs` for why a record lock needs it).
    session: Arc<SessionBound>,
    held: PartitionMap<BTreeMap<i64, Held>>,
    /// Keys whose effect this member applied, oldest forgotten first.
    applied: KeySet<IdempotencyKey>,
    /// Keys reserved by a running acquisition, with its number.
    in_flight: HashMap<IdempotencyKey, u64>,
    next_acquisition: u64,
    counters: Counters,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// A lock guard on the clock every lease of this process reads (`BootClock::shared`: it
    /// counts suspended time, as the broker's lock does, and the send stamps a lease is counted
    /// from are read on it too).
    pub fn new(config: LockGuardConfig) -> Result<Self, GuardConfigError> {
        Self::with_clock(config, BootClock::shared())
    }

    /// A lock guard whose leases read the given clock; tests use
    /// [`ManualClock`](crate::guard::ManualClock) to move time without sleeping.
    pub fn with_clock(
        config: LockGuardConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, GuardConfigError> {
        config.validate()?;
        let base = clock.now();
        Ok(Self {
            // Applied keys are only ever inserted once and never forgotten one by one, so the
            // set's CLOCK replacement forgets them in insertion order, oldest first.
            applied: KeySet::new(config.applied_keys, 1),
            config,
            session: Arc::new(SessionBound::on_clock(clock.clone())),
            time: Timebase::new(clock, base),
            held: PartitionMap::default(),
            in_flight: HashMap::new(),
            next_acquisition: 0,
            counters: Counters::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &LockGuardConfig {
        &self.config
    }

    /// The current instant on the clock the leases read.
    pub fn now(&self) -> Instant {
        self.time.now()
    }

    /// The bound in time on this member's place in the share group, for the share membership
    /// to renew with every answered heartbeat (see [`SessionBound`]): every lease ends when it
    /// passes, whatever its lock has left, since the group may have removed the member and
    /// Kafka then gives its records to others. Until it is first renewed, leases end by their
    /// lock, their session and voiding only.
    pub fn session_bound(&self) -> Arc<SessionBound> {
        self.session.clone()
    }

    /// Turns renewal on or off, for a caller that learns only after the start whether the broker
    /// supports RENEW.
    pub fn set_renewal(&mut self, enabled: bool) {
        self.config.renewal = enabled;
    }

    /// The end of a lease whose lock of `lock` was granted in answer to a request sent at
    /// `sent_at`; an overflow ends it at `sent_at` (not current).
    fn deadline(&self, sent_at: Instant, lock: Duration) -> Instant {
        sent_at
            .checked_add(lock - self.config.margin(lock))
            .unwrap_or(sent_at)
    }

    /// The broker handed this member the record at `offset` of `tp` (its `delivery_count`-th
    /// delivery) under a lock of `lock`, in answer to a ShareFetch sent at `sent_at`, outside
    /// any share session the caller tracks (the lease ends by time only). Says whether to run
    /// it. See [`acquired_in`](Self::acquired_in), which a share consumer uses.
    pub fn acquired(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        delivery_count: i16,
        key: Option<IdempotencyKey>,
        sent_at: Instant,
        lock: Duration,
    ) -> Acquired {
        let grant = Grant {
            sent_at,
            lock,
            lock_ends_by: self.now().max(sent_at).checked_add(lock).unwrap_or(sent_at),
            scope: SessionScope::new(),
        };
        self.acquired_in(tp, offset, delivery_count, key, &grant)
    }

    /// The broker handed this member the record at `offset` of `tp` (its `delivery_count`-th
    /// delivery) under `grant`: a lock of `grant.lock` in answer to a ShareFetch sent at
    /// `grant.sent_at` (the request's send time: the broker acquired the records after it, so
    /// the lock ends after `sent_at + lock`), inside the share session `grant.scope`. Says
    /// whether to run it.
    ///
    /// An acquisition of a record the guard still holds from an earlier acquisition voids the
    /// earlier one: the broker redelivers only after the earlier lock ended, so the earlier
    /// handler must not act any more and its finish acknowledges nothing. The lease is never
    /// current once `grant.scope` ended (see [`SessionScope`]).
    pub fn acquired_in(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        delivery_count: i16,
        key: Option<IdempotencyKey>,
        grant: &Grant,
    ) -> Acquired {
        let (sent_at, lock) = (grant.sent_at, grant.lock);
        let deadline = self.deadline(sent_at, lock);
        if let Some(earlier) = self.take(tp, offset) {
            self.void(tp, offset, earlier, Some(sent_at));
        }
        self.next_acquisition += 1;
        let acquisition = self.next_acquisition;
        let refusal = match &key {
            Some(key) if self.applied.contains(key) => Some(Acquired::AlreadyApplied),
            Some(key) if self.in_flight.contains_key(key) => Some(Acquired::KeyInFlight),
            _ => None,
        };
        let (held, acquired) = match refusal {
            Some(refusal) => {
                let ack = refusal.ack().unwrap_or(AckType::Release);
                match ack {
                    AckType::Accept => {
                        self.counters.refused_already_applied += 1;
                        self.counters.accepted += 1;
                    }
                    _ => {
                        self.counters.refused_key_in_flight += 1;
                        self.counters.released += 1;
                    }
                }
                log::debug!("{tp} offset {offset}: refused ({refusal:?}), acknowledged {ack:?}");
                let held = Held {
                    acquisition,
                    scope: grant.scope.clone(),
                    key: None,
                    state: State::Acking {
                        ack,
                        until: deadline,
                    },
                };
                (held, refusal)
            }
            None => {
                if let Some(key) = &key {
                    self.in_flight.insert(key.clone(), acquisition);
                }
                let lease = LockLease::new(
                    acquisition,
                    (tp.clone(), offset),
                    delivery_count,
                    key.clone(),
                    &self.time,
                    deadline,
                    self.session.clone(),
                    grant,
                );
                let held = Held {
                    acquisition,
                    scope: grant.scope.clone(),
                    key,
                    state: State::Running {
                        lease: lease.clone(),
                        acquired_at: sent_at,
                        renew_from: half_way(sent_at, lock),
                        renewal: Renewal::Idle,
                        reported_expired: false,
                    },
                };
                (held, Acquired::Run(lease))
            }
        };
        self.held
            .entry(tp.clone())
            .or_default()
            .insert(offset, held);
        acquired
    }

    /// Removes the record's entry from the table.
    fn take(&mut self, tp: &TopicPartition, offset: i64) -> Option<Held> {
        let records = self.held.get_mut(tp)?;
        let held = records.remove(&offset);
        if records.is_empty() {
            self.held.remove(tp);
        }
        held
    }

    /// The record's entry, if held.
    fn get_mut(&mut self, tp: &TopicPartition, offset: i64) -> Option<&mut Held> {
        self.held.get_mut(tp)?.get_mut(&offset)
    }

    /// Drops the key reservation of `acquisition`, if it still holds one.
    fn unreserve(&mut self, key: Option<&IdempotencyKey>, acquisition: u64) {
        if let Some(key) = key {
            if self.in_flight.get(key) == Some(&acquisition) {
                self.in_flight.remove(key);
            }
        }
    }

    /// Voids an entry taken out of the table. `redelivered_at`: the send time of the request
    /// that brought the record again, if that is why.
    fn void(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        held: Held,
        redelivered_at: Option<Instant>,
    ) {
        self.unreserve(held.key.as_ref(), held.acquisition);
        if let State::Running { lease, .. } = held.state {
            if let (Some(at), Some(deadline)) = (redelivered_at, lease.deadline()) {
                if deadline > at {
                    // The broker's lock ended before ours would have: the margin was too small
                    // for this broker, or the lock duration it reported was not the one it used.
                    log::warn!(
                        "{tp} offset {offset}: delivered again although its lease ran until \
                         {:?} after the request that brought it back was sent",
                        deadline - at
                    );
                }
            }
            lease.void();
            self.counters.voided += 1;
            log::info!("{tp} offset {offset}: lease voided while its handler runs");
        }
    }

    /// The handler of `lease`'s record finished at `now` with `outcome`: the acknowledgement to
    /// send, or `None` when the lease was voided or already finished (nothing to acknowledge:
    /// another acquisition owns the record's acknowledgement).
    ///
    /// `now` is the instant the handler finished, read from the guard's clock
    /// ([`LockLease::now`]) after the handler returned, never before its effect: the decision is
    /// made at that instant, not when the caller gets to report it. An effect applied inside
    /// its lease and drained after the lease ended is still accepted (its ACCEPT must then reach
    /// the broker before the lock, which the margin leaves room for); deciding at the drain
    /// would release it, and the broker would deliver an applied record again. A voided lease
    /// is never current, whatever the instant. The guard trusts this instant: one read before
    /// the effect, or on another clock, can turn an effect applied after the lease into an
    /// ACCEPT, so every caller reads it the way the share consumer's deliveries do: from the
    /// lease's clock, after the handler returned.
    ///
    /// - Applied under a current lease: [`AckType::Accept`], and the key is remembered as
    ///   applied.
    /// - The lease ended by `now`, whatever the outcome: [`AckType::Release`]. An effect
    ///   applied then is counted in `applied_after_expiry` (the handler did not ask the lease,
    ///   or asked too early; another member may apply it again) and its key is remembered too,
    ///   so this member does not apply it again.
    /// - Skipped: [`AckType::Release`].
    /// - Failed and retryable: [`AckType::Release`] while the delivery count is at most
    ///   `retries`, then [`AckType::Reject`]; failed and not retryable: [`AckType::Reject`].
    pub fn finished(
        &mut self,
        lease: &LockLease,
        outcome: Outcome,
        now: Instant,
    ) -> Option<AckType> {
        if !lease.finish() {
            log::warn!(
                "{} offset {}: finished twice; the second is ignored",
                lease.tp(),
                lease.offset()
            );
            return None;
        }
        let (tp, offset) = (lease.tp(), lease.offset());
        let acquisition = lease.acquisition();
        let current = lease.is_current_at(now);
        let applied = outcome == Outcome::Applied;
        if applied {
            self.remember_applied(lease.key());
        }
        let ours = self.get_mut(tp, offset).is_some_and(|held| {
            held.acquisition == acquisition && matches!(held.state, State::Running { .. })
        });
        if lease.scope().has_ended() {
            // The broker released the record when the session ended: another member may hold
            // it now, and an acknowledgement would land on its acquisition (or be refused).
            if ours {
                if let Some(held) = self.take(tp, offset) {
                    self.void(tp, offset, held, None);
                }
            }
            if applied {
                self.counters.applied_session_ended += 1;
                log::warn!(
                    "{tp} offset {offset}: effect applied, but the share session that acquired \
                     it ended: nothing can be acknowledged; another member may apply it again"
                );
            }
            return None;
        }
        if !ours {
            if applied {
                // A voided lease cannot be current: the effect came after the lock may have
                // ended.
                self.counters.applied_after_expiry += 1;
                log::warn!("{tp} offset {offset}: effect applied under a voided lease");
            }
            return None;
        }
        let ack = if !current {
            self.counters.released_expired += 1;
            if lease.session_lapsed() {
                self.counters.released_session_lapsed += 1;
                log::warn!(
                    "{tp} offset {offset}: the member's session bound passed before its \
                     finish: the group may have removed it and given the record to another"
                );
            }
            if applied {
                self.counters.applied_after_expiry += 1;
                log::warn!(
                    "{tp} offset {offset}: effect applied after its lease ended: released; \
                     another member may apply it again"
                );
            }
            AckType::Release
        } else {
            match outcome {
                Outcome::Applied => AckType::Accept,
                Outcome::Skipped => AckType::Release,
                Outcome::Failed { retryable: true }
                    if usize::try_from(lease.delivery_count())
                        .is_ok_and(|count| count <= self.config.retries) =>
                {
                    AckType::Release
                }
                Outcome::Failed { .. } => AckType::Reject,
            }
        };
        match ack {
            AckType::Accept => self.counters.accepted += 1,
            AckType::Reject => self.counters.rejected += 1,
            _ => self.counters.released += 1,
        }
        let until = lease.deadline().unwrap_or(now);
        let key = lease.key().cloned();
        self.unreserve(key.as_ref(), acquisition);
        if let Some(held) = self.get_mut(tp, offset) {
            held.key = None;
            held.state = State::Acking { ack, until };
        }
        Some(ack)
    }

    /// Remembers an applied key (once: a key already remembered keeps its age).
    fn remember_applied(&mut self, key: Option<&IdempotencyKey>) {
        if let Some(key) = key {
            if !self.applied.contains(key) {
                self.applied.insert(key.clone());
            }
        }
    }

    /// Running records past half their lock, not being renewed, whose lease is still current
    /// at `now`: send RENEW for them, then call [`renew_sent`](Self::renew_sent). Empty unless
    /// renewal is on. Sorted by partition and offset.
    pub fn due_for_renewal(&self, now: Instant) -> Vec<(TopicPartition, i64)> {
        if !self.config.renewal {
            return Vec::new();
        }
        let mut due: Vec<_> = self
            .held
            .iter()
            .flat_map(|(tp, records)| records.iter().map(move |(offset, held)| (tp, offset, held)))
            .filter(|(_, _, held)| match &held.state {
                State::Running {
                    lease,
                    renew_from,
                    renewal: Renewal::Idle,
                    ..
                } => now >= *renew_from && lease.is_current_at(now),
                _ => false,
            })
            .map(|(tp, offset, _)| (tp.clone(), *offset))
            .collect();
        due.sort();
        due
    }

    /// A RENEW for the record is on its way: it is not due again until answered. False when
    /// the record is not running.
    pub fn renew_sent(&mut self, tp: &TopicPartition, offset: i64) -> bool {
        match self.get_mut(tp, offset).map(|held| &mut held.state) {
            Some(State::Running { renewal, .. }) if *renewal != Renewal::Stopped => {
                *renewal = Renewal::Sent;
                true
            }
            _ => false,
        }
    }

    /// The broker granted a RENEW sent at `sent_at` for a lock of `lock`: the lease now ends at
    /// `sent_at + lock - margin`, unless it already ends later (an answer to an older renewal
    /// never shortens it). Ignored (false) when the record is not running, and when the renewal
    /// was sent before the request that acquired the record as it is held now (it may have
    /// renewed an earlier acquisition's lock).
    pub fn renewed(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        sent_at: Instant,
        lock: Duration,
    ) -> bool {
        let deadline = self.deadline(sent_at, lock);
        // The answer arrived by now: the renewed lock ends by now plus the lock at the latest.
        let lock_ends_by = self.now().max(sent_at).checked_add(lock).unwrap_or(sent_at);
        let Some(State::Running {
            lease,
            acquired_at,
            renew_from,
            renewal,
            ..
        }) = self.get_mut(tp, offset).map(|held| &mut held.state)
        else {
            return false;
        };
        if sent_at < *acquired_at {
            return false;
        }
        lease.extend(deadline);
        lease.extend_lock_end(lock_ends_by);
        *renew_from = (*renew_from).max(half_way(sent_at, lock));
        if *renewal == Renewal::Sent {
            *renewal = Renewal::Idle;
        }
        self.counters.renewals += 1;
        true
    }

    /// The broker refused a RENEW (or it could not be sent): the lease keeps its deadline and
    /// runs out as it was; the record is not renewed again. False when it is not running.
    pub fn renew_failed(&mut self, tp: &TopicPartition, offset: i64) -> bool {
        match self.get_mut(tp, offset).map(|held| &mut held.state) {
            Some(State::Running { renewal, .. }) => {
                *renewal = Renewal::Stopped;
                self.counters.renew_failures += 1;
                true
            }
            _ => false,
        }
    }

    /// The broker answered an acknowledgement of `kind` for the record: `ok` when it took it.
    /// A refusal is counted by type and never retried (a refused ACCEPT means the lock was
    /// lost: the record may come back, and its remembered key then refuses it). The record is
    /// no longer tracked. True when it matched the acknowledgement the guard decided for the
    /// record as held now. A RENEW's answer goes to [`renewed`](Self::renewed) or
    /// [`renew_failed`](Self::renew_failed) instead.
    pub fn ack_result(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        kind: AckType,
        ok: bool,
    ) -> bool {
        if !ok {
            match kind {
                AckType::Accept => {
                    self.counters.ack_failures.accept += 1;
                    log::warn!(
                        "{tp} offset {offset}: ACCEPT refused: the lock was lost; the record \
                         may be delivered again"
                    );
                }
                AckType::Release => self.counters.ack_failures.release += 1,
                AckType::Reject => self.counters.ack_failures.reject += 1,
                AckType::Renew => {
                    return self.renew_failed(tp, offset);
                }
                AckType::Gap => {}
            }
        }
        let matched = self
            .get_mut(tp, offset)
            .is_some_and(|held| matches!(held.state, State::Acking { ack, .. } if ack == kind));
        if matched {
            self.take(tp, offset);
        }
        matched
    }

    /// Running records whose lease ended by `now`, each listed once (their handlers will skip,
    /// and their finish releases them); and, unlisted, records whose acknowledgement was
    /// decided but never answered by the time their lock ran out are no longer tracked.
    pub fn expired(&mut self, now: Instant) -> Vec<(TopicPartition, i64)> {
        self.sweep_ended_sessions();
        let mut ended = Vec::new();
        for (tp, records) in self.held.iter_mut() {
            records.retain(|offset, held| match &mut held.state {
                State::Running {
                    lease,
                    reported_expired,
                    ..
                } => {
                    if !*reported_expired && !lease.is_current_at(now) {
                        *reported_expired = true;
                        ended.push((tp.clone(), *offset));
                    }
                    true
                }
                State::Acking { until, .. } => now < *until,
            });
        }
        self.held.retain(|_, records| !records.is_empty());
        ended.sort();
        ended
    }

    /// Stops tracking every record whose share session ended (see [`SessionScope`]): running
    /// leases are voided (counted in [`LockStats::voided`]; they already read not current) and
    /// their finishes acknowledge nothing; decided acknowledgements waiting for their answer are
    /// forgotten (they are dropped unsent, or their answer says nothing about this member any
    /// more). Returns how many were running.
    pub fn sweep_ended_sessions(&mut self) -> usize {
        let ended: Vec<(TopicPartition, i64)> = self
            .held
            .iter()
            .flat_map(|(tp, records)| {
                records
                    .iter()
                    .filter(|(_, held)| held.scope.has_ended())
                    .map(move |(offset, _)| (tp.clone(), *offset))
            })
            .collect();
        let mut running = 0;
        for (tp, offset) in ended {
            if let Some(held) = self.take(&tp, offset) {
                running += usize::from(matches!(held.state, State::Running { .. }));
                self.void(&tp, offset, held, None);
            }
        }
        if running > 0 {
            log::info!("{running} running lease(s) voided: their share session ended");
        }
        running
    }

    /// Stops tracking every record of `tp` (the partition left this member's assignment, or its
    /// share session ended): running leases are voided and their finishes acknowledge nothing.
    /// Returns how many were running.
    pub fn forget_partition(&mut self, tp: &TopicPartition) -> usize {
        let Some(records) = self.held.remove(tp) else {
            return 0;
        };
        let mut running = 0;
        for (offset, held) in records {
            running += usize::from(matches!(held.state, State::Running { .. }));
            self.void(tp, offset, held, None);
        }
        running
    }

    /// Whether the record is held and its handler has not finished.
    pub fn is_running(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.held
            .get(tp)
            .and_then(|records| records.get(&offset))
            .is_some_and(|held| matches!(held.state, State::Running { .. }))
    }

    /// The counters now.
    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        let (mut held, mut running) = (0, 0);
        for held_record in self.held.values().flat_map(BTreeMap::values) {
            held += 1;
            running += usize::from(matches!(held_record.state, State::Running { .. }));
        }
        LockStats {
            held,
            running,
            accepted: c.accepted,
            released: c.released,
            rejected: c.rejected,
            applied_after_expiry: c.applied_after_expiry,
            released_expired: c.released_expired,
            ack_failures: c.ack_failures,
            renewals: c.renewals,
            renew_failures: c.renew_failures,
            refused_already_applied: c.refused_already_applied,
            refused_key_in_flight: c.refused_key_in_flight,
            voided: c.voided,
            applied_session_ended: c.applied_session_ended,
            released_session_lapsed: c.released_session_lapsed,
        }
    }
}

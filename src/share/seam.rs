//! The share consumer's two conversations with the cluster, behind traits so that something other
//! than a broker can hold them: [`ShareSource`] (ShareFetch and ShareAcknowledge: records
//! acquired under locks, acknowledgements, renewals, the sessions' close) and [`ShareMember`]
//! (ShareGroupHeartbeat: the member id, the assignment, fences, the leave).
//!
//! Why here and why these two: they are the boundary [`ShareConsumer`](super::ShareConsumer)
//! already had (it held a `ShareFetcher` and a `ShareMembership` and called nothing else of the
//! cluster), so the consumer's own logic (turns, the lock guard's lease rule, acknowledgements
//! queued and sent between records, renewals at half the lock, release on close) runs unchanged
//! whoever answers. In production [`ShareFetcher`] and [`ShareMembership`] answer, each method
//! being theirs of the same name; tests drive the whole share consumer against the in-memory
//! share coordinator (the hidden `testing` module) on a manual clock, the way the consumer's
//! `RecordSource` and `Membership` seams let them drive the consumer.
//!
//! The traits belong to the share layer, which uses the wire and group layers below it; those
//! layers know nothing of them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::group::{GroupError, ShareAssignment, ShareMembership};
use crate::guard::SessionBound;
use crate::wire::share::{AckResult, RenewResult, ShareAck, ShareFetchRound, ShareFetcher};
use crate::wire::{FetchStats, Nudge, Result};
use crate::TopicPartition;

/// Where a share consumer acquires records and sends what it decided for them.
///
/// Implementations keep the contracts of the [`ShareFetcher`] methods of the same name: every
/// acknowledgement handed to [`acknowledge`](Self::acknowledge) is reported once, in a later
/// [`fetch`](Self::fetch), [`send_acks_now`](Self::send_acks_now) or [`close`](Self::close)
/// (applied, refused with the broker's code, or dropped with the reason); a batch's
/// [`SessionScope`](crate::guard::SessionScope) ends the moment the broker may have released its
/// records; and `sent_at` stamps are read on the clock the consumer's leases read.
pub trait ShareSource: Send {
    /// As [`ShareFetcher::assign`]: the partitions to fetch from now on.
    fn assign(&mut self, partitions: &BTreeSet<TopicPartition>);
    /// As [`ShareFetcher::assigned`].
    fn assigned(&self) -> &BTreeSet<TopicPartition>;
    /// As [`ShareFetcher::acknowledge`]: queued for the next request.
    fn acknowledge(&mut self, acks: Vec<ShareAck>);
    /// As `ShareFetcher::member_fenced`: every session's scope ends now.
    fn member_fenced(&mut self);
    /// As [`ShareFetcher::set_max_records`].
    fn set_max_records(&mut self, max_records: i32);
    /// As [`ShareFetcher::fetch_stats`].
    fn fetch_stats(&self) -> FetchStats;
    /// As [`ShareFetcher::supports_renew`].
    fn supports_renew(&self) -> bool;
    /// As [`ShareFetcher::nudge`]; `None` when a fetch never waits.
    fn nudge(&self) -> Option<Nudge>;
    /// As [`ShareFetcher::fetch`]: one round, carrying the queued acknowledgements.
    fn fetch(&mut self) -> Result<ShareFetchRound>;
    /// As [`ShareFetcher::fetch_ahead`]: the next round's requests sent now, without waiting;
    /// what they acquire comes with the next [`fetch`](Self::fetch).
    fn fetch_ahead(&mut self);
    /// As `ShareFetcher::send_acks_now`: sends the queued acknowledgements, answers later.
    fn send_acks_now(&mut self) -> Vec<AckResult>;
    /// As `ShareFetcher::has_queued_acks`.
    fn has_queued_acks(&self) -> bool;
    /// As [`ShareFetcher::renew`].
    fn renew(&mut self, records: &[(TopicPartition, i64)], timeout: Duration) -> RenewResult;
    /// As [`ShareFetcher::close`]: the last acknowledgements, then every session closed.
    fn close(self: Box<Self>, timeout: Duration) -> Vec<AckResult>;
}

impl ShareSource for ShareFetcher {
    fn assign(&mut self, partitions: &BTreeSet<TopicPartition>) {
        ShareFetcher::assign(self, partitions)
    }

    fn assigned(&self) -> &BTreeSet<TopicPartition> {
        ShareFetcher::assigned(self)
    }

    fn acknowledge(&mut self, acks: Vec<ShareAck>) {
        ShareFetcher::acknowledge(self, acks)
    }

    fn member_fenced(&mut self) {
        ShareFetcher::member_fenced(self)
    }

    fn set_max_records(&mut self, max_records: i32) {
        ShareFetcher::set_max_records(self, max_records)
    }

    fn fetch_stats(&self) -> FetchStats {
        ShareFetcher::fetch_stats(self)
    }

    fn supports_renew(&self) -> bool {
        ShareFetcher::supports_renew(self)
    }

    fn nudge(&self) -> Option<Nudge> {
        Some(ShareFetcher::nudge(self))
    }

    fn fetch(&mut self) -> Result<ShareFetchRound> {
        ShareFetcher::fetch(self)
    }

    fn fetch_ahead(&mut self) {
        ShareFetcher::fetch_ahead(self)
    }

    fn send_acks_now(&mut self) -> Vec<AckResult> {
        ShareFetcher::send_acks_now(self)
    }

    fn has_queued_acks(&self) -> bool {
        ShareFetcher::has_queued_acks(self)
    }

    fn renew(&mut self, records: &[(TopicPartition, i64)], timeout: Duration) -> RenewResult {
        ShareFetcher::renew(self, records, timeout)
    }

    fn close(self: Box<Self>, timeout: Duration) -> Vec<AckResult> {
        ShareFetcher::close(*self, timeout)
    }
}

/// The share consumer's membership of its share group.
///
/// Implementations keep the contracts of the [`ShareMembership`] methods of the same name: the
/// assignment's `fenced` count grows each time the group removed the member (its records were
/// released then), its epoch changes with every new assignment, and each heartbeat the group
/// answered renews the session bound handed over, from the heartbeat's send time on the
/// leases' clock.
pub trait ShareMember: Send {
    /// As [`ShareMembership::member_id`].
    fn member_id(&self) -> &str;
    /// As [`ShareMembership::assignment`].
    fn assignment(&self) -> ShareAssignment;
    /// As [`ShareMembership::wait_for_assignment_change`].
    fn wait_for_assignment_change(&self, since_epoch: i32, timeout: Duration) -> ShareAssignment;
    /// As [`ShareMembership::status`]: the error that ended the membership, if one did.
    fn status(&self) -> std::result::Result<(), GroupError>;
    /// As [`ShareMembership::bound_session`]: every answered heartbeat renews `bound` from
    /// its send time, for as long as the group keeps a member it has not heard from.
    fn bound_session(&self, bound: Arc<SessionBound>);
    /// As [`ShareMembership::leave`].
    fn leave(self: Box<Self>, timeout: Duration) -> std::result::Result<(), GroupError>;
}

impl ShareMember for ShareMembership {
    fn member_id(&self) -> &str {
        ShareMembership::member_id(self)
    }

    fn assignment(&self) -> ShareAssignment {
        ShareMembership::assignment(self)
    }

    fn wait_for_assignment_change(&self, since_epoch: i32, timeout: Duration) -> ShareAssignment {
        ShareMembership::wait_for_assignment_change(self, since_epoch, timeout)
    }

    fn status(&self) -> std::result::Result<(), GroupError> {
        ShareMembership::status(self)
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        ShareMembership::bound_session(self, bound)
    }

    fn leave(self: Box<Self>, timeout: Duration) -> std::result::Result<(), GroupError> {
        ShareMembership::leave(*self, timeout)
    }
}

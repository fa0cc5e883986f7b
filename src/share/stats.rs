//! The share consumer's counters: what the poll thread did, beside the lock guard's own.

use std::fmt;

use crate::guard::LockStats;
use crate::wire::FetchStats;

/// A snapshot of the share consumer's counters ([`ShareConsumer::stats`]).
///
/// [`ShareConsumer::stats`]: super::ShareConsumer::stats
#[derive(Clone, Debug, Default)]
pub struct ShareStats {
    /// The assignment epoch last followed.
    pub assignment_epoch: i32,
    /// Partitions in that assignment.
    pub assigned: usize,
    /// Records acquired from the broker (deliveries, so a redelivered record counts again).
    pub acquired: u64,
    /// Records whose lease ran out before they were handed out (released).
    pub expired_in_buffer: u64,
    /// Acknowledgements whose answer arrived (accepted, released, rejected, renewed, gaps).
    pub acknowledgements: u64,
    /// ShareFetch rounds (each carries the acknowledgements queued before it).
    pub fetch_round_trips: u64,
    /// Requests that carried acknowledgements (a ShareFetch round with some queued before it, a
    /// ShareAcknowledge of a flush or of the close).
    pub ack_round_trips: u64,
    /// Renewal requests (ShareAcknowledge with RENEW).
    pub renew_round_trips: u64,
    /// Partition-level errors in ShareFetch answers.
    pub fetch_errors: u64,
    /// Records acquired and not yet handed out.
    pub buffered: usize,
    /// Records handed out and not yet reported back.
    pub outstanding: usize,
    /// The lock guard's decisions (accepted, released, rejected, failures, renewals, refusals).
    pub locks: LockStats,
    /// What each broker's ShareFetch answers carried (record bytes, answers): the consumer's
    /// `ConsumerStats::fetch`, the same shape counted the same way.
    pub fetch: FetchStats,
}

impl fmt::Display for ShareStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch={} assigned={} acquired={} expired_in_buffer={} acks={} ack_round_trips={} fetches={} renews={} \
             fetch_errors={} buffered={} outstanding={} locks={:?}",
            self.assignment_epoch,
            self.assigned,
            self.acquired,
            self.expired_in_buffer,
            self.acknowledgements,
            self.ack_round_trips,
            self.fetch_round_trips,
            self.renew_round_trips,
            self.fetch_errors,
            self.buffered,
            self.outstanding,
            self.locks
        )?;
        write!(f, " fetched_bytes=")?;
        self.fetch.write_bytes(f)
    }
}

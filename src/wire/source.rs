//! [`RecordSource`]: the three requests a consumer's poll thread makes for records and positions,
//! behind a trait so that something other than a broker can answer them.
//!
//! Why: the poll loop's intake (fetching, and looking up where each partition starts) is the
//! only place the poll thread reads records or positions from the cluster. With those reads
//! behind this trait, tests drive the whole consumer against an in-memory log
//! (the hidden `testing` module), deterministic and without a broker, while [`Client`] answers them in
//! production with exactly the behaviour it always had (each method is the `Client` method of
//! the same name).

use std::collections::HashMap;
use std::sync::Arc;

use super::client::Client;
use super::error::Result;
use super::{CommittedOffset, OffsetSpec};
use super::{FetchConfig, FetchPosition, IsolationLevel, LazyPartition};
use crate::TopicPartition;

/// Ends a wait of the poll thread early from any thread: a fetch waiting for its brokers, a
/// wait for the membership's news. What a consumer's `Waker` calls; each layer that makes the
/// poll thread wait hands one out.
pub type Nudge = Arc<dyn Fn() + Send + Sync>;

/// Where a consumer's poll thread gets its records and starting positions.
///
/// Implementations must keep the contracts of the [`Client`] methods they stand for: one result
/// per position, per-partition errors in the result (OFFSET_OUT_OF_RANGE for a position outside
/// the log), and a fetch that waits no longer than its `max_wait` (plus a small margin).
pub trait RecordSource {
    /// As [`Client::fetch_lazy`]: each position's records, left undecoded until wanted.
    fn fetch_lazy(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<LazyPartition>>;

    /// As [`Client::offset_fetch`]: what `group_id` committed for each partition.
    fn offset_fetch(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<CommittedOffset>>;

    /// As [`Client::list_offsets`]: the earliest or latest offset (or the offset for a
    /// timestamp) of each partition.
    fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<HashMap<TopicPartition, i64>>;

    /// Ends a [`fetch_lazy`](Self::fetch_lazy) that waits for its brokers, from any thread: the
    /// fetch returns what was answered so far. `None` when this source never waits.
    fn nudge(&self) -> Option<Nudge> {
        None
    }
}

impl RecordSource for Client {
    fn fetch_lazy(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<LazyPartition>> {
        Client::fetch_lazy(self, positions, cfg)
    }

    fn offset_fetch(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<CommittedOffset>> {
        Client::offset_fetch(self, group_id, partitions)
    }

    fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<HashMap<TopicPartition, i64>> {
        Client::list_offsets(self, partitions, spec, isolation)
    }

    fn nudge(&self) -> Option<Nudge> {
        Some(self.fetchers.nudge())
    }
}

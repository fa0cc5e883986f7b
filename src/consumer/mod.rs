//! The consumer a user embeds: the blocking poll-process-commit loop with bounded batches, the
//! guard in the middle of it, and the configuration under Kafka's own names.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use rebalance_guard::{Consumer, ConsumerConfig};
//! use rebalance_guard::IdempotencyKey;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ConsumerConfig::builder()
//!     .bootstrap_servers(["127.0.0.1:9092"])
//!     .group_id("order-workers")
//!     .build()?;
//! let stop = AtomicBool::new(false);
//! let mut consumer = Consumer::subscribe(config, &["orders"])?
//!     .with_idempotency_key(|record| record.key.as_deref().map(IdempotencyKey::from));
//! consumer.run(&stop, |record, ctx| -> Result<(), std::io::Error> {
//!     if !ctx.is_current() {
//!         return Ok(()); // the partition moved: its new owner processes this record
//!     }
//!     // Apply the order's effect, keyed by a stable effect key.
//!     println!("{} {}", record.partition, record.offset);
//!     Ok(())
//! })?;
//! consumer.close()?;
//! # Ok(())
//! # }
//! ```

//! # Map
//!
//! Dependencies point down this list; no file imports one above it.
//!
//! - `exactly_once.rs`: [`Consumer::with_transactions`] and [`Consumer::run_transactional`]:
//!   the loop of the transactional mode, each record's outputs into the open transaction.
//! - `seeking.rs`: where the consumer stands and where it moves: `position`, `committed`,
//!   `offsets_for_times`, `beginning_offsets`/`end_offsets`, `seek` (a guard event).
//! - `poll_loop.rs`: the [`Consumer`]: subscribe, `poll`, `commit`, `run`, `run_with_workers`,
//!   `close`, stats.
//! - `workers.rs`: the worker pool of the decoupled mode, written against the narrow
//!   `WorkSource` interface the consumer implements (never against its fields).
//! - `dispatch.rs`: which worker runs a record, by `processing.order`, and the queues between
//!   the poll thread and the workers.
//! - `batch.rs`: a [`Batch`] and its [`Delivery`]s: records leave the intake and are admitted
//!   through the guard one at a time.
//! - `batch_clock.rs`: the batch's readings of time (deadline, pacing, the admission instant),
//!   read again only when the kernel's coarse clock moved or the sizer's stride ran out.
//! - `retry.rs`: the failure policy of `run` and the workers: `processing.retries` with its
//!   backoff (the partition held back in the intake, the poll loop going on) and the
//!   dead-letter callback.
//! - `transactions.rs`: exactly once from Kafka to Kafka: the one transactional commit (offsets
//!   through TxnOffsetCommit, then EndTxn, or an abort and a rewind), used by the loop, the
//!   application's `commit` and every handoff; the handler's [`TransactionContext`].
//! - `pacer.rs`: `commit.interval.ms`: the paced commits of what finished while records flow,
//!   sent without stopping the poll thread.
//! - `handoff.rs`: the handoff driver: the membership's changes into the guard, revocation commits and
//!   drains, [`HandoffFailure`]s (every commit translates the guard's positions through the
//!   group's `commit.rs`).
//! - `listener.rs`: the application's [`ConsumerRebalanceListener`] and what holds when each of
//!   its calls runs.
//! - `fencing.rs`: the fencing token of each assignment, raised through the group's committed
//!   metadata before any record of the partition is handed out.
//! - `intake/`: fetch intake: positions, buffers, pause/resume, fetch errors, resets, and
//!   (`intake/positions.rs`) the starting-position lookups, retried until found.
//! - `sizer`: the `BatchSizer`: how many records a batch may hold and when it must stop.
//! - `failure_detection.rs`: the check at subscribe that the lease bound outlasts the
//!   cluster's `broker.session.timeout.ms` (one DescribeConfigs, a warning if not).
//! - [`dead_letter`]: a dead-letter topic for the dead-letter callback ([`DeadLetterTopic`]) and
//!   the copy of a failed record it writes, with why and where from in its headers.
//! - `wake.rs`: the [`Waker`] that ends a blocked poll from another thread, over the nudges
//!   of the waits below (the membership's, the fetch's).
//! - `stats`: per-partition signals (lag among them), [`RebalanceCounters`], the stats line,
//!   and the [`StatsHandle`] that reads them from another thread.
//! - `context.rs`: the guard as the consumer holds it, the handler's [`WorkContext`] and the
//!   observer's [`GuardView`].
//! - `error.rs`: [`ConsumerError`]. The settings under Kafka's names are the layer below,
//!   `crate::config`, which the share consumer reads too.

mod batch;
mod batch_clock;
mod context;
pub mod dead_letter;
mod dispatch;
mod error;
mod exactly_once;
mod failure_detection;
mod fencing;
mod handoff;
mod intake;
mod listener;
mod pacer;
mod poll_loop;
mod retry;
mod seeking;
mod sizer;
mod stats;
mod transactions;
mod wake;
mod workers;

// The settings sit a layer below (`crate::config`, shared with the share consumer); the
// children of this module name them as `super::config`.
use crate::config;

pub use crate::wire::KeyFn;
pub use batch::{Batch, Delivery};
pub use config::{
    AutoOffsetReset, ConfigError, ConsumerConfig, ConsumerConfigBuilder, GroupProtocol,
    ProcessingOrder, SecurityProtocol, Strategy,
};
pub use context::{GuardView, WorkContext};
pub use dead_letter::DeadLetterTopic;
pub use error::{ConsumerError, HandoffFailure};
pub use handoff::StormHook;
pub use listener::{AssignedContext, ConsumerRebalanceListener, RevokedPartition};
pub use poll_loop::Consumer;
pub use sizer::BatchPlan;
pub use stats::{ConsumerStats, PartitionStats, RebalanceCounters, StatsHandle};
pub use transactions::TransactionContext;
pub use wake::Waker;

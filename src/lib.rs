//! rebalance-guard: a synchronous Kafka consumer that keeps side effects safe across consumer-group
//! rebalances.
//!
//! A worker that submits orders or moves money from a consumer group must not apply an effect on
//! a partition another member already owns, must not commit work that never finished, and should
//! not redo work only because a commit was not made. This crate makes those decisions in one
//! place that can be read top to bottom, on plain OS threads, in pure Rust, with no async runtime.
//!
//! # The map
//!
//! Four layers, each depending only on the ones below it (`docs/DESIGN.md` in the repository walks
//! through the commit ordering with file and function names):
//!
//! - [`consumer`]: what an application embeds. [`Consumer`] runs the blocking
//!   poll-process-commit loop ([`Consumer::run`], or [`Consumer::poll`] and a [`Batch`] of
//!   [`Delivery`]s), sizes batches against `max.poll.interval.ms`, commits the contiguous
//!   completed prefix, and has a decoupled mode with worker threads
//!   ([`Consumer::run_with_workers`], handlers get a [`WorkContext`]). [`ConsumerConfig`] takes
//!   Kafka's own setting names.
//! - [`config`]: the settings under Kafka's names that the consumer and the share consumer
//!   both read, in one table ([`config::SETTINGS`]) with one validation.
//! - [`group`]: consumer-group membership (classic protocol: eager and cooperative assignors,
//!   static membership) with a background heartbeat thread.
//! - [`wire`]: a blocking Kafka client over `std::net` whose messages are encoded by the
//!   `kafka-protocol` crate; [`wire::Client`] is also what tests and tools use to produce data.
//! - [`guard`]: the sans-IO [`RebalanceGuard`], which decides what may be processed and what may
//!   be committed while ownership moves: fence on revoke, drain, commit `last + 1`, never commit
//!   on a loss, leases that go stale when their partition moves or the session could have
//!   expired, storm detection.
//!
//! Beside [`consumer`], on the same layers: [`share`], the member of a share group (KIP-932,
//! Kafka's queues): [`share::ShareConsumer`] acquires records under time-limited locks and
//! acknowledges each by its outcome; the lock guard (`guard::locks`) ends every record's lease
//! before the broker's lock can, so no effect is applied once another member may hold the record.
//!
//! Under all of them, `basics` holds the vocabulary every layer names: [`TopicPartition`] and
//! [`ErrorKind`]. Besides the layers: `metrics` the hooks through which
//! the consumer and the group publish their operational signals to the `metrics` crate (public,
//! with its names, under the cargo feature `metrics`; empty without it); hidden from the
//! documentation and not part of the API, `fuzzing` holds the checks behind the fuzz targets and `testing` the
//! in-memory cluster (a record log with committed offsets, group coordinators for both
//! protocols, and members that run the real session against them) that tests drive the whole
//! consumer against without a broker.
//!
//! The items re-exported here are the ones applications need; the modules hold the rest.

#![warn(missing_docs, unreachable_pub)]

mod basics;
pub mod config;
pub mod consumer;
#[doc(hidden)]
pub mod fuzzing;
pub mod group;
pub mod guard;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
pub mod share;
#[doc(hidden)]
pub mod testing;
pub mod wire;

pub use basics::error_kind::ErrorKind;
pub use basics::partition::TopicPartition;
pub use consumer::{
    Batch, BatchPlan, ConfigError, Consumer, ConsumerConfig, ConsumerConfigBuilder, ConsumerError,
    ConsumerStats, Delivery, GuardView, HandoffFailure, PartitionStats, RebalanceCounters,
    SecurityProtocol, StatsHandle, WorkContext,
};
pub use group::{GroupError, LostReason, Strategy};
pub use guard::{
    AdmitError, CommitFailure, CompleteError, GuardConfig, GuardSnapshot, IdempotencyKey, Lease,
    PartitionSnapshot, RebalanceGuard, RewindError, SeekError, StormStatus,
};
pub use share::{
    ShareConfig, ShareConsumer, ShareContext, ShareDelivery, ShareError, ShareFailure, ShareStats,
};
pub use wire::{
    Client, ClientConfig, ErrorChain, KafkaCode, OAuthBearerCallback, OAuthBearerToken,
    ProduceRecord, Record, SaslConfig, SaslMechanism, Secret, TlsConfig, WireError,
};

//! rebalance-guard: a synchronous Kafka consumer that keeps side effects safe across consumer-group
//! rebalances.
//!
//! A worker that submits orders or moves money from a consumer group must not apply an effect on
//! a partition another member already owns, must not commit work that never finished, and should
//! not redo work only because a commit was not made. This crate makes those decisions in one
//! place that can be read top to bottom, on plain OS threads, in pure Rust, with no async runtime.
//!
//! # Where to start
//!
//! [`Consumer`] (its page has a worker in a dozen lines), [`Consumer::run_with_workers`] for the
//! decoupled mode, [`ConsumerConfig`] (Kafka's property names), [`ShareConsumer`] for share
//! groups, [`Producer`] for writing records (idempotent, partitioned as Java's producer),
//! [`DeadLetterTopic`] for the failure policy, and the [`guard`] module, whose page numbers
//! the rules every commit decision follows. The repository's README.md and docs/ (a guide, the
//! settings, share groups, security, operations) are the long form; every Rust block there is
//! compiled against this API.
//!
//! # The map
//!
//! Layers, each using only the ones below it (the `source_layout` test checks it; bottom first:
//! basics, guard, wire, group, config, metrics, producer, then the two consumers side by side;
//! `docs/DESIGN.md` in the repository walks through the commit ordering hop by hop):
//!
//! - `consumer`: what an application embeds. [`Consumer`] runs the blocking
//!   poll-process-commit loop ([`Consumer::run`], or [`Consumer::poll`] and a [`Batch`] of
//!   [`Delivery`]s), sizes batches against `max.poll.interval.ms`, commits the contiguous
//!   completed prefix, and has a decoupled mode with worker threads
//!   ([`Consumer::run_with_workers`], handlers get a [`WorkContext`]).
//! - `share`, beside it: the member of a share group (KIP-932, Kafka's queues).
//!   [`ShareConsumer`] acquires records under time-limited locks and acknowledges each by its
//!   outcome; its lock guard ends every record's lease before the broker's lock can, so no
//!   effect is applied once another member may hold the record.
//! - `producer`, below them: [`Producer`], idempotent and batched, on the consumer's per-broker
//!   lanes and settings table; the dead-letter topic writes through it, which is why it sits
//!   under the consumers rather than beside them. Its sender's module documentation numbers the
//!   rules that keep every record once and in order.
//! - `metrics`: the hooks through which both publish their operational signals to the `metrics`
//!   crate (public, with its names, under the cargo feature `metrics`; empty without it).
//! - [`config`]: the settings under Kafka's names that the consumers and the producer read, in one table
//!   ([`config::SETTINGS`]) with one validation.
//! - `group`: group membership (the classic protocol with eager and cooperative assignors and
//!   static membership, KIP-848, share groups' heartbeat) on background threads.
//! - `wire`: a blocking Kafka client over `std::net` whose messages are encoded by the
//!   `kafka-protocol` crate.
//! - [`guard`]: the sans-IO [`RebalanceGuard`](guard::RebalanceGuard), which decides what may
//!   be processed and what may be committed while ownership moves: fence on revoke, drain,
//!   commit `last + 1`, never commit on a loss, leases that go stale when their partition moves
//!   or the session could have expired, storm detection. It is public as a module of its own:
//!   it is useful without the rest.
//! - `basics`: the vocabulary every layer names, [`TopicPartition`] and [`ErrorKind`].
//!
//! Above them, for the crate's own tests only: `testing`, the in-memory cluster (a record log
//! with committed offsets, group coordinators for both protocols, and members that run the real
//! session against them) that tests drive the whole consumer against without a broker, and
//! `fuzzing`, the checks behind the fuzz targets.
//!
//! # What is public
//!
//! The items re-exported here are the ones applications name, and [`guard`] and [`partitioner`]
//! are public as modules. `consumer`, `share`, `producer`, `wire` and `group` are crate-private;
//! the internal cargo feature `test-support` makes them (and `testing` and `fuzzing`, which are not compiled at all
//! without it) public for the crate's own integration tests, benchmarks and fuzz targets. That
//! feature is not part of the API and an application never enables it.

#![warn(missing_docs, unreachable_pub)]
// Without `test-support` every type a public signature mentions must be nameable from the root.
#![cfg_attr(not(feature = "test-support"), warn(unnameable_types))]
// On docs.rs (its metadata in Cargo.toml passes `--cfg docsrs`), the items a cargo feature turns
// on (`tls`, `metrics`) carry the feature's name.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The internal `test-support` switch is not a feature an application chooses: no label for it.
#![cfg_attr(docsrs, doc(auto_cfg(hide(feature = "test-support"))))]

/// Declares a function that the crate's own integration tests call but applications never do:
/// `pub` under the internal `test-support` feature, `pub(crate)` otherwise, so that a view of the
/// internals never reaches an application's API. The two arms differ only in visibility; the
/// function is written once.
macro_rules! internal_pub {
    ($(#[$meta:meta])* fn $($rest:tt)*) => {
        #[cfg(feature = "test-support")]
        $(#[$meta])* pub fn $($rest)*
        #[cfg(not(feature = "test-support"))]
        $(#[$meta])* pub(crate) fn $($rest)*
    };
}

// A layer that applications reach through the re-exports below is public only under the
// internal `test-support` feature (see "What is public" above), and crate-private otherwise.
// Without the feature, what only the integration tests use (a layer's re-exports of its
// internals, a few views and constructors) is unused; with it (every `--all-targets` build
// and CI's lints) unused private code is still reported.
mod basics;
// Public: its value types and table are what applications name. Without `test-support`, the
// views only the crate's own tests call (`internal_pub!`) and the printing helpers are unused.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub, dead_code))]
pub mod config;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod consumer;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
pub(crate) mod consumer;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod group;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
pub(crate) mod group;
pub mod guard;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
mod metrics;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod producer;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
pub(crate) mod producer;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod share;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
pub(crate) mod share;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod testing;
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod wire;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
pub(crate) mod wire;

// What an application names. The guard's own types stay in `guard`, which is public.
pub use basics::error_kind::ErrorKind;
pub use basics::partition::TopicPartition;
pub use consumer::{
    AssignedContext, Batch, ConfigError, Consumer, ConsumerConfig, ConsumerConfigBuilder,
    ConsumerError, ConsumerRebalanceListener, ConsumerStats, DeadLetterTopic, Delivery,
    HandoffFailure, RevokedPartition, TransactionContext, Waker, WorkContext,
};
pub use group::{GroupError, LostReason, MemberIdentity};
pub use guard::{IdempotencyKey, StormStatus};
pub use producer::partitioner;
pub use producer::{
    ConsumerGroupMetadata, DeliveryHandle, ProduceError, Producer, ProducerConfig,
    ProducerConfigBuilder, ProducerRecord, RecordMetadata,
};
pub use share::{
    AckType, ShareConfig, ShareConfigBuilder, ShareConsumer, ShareContext, ShareDelivery,
    ShareError, ShareFailure, ShareStats,
};
pub use wire::{ErrorChain, OAuthBearerCallback, OAuthBearerToken, Record, Secret, WireError};

/// The detail behind an error: what each error enum carries, for an application that matches on
/// more than [`ErrorKind`] (which every error answers through `kind()`, and which is what retry
/// and alerting decisions should use).
pub mod error {
    pub use crate::config::PropertiesSyntaxError;
    pub use crate::group::assignor::{AssignError, JoinProtocolError, LeaderError};
    pub use crate::group::subscription::{DecodeError, EncodeError};
    pub use crate::group::{FatalError, GroupApi, PatternError, StrategyError};
    pub use crate::wire::KafkaCode;
}

/// What an application reads to watch a consumer rather than to run it: the parts of
/// [`ConsumerStats`] and [`ShareStats`] (per partition, rebalances, fetching per broker), the
/// handle that reads them from another thread, a batch's sizing plan, and the read-only views of
/// the guard and of the membership (generation and owned partitions) an observer thread holds.
pub mod stats {
    pub use crate::consumer::{
        BatchPlan, GuardView, PartitionStats, RebalanceCounters, StatsHandle,
    };
    pub use crate::group::MembershipView;
    pub use crate::wire::{BrokerFetchStats, FetchStats};
}

/// One record's timestamp kind, as [`Record`] carries it.
pub use wire::TimestampType;

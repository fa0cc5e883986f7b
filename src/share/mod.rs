//! Share groups (KIP-932, "queues for Kafka"): members consume the same partitions together,
//! each record acquired under a lock that expires by time, acknowledged one by one.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use rebalance_guard::{ShareConfig, ShareConsumer};
//! use rebalance_guard::IdempotencyKey;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ShareConfig::builder()
//!     .bootstrap_servers(["127.0.0.1:9092"])
//!     .group_id("order-workers")
//!     .build()?;
//! let stop = AtomicBool::new(false);
//! let mut consumer = ShareConsumer::subscribe(config, &["orders"])?
//!     .with_idempotency_key(|record| record.key.as_deref().map(IdempotencyKey::from));
//! consumer.run_with_workers(&stop, 8, |record, ctx| {
//!     if !ctx.is_current() {
//!         return Ok(()); // the lock may have expired: another member may have the record now
//!     }
//!     println!("{} {} (delivery {})", record.partition, record.offset, ctx.delivery_count());
//!     Ok(())
//! })?;
//! consumer.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! Why the same guard story as the consumer group: a share-group lock *is* a lease that ends by
//! time. When it ends while a handler still works, the broker hands the record to another
//! member and both would apply it. Here every acquired record carries a lease that ends before
//! the broker's lock can (measured from when the ShareFetch was *sent*, minus a safety margin)
//! and before the group may have removed the member (the session bound its answered heartbeats
//! renew: Kafka releases a member's records when its share session ends), the handler asks [`ShareContext::is_current`] right before its effect, a record finished
//! after its lease is released, not accepted, records still running at half their lock are
//! renewed (RENEW, where the broker supports it), and a redelivered record whose idempotency
//! key this member already applied is accepted without running again.
//!
//! # Map
//!
//! - `consumer.rs`: the [`ShareConsumer`]: subscribe, the poll thread's turn (outcomes into
//!   acknowledgements, the assignment into the fetcher, renewals, one ShareFetch round), `poll`,
//!   `run`, `close`.
//! - `workers.rs`: `run_with_workers`, the decoupled mode.
//! - `context.rs`: what a handler holds: [`ShareContext`] (the lease), [`ShareDelivery`] (how a
//!   record ended, reported to the poll thread) and [`ShareFailure`] (retryable or poison).
//! - `stats.rs`: [`ShareStats`].
//! - `config.rs`: [`ShareConfig`]: the settings table's rows a share consumer reads (the
//!   `share.*` ones among them), from the `config` layer it shares with the consumer; this
//!   module and the consumer's import neither each other.
//! - `error.rs`: [`ShareError`].
//! - `seam.rs`: [`ShareSource`] and [`ShareMember`], the two conversations with the cluster the
//!   consumer holds (ShareFetch/ShareAcknowledge, ShareGroupHeartbeat) behind traits: the
//!   broker's `ShareFetcher` and `ShareMembership` in production, the in-memory share
//!   coordinator's members in tests.
//!
//! The layers underneath: the membership (ShareGroupHeartbeat) in `group::share`, the share
//! sessions and fetch threads in `wire::share`, the lock guard in `guard::locks`.

mod config;
mod consumer;
mod context;
mod error;
mod seam;
mod stats;
mod workers;

pub use crate::config::AcquireMode;
pub use crate::guard::AckType;
pub use config::{ShareConfig, ShareConfigBuilder};
pub use consumer::{AckFailureHook, ShareConsumer};
pub use context::{ShareContext, ShareDelivery, ShareFailure};
pub use error::ShareError;
pub use seam::{ShareMember, ShareSource};
pub use stats::ShareStats;

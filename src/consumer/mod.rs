//! The consumer a user embeds: the blocking poll-process-commit loop with bounded batches, the
//! guard in the middle of it, and the configuration under Kafka's own names.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use rebalance_guard::consumer::{Consumer, ConsumerConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ConsumerConfig::builder()
//!     .bootstrap_servers(["127.0.0.1:9092"])
//!     .group_id("order-workers")
//!     .build()?;
//! let stop = AtomicBool::new(false);
//! let mut consumer = Consumer::subscribe(config, &["orders"])?
//!     .with_idempotency_key(|record| record.key.as_ref().map(|k| k.to_vec()));
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

pub mod batch;
pub mod config;
mod error;
mod poll_loop;
mod positions;
mod rebalance;
pub mod stats;
mod workers;

pub use config::{AssignmentStrategy, AutoOffsetReset, ConfigError, ConsumerConfig, GroupProtocol};
pub use error::ConsumerError;
pub use poll_loop::{Batch, Consumer, Delivery, GuardView, KeyFn};
pub use rebalance::{HandoffFailure, RebalanceCounters, StormHook};
pub use stats::{ConsumerStats, PartitionStats};
pub use workers::WorkContext;

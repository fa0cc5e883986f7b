//! rebalance-guard: a synchronous Kafka consumer that keeps side effects safe across rebalances.
pub mod consumer;
pub mod group;
pub mod guard;
pub mod partition;
pub mod wire;

pub use partition::TopicPartition;

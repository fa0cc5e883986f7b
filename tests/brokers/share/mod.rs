//! Share groups on the shared Kafka 4.x broker: our share consumer, its sessions and faults, its
//! membership, and the Java share consumer beside it.
//!
//! Modules:
//! * [`consumer`]: The share consumer on real Kafka 4.4: acknowledgement by outcome, leases, renewal,
//!   retries.
//! * [`faults`]: Share-group members that die or freeze, on real Kafka 4.4.
//! * [`interop`]: Our share consumers and Apache Kafka's Java `KafkaShareConsumer`
//!   (`scripts/SharePeer.java`, explicit acknowledgement) in one share group on real Kafka 4.4.
//! * [`java_peer`]: The Java share peer (`scripts/SharePeer.java`, Apache Kafka's
//!   `KafkaShareConsumer` with explicit acknowledgement) on the shared Kafka 4.4 broker.
//! * [`membership`]: Share-group membership (KIP-932, ShareGroupHeartbeat v1) and group configs
//!   (IncrementalAlterConfigs / DescribeConfigs on a GROUP resource) against real Kafka.
//! * [`sessions`]: Share-group leases that belong to their share session, and acknowledgements that
//!   belong to their delivery, on real Kafka 4.4.

mod consumer;
mod faults;
mod interop;
mod java_peer;
mod membership;
mod sessions;

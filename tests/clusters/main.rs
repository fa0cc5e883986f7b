//! The tier of tests on three-node Apache Kafka clusters of their own (three JVMs each, started by
//! each test through `support::cluster`): leaders killed, paused and cut off, the coordinator
//! moved, read replicas failing, a share group across broker failures, the producer across leader
//! failures. `.config/nextest.toml` runs at most two of them at once, and `scripts/test` runs
//! this tier after the others.
//!
//! Modules:
//! * [`coordinator`]: Group coordinator failures on a three-node Kafka 4.x cluster (replication 3,
//!   `min.insync.replicas=2`), with records produced and consumed throughout.
//! * [`faults`]: Broker failures on a three-node Kafka 4.x cluster (replication 3,
//!   `min.insync.replicas=2`).
//! * [`leaders`]: Fetching survives a hung or unreachable partition leader (issue 21, item 4), on a
//!   three-node Kafka 4.x cluster.
//! * [`producer`]: The producer on three-node Kafka 4.x clusters (issue 34, items 5 and 7): a
//!   leader killed, a leader paused and a rolling restart while an idempotent producer sends;
//!   every record once and in order per key, the handles' offsets the log's.
//! * [`rack`]: Fetching from followers (KIP-392, issue 23 item 9) on a three-node Kafka 4.x cluster
//!   whose nodes are in racks of their own (`broker.rack=rack-ID`).
//! * [`share`]: A share group on three real Kafka 4.4 brokers while brokers fail.
//! * [`transactions`]: Exactly once (issue 35) across a killed transaction coordinator, group
//!   coordinator and output leader on a three-node Kafka 4.4 cluster.

#[path = "../support/mod.rs"]
mod support;

mod coordinator;
mod faults;
mod leaders;
mod producer;
mod rack;
mod share;
mod transactions;

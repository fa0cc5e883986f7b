//! The group layer on single brokers: membership, the clocks of the membership, interop with
//! the Java, confluent-kafka and kafka-python members, the protocol migration.
//!
//! Modules:
//! * [`deadlines`]: The clocks of the membership.
//! * [`interop`]: Our member in one group with real peers.
//! * [`membership`]: Our group member against real coordinators.
//! * [`peers`]: Consumer groups made only of peer clients (confluent-kafka and kafka-python,
//!   `scripts/peer_member.py`), on Kafka, the mock and tansu.
//! * [`protocol_migration`]: A rolling migration of a live consumer group from
//!   `group.protocol=classic` to `consumer` (KIP-848) and back, on Kafka 4.4, the way an operator
//!   does it.

mod deadlines;
mod interop;
mod membership;
mod peers;
mod protocol_migration;

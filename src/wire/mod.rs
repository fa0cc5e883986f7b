//! The blocking Kafka wire client: connections, version negotiation, metadata, fetch, offsets and
//! produce, all over `std::net::TcpStream` with `kafka-protocol` doing the encoding.
//!
//! Why our own: the only synchronous pure-Rust client (`kafka` 0.10) speaks API version 0 only,
//! which Kafka 4.0 removed (KIP-896). Layering: [`connection`] owns one socket and its
//! negotiated [`versions`]; [`client`] routes requests to the right broker and recovers from
//! stale metadata and broken connections; [`records`] turns fetched bytes into [`Record`]s.
//!
//! Threads: everything here is blocking and owned by one thread at a time. A [`Client`] keeps
//! one request connection and one fetch connection per broker; another thread that must talk to
//! the cluster concurrently (the group heartbeat) opens its own [`Connection`] or [`Client`].
//!
//! Known limits, each a deliberate scope cut: no TLS or SASL; Fetch is capped at v12 (topics
//! by name, no fetch sessions) and does not send leader epochs (no KIP-320 fencing); Produce is
//! uncompressed, acks=all, one batch per call, not idempotent; a record's repeated header key
//! keeps only its last value (`kafka-protocol` decodes headers into a map); and
//! `kafka-protocol` pre-allocates arrays by their claimed length, so a hostile broker can still
//! force one large allocation inside a frame that passed the size check.

pub mod client;
mod compression;
pub mod connection;
pub mod error;
pub mod records;
pub mod versions;

pub use client::{
    BrokerInfo, Client, ClientConfig, CommitIdentity, CommitOffset, CommittedOffset, FetchConfig,
    FetchPosition, FetchedPartition, IsolationLevel, OffsetSpec, PartitionMetadata, TopicMetadata,
};
pub use connection::{Connection, ConnectionConfig, Pending, WireRequest};
pub use error::{KafkaCode, Result, WireError};
pub use records::{ProduceRecord, Record, TimestampType};
pub use versions::{client_range, VersionRange, VersionTable};

//! The blocking Kafka wire client: connections, version negotiation, metadata, fetch, offsets and
//! produce, all over `std::net::TcpStream` with `kafka-protocol` doing the encoding.
//!
//! Why our own: the only synchronous pure-Rust client (`kafka` 0.10) speaks API version 0 only,
//! which Kafka 4.0 removed (see `DESIGN.md`). Layering: [`connection`] owns one socket and its
//! negotiated [`versions`]; [`client`] routes requests to the right broker and recovers from
//! stale metadata and broken connections; [`records`] turns fetched bytes into [`Record`]s.

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

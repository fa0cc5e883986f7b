//! The blocking Kafka wire client: connections, version negotiation, metadata, fetch, offsets and
//! produce, all over `std::net::TcpStream` with `kafka-protocol` doing the encoding.
//!
//! Why our own: the only synchronous pure-Rust client (`kafka` 0.10) speaks API version 0 only,
//! which Kafka 4.0 removed (KIP-896).
//!
//! The map, one module per concern and one line per file or folder here (a folder's `mod.rs`
//! maps its own files; a module's children may use it, siblings never use each other both ways):
//! - `client/`: [`Client`], the one type callers hold, and its bounded retry loop (`mod.rs`);
//!   its children each implement the `Client` methods of one concern: `cluster.rs` (metadata,
//!   leaders, coordinators, topic creation), `pool.rs` (connections per broker and their
//!   backoff), `fetch/` (Fetch, with its per-broker lanes in `fetch/fetcher.rs`),
//!   `offsets.rs` (ListOffsets, OffsetFetch, OffsetCommit), `produce/` (Produce, InitProducerId,
//!   and the transaction requests in `produce/txn.rs`) and `configs.rs` (the cluster's
//!   failure-detection settings, DescribeConfigs);
//! - `lane.rs`: the request-lane machine, one OS thread per broker owning that broker's
//!   connection, and the one rule for waiting for their answers (the fetch's wait plus
//!   [`FETCH_ANSWER_MARGIN`]); both the consumer's Fetch and the share fetcher run on it;
//! - `connection/`: one socket to one broker, its framing and handshake (`mod.rs`), and its SASL
//!   authentication (`sasl.rs`);
//! - `source.rs`: [`RecordSource`], the reads a consumer's poll thread makes (fetch, committed
//!   offsets, log offsets), implemented by `Client` and by the hidden `testing` module's log;
//! - `versions.rs`: API version negotiation, free of I/O;
//! - `stream.rs`: the byte stream under a connection, TCP or TLS, with real deadlines;
//! - `tls.rs`: TLS with rustls, behind the cargo feature `tls`;
//! - `scram.rs`: the SCRAM-SHA-256/512 exchange, without I/O;
//! - `oauth.rs`: OAUTHBEARER tokens from the user's callback, cached until they expire;
//! - `secret.rs`: [`Secret`], a password that is never printed and does not outlive its holder;
//! - [`records`] (`records/`): fetched bytes to [`Record`]s and produced records to a batch
//!   (`mod.rs`), one batch read by our own bounded decoder (`batch.rs`);
//! - [`bounded`] (`bounded.rs`, `bounded/`): every response checked against its shape before
//!   `kafka-protocol` decodes it;
//! - `compression.rs`: pure-Rust decompression of record batches;
//! - `error.rs`: [`WireError`] and the [`KafkaCode`] table every layer uses;
//! - `quirks.rs`: where the client works around a broker that deviates from Kafka;
//! - [`share`] (`share/`): share groups (KIP-932): ShareFetch and ShareAcknowledge at v1-v2,
//!   a share session per broker, one share lane per broker (on `lane.rs`), piggybacked
//!   acknowledgements and RENEW, behind [`share::ShareFetcher`].
//!
//! Threads: everything here is blocking and owned by one thread at a time. A [`Client`] keeps
//! one request connection per broker; its fetches run on one lane per broker (`lane.rs`,
//! `client/fetch/fetcher.rs`), which owns that broker's fetch connection, so a broker that
//! hangs or cannot be reached holds only its own partitions: the fetching thread collects
//! whatever answers arrive within the fetch's wait plus [`FETCH_ANSWER_MARGIN`] and leaves a
//! late broker's request in flight. Another thread that must talk to the cluster concurrently
//! (the group's membership and commit threads) opens its own [`Connection`] or [`Client`].
//!
//! Security: SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER on every connection
//! (`connection/sasl.rs`, `scram`, `oauth`; passwords and tokens held as [`Secret`]),
//! re-authenticated before the broker's session ends (KIP-368); TLS with rustls behind the
//! cargo feature `tls` (`tls`, over the deadline-keeping byte stream of `stream`).
//!
//! Known limits, each a deliberate scope cut: no GSSAPI; Fetch is capped at v12 (topics
//! by name, no fetch sessions): it sends each partition's leader epoch (KIP-320 fencing of a
//! stale leader) but no last fetched epoch, so a log truncated under the position is found only
//! as OFFSET_OUT_OF_RANGE (reset by `auto.offset.reset`), and KIP-951's leader hints, which Kafka
//! sends from Fetch v16, are used only where a broker sends them at v12; Produce is
//! uncompressed, acks=all, one batch per call, not idempotent. (`kafka-protocol` pre-allocates
//! arrays by their claimed length, which is why every response passes [`bounded`] before it is
//! decoded; fetched record batches are read by our own bounded decoder, not by
//! `kafka-protocol`.)

// The items marked `#[doc(hidden)] pub` below are wire internals that the integration tests
// (tests/wire_*.rs: framing, version negotiation, record decoding bounds, hostile brokers) and the
// fuzz targets drive directly; they are not part of the product's API and may change without
// notice. Applications use `Client`.
#[doc(hidden)]
pub mod bounded;
mod client;
pub(crate) mod compression;
pub(crate) mod connection;
pub(crate) mod error;
pub(crate) use error::broker_text;
mod lane;
mod oauth;
mod quirks;
#[doc(hidden)]
pub mod records;
pub(crate) mod scram;
pub(crate) mod secret;
pub mod share;
mod source;
mod stream;
mod tls;
pub(crate) mod versions;

pub use client::cluster::{BrokerInfo, PartitionMetadata, TopicMetadata};
#[doc(hidden)]
pub use client::cluster::{MAX_METADATA_BROKERS, MAX_METADATA_TOPICS};
pub use client::configs::{
    BrokerFailureDetection, BROKER_SESSION_TIMEOUT_MS, GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
};
pub use client::fetch::replicas::{
    BrokerFetchStats, FetchStats, PREFERENCE_MAX_AGE, REPLICA_RETRY_AFTER,
};
pub use client::fetch::{
    FetchConfig, FetchPosition, FetchedPartition, IsolationLevel, LazyPartition, LazyRecords,
};
pub use client::offsets::{CommitIdentity, CommittedOffset, OffsetCommitEntry, OffsetSpec};
pub(crate) use client::produce::lane::{
    PartitionAnswer, ProduceDone, ProduceJob, ProduceLanes, TopicBatches,
};
pub use client::produce::txn::{TransactionVersion, TRANSACTION_VERSION_FEATURE};
pub use client::produce::ProducerIdentity;
pub use client::{Client, ClientConfig};
pub use connection::sasl::{SaslConfig, SaslMechanism};
#[doc(hidden)]
pub use connection::{Connection, ConnectionConfig};
pub use error::{ErrorChain, KafkaCode, Result, WireError};
pub use lane::{FETCH_ANSWER_MARGIN, FETCH_CONNECT_GRACE};
pub use oauth::{OAuthBearerCallback, OAuthBearerToken, TokenResult};
pub use records::{DecodeBudget, KeyFn, ProduceRecord, Record, TimestampType};
pub use scram::{MAX_ITERATIONS as SCRAM_MAX_ITERATIONS, MIN_ITERATIONS as SCRAM_MIN_ITERATIONS};
pub use secret::Secret;
pub use source::{Nudge, RecordSource};
pub use tls::{TlsConfig, TlsFileError};
#[doc(hidden)]
pub use versions::{client_range, VersionRange};

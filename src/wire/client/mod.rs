//! The cluster-aware [`Client`] over a bootstrap list, and the one retry loop its operations share.
//!
//! A `Client` belongs to one thread and keeps one connection per broker. Its methods live in the
//! child module of their concern, each an `impl Client` block over the fields declared here (so
//! the files that share the fields are this module's children, never siblings that import each
//! other):
//! - `cluster.rs`: metadata, leaders, coordinators, topic creation;
//! - `pool.rs`: connections per broker, backoff after failures, any-broker requests;
//! - `fetch/`: Fetch (`fetch/mod.rs`), the per-broker fetch lanes (`fetch/fetcher.rs`) and
//!   the preferred read replicas with the bytes per broker (`fetch/replicas.rs`);
//! - `offsets.rs`: ListOffsets, OffsetFetch and OffsetCommit;
//! - `produce/`: Produce (the producer's lanes, InitProducerId, a one-shot Produce for tests
//!   and tools) and the transaction requests (`produce/txn.rs`);
//! - `configs.rs`: the cluster's failure-detection settings (DescribeConfigs), and group
//!   configuration (IncrementalAlterConfigs and DescribeConfigs on a group);
//! - this file: [`ClientConfig`], the fields of [`Client`], and the retry loop they all use.
//!
//! Requests that must go to a partition leader are routed with a leader cache that is refreshed
//! when a broker answers with a stale-metadata error (NOT_LEADER_OR_FOLLOWER,
//! UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...). A broker that fails is reconnected with
//! exponential backoff, and every retry loop is bounded by [`ClientConfig::max_retries`], after
//! which the caller gets [`WireError::RetriesExhausted`] carrying the last error.

pub(super) mod cluster;
pub(super) mod configs;
pub(super) mod fetch;
pub(super) mod offsets;
mod pool;
pub(super) mod produce;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use log::warn;
use uuid::Uuid;

use crate::wire::connection::{Connection, ConnectionConfig};
use crate::wire::error::{KafkaCode, Result, WireError};
use crate::wire::records::DecodeBudget;
use crate::TopicPartition;
use cluster::{BrokerInfo, TopicMetadata};
use fetch::fetcher::Fetchers;
use fetch::replicas::ReadReplicas;
use pool::BrokerState;

/// Settings of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// "host:port" entries used to discover the cluster; any one reachable entry is enough.
    pub bootstrap: Vec<String>,
    /// Per-connection settings (client id, timeouts, maximum response size).
    pub connection: ConnectionConfig,
    /// First delay before retrying a failed request or reconnecting to a failed broker.
    pub retry_backoff: Duration,
    /// Cap on the exponential backoff.
    pub retry_backoff_max: Duration,
    /// Attempts per operation (first try included) before giving up with `RetriesExhausted`.
    pub max_retries: u32,
    /// What one Fetch response may decompress into, over all its partitions (protects
    /// against decompression bombs, including many small ones; see [`DecodeBudget`]).
    pub fetch_decode_budget: DecodeBudget,
    /// Whether Metadata may auto-create topics on brokers configured to allow it.
    pub allow_auto_topic_creation: bool,
}

impl ClientConfig {
    /// A configuration with defaults for everything but the bootstrap list.
    pub fn new<S: Into<String>>(bootstrap: impl IntoIterator<Item = S>) -> Self {
        ClientConfig {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            connection: ConnectionConfig::default(),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_retries: 8,
            fetch_decode_budget: DecodeBudget::default(),
            allow_auto_topic_creation: false,
        }
    }

    /// Parses a comma-separated bootstrap list such as `"127.0.0.1:9092,127.0.0.1:9093"`.
    pub fn from_bootstrap_str(list: &str) -> Self {
        ClientConfig::new(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        )
    }
}

/// A blocking Kafka client for one thread: it owns its sockets (one per broker for requests)
/// and its caches, so nothing is shared or locked. Fetches are the exception: each broker's
/// fetch connection belongs to a fetch thread of this client (see `fetch/fetcher.rs`), so that a
/// hung broker delays no other broker's partitions. A thread that
/// needs its own conversation with the cluster (the heartbeat thread) builds its own `Client`
/// or [`Connection`].
#[derive(Debug)]
pub struct Client {
    pub(super) config: ClientConfig,
    // The cluster as last seen (owned by `cluster.rs`).
    pub(super) brokers: BTreeMap<i32, BrokerInfo>,
    pub(super) topics: HashMap<Arc<str>, TopicMetadata>,
    pub(super) leaders: HashMap<TopicPartition, i32>,
    /// Each topic's id (Metadata v10+), for the requests that name topics by id (ShareFetch,
    /// ShareAcknowledge), and back.
    pub(super) topic_ids: HashMap<Arc<str>, Uuid>,
    pub(super) topic_names: HashMap<Uuid, Arc<str>>,
    /// Each partition's leader epoch from Metadata (or a KIP-951 Fetch answer), sent in Fetch
    /// (KIP-320) so that a broker with another view of the leadership refuses the fetch.
    pub(super) leader_epochs: HashMap<TopicPartition, i32>,
    /// Set when a broker said our leader cache is out of date; the next leader lookup or fetch
    /// refreshes metadata first.
    pub(super) metadata_stale: bool,
    pub(super) coordinators: HashMap<String, i32>,
    /// Transaction coordinators by transactional id (owned by `produce/txn.rs`): apart from
    /// the group coordinators, because a group and a transactional id may share a name and
    /// live on different brokers.
    pub(super) txn_coordinators: HashMap<String, i32>,
    pub(super) controller: Option<i32>,
    // The connection pool (owned by `pool.rs`).
    pub(super) conns: HashMap<i32, Connection>,
    pub(super) bootstrap_conn: Option<Connection>,
    pub(super) broker_state: HashMap<i32, BrokerState>,
    /// Brokers another thread of the same owner found not answering (a producer's lanes): tried
    /// last for the requests any broker can answer (owned by `pool.rs`).
    pub(super) troubled_elsewhere: HashSet<i32>,
    // Fetch state (owned by `fetch/mod.rs`; the fetch connections belong to the brokers' fetch
    // threads, see `fetch/fetcher.rs`).
    pub(super) fetchers: Fetchers,
    pub(super) fetch_rotation: usize,
    /// Preferred read replicas (KIP-392) and bytes fetched per broker (owned by
    /// `fetch/replicas.rs`).
    pub(super) read_replicas: ReadReplicas,
}

impl Client {
    /// Connects to the first reachable bootstrap server and learns the broker list.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        if config.bootstrap.is_empty() {
            return Err(WireError::Config("empty bootstrap list".to_string()));
        }
        let mut client = Client::unconnected(config);
        client.retrying("bootstrap metadata", |c| c.metadata_once(Some(&[])))?;
        Ok(client)
    }

    /// A client that knows nothing of the cluster yet (`connect` bootstraps it; unit tests fill
    /// its caches by hand to talk to fake brokers).
    pub(super) fn unconnected(config: ClientConfig) -> Client {
        Client {
            fetchers: Fetchers::new(&config),
            config,
            brokers: BTreeMap::new(),
            conns: HashMap::new(),
            bootstrap_conn: None,
            broker_state: HashMap::new(),
            troubled_elsewhere: HashSet::new(),
            topics: HashMap::new(),
            leaders: HashMap::new(),
            topic_ids: HashMap::new(),
            topic_names: HashMap::new(),
            leader_epochs: HashMap::new(),
            metadata_stale: true,
            coordinators: HashMap::new(),
            txn_coordinators: HashMap::new(),
            controller: None,
            fetch_rotation: 0,
            read_replicas: ReadReplicas::default(),
        }
    }

    /// The configuration this client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Sets how many attempts each later request gets ([`ClientConfig::max_retries`]), for a
    /// client whose requests do not all deserve the same persistence (the commit thread: a
    /// paced commit gives up early, since the next interval carries its progress anyway; a
    /// revocation's commit is the last word on its partitions and keeps trying).
    pub(crate) fn set_max_retries(&mut self, attempts: u32) {
        self.config.max_retries = attempts;
    }

    /// Runs `op` until it succeeds, fails with a non-retriable error, or `max_retries` attempts
    /// were made; sleeps with exponential backoff between attempts.
    pub(super) fn retrying<T>(
        &mut self,
        what: &str,
        mut op: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let mut backoff = self.config.retry_backoff;
        let attempts = self.config.max_retries.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match op(self) {
                Ok(v) => return Ok(v),
                Err(e) if !e.retriable() => return Err(e),
                Err(e) if attempt >= attempts => {
                    return Err(WireError::RetriesExhausted {
                        what: what.to_string(),
                        attempts: attempt,
                        last: Box::new(e),
                    })
                }
                Err(e) => {
                    if e.kafka_code().is_some_and(KafkaCode::is_stale_metadata) {
                        self.metadata_stale = true;
                    }
                    if let Some(code) = e.kafka_code() {
                        if code.is_coordinator_moved() {
                            self.coordinators.clear();
                        }
                    }
                    warn!(
                        "{what}: attempt {attempt}/{attempts} failed: {e}; retrying in {backoff:?}"
                    );
                    thread::sleep(backoff);
                    backoff = backoff.saturating_mul(2).min(self.config.retry_backoff_max);
                }
            }
        }
    }
}

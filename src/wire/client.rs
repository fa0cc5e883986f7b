//! A cluster-aware client over a bootstrap list: metadata, leaders, coordinators, fetch,
//! offsets and produce, with bounded retries.
//!
//! A `Client` belongs to one thread and keeps one connection per broker. Requests that must go to
//! a partition leader are routed with a leader cache that is refreshed when a broker answers with
//! a stale-metadata error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
//! LEADER_NOT_AVAILABLE, ...). A broker that fails is reconnected with exponential backoff, and
//! every retry loop is bounded by [`ClientConfig::max_retries`], after which the caller gets
//! [`WireError::RetriesExhausted`] carrying the last error.
//!
//! Fetch returns per-partition results rather than failing as a whole: one moved partition must
//! not stop the others, and the consumer needs each partition's error to decide what to do.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{
    self as msg, create_topics_request, fetch_request, list_offsets_request, metadata_request,
    offset_commit_request, offset_fetch_request, produce_request, ApiKey, BrokerId, GroupId,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use log::{debug, info, warn};

use super::connection::{Connection, ConnectionConfig, Pending};
use super::error::{KafkaCode, Result, WireError};
use super::records::{self, AbortedTxn, PartitionInput, ProduceRecord, Record};
use crate::TopicPartition;

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
    /// Upper bound on one batch's decompressed size (protects against decompression bombs).
    pub max_decompressed_batch: usize,
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
            max_decompressed_batch: 256 * 1024 * 1024,
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

/// A broker as listed in the cluster metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// "host:port", as needed to connect.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition in the metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// Partition index.
    pub partition: i32,
    /// Leader broker id, -1 when there is none.
    pub leader: i32,
    /// Leader epoch (-1 if the broker does not report it).
    pub leader_epoch: i32,
    /// Partition-level error, if any.
    pub error: Option<KafkaCode>,
}

/// One topic in the metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: Arc<str>,
    /// Topic-level error (e.g. UNKNOWN_TOPIC_OR_PARTITION), if any.
    pub error: Option<KafkaCode>,
    /// Partitions sorted by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// Which offset ListOffsets should return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (high watermark; last stable offset under read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// Kafka's `isolation.level`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IsolationLevel {
    /// See every record, including those of open and aborted transactions.
    #[default]
    ReadUncommitted,
    /// See only committed transactional records, up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Fetch tuning, named after the Java consumer settings they mirror.
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// `fetch.max.wait.ms`: how long the broker may wait for `min_bytes` to accumulate.
    pub max_wait: Duration,
    /// `fetch.min.bytes`.
    pub min_bytes: i32,
    /// `fetch.max.bytes`: limit for the whole response (per broker).
    pub max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub max_partition_bytes: i32,
    /// `isolation.level`.
    pub isolation: IsolationLevel,
    /// Send the next Fetch for the same partitions as soon as an answer arrives, before
    /// decoding it, so the broker works while we decode (librdkafka gets the same overlap from
    /// its background threads). It changes nothing the caller sees: an answer is used only if
    /// it was asked for exactly the positions the next `fetch` call wants (extra partitions are
    /// ignored); otherwise it is discarded by dropping the fetch connection. A caller whose
    /// calls keep asking for different positions (not the `next_offset`s it was given) pays a
    /// reconnect each time and should turn this off.
    pub prefetch: bool,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            max_partition_bytes: 1024 * 1024,
            isolation: IsolationLevel::ReadUncommitted,
            prefetch: true,
        }
    }
}

/// A partition to fetch and the offset to fetch from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchPosition {
    /// The partition.
    pub tp: TopicPartition,
    /// First offset wanted.
    pub offset: i64,
}

/// The outcome of fetching one partition.
#[derive(Debug)]
pub struct FetchedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// The offset that was asked for.
    pub fetch_offset: i64,
    /// Visible records at or after `fetch_offset`, in offset order.
    pub records: Vec<Record>,
    /// Where the next fetch should start: after the last complete batch returned (which may lie
    /// beyond the last visible record when control or aborted batches were skipped), or
    /// `fetch_offset` when nothing was returned or on error.
    pub next_offset: i64,
    /// High watermark reported by the leader (-1 if unknown).
    pub high_watermark: i64,
    /// Last stable offset (-1 if unknown).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if unknown).
    pub log_start_offset: i64,
    /// Error for this partition; `records` is empty when set. Stale-metadata errors have already
    /// scheduled a metadata refresh, so simply fetching again is the right reaction to them.
    pub error: Option<WireError>,
}

/// An offset to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitOffset {
    /// The partition.
    pub tp: TopicPartition,
    /// The next offset to consume (last processed + 1).
    pub offset: i64,
    /// Leader epoch of the last consumed record, if known (OffsetCommit v6+).
    pub leader_epoch: Option<i32>,
    /// Free-form metadata stored with the offset.
    pub metadata: Option<String>,
}

/// A committed offset as read back with OffsetFetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The partition.
    pub tp: TopicPartition,
    /// The committed offset, `None` if the group has none for this partition.
    pub offset: Option<i64>,
    /// Leader epoch stored with the commit, if any.
    pub leader_epoch: Option<i32>,
    /// Metadata stored with the commit.
    pub metadata: Option<String>,
}

/// Who is committing: the group membership that fences stale commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitIdentity<'a> {
    /// The consumer group.
    pub group_id: &'a str,
    /// Classic protocol: the generation id; KIP-848: the member epoch. -1 commits outside a
    /// group (only allowed for a group without members).
    pub generation_id_or_member_epoch: i32,
    /// The member id given by the coordinator ("" outside a group).
    pub member_id: &'a str,
    /// Static membership `group.instance.id`.
    pub group_instance_id: Option<&'a str>,
}

/// A Fetch sent ahead of the caller's next `fetch` (see [`FetchConfig::prefetch`]).
#[derive(Debug)]
struct InFlightFetch {
    /// The positions asked for, sorted, to check that the caller still wants exactly these.
    key: Vec<(TopicPartition, i64)>,
    settings: FetchSettingsKey,
    pending: Pending<msg::FetchRequest>,
}

/// The fetch settings a prefetched request was made with; a change invalidates it.
type FetchSettingsKey = (Duration, i32, i32, i32, IsolationLevel);

fn settings_key(cfg: &FetchConfig) -> FetchSettingsKey {
    (
        cfg.max_wait,
        cfg.min_bytes,
        cfg.max_bytes,
        cfg.max_partition_bytes,
        cfg.isolation,
    )
}

/// Whether every element of the sorted `small` is in the sorted `big`.
fn is_subset(small: &[(TopicPartition, i64)], big: &[(TopicPartition, i64)]) -> bool {
    small.iter().all(|k| big.binary_search(k).is_ok())
}

/// The positions to prefetch after `resp`: each partition moved past its complete batches, in
/// a rotated order (so that every partition gets to be first). `None` when the response had an
/// error: the caller must see it and metadata may need a refresh first.
fn continuation(group: &[FetchPosition], resp: &msg::FetchResponse) -> Option<Vec<FetchPosition>> {
    if resp.error_code != 0 {
        return None;
    }
    let mut next: Vec<FetchPosition> = group.to_vec();
    for topic in &resp.responses {
        for p in &topic.partitions {
            if p.error_code != 0 {
                return None;
            }
            if let Some(pos) = next.iter_mut().find(|n| {
                n.tp.partition == p.partition_index && *n.tp.topic == *topic.topic.as_str()
            }) {
                if let Some(data) = &p.records {
                    pos.offset = records::next_offset_after(data, pos.offset);
                }
            }
        }
    }
    if !next.is_empty() {
        next.rotate_left(1);
    }
    Some(next)
}

fn position_key(group: &[FetchPosition]) -> Vec<(TopicPartition, i64)> {
    let mut key: Vec<(TopicPartition, i64)> =
        group.iter().map(|p| (p.tp.clone(), p.offset)).collect();
    key.sort();
    key
}

#[derive(Debug, Default)]
struct BrokerState {
    failures: u32,
    retry_at: Option<Instant>,
}

/// A blocking Kafka client for one thread: it owns its sockets (one per broker for requests,
/// one per broker for fetches) and its caches, so nothing is shared or locked. A thread that
/// needs its own conversation with the cluster (the heartbeat thread) builds its own `Client`
/// or [`Connection`].
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    brokers: BTreeMap<i32, BrokerInfo>,
    conns: HashMap<i32, Connection>,
    fetch_conns: HashMap<i32, Connection>,
    prefetched: HashMap<i32, InFlightFetch>,
    bootstrap_conn: Option<Connection>,
    broker_state: HashMap<i32, BrokerState>,
    topics: HashMap<Arc<str>, TopicMetadata>,
    leaders: HashMap<TopicPartition, i32>,
    metadata_stale: bool,
    coordinators: HashMap<String, i32>,
    controller: Option<i32>,
    fetch_rotation: usize,
}

impl Client {
    /// Connects to the first reachable bootstrap server and learns the broker list.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        if config.bootstrap.is_empty() {
            return Err(WireError::Config("empty bootstrap list".to_string()));
        }
        let mut client = Client {
            config,
            brokers: BTreeMap::new(),
            conns: HashMap::new(),
            fetch_conns: HashMap::new(),
            prefetched: HashMap::new(),
            bootstrap_conn: None,
            broker_state: HashMap::new(),
            topics: HashMap::new(),
            leaders: HashMap::new(),
            metadata_stale: true,
            coordinators: HashMap::new(),
            controller: None,
            fetch_rotation: 0,
        };
        client.retrying("bootstrap metadata", |c| c.metadata_once(Some(&[])))?;
        Ok(client)
    }

    /// The configuration this client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The brokers known from the last metadata response.
    pub fn brokers(&self) -> Vec<BrokerInfo> {
        self.brokers.values().cloned().collect()
    }

    /// One broker's address information.
    pub fn broker(&self, node_id: i32) -> Option<&BrokerInfo> {
        self.brokers.get(&node_id)
    }

    /// Fetches metadata for `topics` (all topics when empty), refreshing the leader cache.
    pub fn metadata(&mut self, topics: &[&str]) -> Result<Vec<TopicMetadata>> {
        let names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let req = if names.is_empty() {
            None
        } else {
            Some(names.as_slice())
        };
        self.retrying("metadata", |c| c.metadata_once(req))
    }

    /// How many partitions `topic` had in the last metadata this client saw, without a request.
    pub fn cached_partition_count(&self, topic: &str) -> Option<usize> {
        self.topics
            .get(topic)
            .filter(|t| t.error.is_none() && !t.partitions.is_empty())
            .map(|t| t.partitions.len())
    }

    /// The partition indexes of `topic`, from cache or metadata. Fails (after retries) for a
    /// topic the cluster does not have.
    pub fn partitions(&mut self, topic: &str) -> Result<Vec<i32>> {
        if let Some(t) = self.topics.get(topic) {
            if t.error.is_none() && !t.partitions.is_empty() {
                return Ok(t.partitions.iter().map(|p| p.partition).collect());
            }
        }
        let names = [topic.to_string()];
        self.retrying("metadata", |c| {
            let md = c.metadata_once(Some(&names))?;
            match md.into_iter().find(|t| &*t.name == topic) {
                Some(t) => match t.error {
                    Some(code) => Err(WireError::kafka(ApiKey::Metadata, code, topic)),
                    None => Ok(t.partitions.iter().map(|p| p.partition).collect()),
                },
                None => Err(WireError::kafka(
                    ApiKey::Metadata,
                    KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                    topic,
                )),
            }
        })
    }

    /// The current leader of `tp`, refreshing metadata if it is unknown or stale.
    pub fn leader(&mut self, tp: &TopicPartition) -> Result<i32> {
        if !self.metadata_stale {
            if let Some(&l) = self.leaders.get(tp) {
                if l >= 0 {
                    return Ok(l);
                }
            }
        }
        let names = [tp.topic.to_string()];
        self.metadata_once(Some(&names))?;
        match self.leaders.get(tp) {
            Some(&l) if l >= 0 => Ok(l),
            Some(_) => Err(WireError::kafka(
                ApiKey::Metadata,
                KafkaCode::LEADER_NOT_AVAILABLE,
                tp.to_string(),
            )),
            None => Err(WireError::kafka(
                ApiKey::Metadata,
                KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                tp.to_string(),
            )),
        }
    }

    /// The connection to broker `node_id`, opened (or re-opened after a failure, respecting
    /// the backoff) on demand. Lets the group layer send its own requests to the coordinator.
    ///
    /// Fetches use a second connection per broker, so that a long-polling Fetch never delays a
    /// commit, a metadata request or a group request to the same broker.
    pub fn connection(&mut self, node_id: i32) -> Result<&mut Connection> {
        self.connection_for(node_id, false)
    }

    fn connection_for(&mut self, node_id: i32, fetch: bool) -> Result<&mut Connection> {
        let map = if fetch {
            &mut self.fetch_conns
        } else {
            &mut self.conns
        };
        if map.get(&node_id).is_some_and(Connection::is_broken) {
            map.remove(&node_id);
            if fetch {
                self.prefetched.remove(&node_id);
            }
        }
        let present = if fetch {
            self.fetch_conns.contains_key(&node_id)
        } else {
            self.conns.contains_key(&node_id)
        };
        if !present {
            let addr = self
                .brokers
                .get(&node_id)
                .map(BrokerInfo::addr)
                .ok_or(WireError::UnknownBroker { node_id })?;
            let state = self.broker_state.entry(node_id).or_default();
            if let Some(at) = state.retry_at {
                let now = Instant::now();
                if at > now {
                    return Err(WireError::Io(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        format!(
                            "broker {node_id} ({addr}) failed {} time(s); next attempt in {:?}",
                            state.failures,
                            at - now
                        ),
                    )));
                }
            }
            match Connection::connect(&addr, &self.config.connection) {
                Ok(conn) => {
                    self.broker_state.remove(&node_id);
                    if fetch {
                        self.fetch_conns.insert(node_id, conn);
                    } else {
                        self.conns.insert(node_id, conn);
                    }
                }
                Err(e) => {
                    self.broker_failed(node_id);
                    return Err(e);
                }
            }
        }
        let map = if fetch {
            &mut self.fetch_conns
        } else {
            &mut self.conns
        };
        map.get_mut(&node_id)
            .ok_or(WireError::UnknownBroker { node_id })
    }

    /// Records a failure of `node_id`: drops its connection, schedules the next attempt with
    /// exponential backoff and marks metadata stale (the broker may be gone for good).
    fn broker_failed(&mut self, node_id: i32) {
        self.conns.remove(&node_id);
        self.fetch_conns.remove(&node_id);
        self.prefetched.remove(&node_id);
        let base = self.config.retry_backoff;
        let max = self.config.retry_backoff_max;
        let state = self.broker_state.entry(node_id).or_default();
        state.failures = state.failures.saturating_add(1);
        let factor = 1u32 << state.failures.saturating_sub(1).min(16);
        let delay = base.saturating_mul(factor).min(max);
        state.retry_at = Some(Instant::now() + delay);
        self.metadata_stale = true;
        debug!(
            "broker {node_id} failed ({} in a row); backing off {delay:?}",
            state.failures
        );
    }

    /// Runs `op` until it succeeds, fails with a non-retriable error, or `max_retries` attempts
    /// were made; sleeps with exponential backoff between attempts.
    fn retrying<T>(&mut self, what: &str, mut op: impl FnMut(&mut Self) -> Result<T>) -> Result<T> {
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

    /// Sends `op` to any reachable broker: a live connection first, then known brokers, then the
    /// bootstrap list. Used for requests that any broker can answer (Metadata, FindCoordinator).
    fn any_broker<T>(&mut self, mut op: impl FnMut(&mut Connection) -> Result<T>) -> Result<T> {
        let mut tried = Vec::new();
        let mut candidates: Vec<i32> = self.conns.keys().copied().collect();
        candidates.sort_unstable();
        for id in self.brokers.keys() {
            if !candidates.contains(id) {
                candidates.push(*id);
            }
        }
        for id in candidates {
            let conn = match self.connection(id) {
                Ok(c) => c,
                Err(e) => {
                    tried.push(format!("broker {id}: {e}"));
                    continue;
                }
            };
            match op(conn) {
                Ok(v) => return Ok(v),
                Err(e) if e.breaks_connection() => {
                    tried.push(format!("broker {id}: {e}"));
                    self.broker_failed(id);
                }
                Err(e) => return Err(e),
            }
        }
        if self
            .bootstrap_conn
            .as_ref()
            .is_some_and(Connection::is_broken)
        {
            self.bootstrap_conn = None;
        }
        if let Some(conn) = self.bootstrap_conn.as_mut() {
            match op(conn) {
                Ok(v) => return Ok(v),
                Err(e) if e.breaks_connection() => {
                    tried.push(format!("{}: {e}", conn.addr()));
                    self.bootstrap_conn = None;
                }
                Err(e) => return Err(e),
            }
        }
        for addr in self.config.bootstrap.clone() {
            match Connection::connect(&addr, &self.config.connection) {
                Ok(mut conn) => match op(&mut conn) {
                    Ok(v) => {
                        self.bootstrap_conn = Some(conn);
                        return Ok(v);
                    }
                    Err(e) if e.breaks_connection() => tried.push(format!("{addr}: {e}")),
                    Err(e) => return Err(e),
                },
                Err(e) => tried.push(format!("{addr}: {e}")),
            }
        }
        Err(WireError::NoBrokerAvailable { tried })
    }

    fn metadata_once(&mut self, topics: Option<&[String]>) -> Result<Vec<TopicMetadata>> {
        let auto_create = self.config.allow_auto_topic_creation;
        let resp = self.any_broker(|conn| {
            let version = conn.version_for(ApiKey::Metadata)?;
            let mut req = msg::MetadataRequest::default().with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        metadata_request::MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect()
            }));
            if version >= 4 {
                req = req.with_allow_auto_topic_creation(auto_create);
            }
            conn.send(&req, version)
        })?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(WireError::kafka(ApiKey::Metadata, code, "cluster"));
        }
        let brokers: BTreeMap<i32, BrokerInfo> = resp
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerInfo {
                        node_id: b.node_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: b.rack.as_ref().map(|r| r.to_string()),
                    },
                )
            })
            .collect();
        // Drop connections whose broker disappeared or moved.
        let moved: Vec<i32> = self
            .conns
            .keys()
            .filter(|id| {
                brokers.get(id).map(BrokerInfo::addr) != self.brokers.get(id).map(BrokerInfo::addr)
            })
            .copied()
            .collect();
        for id in moved {
            self.conns.remove(&id);
            self.fetch_conns.remove(&id);
            self.prefetched.remove(&id);
        }
        self.brokers = brokers;
        self.controller = (resp.controller_id.0 >= 0).then_some(resp.controller_id.0);
        let mut out = Vec::with_capacity(resp.topics.len());
        for t in resp.topics {
            let name: Arc<str> = match &t.name {
                Some(n) => self.intern(n.as_str()),
                None => continue,
            };
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    error: KafkaCode::from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            let meta = TopicMetadata {
                name: Arc::clone(&name),
                error: KafkaCode::from_code(t.error_code),
                partitions,
            };
            self.leaders.retain(|tp, _| tp.topic != name);
            for p in &meta.partitions {
                self.leaders.insert(
                    TopicPartition::new(Arc::clone(&name), p.partition),
                    p.leader,
                );
            }
            self.topics.insert(Arc::clone(&name), meta.clone());
            out.push(meta);
        }
        if topics.is_some() {
            self.metadata_stale = false;
        }
        debug!(
            "metadata: {} brokers, {} topics",
            self.brokers.len(),
            out.len()
        );
        Ok(out)
    }

    /// Shares one `Arc<str>` per topic name across all partitions and records.
    fn intern(&self, name: &str) -> Arc<str> {
        self.topics
            .get_key_value(name)
            .map(|(k, _)| Arc::clone(k))
            .unwrap_or_else(|| Arc::from(name))
    }

    /// Finds the group coordinator for `group_id` (cached until it moves).
    pub fn find_coordinator(&mut self, group_id: &str) -> Result<BrokerInfo> {
        if let Some(info) = self
            .coordinators
            .get(group_id)
            .and_then(|id| self.brokers.get(id))
        {
            return Ok(info.clone());
        }
        let info = self.retrying("FindCoordinator", |c| c.find_coordinator_once(group_id))?;
        self.coordinators.insert(group_id.to_string(), info.node_id);
        self.brokers
            .entry(info.node_id)
            .or_insert_with(|| info.clone());
        Ok(info)
    }

    fn find_coordinator_once(&mut self, group_id: &str) -> Result<BrokerInfo> {
        let resp = self.any_broker(|conn| {
            let version = conn.version_for(ApiKey::FindCoordinator)?;
            let key = StrBytes::from_string(group_id.to_string());
            let req = if version >= 4 {
                msg::FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
            } else {
                msg::FindCoordinatorRequest::default().with_key(key)
            };
            Ok((version, conn.send(&req, version)?))
        })?;
        let (version, resp) = resp;
        let (code, node_id, host, port, message) = if version >= 4 {
            let c = resp.coordinators.into_iter().next().ok_or_else(|| {
                WireError::Protocol("FindCoordinator response without coordinators".into())
            })?;
            (c.error_code, c.node_id.0, c.host, c.port, c.error_message)
        } else {
            (
                resp.error_code,
                resp.node_id.0,
                resp.host,
                resp.port,
                resp.error_message,
            )
        };
        if let Some(code) = KafkaCode::from_code(code) {
            let msg = message.map(|m| m.to_string()).unwrap_or_default();
            return Err(WireError::kafka(
                ApiKey::FindCoordinator,
                code,
                format!("group {group_id} {msg}"),
            ));
        }
        Ok(BrokerInfo {
            node_id,
            host: host.to_string(),
            port,
            rack: None,
        })
    }

    /// Forgets the cached coordinator of `group_id` (after NOT_COORDINATOR and friends).
    pub fn invalidate_coordinator(&mut self, group_id: &str) {
        self.coordinators.remove(group_id);
    }

    /// The earliest or latest offset (or the offset for a timestamp) of each partition.
    pub fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.retrying("ListOffsets", |c| {
            c.list_offsets_once(partitions, spec, isolation)
        })
    }

    fn list_offsets_once(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let mut by_leader: BTreeMap<i32, Vec<&TopicPartition>> = BTreeMap::new();
        for tp in partitions {
            let leader = self.leader(tp)?;
            by_leader.entry(leader).or_default().push(tp);
        }
        let mut out = HashMap::with_capacity(partitions.len());
        for (leader, tps) in by_leader {
            let conn = match self.connection(leader) {
                Ok(c) => c,
                Err(e) => {
                    self.metadata_stale = true;
                    return Err(e);
                }
            };
            let version = conn.version_for(ApiKey::ListOffsets)?;
            let mut topics: BTreeMap<&str, Vec<list_offsets_request::ListOffsetsPartition>> =
                BTreeMap::new();
            for tp in &tps {
                topics.entry(&tp.topic).or_default().push(
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(tp.partition)
                        .with_timestamp(spec.timestamp()),
                );
            }
            let mut req = msg::ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            list_offsets_request::ListOffsetsTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            if version >= 2 {
                req = req.with_isolation_level(isolation.code());
            }
            let resp = match conn.send(&req, version) {
                Ok(r) => r,
                Err(e) => {
                    if e.breaks_connection() {
                        self.broker_failed(leader);
                    }
                    return Err(e);
                }
            };
            for t in resp.topics {
                for p in t.partitions {
                    let tp = TopicPartition::new(self.intern(t.name.as_str()), p.partition_index);
                    if let Some(code) = KafkaCode::from_code(p.error_code) {
                        if code.is_stale_metadata() {
                            self.metadata_stale = true;
                        }
                        return Err(WireError::kafka(ApiKey::ListOffsets, code, tp.to_string()));
                    }
                    out.insert(tp, p.offset);
                }
            }
        }
        for tp in partitions {
            if !out.contains_key(tp) {
                return Err(WireError::Protocol(format!(
                    "ListOffsets response lacks {tp}"
                )));
            }
        }
        Ok(out)
    }

    /// Fetches from every partition in `positions`, one request per leader, all requests sent
    /// before any response is awaited so the brokers wait for data in parallel.
    ///
    /// Returns one [`FetchedPartition`] per position (in no particular order). Per-partition
    /// failures (leader moved, offset out of range, broker down, corrupt batch) are reported in
    /// that partition's `error`; the call itself fails only if no metadata can be had.
    pub fn fetch(
        &mut self,
        positions: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Vec<FetchedPartition>> {
        let mut results = Vec::with_capacity(positions.len());
        if positions.is_empty() {
            return Ok(results);
        }
        if self.metadata_stale || positions.iter().any(|p| !self.leaders.contains_key(&p.tp)) {
            let mut names: Vec<String> = positions.iter().map(|p| p.tp.topic.to_string()).collect();
            names.sort();
            names.dedup();
            if let Err(e) = self.metadata_once(Some(&names)) {
                if self.leaders.is_empty() {
                    return Err(e);
                }
                warn!("fetch: metadata refresh failed, using cached leaders: {e}");
            }
        }
        // Rotate the order so that every partition is regularly first in its request: brokers
        // only guarantee progress (KIP-74) for the first partition when a batch exceeds limits.
        self.fetch_rotation = self.fetch_rotation.wrapping_add(1);
        let start = self.fetch_rotation % positions.len();
        let mut by_leader: BTreeMap<i32, Vec<&FetchPosition>> = BTreeMap::new();
        for pos in positions[start..].iter().chain(&positions[..start]) {
            match self.leaders.get(&pos.tp) {
                Some(&leader) if leader >= 0 => by_leader.entry(leader).or_default().push(pos),
                Some(_) => results.push(failed(
                    pos,
                    WireError::kafka(
                        ApiKey::Fetch,
                        KafkaCode::LEADER_NOT_AVAILABLE,
                        pos.tp.to_string(),
                    ),
                )),
                None => results.push(failed(
                    pos,
                    WireError::kafka(
                        ApiKey::Fetch,
                        KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                        pos.tp.to_string(),
                    ),
                )),
            }
        }
        if by_leader.is_empty() {
            self.metadata_stale = true;
        }

        // Phase 1: per leader, take over a matching prefetched request or write a new one.
        let settings = settings_key(cfg);
        let mut in_flight: Vec<(i32, Vec<FetchPosition>, Pending<msg::FetchRequest>)> = Vec::new();
        for (leader, group) in by_leader {
            let group: Vec<FetchPosition> = group.into_iter().cloned().collect();
            if let Some(pf) = self.prefetched.remove(&leader) {
                // Usable if it asked for every wanted position (it may hold more partitions,
                // whose data is then ignored: only requested positions are ever returned).
                if pf.settings == settings && is_subset(&position_key(&group), &pf.key) {
                    in_flight.push((leader, group, pf.pending));
                    continue;
                }
                // The caller moved on (seek, new assignment, other settings): the answer in
                // flight is for other positions. Dropping the connection discards it at once,
                // where reading it could take up to max_wait.
                debug!("fetch: discarding the prefetch from broker {leader}");
                self.fetch_conns.remove(&leader);
            }
            match self.send_fetch(leader, &group, cfg) {
                Ok(pending) => in_flight.push((leader, group, pending)),
                Err(e) => {
                    if e.breaks_connection() {
                        self.broker_failed(leader);
                    }
                    self.metadata_stale = true;
                    for pos in &group {
                        results.push(failed(pos, duplicate(&e)));
                    }
                }
            }
        }
        if in_flight.is_empty() {
            // Nothing could be sent (brokers down or in backoff, no leaders): wait as a long
            // poll would, so that a caller looping on fetch does not spin.
            thread::sleep(cfg.max_wait.min(self.config.retry_backoff));
            return Ok(results);
        }
        // Phase 2: collect the responses. With prefetch on, each broker is asked for its
        // continuation as soon as its answer is in, before waiting for the next broker and
        // before decoding, so every broker prepares its next answer while we wait and decode.
        let timeout = self.config.connection.request_timeout + cfg.max_wait;
        let mut responses = Vec::with_capacity(in_flight.len());
        for (leader, group, pending) in in_flight {
            let resp = match self.fetch_conns.get_mut(&leader) {
                Some(conn) => conn.receive(pending, timeout),
                None => Err(WireError::UnknownBroker { node_id: leader }),
            };
            match resp {
                Ok(resp) => {
                    if cfg.prefetch {
                        self.prefetch(leader, &group, &resp, cfg);
                    }
                    responses.push((group, resp));
                }
                Err(e) => {
                    warn!("fetch from broker {leader} failed: {e}");
                    if e.breaks_connection() {
                        self.broker_failed(leader);
                    }
                    for pos in &group {
                        results.push(failed(pos, duplicate(&e)));
                    }
                }
            }
        }
        // Phase 3: decode.
        for (group, resp) in responses {
            self.absorb_fetch(resp, &group, cfg, &mut results);
        }
        Ok(results)
    }

    /// Sends the Fetch that continues `resp` (see [`FetchConfig::prefetch`]).
    fn prefetch(
        &mut self,
        leader: i32,
        group: &[FetchPosition],
        resp: &msg::FetchResponse,
        cfg: &FetchConfig,
    ) {
        let Some(next) = continuation(group, resp) else {
            return;
        };
        match self.send_fetch(leader, &next, cfg) {
            Ok(pending) => {
                self.prefetched.insert(
                    leader,
                    InFlightFetch {
                        key: position_key(&next),
                        settings: settings_key(cfg),
                        pending,
                    },
                );
            }
            Err(e) => debug!("prefetch to broker {leader} not sent: {e}"),
        }
    }

    fn send_fetch(
        &mut self,
        leader: i32,
        group: &[FetchPosition],
        cfg: &FetchConfig,
    ) -> Result<Pending<msg::FetchRequest>> {
        // A response larger than the connection accepts would break the connection on every
        // attempt; leave room for the response's own fields.
        let ceiling = self
            .config
            .connection
            .max_response_size
            .saturating_sub(1024 * 1024)
            .max(1024 * 1024);
        let max_bytes = cfg
            .max_bytes
            .min(i32::try_from(ceiling).unwrap_or(i32::MAX));
        let conn = self.connection_for(leader, true)?;
        let version = conn.version_for(ApiKey::Fetch)?;
        // Keep the partition order (rotation) while grouping by topic: consecutive runs of the
        // same topic become one FetchTopic.
        let mut topics: Vec<fetch_request::FetchTopic> = Vec::new();
        for pos in group {
            let part = fetch_request::FetchPartition::default()
                .with_partition(pos.tp.partition)
                .with_fetch_offset(pos.offset)
                .with_partition_max_bytes(cfg.max_partition_bytes);
            match topics.last_mut() {
                Some(t) if t.topic.as_str() == &*pos.tp.topic => t.partitions.push(part),
                _ => topics.push(
                    fetch_request::FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(pos.tp.topic.to_string())))
                        .with_partitions(vec![part]),
                ),
            }
        }
        let max_wait = i32::try_from(cfg.max_wait.as_millis()).unwrap_or(i32::MAX);
        let req = msg::FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait)
            .with_min_bytes(cfg.min_bytes)
            .with_max_bytes(max_bytes)
            .with_isolation_level(cfg.isolation.code())
            .with_topics(topics);
        conn.send_request(&req, version)
    }

    fn absorb_fetch(
        &mut self,
        resp: msg::FetchResponse,
        group: &[FetchPosition],
        cfg: &FetchConfig,
        results: &mut Vec<FetchedPartition>,
    ) {
        let mut wanted: HashMap<&TopicPartition, &FetchPosition> =
            group.iter().map(|p| (&p.tp, p)).collect();
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            for pos in group {
                results.push(failed(
                    pos,
                    WireError::kafka(ApiKey::Fetch, code, "whole fetch request"),
                ));
            }
            return;
        }
        for topic in resp.responses {
            let name = self.intern(topic.topic.as_str());
            for p in topic.partitions {
                let key = TopicPartition::new(Arc::clone(&name), p.partition_index);
                let Some(pos) = wanted.remove(&key) else {
                    // A prefetched answer for a partition the caller no longer asks for.
                    debug!("fetch: ignoring data of unrequested partition {key}");
                    continue;
                };
                if let Some(code) = KafkaCode::from_code(p.error_code) {
                    if code.is_stale_metadata() {
                        self.metadata_stale = true;
                        self.leaders.remove(&pos.tp);
                    }
                    let mut r = failed(
                        pos,
                        WireError::kafka(ApiKey::Fetch, code, pos.tp.to_string()),
                    );
                    r.high_watermark = p.high_watermark;
                    r.log_start_offset = p.log_start_offset;
                    results.push(r);
                    continue;
                }
                let aborted: Option<Vec<AbortedTxn>> = match cfg.isolation {
                    IsolationLevel::ReadCommitted => Some(
                        p.aborted_transactions
                            .iter()
                            .flatten()
                            .map(|t| AbortedTxn {
                                producer_id: t.producer_id.0,
                                first_offset: t.first_offset,
                            })
                            .collect(),
                    ),
                    IsolationLevel::ReadUncommitted => None,
                };
                let input = PartitionInput {
                    topic: &pos.tp.topic,
                    partition: pos.tp.partition,
                    fetch_offset: pos.offset,
                    aborted: aborted.as_deref(),
                    max_decompressed: self.config.max_decompressed_batch,
                };
                let data = p.records.unwrap_or_default();
                let mut records = Vec::new();
                let (next_offset, error) =
                    match records::decode_partition(&input, &data, &mut records) {
                        Ok(summary) => (
                            summary.next_offset.unwrap_or(pos.offset).max(pos.offset),
                            None,
                        ),
                        Err(e) => {
                            records.clear();
                            (pos.offset, Some(e))
                        }
                    };
                results.push(FetchedPartition {
                    tp: pos.tp.clone(),
                    fetch_offset: pos.offset,
                    records,
                    next_offset,
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    error,
                });
            }
        }
        // A partition the broker did not answer for: nothing new, fetch it again next time.
        for pos in wanted.into_values() {
            results.push(untouched(pos));
        }
    }

    /// Reads the committed offsets of `group_id` for `partitions`.
    pub fn offset_fetch(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<CommittedOffset>> {
        self.retrying("OffsetFetch", |c| c.offset_fetch_once(group_id, partitions))
    }

    fn offset_fetch_once(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<CommittedOffset>> {
        let coordinator = self.find_coordinator(group_id)?.node_id;
        let conn = match self.connection(coordinator) {
            Ok(c) => c,
            Err(e) => {
                self.coordinators.remove(group_id);
                return Err(e);
            }
        };
        let version = conn.version_for(ApiKey::OffsetFetch)?;
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        let group = GroupId(StrBytes::from_string(group_id.to_string()));
        let req = if version >= 8 {
            msg::OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group)
                    .with_topics(Some(
                        by_topic
                            .iter()
                            .map(|(t, ps)| {
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                    .with_partition_indexes(ps.clone())
                            })
                            .collect(),
                    )),
            ])
        } else {
            msg::OffsetFetchRequest::default()
                .with_group_id(group)
                .with_topics(Some(
                    by_topic
                        .iter()
                        .map(|(t, ps)| {
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                .with_partition_indexes(ps.clone())
                        })
                        .collect(),
                ))
        };
        let resp = match conn.send(&req, version) {
            Ok(r) => r,
            Err(e) => {
                if e.breaks_connection() {
                    self.broker_failed(coordinator);
                }
                return Err(e);
            }
        };
        // (topic, partition, offset, epoch, metadata, error)
        type Row = (TopicName, i32, i64, i32, Option<StrBytes>, i16);
        let (top_error, rows): (i16, Vec<Row>) = if version >= 8 {
            let g = resp.groups.into_iter().next().ok_or_else(|| {
                WireError::Protocol("OffsetFetch response without groups".to_string())
            })?;
            let mut rows = Vec::new();
            for t in g.topics {
                for p in t.partitions {
                    rows.push((
                        t.name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata,
                        p.error_code,
                    ));
                }
            }
            (g.error_code, rows)
        } else {
            let mut rows = Vec::new();
            for t in resp.topics {
                for p in t.partitions {
                    rows.push((
                        t.name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata,
                        p.error_code,
                    ));
                }
            }
            (resp.error_code, rows)
        };
        if let Some(code) = KafkaCode::from_code(top_error) {
            if code.is_coordinator_moved() {
                self.coordinators.remove(group_id);
            }
            return Err(WireError::kafka(
                ApiKey::OffsetFetch,
                code,
                format!("group {group_id}"),
            ));
        }
        let mut out = Vec::with_capacity(rows.len());
        for (name, partition, offset, epoch, metadata, error) in rows {
            let tp = TopicPartition::new(self.intern(name.as_str()), partition);
            if let Some(code) = KafkaCode::from_code(error) {
                if code.is_coordinator_moved() {
                    self.coordinators.remove(group_id);
                }
                return Err(WireError::kafka(
                    ApiKey::OffsetFetch,
                    code,
                    format!("group {group_id} {tp}"),
                ));
            }
            out.push(CommittedOffset {
                tp,
                offset: (offset >= 0).then_some(offset),
                leader_epoch: (epoch >= 0).then_some(epoch),
                metadata: metadata.map(|m| m.to_string()),
            });
        }
        Ok(out)
    }

    /// Commits `offsets` for the member `who`, returning each partition's own result.
    ///
    /// Coordinator moves and transport failures are retried (bounded); every other error —
    /// in particular ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS and the
    /// KIP-848 epoch errors — is returned per partition untouched, because only the group layer
    /// knows whether the commit may be repeated.
    pub fn offset_commit(
        &mut self,
        who: &CommitIdentity<'_>,
        offsets: &[CommitOffset],
    ) -> Result<Vec<(TopicPartition, std::result::Result<(), WireError>)>> {
        self.retrying("OffsetCommit", |c| {
            let results = c.offset_commit_once(who, offsets)?;
            // If the coordinator moved, every partition says so: find it again and retry.
            if let Some(code) = results
                .iter()
                .filter_map(|(_, r)| r.as_ref().err().and_then(WireError::kafka_code))
                .find(|c| c.is_coordinator_moved() || *c == KafkaCode::COORDINATOR_LOAD_IN_PROGRESS)
            {
                c.coordinators.remove(who.group_id);
                return Err(WireError::kafka(
                    ApiKey::OffsetCommit,
                    code,
                    format!("group {}", who.group_id),
                ));
            }
            Ok(results)
        })
    }

    fn offset_commit_once(
        &mut self,
        who: &CommitIdentity<'_>,
        offsets: &[CommitOffset],
    ) -> Result<Vec<(TopicPartition, std::result::Result<(), WireError>)>> {
        let coordinator = self.find_coordinator(who.group_id)?.node_id;
        let conn = match self.connection(coordinator) {
            Ok(c) => c,
            Err(e) => {
                self.coordinators.remove(who.group_id);
                return Err(e);
            }
        };
        let version = conn.version_for(ApiKey::OffsetCommit)?;
        let mut by_topic: BTreeMap<&str, Vec<offset_commit_request::OffsetCommitRequestPartition>> =
            BTreeMap::new();
        for o in offsets {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(o.tp.partition)
                .with_committed_offset(o.offset)
                .with_committed_metadata(o.metadata.clone().map(StrBytes::from_string));
            if version >= 6 {
                p = p.with_committed_leader_epoch(o.leader_epoch.unwrap_or(-1));
            }
            by_topic.entry(&o.tp.topic).or_default().push(p);
        }
        let mut req = msg::OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(who.group_id.to_string())))
            .with_generation_id_or_member_epoch(who.generation_id_or_member_epoch)
            .with_member_id(StrBytes::from_string(who.member_id.to_string()))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        if version >= 7 {
            req = req.with_group_instance_id(
                who.group_instance_id
                    .map(|s| StrBytes::from_string(s.to_string())),
            );
        } else if who.group_instance_id.is_some() {
            return Err(WireError::UnsupportedVersion {
                api: ApiKey::OffsetCommit as i16,
                ours: (7, super::versions::client_range(ApiKey::OffsetCommit).max),
                broker: conn
                    .versions()
                    .broker_range(ApiKey::OffsetCommit)
                    .map(|r| (r.min, r.max)),
            });
        }
        let resp = match conn.send(&req, version) {
            Ok(r) => r,
            Err(e) => {
                if e.breaks_connection() {
                    self.broker_failed(coordinator);
                }
                return Err(e);
            }
        };
        let mut out = Vec::with_capacity(offsets.len());
        for t in resp.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(self.intern(t.name.as_str()), p.partition_index);
                let r = match KafkaCode::from_code(p.error_code) {
                    None => Ok(()),
                    Some(code) => Err(WireError::kafka(
                        ApiKey::OffsetCommit,
                        code,
                        format!("group {} {tp}", who.group_id),
                    )),
                };
                out.push((tp, r));
            }
        }
        Ok(out)
    }

    /// Appends `records` to `tp` as one uncompressed batch with acks=all; returns the base offset
    /// the leader assigned. Meant for tests, examples and demos, not for high-volume producing.
    pub fn produce(&mut self, tp: &TopicPartition, records: &[ProduceRecord]) -> Result<i64> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let batch = records::encode_batch(records, now_ms)?;
        self.retrying("Produce", |c| c.produce_once(tp, batch.clone()))
    }

    fn produce_once(&mut self, tp: &TopicPartition, batch: Bytes) -> Result<i64> {
        let leader = self.leader(tp)?;
        let timeout_ms =
            i32::try_from(self.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let conn = match self.connection(leader) {
            Ok(c) => c,
            Err(e) => {
                self.metadata_stale = true;
                return Err(e);
            }
        };
        let version = conn.version_for(ApiKey::Produce)?;
        let req = msg::ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(tp.topic.to_string())))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(tp.partition)
                        .with_records(Some(batch)),
                ])]);
        let resp = match conn.send(&req, version) {
            Ok(r) => r,
            Err(e) => {
                if e.breaks_connection() {
                    self.broker_failed(leader);
                }
                return Err(e);
            }
        };
        let p = resp
            .responses
            .into_iter()
            .flat_map(|t| t.partition_responses)
            .find(|p| p.index == tp.partition)
            .ok_or_else(|| WireError::Protocol(format!("Produce response lacks {tp}")))?;
        if let Some(code) = KafkaCode::from_code(p.error_code) {
            if code.is_stale_metadata() {
                self.metadata_stale = true;
            }
            let msg = p.error_message.map(|m| m.to_string()).unwrap_or_default();
            return Err(WireError::kafka(
                ApiKey::Produce,
                code,
                format!("{tp} {msg}"),
            ));
        }
        Ok(p.base_offset)
    }

    /// Creates topics (name, partitions, replication factor) through the controller. A topic
    /// that already exists is an error with code TOPIC_ALREADY_EXISTS (36), which callers that
    /// only want the topic to exist can ignore.
    pub fn create_topics(&mut self, topics: &[(&str, i32, i16)]) -> Result<()> {
        // A controller id missing from the broker list (librdkafka's mock cluster reports 0
        // while numbering its brokers from 1) falls back to any known broker.
        let controller = match self.controller.filter(|id| self.brokers.contains_key(id)) {
            Some(c) => c,
            None => *self
                .brokers
                .keys()
                .next()
                .ok_or(WireError::NoBrokerAvailable { tried: Vec::new() })?,
        };
        let timeout_ms =
            i32::try_from(self.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let conn = self.connection(controller)?;
        let version = conn.version_for(ApiKey::CreateTopics)?;
        let req = msg::CreateTopicsRequest::default()
            .with_timeout_ms(timeout_ms)
            .with_topics(
                topics
                    .iter()
                    .map(|(name, parts, rf)| {
                        create_topics_request::CreatableTopic::default()
                            .with_name(TopicName(StrBytes::from_string(name.to_string())))
                            .with_num_partitions(*parts)
                            .with_replication_factor(*rf)
                    })
                    .collect(),
            );
        let resp = conn.send(&req, version)?;
        for t in resp.topics {
            if let Some(code) = KafkaCode::from_code(t.error_code) {
                return Err(WireError::kafka(
                    ApiKey::CreateTopics,
                    code,
                    format!(
                        "topic {} {}",
                        t.name.as_str(),
                        t.error_message.map(|m| m.to_string()).unwrap_or_default()
                    ),
                ));
            }
        }
        self.metadata_stale = true;
        info!(
            "created topics {:?}",
            topics.iter().map(|t| t.0).collect::<Vec<_>>()
        );
        Ok(())
    }
}

/// A partition result with no records that keeps the position, so the caller simply fetches
/// again.
fn untouched(pos: &FetchPosition) -> FetchedPartition {
    FetchedPartition {
        tp: pos.tp.clone(),
        fetch_offset: pos.offset,
        records: Vec::new(),
        next_offset: pos.offset,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        error: None,
    }
}

/// A failed partition result that keeps the position.
fn failed(pos: &FetchPosition, error: WireError) -> FetchedPartition {
    FetchedPartition {
        error: Some(error),
        ..untouched(pos)
    }
}

/// Copies an error for each partition it affects (`io::Error` is not `Clone`).
fn duplicate(e: &WireError) -> WireError {
    match e {
        WireError::Kafka { api, code, context } => WireError::Kafka {
            api: *api,
            code: *code,
            context: context.clone(),
        },
        WireError::Io(io) => WireError::Io(std::io::Error::new(io.kind(), io.to_string())),
        WireError::Timeout { what } => WireError::Timeout { what: what.clone() },
        WireError::UnsupportedVersion { api, ours, broker } => WireError::UnsupportedVersion {
            api: *api,
            ours: *ours,
            broker: *broker,
        },
        WireError::UnknownBroker { node_id } => WireError::UnknownBroker { node_id: *node_id },
        WireError::Truncated { expected, got } => WireError::Truncated {
            expected: *expected,
            got: *got,
        },
        other => WireError::Protocol(other.to_string()),
    }
}

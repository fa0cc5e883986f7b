//! What the client knows about the cluster: brokers, topics and their partition leaders, group
//! coordinators and the controller; and the requests that learn it (Metadata, FindCoordinator)
//! or change it (CreateTopics).
//!
//! The caches here route every other request, the share fetcher's included (its topic ids,
//! leaders and broker endpoints come from here, not from a cache of its own): [`Client::leader`] answers from the leader cache
//! unless a broker reported stale metadata, and [`Client::find_coordinator`] from the coordinator
//! cache until a coordinator error removes the entry.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::{
    self as msg, create_topics_request, metadata_request, ApiKey, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use log::{debug, info};
use uuid::Uuid;

use super::Client;
use crate::wire::error::{broker_text, KafkaCode, Result, WireError};
use crate::wire::quirks;
use crate::TopicPartition;

/// What FindCoordinator looks for: its `key_type` (v1+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CoordinatorKind {
    /// A consumer or share group's coordinator (key type 0).
    Group = 0,
    /// A transactional id's transaction coordinator (key type 1).
    Transaction = 1,
}

impl CoordinatorKind {
    /// How an error message names the key.
    fn noun(self) -> &'static str {
        match self {
            CoordinatorKind::Group => "group",
            CoordinatorKind::Transaction => "transactional id",
        }
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
    /// Kafka's internal topics (`__consumer_offsets`, `__transaction_state`, ...): a pattern
    /// subscription leaves them out under `exclude.internal.topics`.
    pub is_internal: bool,
}

/// The most brokers a Metadata response may list (checked before it is decoded, by
/// `wire::bounded`). Kafka's largest deployments run a few thousand brokers; a response listing
/// more is broken or hostile, and refusing it keeps the caches (and every per-broker loop over
/// them) small.
pub const MAX_METADATA_BROKERS: usize = 10_000;

/// The most topics a Metadata response may list, for the same reason: well above what a
/// KRaft cluster supports (a few hundred thousand partitions), well below what the frame size
/// could carry.
pub const MAX_METADATA_TOPICS: usize = 1_000_000;

impl Client {
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

    /// Like [`Client::metadata`] with one attempt (on any broker that answers) instead of the
    /// client's retries: for a caller that must not block longer than one request timeout and
    /// asks again in its own loop (the producer's sender, whose other brokers' batches wait).
    pub(crate) fn metadata_single(&mut self, topics: &[&str]) -> Result<Vec<TopicMetadata>> {
        let names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let req = if names.is_empty() {
            None
        } else {
            Some(names.as_slice())
        };
        self.metadata_once(req)
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

    pub(super) fn metadata_once(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<Vec<TopicMetadata>> {
        self.metadata_from(topics, 0)
    }

    /// [`metadata_once`](Self::metadata_once) from a broker that speaks Metadata at
    /// `min_version` or later (v10: topic ids), else [`WireError::UnsupportedVersion`].
    fn metadata_from(
        &mut self,
        topics: Option<&[String]>,
        min_version: i16,
    ) -> Result<Vec<TopicMetadata>> {
        let auto_create = self.config.allow_auto_topic_creation;
        let resp = self.any_broker(|conn| {
            let version = conn.version_for(ApiKey::Metadata)?;
            if version < min_version {
                return Err(WireError::UnsupportedVersion {
                    api: ApiKey::Metadata as i16,
                    ours: (min_version, 12),
                    broker: Some((0, version)),
                });
            }
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
        }
        self.brokers = brokers;
        self.controller = (resp.controller_id.0 >= 0).then_some(resp.controller_id.0);
        // One pass over the leader cache for all answered topics (not one per topic: a response
        // with many topics would make that quadratic).
        let answered: HashSet<&str> = resp
            .topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.as_str()))
            .collect();
        self.leaders.retain(|tp, _| !answered.contains(&*tp.topic));
        self.leader_epochs
            .retain(|tp, _| !answered.contains(&*tp.topic));
        drop(answered);
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
            if t.error_code == 0 && !t.topic_id.is_nil() {
                self.topic_ids.insert(Arc::clone(&name), t.topic_id);
                self.topic_names.insert(t.topic_id, Arc::clone(&name));
            }
            let meta = TopicMetadata {
                name: Arc::clone(&name),
                error: KafkaCode::from_code(t.error_code),
                partitions,
                is_internal: t.is_internal,
            };
            for p in &meta.partitions {
                let tp = TopicPartition::new(Arc::clone(&name), p.partition);
                if p.leader_epoch >= 0 {
                    self.leader_epochs.insert(tp.clone(), p.leader_epoch);
                }
                self.leaders.insert(tp, p.leader);
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

    /// Refreshes the caches for `topics` with one Metadata request at v10 or later (topic ids),
    /// no retry loop: for a caller whose requests name topics by id (the share fetcher), which
    /// tries again with its next round.
    pub(in crate::wire) fn refresh_topic_ids(&mut self, topics: &[String]) -> Result<()> {
        self.metadata_from(Some(topics), 10).map(|_| ())
    }

    /// Whether a broker said the leader cache is out of date (the next lookup refreshes it).
    pub(in crate::wire) fn metadata_is_stale(&self) -> bool {
        self.metadata_stale
    }

    /// A broker said the leader cache is out of date (NOT_LEADER_OR_FOLLOWER without a usable
    /// hint, an unknown topic id, a failed request): the next lookup refreshes it.
    pub(in crate::wire) fn mark_metadata_stale(&mut self) {
        self.metadata_stale = true;
    }

    /// `tp`'s leader as cached (-1: none), without a request.
    pub(crate) fn cached_leader(&self, tp: &TopicPartition) -> Option<i32> {
        self.leaders.get(tp).copied()
    }

    /// `topic`'s id as cached (learnt from Metadata v10 or later).
    pub(in crate::wire) fn topic_id(&self, topic: &str) -> Option<Uuid> {
        self.topic_ids.get(topic).copied()
    }

    /// The cached topic names by id, to read answers that name topics by id.
    pub(in crate::wire) fn topic_names(&self) -> &HashMap<Uuid, Arc<str>> {
        &self.topic_names
    }

    /// A broker's answer named `leader` as `tp`'s leader (a share answer's NOT_LEADER hint):
    /// cached as it says. Returns the leader cached before.
    pub(in crate::wire) fn leader_named(
        &mut self,
        tp: &TopicPartition,
        leader: i32,
    ) -> Option<i32> {
        self.leaders.insert(tp.clone(), leader)
    }

    /// A broker's answer gave `node_id`'s endpoint (with a leader hint): cached as it says; a
    /// request connection to its old address is dropped, as a Metadata answer's move drops it.
    pub(in crate::wire) fn endpoint_named(&mut self, node_id: i32, host: &str, port: i32) {
        let known = self.brokers.get(&node_id);
        if known.is_some_and(|b| b.host == host && b.port == port) {
            return;
        }
        let rack = known.and_then(|b| b.rack.clone());
        if known.is_some() {
            self.conns.remove(&node_id);
        }
        self.brokers.insert(
            node_id,
            BrokerInfo {
                node_id,
                host: host.to_string(),
                port,
                rack,
            },
        );
    }

    /// Shares one `Arc<str>` per topic name across all partitions and records.
    pub(super) fn intern(&self, name: &str) -> Arc<str> {
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
        let info = self.retrying("FindCoordinator", |c| {
            c.find_coordinator_once(group_id, CoordinatorKind::Group)
        })?;
        self.coordinators.insert(group_id.to_string(), info.node_id);
        self.brokers
            .entry(info.node_id)
            .or_insert_with(|| info.clone());
        Ok(info)
    }

    /// One FindCoordinator for `key` (a group id or a transactional id, as `kind` says), from
    /// any broker.
    pub(super) fn find_coordinator_once(
        &mut self,
        key: &str,
        kind: CoordinatorKind,
    ) -> Result<BrokerInfo> {
        let group_id = key;
        let resp = self.any_broker(|conn| {
            let version = conn.version_for(ApiKey::FindCoordinator)?;
            if kind == CoordinatorKind::Transaction && version < 1 {
                // v0 has no key type: it would find the group coordinator of a group so named.
                return Err(WireError::UnsupportedVersion {
                    api: ApiKey::FindCoordinator as i16,
                    ours: (
                        1,
                        crate::wire::versions::client_range(ApiKey::FindCoordinator).max,
                    ),
                    broker: conn
                        .versions()
                        .broker_range(ApiKey::FindCoordinator)
                        .map(|r| (r.min, r.max)),
                });
            }
            let key = StrBytes::from_string(group_id.to_string());
            let mut req = if version >= 4 {
                msg::FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
            } else {
                msg::FindCoordinatorRequest::default().with_key(key)
            };
            if version >= 1 {
                req = req.with_key_type(kind as i8);
            }
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
            let msg = message.map(|m| broker_text(m.as_str())).unwrap_or_default();
            return Err(WireError::kafka(
                ApiKey::FindCoordinator,
                code,
                format!("{} {group_id} {msg}", kind.noun()),
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

    /// Creates topics (name, partitions, replication factor) through the controller. A topic
    /// that already exists is an error with [`KafkaCode::TOPIC_ALREADY_EXISTS`], which callers that
    /// only want the topic to exist can ignore.
    pub fn create_topics(&mut self, topics: &[(&str, i32, i16)]) -> Result<()> {
        let controller = quirks::controller_or_any_broker(self.controller, &self.brokers)
            .ok_or(WireError::NoBrokerAvailable { tried: Vec::new() })?;
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
                        t.error_message
                            .map(|m| broker_text(m.as_str()))
                            .unwrap_or_default()
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

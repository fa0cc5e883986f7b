//! Offsets: where a partition's log starts and ends (ListOffsets, sent to the leader), and what a
//! group committed (OffsetFetch and OffsetCommit, sent to the group coordinator).
//!
//! OffsetCommit reports each partition's result untouched: only the group layer knows whether a
//! refused commit may be repeated, so nothing here retries a generation or member error.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::{
    self as msg, list_offsets_request, offset_commit_request, offset_fetch_request, ApiKey,
    BrokerId, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::fetch::IsolationLevel;
use super::Client;
use crate::wire::connection::Connection;
use crate::wire::error::{KafkaCode, Result, WireError};
use crate::TopicPartition;

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

/// One partition's entry in an OffsetCommit request: the position to store for the group.
///
/// Named apart from the guard's [`crate::guard::CommitOffset`] (what the guard decided may be
/// committed): this one carries the wire-level leader epoch and metadata, and is what the group
/// layer sends on the guard's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitEntry {
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

impl Client {
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
            let conn = self.leader_connection(leader)?;
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
                .with_topics(per_topic(topics, |name, ps| {
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(name)
                        .with_partitions(ps)
                }));
            if version >= 2 {
                req = req.with_isolation_level(isolation.code());
            }
            let resp = conn.send(&req, version);
            let resp = self.failed_if_broken(leader, resp)?;
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
        let conn = self.coordinator_connection(group_id, coordinator)?;
        let version = conn.version_for(ApiKey::OffsetFetch)?;
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        let group = GroupId(StrBytes::from_string(group_id.to_string()));
        let mut req = if version >= 8 {
            msg::OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group)
                    .with_topics(Some(per_topic(by_topic, |name, ps| {
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(name)
                            .with_partition_indexes(ps)
                    }))),
            ])
        } else {
            msg::OffsetFetchRequest::default()
                .with_group_id(group)
                .with_topics(Some(per_topic(by_topic, |name, ps| {
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(name)
                        .with_partition_indexes(ps)
                })))
        };
        if version >= 7 {
            // KIP-447: while a transaction holds offsets of a partition that are not committed
            // or aborted yet, the coordinator answers UNSTABLE_OFFSET_COMMIT (retriable) instead
            // of the older offset. A new owner that read the older one would redo what the
            // transaction's outputs already hold once it commits. Asked always: in a group
            // without transactions nothing is ever pending, so nothing changes.
            req = req.with_require_stable(true);
        }
        let resp = conn.send(&req, version);
        let resp = self.failed_if_broken(coordinator, resp)?;
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
        offsets: &[OffsetCommitEntry],
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
        offsets: &[OffsetCommitEntry],
    ) -> Result<Vec<(TopicPartition, std::result::Result<(), WireError>)>> {
        let coordinator = self.find_coordinator(who.group_id)?.node_id;
        let conn = self.coordinator_connection(who.group_id, coordinator)?;
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
            .with_topics(per_topic(by_topic, |name, ps| {
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(name)
                    .with_partitions(ps)
            }));
        if version >= 7 {
            req = req.with_group_instance_id(
                who.group_instance_id
                    .map(|s| StrBytes::from_string(s.to_string())),
            );
        } else if who.group_instance_id.is_some() {
            return Err(WireError::UnsupportedVersion {
                api: ApiKey::OffsetCommit as i16,
                ours: (
                    7,
                    crate::wire::versions::client_range(ApiKey::OffsetCommit).max,
                ),
                broker: conn
                    .versions()
                    .broker_range(ApiKey::OffsetCommit)
                    .map(|r| (r.min, r.max)),
            });
        }
        // In order: a commit whose answer did not come keeps its connection, so the next
        // commit of this client goes behind it and cannot be executed before it
        // (`connection/ordered.rs`).
        let resp = conn.send_in_order(&req, version);
        let resp = self.failed_if_broken(coordinator, resp)?;
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
}

impl Client {
    /// The connection to partition leader `leader`; failing to reach it marks the metadata
    /// stale, so the retry looks the leader up again.
    pub(super) fn leader_connection(&mut self, leader: i32) -> Result<&mut Connection> {
        if let Err(e) = self.connection(leader) {
            self.metadata_stale = true;
            return Err(e);
        }
        // Asked again because returning the first borrow would keep `self` borrowed in the
        // error arm (a borrow-checker limit); the connection is open now, so this is a lookup.
        self.connection(leader)
    }

    /// The connection to `group_id`'s coordinator `node`; failing to reach it forgets the
    /// coordinator, so the retry finds it again.
    pub(super) fn coordinator_connection(
        &mut self,
        group_id: &str,
        node: i32,
    ) -> Result<&mut Connection> {
        if let Err(e) = self.connection(node) {
            self.coordinators.remove(group_id);
            return Err(e);
        }
        // Asked again because returning the first borrow would keep `self` borrowed in the
        // error arm (a borrow-checker limit); the connection is open now, so this is a lookup.
        self.connection(node)
    }

    /// `sent` (a request's outcome from broker `node`), recording the broker as failed when the
    /// error broke its connection. A timeout that left the connection open with its answer owed
    /// (`connection/ordered.rs`) keeps it: the next request must go behind the owed one.
    pub(super) fn failed_if_broken<T>(&mut self, node: i32, sent: Result<T>) -> Result<T> {
        if let Err(e) = &sent {
            let kept = matches!(e, WireError::Timeout { .. })
                && self.conns.get(&node).is_some_and(|c| !c.is_broken());
            if e.breaks_connection() && !kept {
                self.broker_failed(node);
            }
        }
        sent
    }
}

/// The request topics for partitions grouped by topic name, in name order.
pub(super) fn per_topic<P, T>(
    by_topic: BTreeMap<&str, Vec<P>>,
    topic: impl Fn(TopicName, Vec<P>) -> T,
) -> Vec<T> {
    by_topic
        .into_iter()
        .map(|(t, ps)| topic(TopicName(StrBytes::from_string(t.to_string())), ps))
        .collect()
}

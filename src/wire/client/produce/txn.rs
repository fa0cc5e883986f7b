//! The transaction requests (KIP-98, KIP-447, KIP-890) on the wire: the transaction
//! coordinator and the protocol version the cluster runs, InitProducerId with a transactional
//! id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn.
//!
//! Every request here is ONE attempt. Why: what a transactional error means depends on the
//! transaction's state (CONCURRENT_TRANSACTIONS after an EndTxn is "wait and ask again",
//! PRODUCER_FENCED is the end of this producer, TRANSACTION_ABORTABLE is "abort and go on"), and
//! only the producer's transaction manager knows that state, so it owns the retry policy. What
//! this layer does on its own is keep its caches right: an answer or a broken connection that
//! says the coordinator moved forgets it, so that the manager's next attempt finds it again.
//!
//! Transaction version 1 and 2 (KIP-890) differ on the wire: with version 1 the producer adds
//! each partition (AddPartitionsToTxn) and the group (AddOffsetsToTxn) to the transaction itself,
//! and sends Produce up to v11, TxnOffsetCommit up to v4 and EndTxn up to v4; with version 2 the
//! partition leader and the group coordinator add them (Produce v12, TxnOffsetCommit v5) and
//! EndTxn v5 answers with the producer epoch the coordinator bumped at the end of every
//! transaction. The version is the manager's decision for a whole transaction
//! ([`Client::transaction_version`] between transactions), so the requests whose version depends
//! on it take it as an argument rather than asking the cluster again in the middle of one.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{
    self as msg, add_partitions_to_txn_request, txn_offset_commit_request, ApiKey, GroupId,
    ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::super::cluster::{BrokerInfo, CoordinatorKind};
use super::super::offsets::{per_topic, CommitIdentity, OffsetCommitEntry};
use super::super::Client;
use super::ProducerIdentity;
use crate::wire::connection::WireRequest;
use crate::wire::error::{KafkaCode, Result, WireError};
use crate::wire::records::encode::{Codec, OpenBatch, ProducerStamp};
use crate::wire::records::{self, ProduceRecord};
use crate::wire::versions::{client_range, VersionRange};
use crate::TopicPartition;

/// The finalized feature that says which transaction protocol the cluster runs (KIP-890).
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The newest Produce version of transaction version 1: from v12 a transactional batch adds its
/// partition to the transaction implicitly, which a version-1 transaction must not ask for
/// (Java's `ProduceRequest.LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2`).
pub(crate) const PRODUCE_V1_MAX: i16 = 11;
/// The newest TxnOffsetCommit and EndTxn version of transaction version 1 (Java's
/// `LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2` of both requests).
const TXN_V1_MAX: i16 = 4;
/// The first version of EndTxn, TxnOffsetCommit (5) and Produce (12) of transaction version 2.
const END_TXN_V2: i16 = 5;
const TXN_OFFSET_COMMIT_V2: i16 = 5;
const PRODUCE_V2: i16 = 12;

/// Which transaction protocol the cluster runs (KIP-890): the finalized feature
/// `transaction.version`. A producer decides it between transactions and keeps it for a whole
/// transaction, because the two protocols add partitions and groups to a transaction
/// differently (see the module notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionVersion {
    /// KIP-98's protocol (feature level 0 or 1): the producer adds partitions and groups itself.
    V1,
    /// KIP-890 part 2 (feature level 2+): the brokers add them; every transaction's end bumps
    /// the producer epoch.
    V2,
}

impl TransactionVersion {
    /// The Produce versions a transactional batch of this protocol may be sent with.
    pub(crate) fn produce_versions(self) -> VersionRange {
        let ours = client_range(ApiKey::Produce);
        match self {
            TransactionVersion::V1 => VersionRange::new(ours.min, ours.max.min(PRODUCE_V1_MAX)),
            TransactionVersion::V2 => VersionRange::new(PRODUCE_V2, ours.max.max(PRODUCE_V2)),
        }
    }

    /// The EndTxn versions of this protocol.
    fn end_txn_versions(self) -> VersionRange {
        let ours = client_range(ApiKey::EndTxn);
        match self {
            TransactionVersion::V1 => VersionRange::new(ours.min, ours.max.min(TXN_V1_MAX)),
            TransactionVersion::V2 => VersionRange::new(END_TXN_V2, ours.max),
        }
    }

    /// The TxnOffsetCommit versions of this protocol (v3+ only: KIP-447's fencing).
    fn txn_offset_commit_versions(self) -> VersionRange {
        let ours = client_range(ApiKey::TxnOffsetCommit);
        match self {
            TransactionVersion::V1 => VersionRange::new(ours.min, ours.max.min(TXN_V1_MAX)),
            TransactionVersion::V2 => VersionRange::new(TXN_OFFSET_COMMIT_V2, ours.max),
        }
    }
}

/// Milliseconds in an `i32` request field, saturated (Kafka's timeouts are `int32`).
fn millis_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

impl Client {
    /// The transaction coordinator of `transactional_id`: FindCoordinator with key type 1
    /// (transaction), cached apart from the group coordinators, because a group and a
    /// transactional id may share a name and live on different brokers. Retries like
    /// [`Client::find_coordinator`] (the coordinator may still be loading its partition of
    /// `__transaction_state`, which Kafka creates on the first lookup).
    pub fn find_transaction_coordinator(&mut self, transactional_id: &str) -> Result<BrokerInfo> {
        if let Some(info) = self
            .txn_coordinators
            .get(transactional_id)
            .and_then(|id| self.brokers.get(id))
        {
            return Ok(info.clone());
        }
        let info = self.retrying("FindCoordinator (transaction)", |c| {
            c.find_coordinator_once(transactional_id, CoordinatorKind::Transaction)
        })?;
        self.txn_coordinators
            .insert(transactional_id.to_string(), info.node_id);
        self.brokers
            .entry(info.node_id)
            .or_insert_with(|| info.clone());
        Ok(info)
    }

    /// Forgets the transaction coordinator of `transactional_id` (after NOT_COORDINATOR,
    /// COORDINATOR_NOT_AVAILABLE or a broken connection), so the next request finds it again.
    pub fn invalidate_transaction_coordinator(&mut self, transactional_id: &str) {
        self.txn_coordinators.remove(transactional_id);
    }

    /// Which transaction protocol to use for `transactional_id`'s next transaction:
    /// [`TransactionVersion::V2`] when the finalized feature `transaction.version` is at level
    /// 2 or more and the transaction coordinator speaks EndTxn v5 and Produce v12; V1 otherwise
    /// (a cluster that never finalized the feature, Kafka 3.x, or a coordinator too old).
    ///
    /// The level is read as Java's producer reads it: from the ApiVersions answer (v3+) with the
    /// newest finalized-features epoch among the brokers this client is connected to (Java's
    /// `ApiVersions.getFinalizedFeaturesInfo`, read by `TransactionManager`'s
    /// `maybeUpdateTransactionV2Enabled`); the coordinator's connection is opened first, so it
    /// is always among them. Java then only caps its request versions by the answer; the
    /// extra check that the coordinator speaks the version-2 requests keeps a producer off V2
    /// with a coordinator that could not serve it. Ask between transactions, not within one.
    pub fn transaction_version(&mut self, transactional_id: &str) -> Result<TransactionVersion> {
        let node = self.find_transaction_coordinator(transactional_id)?.node_id;
        if let Err(e) = self.connection(node) {
            self.invalidate_transaction_coordinator(transactional_id);
            return Err(e);
        }
        let level = self
            .conns
            .values()
            .chain(self.bootstrap_conn.iter())
            .map(|c| c.versions())
            .filter(|v| v.finalized_features_epoch() >= 0)
            .max_by_key(|v| v.finalized_features_epoch())
            .and_then(|v| v.finalized_feature(TRANSACTION_VERSION_FEATURE))
            .unwrap_or(0);
        let coordinator = self
            .conns
            .get(&node)
            .map(|c| c.versions())
            .ok_or(WireError::UnknownBroker { node_id: node })?;
        let v2 = level >= 2
            && coordinator.broker_supports(ApiKey::EndTxn, END_TXN_V2)
            && coordinator.broker_supports(ApiKey::Produce, PRODUCE_V2);
        Ok(if v2 {
            TransactionVersion::V2
        } else {
            TransactionVersion::V1
        })
    }

    /// Sends one request to `transactional_id`'s transaction coordinator at the highest version
    /// in `ours` both sides speak; `make` builds it for that version. A connection that cannot
    /// be opened or breaks forgets the coordinator (it may have moved with its broker).
    fn send_to_transaction_coordinator<R: WireRequest>(
        &mut self,
        transactional_id: &str,
        api: ApiKey,
        ours: VersionRange,
        make: impl FnOnce(i16) -> Result<R>,
    ) -> Result<(i16, R::Response)> {
        let node = self.find_transaction_coordinator(transactional_id)?.node_id;
        let conn = match self.connection(node) {
            Ok(conn) => conn,
            Err(e) => {
                self.invalidate_transaction_coordinator(transactional_id);
                return Err(e);
            }
        };
        let version = conn.version_within(api, ours)?;
        let req = make(version)?;
        let sent = conn.send(&req, version);
        if sent.as_ref().is_err_and(WireError::breaks_connection) {
            self.invalidate_transaction_coordinator(transactional_id);
        }
        let resp = self.failed_if_broken(node, sent)?;
        Ok((version, resp))
    }

    /// `code` from `api`'s answer as an error, forgetting the transaction coordinator when the
    /// code says it moved.
    fn txn_error(
        &mut self,
        transactional_id: &str,
        api: ApiKey,
        code: KafkaCode,
        what: String,
    ) -> WireError {
        if code.is_coordinator_moved() {
            self.invalidate_transaction_coordinator(transactional_id);
        }
        WireError::kafka(api, code, what)
    }

    /// InitProducerId with `transactional_id` and `transaction_timeout`, sent to the transaction
    /// coordinator. `current`: `Some` asks for a bump of that id and epoch (KIP-360, v3+; the
    /// coordinator refuses it with PRODUCER_FENCED or INVALID_PRODUCER_EPOCH if the epoch is
    /// not the latest); `None` takes the id registered for the transactional id, bumping its
    /// epoch, which fences any older producer of the same transactional id and aborts its open
    /// transaction.
    ///
    /// One attempt: errors come back as [`WireError::Kafka`] with the code
    /// (CONCURRENT_TRANSACTIONS while an earlier transaction completes,
    /// COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TRANSACTION_TIMEOUT, ...); a coordinator
    /// error or a broken connection also forgets the cached coordinator.
    pub fn init_transactional_producer(
        &mut self,
        transactional_id: &str,
        transaction_timeout: Duration,
        current: Option<ProducerIdentity>,
    ) -> Result<ProducerIdentity> {
        let ours = client_range(ApiKey::InitProducerId);
        // A bump names the id and epoch, which only v3+ carries.
        let ours = if current.is_some() {
            VersionRange::new(ours.min.max(3), ours.max)
        } else {
            ours
        };
        let (_, resp) = self.send_to_transaction_coordinator(
            transactional_id,
            ApiKey::InitProducerId,
            ours,
            |version| {
                let mut req = msg::InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                        transactional_id.to_string(),
                    ))))
                    .with_transaction_timeout_ms(millis_i32(transaction_timeout));
                if version >= 3 {
                    let (id, epoch) = current.map_or((-1, -1), |c| (c.producer_id, c.epoch));
                    req = req
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(epoch);
                }
                Ok(req)
            },
        )?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(self.txn_error(
                transactional_id,
                ApiKey::InitProducerId,
                code,
                format!("transactional id {transactional_id}"),
            ));
        }
        Ok(ProducerIdentity {
            producer_id: resp.producer_id.0,
            epoch: resp.producer_epoch,
        })
    }

    /// AddPartitionsToTxn (transaction version 1): adds `partitions` to the transaction of
    /// `transactional_id` before the first batch to each is sent. Client versions 0-3 only (v4+
    /// is the brokers' batch form). One attempt; `Ok` carries each partition's own result
    /// (`None`: added); when one partition fails Kafka answers OPERATION_NOT_ATTEMPTED for the
    /// others. A top-level error (v4 only) or a transport error is `Err`; a coordinator error on
    /// any partition also forgets the cached coordinator.
    pub fn add_partitions_to_txn(
        &mut self,
        transactional_id: &str,
        id: ProducerIdentity,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Option<KafkaCode>)>> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        let (_, resp) = self.send_to_transaction_coordinator(
            transactional_id,
            ApiKey::AddPartitionsToTxn,
            client_range(ApiKey::AddPartitionsToTxn),
            |_| {
                Ok(msg::AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                        transactional_id.to_string(),
                    )))
                    .with_v3_and_below_producer_id(ProducerId(id.producer_id))
                    .with_v3_and_below_producer_epoch(id.epoch)
                    .with_v3_and_below_topics(per_topic(by_topic, |name, ps| {
                        add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(name)
                            .with_partitions(ps)
                    })))
            },
        )?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(self.txn_error(
                transactional_id,
                ApiKey::AddPartitionsToTxn,
                code,
                format!("transactional id {transactional_id}"),
            ));
        }
        let mut out = Vec::with_capacity(partitions.len());
        let mut moved = false;
        for t in resp.results_by_topic_v3_and_below {
            for p in t.results_by_partition {
                let tp = TopicPartition::new(self.intern(t.name.as_str()), p.partition_index);
                let code = KafkaCode::from_code(p.partition_error_code);
                moved |= code.is_some_and(KafkaCode::is_coordinator_moved);
                out.push((tp, code));
            }
        }
        if moved {
            self.invalidate_transaction_coordinator(transactional_id);
        }
        if let Some(missing) = partitions
            .iter()
            .find(|tp| !out.iter().any(|(answered, _)| answered == *tp))
        {
            return Err(WireError::Protocol(format!(
                "AddPartitionsToTxn response lacks {missing}"
            )));
        }
        Ok(out)
    }

    /// AddOffsetsToTxn (transaction version 1): adds `group_id`'s offsets partition to the
    /// transaction, before [`Client::txn_offset_commit`] (with version 2 the group coordinator
    /// adds it itself). One attempt; the code of a refusal is in the error.
    pub fn add_offsets_to_txn(
        &mut self,
        transactional_id: &str,
        id: ProducerIdentity,
        group_id: &str,
    ) -> Result<()> {
        let (_, resp) = self.send_to_transaction_coordinator(
            transactional_id,
            ApiKey::AddOffsetsToTxn,
            client_range(ApiKey::AddOffsetsToTxn),
            |_| {
                Ok(msg::AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(StrBytes::from_string(
                        transactional_id.to_string(),
                    )))
                    .with_producer_id(ProducerId(id.producer_id))
                    .with_producer_epoch(id.epoch)
                    .with_group_id(GroupId(StrBytes::from_string(group_id.to_string()))))
            },
        )?;
        match KafkaCode::from_code(resp.error_code) {
            None => Ok(()),
            Some(code) => Err(self.txn_error(
                transactional_id,
                ApiKey::AddOffsetsToTxn,
                code,
                format!("transactional id {transactional_id} group {group_id}"),
            )),
        }
    }

    /// TxnOffsetCommit: `offsets` become the group's committed offsets when (and only if) the
    /// transaction commits. Sent to the GROUP coordinator of `who.group_id`, carrying the group
    /// membership (member id, generation id or KIP-848 member epoch, group instance id), so
    /// that the coordinator refuses a zombie's offsets (KIP-447, v3+). A broker below v3 is
    /// refused with [`WireError::UnsupportedVersion`] before anything is sent: without the
    /// membership there is no fencing. `tv` is the transaction's protocol: V1 sends up to v4
    /// (the group must have been added with [`Client::add_offsets_to_txn`]; else the
    /// coordinator answers TRANSACTION_ABORTABLE), V2 sends v5 (the coordinator adds it).
    ///
    /// Like [`Client::offset_commit`], each partition's own result comes back untouched
    /// (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, the KIP-848 epoch errors,
    /// ...); a coordinator move answers every partition with NOT_COORDINATOR or
    /// COORDINATOR_NOT_AVAILABLE, which forgets the group coordinator and is returned the same
    /// way: ONE attempt, the caller retries. Sent in order (`connection/ordered.rs`), as
    /// OffsetCommit is: a commit whose answer timed out keeps its connection, so the caller's
    /// next commit for the transaction goes behind it on the same connection and cannot be
    /// applied before it (the older offsets overwriting the newer ones).
    pub fn txn_offset_commit(
        &mut self,
        transactional_id: &str,
        id: ProducerIdentity,
        tv: TransactionVersion,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<Vec<(TopicPartition, std::result::Result<(), WireError>)>> {
        let coordinator = self.find_coordinator(who.group_id)?.node_id;
        let conn = self.coordinator_connection(who.group_id, coordinator)?;
        let version =
            conn.version_within(ApiKey::TxnOffsetCommit, tv.txn_offset_commit_versions())?;
        let mut by_topic: BTreeMap<
            &str,
            Vec<txn_offset_commit_request::TxnOffsetCommitRequestPartition>,
        > = BTreeMap::new();
        for o in offsets {
            by_topic.entry(&o.tp.topic).or_default().push(
                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(o.tp.partition)
                    .with_committed_offset(o.offset)
                    .with_committed_leader_epoch(o.leader_epoch.unwrap_or(-1))
                    .with_committed_metadata(o.metadata.clone().map(StrBytes::from_string)),
            );
        }
        let req = msg::TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_group_id(GroupId(StrBytes::from_string(who.group_id.to_string())))
            .with_producer_id(ProducerId(id.producer_id))
            .with_producer_epoch(id.epoch)
            .with_generation_id(who.generation_id_or_member_epoch)
            .with_member_id(StrBytes::from_string(who.member_id.to_string()))
            .with_group_instance_id(
                who.group_instance_id
                    .map(|s| StrBytes::from_string(s.to_string())),
            )
            .with_topics(per_topic(by_topic, |name, ps| {
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(name)
                    .with_partitions(ps)
            }));
        let sent = conn.send_in_order(&req, version);
        if sent.as_ref().is_err_and(WireError::breaks_connection) {
            self.invalidate_coordinator(who.group_id);
        }
        let resp = self.failed_if_broken(coordinator, sent)?;
        let mut out = Vec::with_capacity(offsets.len());
        let mut moved = false;
        for t in resp.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(self.intern(t.name.as_str()), p.partition_index);
                let r = match KafkaCode::from_code(p.error_code) {
                    None => Ok(()),
                    Some(code) => {
                        moved |= code.is_coordinator_moved();
                        Err(WireError::kafka(
                            ApiKey::TxnOffsetCommit,
                            code,
                            format!(
                                "transactional id {transactional_id} group {} {tp}",
                                who.group_id
                            ),
                        ))
                    }
                };
                out.push((tp, r));
            }
        }
        if moved {
            self.invalidate_coordinator(who.group_id);
        }
        Ok(out)
    }

    /// EndTxn: commits (`commit`) or aborts the transaction, one attempt, at the transaction
    /// coordinator, with the protocol `tv` of the transaction (V1: up to v4; V2: v5). With V2
    /// the answer carries the producer id and epoch the coordinator bumped to, which the
    /// producer must use from then on: returned as `Some` (`None` with V1, whose epoch stays).
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        id: ProducerIdentity,
        tv: TransactionVersion,
        commit: bool,
    ) -> Result<Option<ProducerIdentity>> {
        let (version, resp) = self.send_to_transaction_coordinator(
            transactional_id,
            ApiKey::EndTxn,
            tv.end_txn_versions(),
            |_| {
                Ok(msg::EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(StrBytes::from_string(
                        transactional_id.to_string(),
                    )))
                    .with_producer_id(ProducerId(id.producer_id))
                    .with_producer_epoch(id.epoch)
                    .with_committed(commit))
            },
        )?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(self.txn_error(
                transactional_id,
                ApiKey::EndTxn,
                code,
                format!(
                    "transactional id {transactional_id} ({})",
                    if commit { "commit" } else { "abort" }
                ),
            ));
        }
        Ok(
            (version >= END_TXN_V2 && resp.producer_id.0 >= 0).then_some(ProducerIdentity {
                producer_id: resp.producer_id.0,
                epoch: resp.producer_epoch,
            }),
        )
    }

    /// Writes `records` to `tp` as one uncompressed transactional batch of producer `id`
    /// starting at sequence `base_sequence`, with acks=all, in the transaction of
    /// `transactional_id` under protocol `tv` (V1: Produce up to v11, the partition must have
    /// been added with [`Client::add_partitions_to_txn`]; V2: Produce v12, the leader adds it).
    /// Returns the base offset. One attempt. For tests and tools that drive a transaction by
    /// hand; the producer writes its transactional batches through its lanes.
    pub fn produce_transactional_once(
        &mut self,
        transactional_id: &str,
        id: ProducerIdentity,
        tv: TransactionVersion,
        tp: &TopicPartition,
        records: &[ProduceRecord],
        base_sequence: i32,
    ) -> Result<i64> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let size: usize = records.iter().map(records::encode::record_size_bound).sum();
        let mut open = OpenBatch::with_capacity(size);
        for r in records {
            open.append(r, now_ms);
        }
        let batch = open
            .seal(Codec::NONE)
            .map_err(|e| WireError::Protocol(format!("cannot encode record batch: {e}")))?
            .stamp(ProducerStamp {
                producer_id: id.producer_id,
                epoch: id.epoch,
                base_sequence,
                transactional: true,
            });
        self.produce_one_batch(tp, batch, Some((transactional_id, tv)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_never_sends_the_version_2_requests() {
        let v1 = TransactionVersion::V1;
        assert_eq!(v1.produce_versions().max, PRODUCE_V1_MAX);
        assert_eq!(v1.end_txn_versions(), VersionRange::new(0, 4));
        assert_eq!(v1.txn_offset_commit_versions(), VersionRange::new(3, 4));
    }

    #[test]
    fn version_2_sends_only_the_version_2_requests() {
        let v2 = TransactionVersion::V2;
        assert_eq!(v2.produce_versions(), VersionRange::new(12, 12));
        assert_eq!(v2.end_txn_versions(), VersionRange::new(5, 5));
        assert_eq!(v2.txn_offset_commit_versions(), VersionRange::new(5, 5));
    }
}

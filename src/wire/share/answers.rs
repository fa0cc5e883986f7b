//! A broker's ShareFetch or ShareAcknowledge answer turned into what the caller sees: acquired
//! records (only those inside the acquired ranges), gap acknowledgements for acquired offsets
//! without a record, the outcome of each acknowledgement the request carried, partition errors
//! and leader hints. Free of I/O.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages as msg;
use log::{debug, warn};
use uuid::Uuid;

use super::session::{AckMap, SessionRequest};
use super::{AckError, AckResult, AckType, AcquiredBatch, AcquiredRecord};
use crate::wire::records::{Allowance, DecodeBudget, PartitionDecoder, PartitionInput};
use crate::wire::{KafkaCode, Record};
use crate::TopicPartition;

/// The most gap acknowledgements one partition answer produces; acquired offsets beyond are
/// left to their lock (they come back, and are gapped then). Why a cap: an acquired range is
/// two numbers, so a broken or hostile answer could claim billions of offsets.
pub const MAX_GAPS_PER_PARTITION: usize = 100_000;

/// What one answer means, besides the session verdict.
#[derive(Debug, Default)]
pub(super) struct Digest {
    /// The answer's top-level error.
    pub(super) top_error: Option<KafkaCode>,
    pub(super) batches: Vec<AcquiredBatch>,
    pub(super) acks: Vec<AckResult>,
    pub(super) errors: Vec<(TopicPartition, KafkaCode)>,
    /// Acknowledgements this layer owes: GAP for acquired offsets without a record, RELEASE
    /// for acquired records it could not decode.
    pub(super) owed: AckMap,
    /// Partitions whose leader the broker named: (partition, leader id).
    pub(super) leaders: Vec<(TopicPartition, i32)>,
    /// Endpoints the broker sent with those hints.
    pub(super) endpoints: Vec<(i32, String)>,
    /// Whether metadata should be refreshed (a leader moved without a usable hint).
    pub(super) stale: bool,
    /// `AcquisitionLockTimeoutMs` of a v2 ShareAcknowledge answer.
    pub(super) lock: Option<Duration>,
}

/// Every acknowledgement of `req`, failed with `error`.
pub(super) fn all_failed(req: &SessionRequest, error: &AckError) -> Vec<AckResult> {
    req.acks
        .iter()
        .map(|(tp, acks)| AckResult {
            tp: tp.clone(),
            acks: acks.clone(),
            outcome: Err(error.clone()),
        })
        .collect()
}

fn outcomes(req: &SessionRequest, codes: &HashMap<TopicPartition, i16>) -> Vec<AckResult> {
    req.acks
        .iter()
        .map(|(tp, acks)| AckResult {
            tp: tp.clone(),
            acks: acks.clone(),
            outcome: match codes.get(tp) {
                Some(0) => Ok(()),
                Some(code) => Err(AckError::Kafka(KafkaCode(*code))),
                None => Err(AckError::Transport(
                    "the answer does not name the partition".to_string(),
                )),
            },
        })
        .collect()
}

fn leader_hint(
    d: &mut Digest,
    tp: &TopicPartition,
    code: i16,
    leader: &msg::share_fetch_response::LeaderIdAndEpoch,
) {
    let Some(code) = KafkaCode::from_code(code) else {
        return;
    };
    if !code.is_stale_metadata() {
        return;
    }
    if leader.leader_id >= 0 {
        d.leaders.push((tp.clone(), leader.leader_id));
    } else {
        d.stale = true;
    }
}

/// Reads a ShareFetch answer to `req`, sent at `sent_at`.
pub(super) fn fetch_answer(
    resp: msg::ShareFetchResponse,
    req: &SessionRequest,
    sent_at: Instant,
    names: &HashMap<Uuid, Arc<str>>,
    budget: DecodeBudget,
) -> Digest {
    let mut d = Digest {
        top_error: KafkaCode::from_code(resp.error_code),
        ..Digest::default()
    };
    if let Some(code) = d.top_error {
        d.acks = all_failed(req, &AckError::Kafka(code));
        return d;
    }
    let lock = Duration::from_millis(u64::try_from(resp.acquisition_lock_timeout_ms).unwrap_or(0));
    let mut allowance = Allowance::new(budget);
    let mut ack_codes = HashMap::new();
    for topic in resp.responses {
        let Some(name) = names.get(&topic.topic_id) else {
            debug!("share: answer for unknown topic id {}", topic.topic_id);
            d.stale = true;
            continue;
        };
        for p in topic.partitions {
            let tp = TopicPartition::new(Arc::clone(name), p.partition_index);
            ack_codes.insert(tp.clone(), p.acknowledge_error_code);
            leader_hint(&mut d, &tp, p.error_code, &p.current_leader);
            if let Some(code) = KafkaCode::from_code(p.error_code) {
                d.errors.push((tp.clone(), code));
            }
            if p.acquired_records.is_empty() {
                continue;
            }
            let mut ranges: Vec<(i64, i64, u16)> = p
                .acquired_records
                .iter()
                .filter(|r| r.first_offset <= r.last_offset)
                .map(|r| {
                    let count = u16::try_from(r.delivery_count.max(0)).unwrap_or(0);
                    (r.first_offset, r.last_offset, count)
                })
                .collect();
            ranges.sort_unstable();
            let records = p.records.unwrap_or_default();
            let batch = acquire(&tp, &ranges, records, &mut allowance, &mut d);
            if !batch.is_empty() {
                d.batches.push(AcquiredBatch {
                    tp,
                    sent_at,
                    lock_duration: lock,
                    records: batch,
                });
            }
        }
    }
    for (tp, code) in &d.errors {
        debug!("share: fetch of {tp} failed: {}", code.name());
    }
    d.acks = outcomes(req, &ack_codes);
    d.endpoints = resp
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, format!("{}:{}", e.host, e.port)))
        .collect();
    d
}

/// The records of `data` inside the acquired `ranges`; acquired offsets without a record in
/// the decoded batches are owed a GAP, those past what could be decoded a RELEASE.
fn acquire(
    tp: &TopicPartition,
    ranges: &[(i64, i64, u16)],
    data: Bytes,
    allowance: &mut Allowance,
    d: &mut Digest,
) -> Vec<AcquiredRecord> {
    let first = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let input = PartitionInput {
        topic: &tp.topic,
        partition: tp.partition,
        fetch_offset: first,
        aborted: None,
    };
    let mut decoder = PartitionDecoder::new(&input, data);
    let mut records: Vec<Record> = Vec::new();
    loop {
        match decoder.step(&mut records, allowance) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                warn!("share: records of {tp} cannot be decoded: {e}");
                d.errors.push((tp.clone(), KafkaCode(2)));
                break;
            }
        }
    }
    // Everything below `decoded` that has no record is a gap; the rest is released.
    let decoded = decoder.summary().next_offset.unwrap_or(first);
    let mut out = Vec::with_capacity(records.len());
    let mut next = records.into_iter().peekable();
    let mut owed: Vec<(i64, AckType)> = Vec::new();
    for &(lo, hi, count) in ranges {
        // Records before this range are outside every acquired range seen so far: dropped.
        while next.peek().is_some_and(|r| r.offset < lo) {
            next.next();
        }
        let mut offset = lo;
        while offset <= hi {
            match next.peek() {
                Some(r) if r.offset == offset => {
                    if let Some(record) = next.next() {
                        out.push(AcquiredRecord {
                            record,
                            delivery_count: count,
                        });
                    }
                }
                _ => {
                    if owed.len() >= MAX_GAPS_PER_PARTITION {
                        warn!("share: more than {MAX_GAPS_PER_PARTITION} offsets of {tp} owe a gap; the rest wait for their lock");
                        break;
                    }
                    let kind = if offset < decoded {
                        AckType::Gap
                    } else {
                        AckType::Release
                    };
                    owed.push((offset, kind));
                }
            }
            if offset == i64::MAX {
                break;
            }
            offset += 1;
        }
    }
    if !owed.is_empty() {
        d.owed.insert(tp.clone(), owed);
    }
    out.sort_by_key(|r| r.record.offset);
    out
}

/// Reads a ShareAcknowledge answer to `req`.
pub(super) fn acknowledge_answer(
    resp: &msg::ShareAcknowledgeResponse,
    lock_ms: Option<i32>,
    req: &SessionRequest,
    names: &HashMap<Uuid, Arc<str>>,
) -> Digest {
    let mut d = Digest {
        top_error: KafkaCode::from_code(resp.error_code),
        lock: lock_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        ..Digest::default()
    };
    if let Some(code) = d.top_error {
        d.acks = all_failed(req, &AckError::Kafka(code));
        return d;
    }
    let mut codes = HashMap::new();
    for topic in &resp.responses {
        let Some(name) = names.get(&topic.topic_id) else {
            continue;
        };
        for p in &topic.partitions {
            let tp = TopicPartition::new(Arc::clone(name), p.partition_index);
            codes.insert(tp.clone(), p.error_code);
            if let Some(code) = KafkaCode::from_code(p.error_code) {
                if code.is_stale_metadata() {
                    if p.current_leader.leader_id >= 0 {
                        d.leaders.push((tp.clone(), p.current_leader.leader_id));
                    } else {
                        d.stale = true;
                    }
                }
            }
        }
    }
    d.acks = outcomes(req, &codes);
    d.endpoints = resp
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, format!("{}:{}", e.host, e.port)))
        .collect();
    d
}

//! A broker's ShareFetch or ShareAcknowledge answer turned into what the caller sees: acquired
//! records (only those inside the acquired ranges), gap acknowledgements for acquired offsets
//! without a record, the outcome of each acknowledgement the request carried, partition errors
//! and leader hints. Free of I/O.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages as msg;
use log::{debug, warn};
use uuid::Uuid;

use super::session::{AckMap, SessionRequest};
use super::{AckError, AckResult, AckType, AcquiredBatch, AcquiredRecord, AnswerError};
use crate::wire::records::{Allowance, DecodeBudget, PartitionDecoder, PartitionInput};
use crate::wire::{KafkaCode, Record};
use crate::TopicPartition;

/// The most gap acknowledgements one partition answer produces; acquired offsets beyond are
/// left to their lock (they come back, and are gapped then). Why a cap: an acquired range is
/// two numbers, so a broken or hostile answer could claim billions of offsets.
pub const MAX_GAPS_PER_PARTITION: usize = 100_000;

/// The most acknowledgements one share session may owe at once (queued and not yet sent, GAP
/// and RELEASE for acquired offsets without a usable record), across all its partitions: one
/// answer adds at most what is left of it. Why a total and not only
/// [`MAX_GAPS_PER_PARTITION`]: the per-partition cap times the partitions an answer can name
/// (about 25,000 in a 1 MB answer) is billions of acknowledgements. Why this value: a real
/// answer owes at most about the offsets it acquired, which `MaxRecords` (`max.poll.records`,
/// 500 by default) bounds per partition, so 100,000 leaves room for batch-optimized
/// acquisition and compacted ranges while the queue stays under 2 MB (16 bytes each) and one
/// request can still carry it ([`MAX_ACKS_PER_PARTITION`](super::MAX_ACKS_PER_PARTITION) per
/// partition). Offsets beyond it are left to their lock: they come back and are gapped then.
pub const MAX_OWED_PER_SESSION: usize = 100_000;

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
    /// Endpoints the broker sent with those hints: (node id, host, port).
    pub(super) endpoints: Vec<(i32, String, i32)>,
    /// Whether metadata should be refreshed (a leader moved without a usable hint).
    pub(super) stale: bool,
    /// The answer's `AcquisitionLockTimeoutMs`: a ShareFetch answer's (every partition's
    /// records and owed acknowledgements are under it, whether or not the partition had a
    /// usable record) or a v2 ShareAcknowledge answer's (a renewal's new lock).
    pub(super) lock: Option<Duration>,
    /// What the answer said that this layer refused (a partition the session did not ask for).
    pub(super) refused: Vec<AnswerError>,
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

/// Reads a ShareFetch answer to `req`, sent at `sent_at` on a session that fetched `asked` (its
/// partitions as of that request): a partition outside it is refused
/// ([`AnswerError::UnaskedPartition`]) and everything the answer says of it ignored. The
/// acknowledgements it owes number at most `owed_room` (what is left of
/// [`MAX_OWED_PER_SESSION`] for the session).
pub(super) fn fetch_answer(
    resp: msg::ShareFetchResponse,
    req: &SessionRequest,
    sent_at: Instant,
    names: &HashMap<Uuid, Arc<str>>,
    budget: DecodeBudget,
    asked: &BTreeSet<TopicPartition>,
    owed_room: usize,
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
    d.lock = Some(lock);
    let mut allowance = Allowance::new(budget);
    let mut ack_codes = HashMap::new();
    let mut room = owed_room.min(MAX_OWED_PER_SESSION);
    for topic in resp.responses {
        let Some(name) = names.get(&topic.topic_id) else {
            debug!("share: answer for unknown topic id {}", topic.topic_id);
            d.stale = true;
            continue;
        };
        for p in topic.partitions {
            let tp = TopicPartition::new(Arc::clone(name), p.partition_index);
            if !asked.contains(&tp) {
                // Never acquired on our behalf as far as this member knows: nothing of it is
                // run, acknowledged or owed (whatever the broker holds runs out by its lock).
                d.refused.push(AnswerError::UnaskedPartition { tp });
                continue;
            }
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
            let batch = acquire(&tp, &ranges, records, &mut allowance, &mut room, &mut d);
            if !batch.is_empty() {
                d.batches.push(AcquiredBatch {
                    tp,
                    sent_at,
                    lock_duration: lock,
                    // The fetcher sets both when it absorbs the answer (the arrival and the
                    // partition's scope are its to know).
                    lock_ends_by: sent_at.checked_add(lock).unwrap_or(sent_at),
                    scope: req.scope.clone(),
                    records: batch,
                });
            }
        }
    }
    for (tp, code) in &d.errors {
        debug!("share: fetch of {tp} failed: {}", code.name());
    }
    if let Some(first) = d.refused.first() {
        warn!(
            "share: the answer named {} partition(s) the session did not ask for (first: \
             {first}); ignored",
            d.refused.len()
        );
    }
    d.acks = outcomes(req, &ack_codes);
    d.endpoints = resp
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, e.host.to_string(), e.port))
        .collect();
    d
}

/// The records of `data` inside the acquired `ranges`; acquired offsets without a record in
/// the decoded batches are owed a GAP, those past what could be decoded a RELEASE, at most
/// [`MAX_GAPS_PER_PARTITION`] of them and at most `room` (taken from it). The work is bounded by
/// the records and what is owed, never by the width of a range.
fn acquire(
    tp: &TopicPartition,
    ranges: &[(i64, i64, u16)],
    data: Bytes,
    allowance: &mut Allowance,
    room: &mut usize,
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
                d.errors.push((tp.clone(), KafkaCode::CORRUPT_MESSAGE));
                break;
            }
        }
    }
    // Everything below `decoded` that has no record is a gap; the rest is released.
    let decoded = decoder.summary().next_offset.unwrap_or(first);
    let mut out = Vec::with_capacity(records.len());
    let mut next = records.into_iter().peekable();
    let mut owed = Owed {
        list: Vec::new(),
        limit: (*room).min(MAX_GAPS_PER_PARTITION),
        decoded,
        capped: false,
    };
    for &(lo, hi, count) in ranges {
        // Records before this range are outside every acquired range seen so far: dropped.
        while next.peek().is_some_and(|r| r.offset < lo) {
            next.next();
        }
        // The first offset of the range not accounted for yet (`None`: past `i64::MAX`).
        let mut from = Some(lo);
        while let Some(record) = next.next_if(|r| r.offset <= hi) {
            let Some(start) = from else { break };
            if record.offset < start {
                continue;
            }
            if record.offset > start {
                owed.span(start, record.offset - 1);
            }
            from = record.offset.checked_add(1);
            out.push(AcquiredRecord {
                record,
                delivery_count: count,
                range_last: hi,
            });
        }
        if let Some(start) = from {
            owed.span(start, hi);
        }
    }
    if owed.capped {
        warn!(
            "share: more acquired offsets of {tp} owe a gap than this answer may owe ({}); the \
             rest wait for their lock",
            owed.limit
        );
    }
    *room = room.saturating_sub(owed.list.len());
    if !owed.list.is_empty() {
        d.owed.insert(tp.clone(), owed.list);
    }
    out.sort_by_key(|r| r.record.offset);
    out
}

/// The acknowledgements one partition's answer owes, up to `limit`.
struct Owed {
    list: Vec<(i64, AckType)>,
    limit: usize,
    /// Offsets below it were decoded (a missing record is a gap); from it on, RELEASE.
    decoded: i64,
    /// An offset was left out for the limit.
    capped: bool,
}

impl Owed {
    /// Owes every offset of `first..=last` (none when `last < first`), as far as the limit
    /// allows; each step owes one, so the width of the span costs nothing past the limit.
    fn span(&mut self, first: i64, last: i64) {
        let mut offset = first;
        while offset <= last {
            if self.list.len() >= self.limit {
                self.capped = true;
                return;
            }
            let kind = if offset < self.decoded {
                AckType::Gap
            } else {
                AckType::Release
            };
            self.list.push((offset, kind));
            let Some(after) = offset.checked_add(1) else {
                return;
            };
            offset = after;
        }
    }
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
        .map(|e| (e.node_id.0, e.host.to_string(), e.port))
        .collect();
    d
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kafka_protocol::messages::share_fetch_response as r;

    use super::*;
    use crate::wire::records::tests::batches;

    fn answer(
        records: Bytes,
        acquired: &[(i64, i64, i16)],
        ack_error: i16,
    ) -> (msg::ShareFetchResponse, HashMap<Uuid, Arc<str>>) {
        let id = Uuid::from_u128(7);
        let partition = r::PartitionData::default()
            .with_partition_index(0)
            .with_acknowledge_error_code(ack_error)
            .with_records(Some(records))
            .with_acquired_records(
                acquired
                    .iter()
                    .map(|&(first, last, count)| {
                        r::AcquiredRecords::default()
                            .with_first_offset(first)
                            .with_last_offset(last)
                            .with_delivery_count(count)
                    })
                    .collect(),
            );
        let resp = msg::ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(30_000)
            .with_responses(vec![r::ShareFetchableTopicResponse::default()
                .with_topic_id(id)
                .with_partitions(vec![partition])]);
        (resp, HashMap::from([(id, Arc::from("t"))]))
    }

    /// The partitions of topic `t` a session asked for.
    fn asked(partitions: &[i32]) -> BTreeSet<TopicPartition> {
        partitions
            .iter()
            .map(|p| TopicPartition::new("t", *p))
            .collect()
    }

    fn request_with_acks() -> SessionRequest {
        let tp = TopicPartition::new("t", 0);
        SessionRequest {
            epoch: 3,
            listed: BTreeSet::from([tp.clone()]),
            acks: AckMap::from([(tp, vec![(9, AckType::Accept)])]),
            ..SessionRequest::default()
        }
    }

    #[test]
    fn only_acquired_records_come_out_and_holes_in_the_batches_are_owed_a_gap() {
        // Records 0..=1 and 4..=5 (2 and 3 compacted away); acquired 1..=5 and 7..=8, where
        // 7 and 8 lie past the decoded batches.
        let (resp, names) = answer(batches(&[(0, 1), (4, 5)]), &[(7, 8, 2), (1, 5, 1)], 0);
        let at = Instant::now();
        let d = fetch_answer(
            resp,
            &request_with_acks(),
            at,
            &names,
            DecodeBudget::default(),
            &asked(&[0]),
            MAX_OWED_PER_SESSION,
        );
        assert_eq!(d.batches.len(), 1);
        let b = &d.batches[0];
        assert_eq!(b.sent_at, at);
        assert_eq!(b.lock_duration, Duration::from_secs(30));
        let got: Vec<(i64, u16)> = b
            .records
            .iter()
            .map(|r| (r.record.offset, r.delivery_count))
            .collect();
        assert_eq!(
            got,
            vec![(1, 1), (4, 1), (5, 1)],
            "record 0 was not acquired"
        );
        let owed = &d.owed[&TopicPartition::new("t", 0)];
        assert_eq!(
            owed,
            &vec![
                (2, AckType::Gap),
                (3, AckType::Gap),
                (7, AckType::Release),
                (8, AckType::Release)
            ]
        );
        assert_eq!(d.acks.len(), 1);
        assert_eq!(d.acks[0].outcome, Ok(()));
    }

    #[test]
    fn acknowledge_errors_and_top_level_errors_fail_the_carried_acks() {
        let (resp, names) = answer(Bytes::new(), &[], INVALID_RECORD_STATE_CODE);
        let d = fetch_answer(
            resp,
            &request_with_acks(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&[0]),
            MAX_OWED_PER_SESSION,
        );
        assert_eq!(d.acks[0].outcome, Err(AckError::Kafka(KafkaCode(121))));
        let (resp, names) = answer(Bytes::new(), &[], 0);
        let resp = resp.with_error_code(122);
        let d = fetch_answer(
            resp,
            &request_with_acks(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&[0]),
            MAX_OWED_PER_SESSION,
        );
        assert_eq!(d.top_error, Some(KafkaCode(122)));
        assert_eq!(d.acks[0].outcome, Err(AckError::Kafka(KafkaCode(122))));
        assert!(d.batches.is_empty());
    }

    #[test]
    fn a_range_of_billions_of_offsets_owes_a_bounded_number_of_gaps() {
        let (resp, names) = answer(batches(&[(0, 0)]), &[(0, i64::MAX, 1)], 0);
        let d = fetch_answer(
            resp,
            &SessionRequest::default(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&[0]),
            MAX_OWED_PER_SESSION,
        );
        let owed = &d.owed[&TopicPartition::new("t", 0)];
        assert_eq!(owed.len(), MAX_GAPS_PER_PARTITION);
        assert_eq!(d.batches[0].records.len(), 1);
    }

    #[test]
    fn a_moved_leader_is_named_from_the_answer() {
        let id = Uuid::from_u128(7);
        let resp = msg::ShareFetchResponse::default().with_responses(vec![
            r::ShareFetchableTopicResponse::default()
                .with_topic_id(id)
                .with_partitions(vec![r::PartitionData::default()
                    .with_error_code(6)
                    .with_current_leader(
                        r::LeaderIdAndEpoch::default()
                            .with_leader_id(2)
                            .with_leader_epoch(5),
                    )]),
        ]);
        let names = HashMap::from([(id, Arc::from("t"))]);
        let d = fetch_answer(
            resp,
            &SessionRequest::default(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&[0]),
            MAX_OWED_PER_SESSION,
        );
        assert_eq!(d.leaders, vec![(TopicPartition::new("t", 0), 2)]);
        assert_eq!(d.errors, vec![(TopicPartition::new("t", 0), KafkaCode(6))]);
    }

    /// An answer naming partitions `partitions` of topic `t`, each claiming `[0, last]`
    /// acquired with no record.
    fn empty_claims(
        partitions: i32,
        last: i64,
    ) -> (msg::ShareFetchResponse, HashMap<Uuid, Arc<str>>) {
        let id = Uuid::from_u128(7);
        let claims = (0..partitions)
            .map(|p| {
                r::PartitionData::default()
                    .with_partition_index(p)
                    .with_acquired_records(vec![r::AcquiredRecords::default()
                        .with_first_offset(0)
                        .with_last_offset(last)
                        .with_delivery_count(1)])
            })
            .collect();
        let resp = msg::ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(30_000)
            .with_responses(vec![r::ShareFetchableTopicResponse::default()
                .with_topic_id(id)
                .with_partitions(claims)]);
        (resp, HashMap::from([(id, Arc::from("t"))]))
    }

    #[test]
    fn fifty_partitions_claiming_ten_million_offsets_each_owe_at_most_the_session_bound() {
        let (resp, names) = empty_claims(50, 10_000_000);
        let all: Vec<i32> = (0..50).collect();
        let d = fetch_answer(
            resp,
            &SessionRequest::default(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&all),
            MAX_OWED_PER_SESSION,
        );
        let total: usize = d.owed.values().map(Vec::len).sum();
        assert!(
            total <= MAX_OWED_PER_SESSION,
            "{total} acknowledgements owed by one answer"
        );
        assert!(d.batches.is_empty());
        // What the session already owes counts: with 10 left, the answer owes 10.
        let (resp, names) = empty_claims(50, 10_000_000);
        let d = fetch_answer(
            resp,
            &SessionRequest::default(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&all),
            10,
        );
        assert_eq!(d.owed.values().map(Vec::len).sum::<usize>(), 10);
    }

    #[test]
    fn a_partition_the_session_did_not_ask_for_is_refused_and_its_records_ignored() {
        let (resp, names) = answer(batches(&[(0, 2)]), &[(0, 5, 1)], 0);
        let d = fetch_answer(
            resp,
            &SessionRequest::default(),
            Instant::now(),
            &names,
            DecodeBudget::default(),
            &asked(&[1]),
            MAX_OWED_PER_SESSION,
        );
        assert_eq!(
            d.refused,
            vec![AnswerError::UnaskedPartition {
                tp: TopicPartition::new("t", 0)
            }]
        );
        assert!(d.batches.is_empty(), "{:?}", d.batches);
        assert!(d.owed.is_empty(), "{:?}", d.owed);
        assert!(d.errors.is_empty());
    }

    const INVALID_RECORD_STATE_CODE: i16 = KafkaCode::INVALID_RECORD_STATE.0;
}

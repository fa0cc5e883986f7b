//! One share session (KIP-932) between this member and one broker, free of I/O: what the next
//! ShareFetch or ShareAcknowledge says (epoch, partitions, acknowledgements, forgotten
//! partitions) and what an answer means for the session.
//!
//! The rules: epoch 0 opens the session with the full partition list and carries no
//! acknowledgements; each later request carries the next epoch (wrapping to 1 after
//! `i32::MAX`) and lists only partitions that are new to the session or carry
//! acknowledgements, partitions no longer wanted go in `ForgottenTopicsData`; epoch -1 closes
//! it. A SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH answer (or a broken
//! connection) resets the session to epoch 0: the acknowledgements of that request have an
//! unknown outcome, are reported failed and are never resent here (the caller decides).
//!
//! Each incarnation of the session has its [`SessionScope`], and each partition acquiring
//! records in it a scope inside that one: a reset or a close ends the incarnation's scope, a
//! partition that moved to another leader ends its own, and every lease and queued
//! acknowledgement of an ended scope is void (the broker released those records).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::acks::MAX_ACKS_PER_PARTITION;
use super::{AckType, SessionScope, ShareAck};
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// Whether a ShareAcknowledge moves the session epoch on, like a ShareFetch. Measured on Kafka
/// 4.4 (`tests/brokers/wire/share.rs`): it does.
pub const ACKNOWLEDGE_ADVANCES_EPOCH: bool = true;

/// Acknowledgements per partition, as a request carries them.
pub type AckMap = BTreeMap<TopicPartition, Vec<(i64, AckType)>>;

/// Acknowledgements per partition, as queued by the caller, each tied to its acquisition.
pub type AckQueue = BTreeMap<TopicPartition, Vec<ShareAck>>;

/// What to send next on a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionRequest {
    /// `ShareSessionEpoch`.
    pub epoch: i32,
    /// The partitions to name in `Topics` (a ShareFetch's new partitions and those carrying
    /// acknowledgements; a ShareAcknowledge's partitions with acknowledgements).
    pub listed: BTreeSet<TopicPartition>,
    /// The acknowledgements carried, per partition.
    pub acks: AckMap,
    /// `ForgottenTopicsData` (ShareFetch only).
    pub forgotten: BTreeSet<TopicPartition>,
    /// The session's incarnation when this was built: an answer to a request of an earlier
    /// incarnation says nothing about the current one, and acquires nothing that is current.
    pub scope: SessionScope,
}

/// What an answer did to the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The session goes on.
    Continue,
    /// The session is gone: the next request opens a new one (epoch 0), and the request's
    /// acknowledgements failed.
    Reset,
}

/// The client side of one share session.
#[derive(Clone, Debug, Default)]
pub struct ShareSession {
    epoch: i32,
    members: BTreeSet<TopicPartition>,
    /// This incarnation's scope.
    scope: SessionScope,
    /// The scopes of the partitions that acquired records in this incarnation.
    partitions: BTreeMap<TopicPartition, SessionScope>,
}

impl ShareSession {
    /// A session not opened yet (the next request has epoch 0).
    pub fn new() -> Self {
        ShareSession::default()
    }

    /// The epoch the next request carries.
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether a session is open (acknowledgements can be sent).
    pub fn is_open(&self) -> bool {
        self.epoch != 0
    }

    /// The partitions the broker holds in the session, as far as we know.
    pub fn members(&self) -> &BTreeSet<TopicPartition> {
        &self.members
    }

    /// The current incarnation's scope: ended by [`reset`](Self::reset) (and by whoever drops
    /// the session's connection).
    pub(crate) fn scope(&self) -> &SessionScope {
        &self.scope
    }

    /// The scope of `tp`'s records acquired in this incarnation (inside [`scope`](Self::scope)).
    pub(crate) fn partition_scope(&mut self, tp: &TopicPartition) -> SessionScope {
        let session = &self.scope;
        self.partitions
            .entry(tp.clone())
            .or_insert_with(|| session.child())
            .clone()
    }

    /// `tp` moved to another leader: the records this session acquired of it are released (a
    /// new leader does not keep them acquired), so their scope ends.
    pub(crate) fn end_partition(&mut self, tp: &TopicPartition) {
        if let Some(scope) = self.partitions.remove(tp) {
            if scope.end() {
                log::info!("share: {tp} left this session: its leases end");
            }
        }
    }

    /// A session whose scope ended (its connection was dropped) is gone at the broker: the
    /// next request opens a new one.
    fn reopen_if_ended(&mut self) {
        if self.epoch != 0 && self.scope.has_ended() {
            self.reset();
        }
    }

    fn advance(&mut self) {
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
    }

    /// Takes at most [`MAX_ACKS_PER_PARTITION`] acknowledgements per partition out of `acks`,
    /// of one kind per partition: the broker stops at a partition's first refused offset and
    /// rolls back the partition's other acknowledgements in the request, so late ones (which
    /// may be refused) never travel with those that are not; they wait for a request that
    /// carries none of those for the partition. Lateness is read at `now`, the instant the
    /// request is built ([`ShareAck::late`]).
    fn take(acks: &mut AckQueue, now: Instant) -> AckMap {
        let mut carried = AckMap::new();
        for (tp, list) in acks.iter_mut() {
            let late = list.iter().all(|a| a.late(now));
            let mut taken = Vec::new();
            list.retain(|a| {
                if a.late(now) != late || taken.len() >= MAX_ACKS_PER_PARTITION {
                    return true;
                }
                taken.push((a.offset, a.kind));
                false
            });
            if !taken.is_empty() {
                carried.insert(tp.clone(), taken);
            }
        }
        acks.retain(|_, list| !list.is_empty());
        carried
    }

    /// The next ShareFetch, built at `now`: fetch `wanted`, carrying what it can of `acks`
    /// (taken out of the map; none when the session opens, since epoch 0 carries no
    /// acknowledgements).
    pub fn fetch(
        &mut self,
        wanted: &BTreeSet<TopicPartition>,
        acks: &mut AckQueue,
        now: Instant,
    ) -> SessionRequest {
        self.reopen_if_ended();
        let epoch = self.epoch;
        if epoch == 0 {
            self.members = wanted.clone();
            self.advance();
            return SessionRequest {
                epoch,
                listed: wanted.clone(),
                scope: self.scope.clone(),
                ..SessionRequest::default()
            };
        }
        let carried = Self::take(acks, now);
        let mut listed: BTreeSet<TopicPartition> =
            wanted.difference(&self.members).cloned().collect();
        listed.extend(carried.keys().cloned());
        // A partition is forgotten once its acknowledgements are out.
        let forgotten: BTreeSet<TopicPartition> = self
            .members
            .iter()
            .filter(|tp| !wanted.contains(*tp) && !carried.contains_key(*tp))
            .cloned()
            .collect();
        self.members.extend(listed.iter().cloned());
        self.members.retain(|tp| !forgotten.contains(tp));
        self.advance();
        SessionRequest {
            epoch,
            listed,
            acks: carried,
            forgotten,
            scope: self.scope.clone(),
        }
    }

    /// The next ShareAcknowledge, built at `now`, carrying `acks` (taken out of the map), or
    /// `None` without an open session or without acknowledgements.
    pub fn acknowledge(&mut self, acks: &mut AckQueue, now: Instant) -> Option<SessionRequest> {
        self.reopen_if_ended();
        if self.epoch == 0 || acks.values().all(Vec::is_empty) {
            return None;
        }
        let epoch = self.epoch;
        let carried = Self::take(acks, now);
        if ACKNOWLEDGE_ADVANCES_EPOCH {
            self.advance();
        }
        Some(SessionRequest {
            epoch,
            listed: carried.keys().cloned().collect(),
            acks: carried,
            forgotten: BTreeSet::new(),
            scope: self.scope.clone(),
        })
    }

    /// The closing ShareAcknowledge (epoch -1), built at `now`, carrying `acks`, or `None`
    /// when no session is open. The session is closed (its scope ended) from here on.
    pub fn close(&mut self, acks: &mut AckQueue, now: Instant) -> Option<SessionRequest> {
        if self.epoch == 0 {
            return None;
        }
        let carried = Self::take(acks, now);
        let req = SessionRequest {
            epoch: -1,
            listed: carried.keys().cloned().collect(),
            acks: carried,
            forgotten: BTreeSet::new(),
            scope: self.scope.clone(),
        };
        self.reset();
        Some(req)
    }

    /// What the answer to `req` with top-level error `error` means for the session.
    pub fn answered(&mut self, req: &SessionRequest, error: Option<KafkaCode>) -> Verdict {
        let Some(code) = error else {
            return Verdict::Continue;
        };
        let session_gone = req.epoch == 0
            || matches!(
                code,
                KafkaCode::SHARE_SESSION_NOT_FOUND | KafkaCode::INVALID_SHARE_SESSION_EPOCH
            );
        if !session_gone {
            return Verdict::Continue;
        }
        if req.scope == self.scope {
            self.reset();
        }
        Verdict::Reset
    }

    /// The connection broke with `req` unanswered: its outcome is unknown, and so is the
    /// broker's epoch; the next request opens a new session.
    pub fn transport_failed(&mut self, req: &SessionRequest) {
        if req.scope == self.scope {
            self.reset();
        }
    }

    /// Forgets the session (epoch 0 next): its scope ends, so every lease it acquired reads
    /// not current and every acknowledgement queued for it is dropped; the next incarnation
    /// gets a scope of its own.
    pub fn reset(&mut self) {
        self.epoch = 0;
        self.members.clear();
        self.scope.end();
        self.scope = SessionScope::new();
        self.partitions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tps(ps: &[i32]) -> BTreeSet<TopicPartition> {
        ps.iter().map(|p| TopicPartition::new("t", *p)).collect()
    }

    fn ack(p: i32, offset: i64, late: bool) -> ShareAck {
        ShareAck {
            tp: TopicPartition::new("t", p),
            offset,
            kind: if late {
                AckType::Release
            } else {
                AckType::Accept
            },
            scope: SessionScope::new(),
            lock_ends_by: now() + Duration::from_secs(60),
            // A late one's deadline has passed; the others' is a minute away.
            deadline: if late {
                now() - Duration::from_millis(1)
            } else {
                now() + Duration::from_secs(60)
            },
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    fn acks(p: i32, offsets: &[i64]) -> AckQueue {
        let mut m = AckQueue::new();
        m.insert(
            TopicPartition::new("t", p),
            offsets.iter().map(|o| ack(p, *o, false)).collect(),
        );
        m
    }

    #[test]
    fn late_acks_never_share_a_partition_batch_with_acks_decided_inside_their_lease() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0, 1]), &mut AckQueue::new(), now());
        let mut queued = AckQueue::new();
        queued.insert(
            TopicPartition::new("t", 0),
            vec![ack(0, 1, false), ack(0, 2, true), ack(0, 3, false)],
        );
        queued.insert(TopicPartition::new("t", 1), vec![ack(1, 7, true)]);
        let first = s.fetch(&tps(&[0, 1]), &mut queued, now());
        assert_eq!(
            first.acks[&TopicPartition::new("t", 0)],
            vec![(1, AckType::Accept), (3, AckType::Accept)]
        );
        assert_eq!(
            first.acks[&TopicPartition::new("t", 1)],
            vec![(7, AckType::Release)],
            "a partition with only late acks sends them"
        );
        let second = s.acknowledge(&mut queued, now()).expect("open");
        assert_eq!(
            second.acks[&TopicPartition::new("t", 0)],
            vec![(2, AckType::Release)]
        );
        assert!(queued.is_empty());
    }

    #[test]
    fn a_reset_or_a_moved_partition_ends_its_scope_and_an_ended_scope_reopens() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0, 1]), &mut AckQueue::new(), now());
        let first = s.scope().clone();
        let (p0, p1) = (
            s.partition_scope(&tps(&[0]).into_iter().next().unwrap()),
            s.partition_scope(&TopicPartition::new("t", 1)),
        );
        assert_eq!(p0, s.partition_scope(&TopicPartition::new("t", 0)));
        s.end_partition(&TopicPartition::new("t", 0));
        assert!(p0.has_ended() && !p1.has_ended() && !first.has_ended());
        // Whoever drops the connection ends the scope: the next request opens a new session.
        first.end();
        let reopen = s.fetch(&tps(&[0, 1]), &mut AckQueue::new(), now());
        assert_eq!(reopen.epoch, 0);
        assert!(p1.has_ended());
        assert_ne!(&reopen.scope, &first);
        assert!(!reopen.scope.has_ended());
        let close = s.close(&mut AckQueue::new(), now()).expect("open");
        assert!(close.scope.has_ended(), "a close ends the scope");
    }

    #[test]
    fn opens_with_everything_then_lists_only_news_and_acks_and_forgets_the_rest() {
        let mut s = ShareSession::new();
        let mut pending = acks(0, &[1, 2]);
        let open = s.fetch(&tps(&[0, 1]), &mut pending, now());
        assert_eq!(open.epoch, 0);
        assert_eq!(open.listed, tps(&[0, 1]));
        assert!(open.acks.is_empty(), "epoch 0 carries no acks");
        assert_eq!(pending.len(), 1, "the acks wait for the next request");
        let next = s.fetch(&tps(&[0, 1]), &mut pending, now());
        assert_eq!(next.epoch, 1);
        assert_eq!(next.listed, tps(&[0]), "only the partition with acks");
        assert_eq!(next.acks.len(), 1);
        assert!(pending.is_empty());
        let moved = s.fetch(&tps(&[1, 2]), &mut pending, now());
        assert_eq!(moved.epoch, 2);
        assert_eq!(moved.listed, tps(&[2]));
        assert_eq!(moved.forgotten, tps(&[0]));
        assert_eq!(s.members(), &tps(&[1, 2]));
        let ack = s.acknowledge(&mut acks(1, &[5]), now()).expect("open");
        assert_eq!(ack.epoch, 3);
        let close = s.close(&mut AckQueue::new(), now()).expect("open");
        assert_eq!(close.epoch, -1);
        assert!(!s.is_open());
        assert!(s.close(&mut AckQueue::new(), now()).is_none());
    }

    #[test]
    fn a_partition_with_acks_is_forgotten_only_after_they_are_out() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0, 1]), &mut AckQueue::new(), now());
        let r = s.fetch(&tps(&[1]), &mut acks(0, &[3]), now());
        assert_eq!(r.listed, tps(&[0]));
        assert!(r.forgotten.is_empty());
        let r = s.fetch(&tps(&[1]), &mut AckQueue::new(), now());
        assert_eq!(r.forgotten, tps(&[0]));
    }

    #[test]
    fn the_epoch_wraps_to_one_after_max() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0]), &mut AckQueue::new(), now());
        s.epoch = i32::MAX;
        assert_eq!(
            s.fetch(&tps(&[0]), &mut AckQueue::new(), now()).epoch,
            i32::MAX
        );
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn session_errors_reset_to_epoch_zero_and_stale_answers_do_not_reset_again() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0]), &mut AckQueue::new(), now());
        let a = s.fetch(&tps(&[0]), &mut acks(0, &[1]), now());
        let b = s.acknowledge(&mut acks(0, &[2]), now()).expect("open");
        assert_eq!(
            s.answered(&a, Some(KafkaCode::INVALID_SHARE_SESSION_EPOCH)),
            Verdict::Reset
        );
        assert_eq!(s.epoch(), 0);
        let reopen = s.fetch(&tps(&[0]), &mut AckQueue::new(), now());
        assert_eq!(reopen.epoch, 0);
        // The request queued behind `a` fails too, but says nothing of the new session.
        assert_eq!(
            s.answered(&b, Some(KafkaCode::SHARE_SESSION_NOT_FOUND)),
            Verdict::Reset
        );
        assert_eq!(s.epoch(), 1);
        assert_eq!(s.answered(&reopen, None), Verdict::Continue);
        // Other errors leave an open session alone; a failed opening resets.
        let c = s.fetch(&tps(&[0]), &mut AckQueue::new(), now());
        assert_eq!(
            s.answered(&c, Some(KafkaCode::GROUP_AUTHORIZATION_FAILED)),
            Verdict::Continue
        );
        s.transport_failed(&c);
        assert_eq!(s.epoch(), 0);
        let d = s.fetch(&tps(&[0]), &mut AckQueue::new(), now());
        assert_eq!(s.answered(&d, Some(KafkaCode(69))), Verdict::Reset);
        assert!(
            s.acknowledge(&mut acks(0, &[1]), now()).is_none(),
            "no session"
        );
    }
}

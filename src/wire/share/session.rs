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

use std::collections::{BTreeMap, BTreeSet};

use super::acks::MAX_ACKS_PER_PARTITION;
use super::AckType;
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// `SHARE_SESSION_NOT_FOUND` (122): the broker has no session for this member.
pub const SHARE_SESSION_NOT_FOUND: KafkaCode = KafkaCode(122);
/// `INVALID_SHARE_SESSION_EPOCH` (123): the epoch is not the one the broker expects.
pub const INVALID_SHARE_SESSION_EPOCH: KafkaCode = KafkaCode(123);
/// `INVALID_RECORD_STATE` (121): an acknowledged record is not acquired by this member (its
/// lock expired, or it was acknowledged already).
pub const INVALID_RECORD_STATE: KafkaCode = KafkaCode(121);
/// `SHARE_SESSION_LIMIT_REACHED` (133): the broker holds as many sessions as it allows.
pub const SHARE_SESSION_LIMIT_REACHED: KafkaCode = KafkaCode(133);

/// Whether a ShareAcknowledge moves the session epoch on, like a ShareFetch. Measured on Kafka
/// 4.4 (`tests/wire_share.rs`): it does.
pub const ACKNOWLEDGE_ADVANCES_EPOCH: bool = true;

/// Acknowledgements per partition, as queued by the caller.
pub type AckMap = BTreeMap<TopicPartition, Vec<(i64, AckType)>>;

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
    /// incarnation says nothing about the current one.
    pub incarnation: u64,
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
    incarnation: u64,
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

    fn advance(&mut self) {
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
    }

    /// Takes at most [`MAX_ACKS_PER_PARTITION`] acknowledgements per partition out of `acks`.
    fn take(acks: &mut AckMap) -> AckMap {
        let mut carried = AckMap::new();
        for (tp, list) in acks.iter_mut() {
            if list.is_empty() {
                continue;
            }
            let n = list.len().min(MAX_ACKS_PER_PARTITION);
            carried.insert(tp.clone(), list.drain(..n).collect());
        }
        acks.retain(|_, list| !list.is_empty());
        carried
    }

    /// The next ShareFetch: fetch `wanted`, carrying what it can of `acks` (taken out of the
    /// map; none when the session opens, since epoch 0 carries no acknowledgements).
    pub fn fetch(
        &mut self,
        wanted: &BTreeSet<TopicPartition>,
        acks: &mut AckMap,
    ) -> SessionRequest {
        let epoch = self.epoch;
        if epoch == 0 {
            self.members = wanted.clone();
            self.advance();
            return SessionRequest {
                epoch,
                listed: wanted.clone(),
                incarnation: self.incarnation,
                ..SessionRequest::default()
            };
        }
        let carried = Self::take(acks);
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
            incarnation: self.incarnation,
        }
    }

    /// The next ShareAcknowledge carrying `acks` (taken out of the map), or `None` without an
    /// open session or without acknowledgements.
    pub fn acknowledge(&mut self, acks: &mut AckMap) -> Option<SessionRequest> {
        if self.epoch == 0 || acks.values().all(Vec::is_empty) {
            return None;
        }
        let epoch = self.epoch;
        let carried = Self::take(acks);
        if ACKNOWLEDGE_ADVANCES_EPOCH {
            self.advance();
        }
        Some(SessionRequest {
            epoch,
            listed: carried.keys().cloned().collect(),
            acks: carried,
            forgotten: BTreeSet::new(),
            incarnation: self.incarnation,
        })
    }

    /// The closing ShareAcknowledge (epoch -1) carrying `acks`, or `None` when no session is
    /// open. The session is closed from here on.
    pub fn close(&mut self, acks: &mut AckMap) -> Option<SessionRequest> {
        if self.epoch == 0 {
            return None;
        }
        let carried = Self::take(acks);
        let req = SessionRequest {
            epoch: -1,
            listed: carried.keys().cloned().collect(),
            acks: carried,
            forgotten: BTreeSet::new(),
            incarnation: self.incarnation,
        };
        self.reset();
        Some(req)
    }

    /// What the answer to `req` with top-level error `error` means for the session.
    pub fn answered(&mut self, req: &SessionRequest, error: Option<KafkaCode>) -> Verdict {
        let Some(code) = error else {
            return Verdict::Continue;
        };
        let session_gone =
            req.epoch == 0 || matches!(code, SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH);
        if !session_gone {
            return Verdict::Continue;
        }
        if req.incarnation == self.incarnation {
            self.reset();
        }
        Verdict::Reset
    }

    /// The connection broke with `req` unanswered: its outcome is unknown, and so is the
    /// broker's epoch; the next request opens a new session.
    pub fn transport_failed(&mut self, req: &SessionRequest) {
        if req.incarnation == self.incarnation {
            self.reset();
        }
    }

    /// Forgets the session (epoch 0 next).
    pub fn reset(&mut self) {
        self.epoch = 0;
        self.members.clear();
        self.incarnation = self.incarnation.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(ps: &[i32]) -> BTreeSet<TopicPartition> {
        ps.iter().map(|p| TopicPartition::new("t", *p)).collect()
    }

    fn acks(p: i32, offsets: &[i64]) -> AckMap {
        let mut m = AckMap::new();
        m.insert(
            TopicPartition::new("t", p),
            offsets.iter().map(|o| (*o, AckType::Accept)).collect(),
        );
        m
    }

    #[test]
    fn opens_with_everything_then_lists_only_news_and_acks_and_forgets_the_rest() {
        let mut s = ShareSession::new();
        let mut pending = acks(0, &[1, 2]);
        let open = s.fetch(&tps(&[0, 1]), &mut pending);
        assert_eq!(open.epoch, 0);
        assert_eq!(open.listed, tps(&[0, 1]));
        assert!(open.acks.is_empty(), "epoch 0 carries no acks");
        assert_eq!(pending.len(), 1, "the acks wait for the next request");
        let next = s.fetch(&tps(&[0, 1]), &mut pending);
        assert_eq!(next.epoch, 1);
        assert_eq!(next.listed, tps(&[0]), "only the partition with acks");
        assert_eq!(next.acks.len(), 1);
        assert!(pending.is_empty());
        let moved = s.fetch(&tps(&[1, 2]), &mut pending);
        assert_eq!(moved.epoch, 2);
        assert_eq!(moved.listed, tps(&[2]));
        assert_eq!(moved.forgotten, tps(&[0]));
        assert_eq!(s.members(), &tps(&[1, 2]));
        let ack = s.acknowledge(&mut acks(1, &[5])).expect("open");
        assert_eq!(ack.epoch, 3);
        let close = s.close(&mut AckMap::new()).expect("open");
        assert_eq!(close.epoch, -1);
        assert!(!s.is_open());
        assert!(s.close(&mut AckMap::new()).is_none());
    }

    #[test]
    fn a_partition_with_acks_is_forgotten_only_after_they_are_out() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0, 1]), &mut AckMap::new());
        let r = s.fetch(&tps(&[1]), &mut acks(0, &[3]));
        assert_eq!(r.listed, tps(&[0]));
        assert!(r.forgotten.is_empty());
        let r = s.fetch(&tps(&[1]), &mut AckMap::new());
        assert_eq!(r.forgotten, tps(&[0]));
    }

    #[test]
    fn the_epoch_wraps_to_one_after_max() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0]), &mut AckMap::new());
        s.epoch = i32::MAX;
        assert_eq!(s.fetch(&tps(&[0]), &mut AckMap::new()).epoch, i32::MAX);
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn session_errors_reset_to_epoch_zero_and_stale_answers_do_not_reset_again() {
        let mut s = ShareSession::new();
        s.fetch(&tps(&[0]), &mut AckMap::new());
        let a = s.fetch(&tps(&[0]), &mut acks(0, &[1]));
        let b = s.acknowledge(&mut acks(0, &[2])).expect("open");
        assert_eq!(
            s.answered(&a, Some(INVALID_SHARE_SESSION_EPOCH)),
            Verdict::Reset
        );
        assert_eq!(s.epoch(), 0);
        let reopen = s.fetch(&tps(&[0]), &mut AckMap::new());
        assert_eq!(reopen.epoch, 0);
        // The request queued behind `a` fails too, but says nothing of the new session.
        assert_eq!(
            s.answered(&b, Some(SHARE_SESSION_NOT_FOUND)),
            Verdict::Reset
        );
        assert_eq!(s.epoch(), 1);
        assert_eq!(s.answered(&reopen, None), Verdict::Continue);
        // Other errors leave an open session alone; a failed opening resets.
        let c = s.fetch(&tps(&[0]), &mut AckMap::new());
        assert_eq!(
            s.answered(&c, Some(KafkaCode::GROUP_AUTHORIZATION_FAILED)),
            Verdict::Continue
        );
        s.transport_failed(&c);
        assert_eq!(s.epoch(), 0);
        let d = s.fetch(&tps(&[0]), &mut AckMap::new());
        assert_eq!(s.answered(&d, Some(KafkaCode(69))), Verdict::Reset);
        assert!(s.acknowledge(&mut acks(0, &[1])).is_none(), "no session");
    }
}

//! The fencing token: a number per partition that grows every time the partition is assigned,
//! to this member or another, so that a sink can refuse the writes of a member whose partition
//! moved, however late they arrive.
//!
//! Kafka fences a stale member's commits (the generation, the member epoch, the instance id),
//! not its writes anywhere else: a member that checked its lease and then stalled (a pause, a
//! page-fault storm, a hung disk) still writes into a database after its partition moved. The
//! token carries the group's fencing out to the sink. At each assignment of a partition, before
//! any record of it is handed out:
//!
//! 1. the member reads the partition's committed position and metadata (OffsetFetch, stable
//!    offsets only) and the token in it (`rgc2;<token>;...`, 0 when there is none);
//! 2. it commits the same position (-1 when the group has none: still none, and every client
//!    resets as before) with the token plus one in the metadata, synchronously, as the identity
//!    the partition was assigned to;
//! 3. only once the coordinator accepted that commit does the assignment have its token: the
//!    guard hands it out with every lease, and every later commit of the assignment writes it
//!    again. Until then the partition is owned and not fetched; a raise that failed or was
//!    refused is tried again at later polls, as the member's identity then.
//!
//! Why it only grows: the coordinator applies a group's commits one at a time and refuses the
//! commits of an identity that lost its partitions (an old generation, an old member epoch, a
//! member id its static instance replaced), and a member commits a partition's metadata only
//! while its guard owns the partition; the previous owner's last commit was therefore applied
//! before the next owner's read, so the next owner reads at least the previous owner's token
//! and commits one more. DESIGN.md gives the argument per protocol.
//!
//! Why not the generation or the member epoch: a static member restarted under its
//! `group.instance.id` is given the generation of the process it replaces (no rebalance), so
//! the frozen old process and the new one would carry the same number; and a group deleted and
//! created again starts from generation 1.
//!
//! It needs every member of the group to be this library: another client's commit writes its
//! own metadata, and the next token read from it is 1 again. A sink that keeps the largest
//! token then refuses the new owner (safe, and loud), never admits an old one.

use std::time::Instant;

use crate::group::{CommitKind, MemberIdentity, Membership};
use crate::guard::raised_fencing_token;
use crate::wire::{ErrorChain, OffsetCommitEntry};
use crate::TopicPartition;

use super::context::Guard;

/// What one raise did: the partitions that have their token now, and why the others do not.
#[derive(Debug, Default)]
pub(crate) struct Raised {
    /// Fenced: each with the token its assignment carries from now on.
    pub(crate) fenced: Vec<(TopicPartition, u64)>,
    /// Not fenced, with the reason: they stay unfetched and are tried again later.
    pub(crate) failed: Vec<(TopicPartition, String)>,
}

impl Raised {
    fn fail_all(partitions: &[TopicPartition], why: &str) -> Self {
        Raised {
            fenced: Vec::new(),
            failed: partitions
                .iter()
                .map(|tp| (tp.clone(), why.to_string()))
                .collect(),
        }
    }
}

/// Raises the fencing token of `partitions`, owned by `identity` and without a token yet, and
/// gives each one the coordinator accepted its token in the guard (steps 1 to 3 above).
pub(crate) fn raise(
    member: &mut dyn Membership,
    guard: &Guard,
    group_id: &str,
    identity: &MemberIdentity,
    partitions: &[TopicPartition],
) -> Raised {
    if partitions.is_empty() {
        return Raised::default();
    }
    // 1. The committed token (stable offsets: a previous owner's open transaction is waited for).
    let committed = match member.records().offset_fetch(group_id, partitions) {
        Ok(committed) => committed,
        Err(error) => {
            return Raised::fail_all(
                partitions,
                &format!("reading the committed token: {}", ErrorChain(&error)),
            )
        }
    };
    let mut raised = Raised::default();
    let mut entries = Vec::with_capacity(partitions.len());
    let mut tokens = Vec::with_capacity(partitions.len());
    for tp in partitions {
        let Some(found) = committed.iter().find(|c| &c.tp == tp) else {
            raised
                .failed
                .push((tp.clone(), "absent from the OffsetFetch answer".into()));
            continue;
        };
        let position = found.offset.filter(|&o| o >= 0).unwrap_or(-1);
        let (token, metadata) = raised_fencing_token(found.metadata.as_deref(), position);
        entries.push(OffsetCommitEntry {
            tp: tp.clone(),
            offset: position,
            leader_epoch: found.leader_epoch,
            metadata: Some(metadata),
        });
        tokens.push((tp.clone(), token));
    }
    if entries.is_empty() {
        return raised;
    }
    // 2. The same position with the next token, as the identity that owns the partitions.
    let results = match member.commit_as(identity, &entries, CommitKind::Fencing) {
        Ok(results) => results,
        Err(error) => {
            let why = format!("committing the raised token: {}", ErrorChain(&error));
            raised
                .failed
                .extend(tokens.into_iter().map(|(tp, _)| (tp, why.clone())));
            return raised;
        }
    };
    // 3. Accepted: the assignment carries its token (unless it ended meanwhile).
    for (tp, token) in tokens {
        match results.iter().find(|(t, _)| *t == tp).map(|(_, r)| r) {
            Some(Ok(())) if guard.set_fencing_token(&tp, token) => {
                log::info!(
                    "{tp}: fencing token {token} (generation {})",
                    identity.generation_id
                );
                raised.fenced.push((tp, token));
            }
            Some(Ok(())) => raised
                .failed
                .push((tp, "no longer owned when its token was accepted".into())),
            Some(Err(error)) => raised.failed.push((
                tp,
                format!("the raised token was refused: {}", ErrorChain(error)),
            )),
            None => raised
                .failed
                .push((tp, "absent from the OffsetCommit answer".into())),
        }
    }
    raised
}

/// When the partitions whose raise failed are tried again: after `retry.backoff.ms`, doubling
/// up to `retry.backoff.max.ms`, so that a coordinator that keeps refusing (a rebalance under
/// way) is not asked at every poll.
#[derive(Debug, Default)]
pub(crate) struct RetryClock {
    failures: u32,
    due: Option<Instant>,
}

impl RetryClock {
    /// True when a retry is due at `now` (or none failed yet).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.due.is_none_or(|due| now >= due)
    }

    /// A raise failed: the next try waits `backoff(failures)`.
    pub(crate) fn failed(&mut self, now: Instant, backoff: impl Fn(u32) -> std::time::Duration) {
        self.failures = self.failures.saturating_add(1);
        self.due = Some(now + backoff(self.failures));
    }

    /// Every partition has its token: the next failure starts from the first backoff.
    pub(crate) fn settled(&mut self) {
        *self = RetryClock::default();
    }
}

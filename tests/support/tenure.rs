//! Who owned which partition when, and who applied which record when, on the one clock every
//! process of this host shares (CLOCK_MONOTONIC: `System.nanoTime` in the Java peer,
//! `time.monotonic` in the Python peers, read here with `clock_gettime`), so that our members
//! (threads of the test) and peer processes are judged on one timeline.
//!
//! A member's *tenure* of a partition is the interval in which it may apply that partition's
//! records, stamped so that it can only be too long, never too short:
//! - it starts when the assignment is handed to the code that fetches and applies (our member:
//!   when the membership hands the poll thread the `Assign` change, before any record of it can
//!   be fetched; the Java peer: in `onPartitionsAssigned`, which runs inside `poll` before that
//!   poll returns records of the partition);
//! - it ends when the member can apply nothing more of it and has committed (our member: when
//!   the poll thread acknowledges the `Revoke` change, after the drain and the synchronous
//!   commit, or, for a loss, right after the lost hook fenced the guard; the Java peer:
//!   its `revoked` line is printed after `commitSync` in `onPartitionsRevoked`).
//!
//! The handover between two members is a chain of causes: the old owner ends its tenure, then
//! tells the coordinator (the acknowledging heartbeat, the cooperative JoinGroup, LeaveGroup),
//! and only then does the coordinator give the partition to the next owner, whose tenure starts
//! when its member hears of it. So a correct group shows, for every partition, tenures that
//! follow each other *strictly* on this clock, with no slack allowed: [`check_tenures`] fails on
//! any overlap, however short. And every applied record must fall inside a tenure of the member
//! that applied it, so that the tenures bound what was really done.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebalance_guard::group::{
    Change, CommitError, CommitKind, CommitResults, FenceHook, GroupError, LostHook, LostReason,
    MemberIdentity, Membership, MembershipView, OffsetCommitSend, RebalanceProtocol,
};
use rebalance_guard::guard::SessionBound;
use rebalance_guard::wire::{OffsetCommitEntry, RecordSource};
use rebalance_guard::TopicPartition;

use super::members::{MemberEvent, MemberEventKind, Tp};

/// CLOCK_MONOTONIC now, in seconds: the clock of the peers' `t`.
pub fn monotonic_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// One member's tenure of one partition (see the module docs); `end` is `None` while it lasts.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenure {
    pub member: String,
    pub tp: Tp,
    pub start: f64,
    pub end: Option<f64>,
}

/// One record a member applied, and when.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub member: String,
    pub tp: Tp,
    pub offset: i64,
    pub t: f64,
}

/// What one member did: its tenures, the records it applied, its losses.
#[derive(Clone, Debug, Default)]
pub struct MemberLog {
    pub tenures: Vec<Tenure>,
    pub applied: Vec<Applied>,
    /// Partitions taken away without a handoff, with the reason and when: what the member
    /// applied of them since its last commit is redone by the next owner.
    pub lost: Vec<Loss>,
}

impl MemberLog {
    /// The partitions whose tenure lasts now.
    pub fn owned(&self) -> BTreeSet<Tp> {
        self.tenures
            .iter()
            .filter(|t| t.end.is_none())
            .map(|t| t.tp.clone())
            .collect()
    }

    fn start(&mut self, member: &str, tp: Tp, at: f64) {
        if !self.tenures.iter().any(|t| t.tp == tp && t.end.is_none()) {
            self.tenures.push(Tenure {
                member: member.to_string(),
                tp,
                start: at,
                end: None,
            });
        }
    }

    fn end(&mut self, tp: &Tp, at: f64) {
        for t in self.tenures.iter_mut() {
            if &t.tp == tp && t.end.is_none() {
                t.end = Some(at);
            }
        }
    }

    /// Ends the open tenure of `tp` as lost at `at`, once: the lost hook (the moment the guard
    /// fenced it) and the `Lost` change handed to the poll thread afterwards both report it.
    pub fn lose(&mut self, tp: Tp, reason: String, at: f64) {
        if self.tenures.iter().any(|t| t.tp == tp && t.end.is_none()) {
            self.end(&tp, at);
            self.lost.push(Loss { tp, reason, t: at });
        }
    }

    /// Ends every tenure still open (the member is gone).
    pub fn end_all(&mut self, at: f64) {
        for t in self.tenures.iter_mut() {
            t.end.get_or_insert(at);
        }
    }
}

/// A partition taken from a member without a handoff.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    pub tp: Tp,
    pub reason: String,
    /// When the member took notice (the end of its tenure).
    pub t: f64,
}

/// A shared, growing [`MemberLog`].
pub type SharedLog = Arc<Mutex<MemberLog>>;

fn tp_of(tp: &TopicPartition) -> Tp {
    (tp.topic.to_string(), tp.partition)
}

/// The lost hook to build the product's member with: `hook` (the consumer's, which fences the
/// guard), then the loss stamped in `log`, so that a tenure lost on the heartbeat or membership
/// thread ends when the guard stopped it, not when the poll thread next looks.
pub fn recording_lost_hook(hook: LostHook, log: SharedLog) -> LostHook {
    Arc::new(move |partitions: &[TopicPartition], reason: &LostReason| {
        hook(partitions, reason);
        let now = monotonic_now();
        let mut log = log.lock().unwrap();
        for tp in partitions {
            log.lose(tp_of(tp), format!("{reason:?}"), now);
        }
    })
}

/// The product's membership with its tenures recorded: every method goes to `inner`; the
/// changes it hands out and the acknowledgements it receives are stamped on the way.
pub struct Recording {
    name: String,
    inner: Box<dyn Membership>,
    log: SharedLog,
    /// The partitions of each `Revoke` handed out and not yet acknowledged, in order.
    revoking: VecDeque<Vec<Tp>>,
}

impl Recording {
    pub fn new(name: &str, inner: Box<dyn Membership>, log: SharedLog) -> Recording {
        Recording {
            name: name.to_string(),
            inner,
            log,
            revoking: VecDeque::new(),
        }
    }

    fn saw(&mut self, change: &Change) {
        let now = monotonic_now();
        let mut log = self.log.lock().unwrap();
        match change {
            Change::Assign { partitions, .. } => {
                for tp in partitions {
                    log.start(&self.name, tp_of(tp), now);
                }
            }
            Change::Revoke { partitions, .. } => {
                self.revoking
                    .push_back(partitions.iter().map(tp_of).collect());
            }
            Change::Lost { partitions, reason } => {
                for tp in partitions {
                    log.lose(tp_of(tp), format!("{reason:?}"), now);
                }
            }
        }
    }
}

impl Membership for Recording {
    fn next_change(&mut self, timeout: Duration) -> Result<Option<Change>, GroupError> {
        let change = self.inner.next_change(timeout)?;
        if let Some(change) = &change {
            self.saw(change);
        }
        Ok(change)
    }

    fn acknowledge(&mut self, change: Change) {
        if change.revoked().is_some() {
            let now = monotonic_now();
            if let Some(revoked) = self.revoking.pop_front() {
                let mut log = self.log.lock().unwrap();
                for tp in &revoked {
                    log.end(tp, now);
                }
            }
        }
        self.inner.acknowledge(change);
    }

    fn closing(&mut self) -> Vec<Change> {
        let changes = self.inner.closing();
        for change in &changes {
            self.saw(change);
        }
        changes
    }

    fn leave(&mut self) -> Result<(), GroupError> {
        self.inner.leave()
    }

    fn commit_as(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
    ) -> Result<CommitResults, CommitError> {
        self.inner.commit_as(identity, offsets, kind)
    }

    fn commit_through(
        &mut self,
        identity: &MemberIdentity,
        offsets: &[OffsetCommitEntry],
        kind: CommitKind,
        send: &mut OffsetCommitSend<'_>,
    ) -> Result<CommitResults, CommitError> {
        self.inner.commit_through(identity, offsets, kind, send)
    }

    fn commit_in_background(
        &mut self,
        offsets: Vec<OffsetCommitEntry>,
    ) -> Result<(), Vec<OffsetCommitEntry>> {
        self.inner.commit_in_background(offsets)
    }

    fn commit_answer(&mut self) -> Option<Result<CommitResults, CommitError>> {
        self.inner.commit_answer()
    }

    fn settle_commit(&mut self) {
        self.inner.settle_commit()
    }

    fn commit_in_flight(&self) -> bool {
        self.inner.commit_in_flight()
    }

    fn records(&mut self) -> &mut dyn RecordSource {
        self.inner.records()
    }

    fn identity(&self) -> MemberIdentity {
        self.inner.identity()
    }

    fn owned(&self) -> Vec<TopicPartition> {
        self.inner.owned()
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.inner.rebalance_protocol()
    }

    fn may_fetch(&self) -> bool {
        self.inner.may_fetch()
    }

    fn batch_boundary_due(&self) -> bool {
        self.inner.batch_boundary_due()
    }

    fn enter_poll(&self) {
        self.inner.enter_poll()
    }

    fn leave_poll(&self) {
        self.inner.leave_poll()
    }

    fn wait_while_session_lapsed(&self, bound: &SessionBound, timeout: Duration) {
        self.inner.wait_while_session_lapsed(bound, timeout)
    }

    fn nudge(&self) -> rebalance_guard::wire::Nudge {
        self.inner.nudge()
    }

    fn view(&self) -> MembershipView {
        self.inner.view()
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        self.inner.bound_session(bound)
    }

    fn fence_revocations_with(&self, hook: FenceHook) {
        self.inner.fence_revocations_with(hook)
    }

    fn panic_membership_thread(&self) {
        self.inner.panic_membership_thread()
    }
}

/// A peer member's tenures and applied records, from its event lines: a partition's tenure
/// starts at the event whose `owned` first lists it and ends at the event whose `owned` no
/// longer does (revoked, lost, closed, killed); a member that exited without saying so ends
/// everything at its last event.
pub fn peer_log(member: &str, events: &[MemberEvent]) -> MemberLog {
    let mut log = MemberLog::default();
    let mut owned: BTreeSet<Tp> = BTreeSet::new();
    let mut last_t = 0.0;
    for e in events {
        last_t = e.t;
        if let (MemberEventKind::Record, Some((topic, partition, offset))) = (&e.kind, &e.record) {
            log.applied.push(Applied {
                member: member.to_string(),
                tp: (topic.clone(), *partition),
                offset: *offset,
                t: e.t,
            });
        }
        let Some(now) = &e.owned else { continue };
        for tp in now.difference(&owned) {
            log.start(member, tp.clone(), e.t);
        }
        for tp in owned.difference(now) {
            log.end(tp, e.t);
            if e.kind == MemberEventKind::Lost {
                log.lost.push(Loss {
                    tp: tp.clone(),
                    reason: "lost".to_string(),
                    t: e.t,
                });
            }
        }
        owned = now.clone();
    }
    log.end_all(last_t);
    log
}

/// What [`check_tenures`] measured.
#[derive(Debug, Default)]
pub struct TenureReport {
    /// Handovers checked (consecutive tenures of one partition by different members).
    pub handovers: usize,
    /// The shortest gap between one tenure's end and the next one's start, in seconds.
    pub min_gap: Option<f64>,
}

/// Fails when two tenures of one partition overlap (the later one starts at or before the
/// earlier one ends, on the shared clock, without any tolerance), when a tenure is still open,
/// or when a member applied a record outside its own tenures of that partition. `logs` are
/// every member incarnation's logs, named by their tenures' `member`.
pub fn check_tenures(logs: &[MemberLog]) -> Result<TenureReport, String> {
    let mut problems = String::new();
    let mut by_tp: BTreeMap<&Tp, Vec<&Tenure>> = BTreeMap::new();
    for log in logs {
        for t in &log.tenures {
            by_tp.entry(&t.tp).or_default().push(t);
        }
        for a in &log.applied {
            let inside = log
                .tenures
                .iter()
                .any(|t| t.tp == a.tp && t.start <= a.t && t.end.is_none_or(|end| a.t <= end));
            if !inside {
                let _ = writeln!(
                    problems,
                    "{} applied {}-{}@{} at {:.6}, outside its tenures of it",
                    a.member, a.tp.0, a.tp.1, a.offset, a.t
                );
            }
        }
    }
    let mut report = TenureReport::default();
    for (tp, mut tenures) in by_tp {
        tenures.sort_by(|a, b| a.start.total_cmp(&b.start));
        for pair in tenures.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let Some(end) = a.end else {
                let _ = writeln!(
                    problems,
                    "{}-{}: {}'s tenure from {:.6} never ended, yet {} took it at {:.6}",
                    tp.0, tp.1, a.member, a.start, b.member, b.start
                );
                continue;
            };
            if a.member != b.member {
                report.handovers += 1;
            }
            let gap = b.start - end;
            report.min_gap = Some(report.min_gap.map_or(gap, |g: f64| g.min(gap)));
            if gap <= 0.0 {
                let _ = writeln!(
                    problems,
                    "{}-{}: {} owned it {:.6}..{:.6} and {} from {:.6}: overlap of {:.1} ms",
                    tp.0,
                    tp.1,
                    a.member,
                    a.start,
                    end,
                    b.member,
                    b.start,
                    -gap * 1e3
                );
            }
        }
    }
    if problems.is_empty() {
        Ok(report)
    } else {
        Err(problems)
    }
}

//! One in-memory share-group member as the share consumer holds it: [`InMemoryShareMember`] (its
//! heartbeats) and [`InMemoryShareSource`] (its share session: fetches, acknowledgements,
//! renewals, the close), both talking to the [`ShareCoordinator`] at once, on its clock.
//!
//! The source keeps what the wire layer keeps for the consumer's sake: the share session's
//! [`SessionScope`] (one per session, a child per partition), ended when the member learns that
//! the session is gone (the group removed it, or the consumer saw a fence) and at the close, so
//! that a lease of an ended session reads not current; and an acknowledgement decided in an
//! ended session is dropped unsent ([`AckError::SessionEnded`]), as the fetcher drops it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::ShareCoordinator;
use crate::group::{GroupError, ShareAssignment};
use crate::guard::{AckType, SessionBound, SessionScope};
use crate::share::{ShareMember, ShareSource};
use crate::wire::share::{
    AckError, AckResult, AcquiredBatch, AcquiredRecord, RenewResult, ShareAck, ShareFetchRound,
};
use crate::wire::{FetchStats, Nudge, Result};
use crate::TopicPartition;

/// A member's heartbeat side: each [`assignment`](ShareMember::assignment) is a heartbeat at
/// the coordinator's now, which renews the session bound handed over for the group's session
/// timeout from then (the coordinator answers at once, so the send time is now).
#[derive(Debug)]
pub struct InMemoryShareMember {
    coordinator: ShareCoordinator,
    id: String,
    topics: Vec<String>,
    bound: Mutex<Option<Arc<SessionBound>>>,
}

impl InMemoryShareMember {
    pub(super) fn new(coordinator: ShareCoordinator, id: String) -> Self {
        let topics = coordinator
            .lock()
            .members
            .get(&id)
            .map(|m| m.topics.clone())
            .unwrap_or_default();
        InMemoryShareMember {
            coordinator,
            id,
            topics,
            bound: Mutex::new(None),
        }
    }
}

impl ShareMember for InMemoryShareMember {
    fn member_id(&self) -> &str {
        &self.id
    }

    fn assignment(&self) -> ShareAssignment {
        let sent = self.coordinator.now();
        let (epoch, partitions, fenced) = self.coordinator.heartbeat(&self.id, &self.topics);
        if let Some(bound) = &*self.bound.lock().unwrap_or_else(PoisonError::into_inner) {
            bound.renew(sent, self.coordinator.settings().session_timeout);
        }
        ShareAssignment {
            epoch,
            partitions,
            fenced,
        }
    }

    fn wait_for_assignment_change(&self, _since_epoch: i32, _timeout: Duration) -> ShareAssignment {
        // Time moves only when the test moves it: nothing can change while this waits.
        self.assignment()
    }

    fn status(&self) -> std::result::Result<(), GroupError> {
        Ok(())
    }

    fn bound_session(&self, bound: Arc<SessionBound>) {
        *self.bound.lock().unwrap_or_else(PoisonError::into_inner) = Some(bound);
    }

    fn leave(self: Box<Self>, _timeout: Duration) -> std::result::Result<(), GroupError> {
        self.coordinator.leave(&self.id);
        Ok(())
    }
}

/// A member's share session: what the share consumer fetches through.
#[derive(Debug)]
pub struct InMemoryShareSource {
    coordinator: ShareCoordinator,
    id: String,
    assigned: BTreeSet<TopicPartition>,
    pending: Vec<ShareAck>,
    /// Outcomes not reported yet.
    results: Vec<AckResult>,
    max_records: usize,
    /// Batch-optimized acquisition (`share.acquire.mode`): whole produced batches.
    whole_batches: bool,
    /// The coordinator's session generation this session belongs to.
    generation: u64,
    session: SessionScope,
    partitions: HashMap<TopicPartition, SessionScope>,
    /// What a fetch sent ahead acquired: the next `fetch` hands it over (the fetch "in
    /// flight" until then).
    ahead: Option<Vec<AcquiredBatch>>,
}

impl InMemoryShareSource {
    pub(super) fn new(coordinator: ShareCoordinator, id: String) -> Self {
        let generation = coordinator.session_generation(&id);
        InMemoryShareSource {
            max_records: coordinator.settings().max_records,
            whole_batches: false,
            coordinator,
            id,
            assigned: BTreeSet::new(),
            pending: Vec::new(),
            results: Vec::new(),
            generation,
            session: SessionScope::new(),
            partitions: HashMap::new(),
            ahead: None,
        }
    }

    /// Acquires whole produced batches, past `MaxRecords` (`share.acquire.mode`
    /// `batch_optimized`), or at most `MaxRecords` (`record_limit`, the default).
    pub fn acquire_whole_batches(&mut self, whole: bool) {
        self.whole_batches = whole;
    }

    /// Ends the session's scope and opens the next one.
    fn new_session(&mut self) {
        self.session.end();
        self.session = SessionScope::new();
        self.partitions.clear();
    }

    /// Before each request: a session the coordinator dropped (the member left or was fenced)
    /// ends here, as a session error ends it on the wire.
    fn check_session(&mut self) {
        let generation = self.coordinator.session_generation(&self.id);
        if generation != self.generation {
            log::info!(
                "in-memory share session of {} ended by the coordinator",
                self.id
            );
            self.generation = generation;
            self.new_session();
        }
    }

    fn partition_scope(&mut self, tp: &TopicPartition) -> SessionScope {
        let session = &self.session;
        self.partitions
            .entry(tp.clone())
            .or_insert_with(|| session.child())
            .clone()
    }

    /// Acquires what the coordinator gives this member now, under its lock from now.
    fn acquire(&mut self) -> Vec<AcquiredBatch> {
        let sent_at = self.coordinator.now();
        let lock = self.coordinator.settings().lock_duration;
        let acquired = self.coordinator.fetch(
            &self.id,
            &self.assigned,
            self.max_records,
            self.whole_batches,
        );
        let mut batches = Vec::new();
        for (tp, records) in acquired {
            // One acquired range per partition and fetch (the coordinator keeps no in-flight
            // batches of its own).
            let range_last = records.iter().map(|(r, _)| r.offset).max().unwrap_or(0);
            batches.push(AcquiredBatch {
                scope: self.partition_scope(&tp),
                tp,
                sent_at,
                lock_duration: lock,
                lock_ends_by: sent_at + lock,
                records: records
                    .into_iter()
                    .map(|(record, delivery_count)| AcquiredRecord {
                        record,
                        delivery_count,
                        range_last,
                    })
                    .collect(),
            });
        }
        batches
    }

    /// Sends the queued acknowledgements: each applied or refused by the coordinator, or
    /// dropped unsent when its session ended.
    fn send_pending(&mut self) {
        for ack in std::mem::take(&mut self.pending) {
            let outcome = if ack.scope.has_ended() || !ack.scope.is_within(&self.session) {
                Err(AckError::SessionEnded)
            } else {
                self.coordinator
                    .acknowledge(&self.id, &ack.tp, ack.offset, ack.kind)
                    .map_err(AckError::Kafka)
            };
            self.results.push(AckResult {
                tp: ack.tp,
                acks: vec![(ack.offset, ack.kind)],
                outcome,
            });
        }
    }
}

impl ShareSource for InMemoryShareSource {
    fn assign(&mut self, partitions: &BTreeSet<TopicPartition>) {
        self.assigned = partitions.clone();
    }

    fn assigned(&self) -> &BTreeSet<TopicPartition> {
        &self.assigned
    }

    fn acknowledge(&mut self, acks: Vec<ShareAck>) {
        for ack in acks {
            if ack.kind == AckType::Renew {
                self.results.push(AckResult {
                    tp: ack.tp,
                    acks: vec![(ack.offset, ack.kind)],
                    outcome: Err(AckError::RenewUnsupported),
                });
            } else {
                self.pending.push(ack);
            }
        }
    }

    fn member_fenced(&mut self) {
        self.new_session();
    }

    fn set_max_records(&mut self, max_records: i32) {
        self.max_records = usize::try_from(max_records.max(1)).unwrap_or(1);
    }

    fn fetch_stats(&self) -> FetchStats {
        FetchStats::default()
    }

    fn supports_renew(&self) -> bool {
        self.coordinator.settings().renew
    }

    fn nudge(&self) -> Option<Nudge> {
        None
    }

    fn fetch(&mut self) -> Result<ShareFetchRound> {
        // A fetch sent ahead is the one in flight: its answer is this round's, and the
        // acknowledgements queued since wait for the next request, as on the wire.
        let batches = match self.ahead.take() {
            Some(batches) => batches,
            None => {
                self.check_session();
                self.send_pending();
                self.acquire()
            }
        };
        Ok(ShareFetchRound {
            batches,
            ack_results: std::mem::take(&mut self.results),
            errors: Vec::new(),
            refused: Vec::new(),
        })
    }

    fn fetch_ahead(&mut self) {
        if self.ahead.is_none() {
            self.check_session();
            self.send_pending();
            self.ahead = Some(self.acquire());
        }
    }

    fn send_acks_now(&mut self) -> Vec<AckResult> {
        if self.ahead.is_none() {
            // A leader with a fetch out gets no ShareAcknowledge: they ride on the next fetch.
            self.check_session();
            self.send_pending();
        }
        std::mem::take(&mut self.results)
    }
    fn has_queued_acks(&self) -> bool {
        !self.pending.is_empty()
    }

    fn renew(&mut self, records: &[(TopicPartition, i64)], _timeout: Duration) -> RenewResult {
        self.check_session();
        let sent_at = self.coordinator.now();
        let mut results = Vec::new();
        let mut any = false;
        for (tp, offset) in records {
            let outcome = self
                .coordinator
                .acknowledge(&self.id, tp, *offset, AckType::Renew)
                .map_err(AckError::Kafka);
            any |= outcome.is_ok();
            results.push(AckResult {
                tp: tp.clone(),
                acks: vec![(*offset, AckType::Renew)],
                outcome,
            });
        }
        RenewResult {
            sent_at,
            lock_duration: any.then(|| self.coordinator.settings().lock_duration),
            results,
        }
    }

    fn close(mut self: Box<Self>, _timeout: Duration) -> Vec<AckResult> {
        self.check_session();
        self.send_pending();
        self.session.end();
        self.coordinator.close_session(&self.id);
        std::mem::take(&mut self.results)
    }
}

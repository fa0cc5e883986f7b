//! Transactions (KIP-98), fenced by the consumer group (KIP-447), in either protocol version
//! (KIP-890): what a transactional producer asks of the transaction coordinator, and the one
//! state both the caller's thread and the sender read.
//!
//! The story of one transaction:
//!
//! 1. [`Producer::init_transactions`](super::Producer::init_transactions): InitProducerId with
//!    the `transactional.id` gives the id and a new epoch, which fences every older producer of
//!    the same id (their next request is refused) and aborts what they left open. The
//!    cluster's `transaction.version` decides the protocol: 2 on Kafka 4.x (partitions join the
//!    transaction with their first Produce, every EndTxn bumps the epoch), 1 before.
//! 2. `begin_transaction` is local. Each record is sent as usual; with version 1 the sender adds
//!    a partition to the transaction (AddPartitionsToTxn, all new partitions in one request)
//!    before the partition's first batch goes, and sends nothing of it until the coordinator
//!    said yes.
//! 3. `send_offsets_to_transaction` (the consumer's positions): with version 1 AddOffsetsToTxn
//!    first, then TxnOffsetCommit to the group coordinator, carrying the member id, generation
//!    (or member epoch) and instance id, so that the group refuses a zombie's offsets.
//! 4. `commit_transaction` waits until every record of the transaction was acknowledged; if
//!    one failed, the transaction can only abort. Then EndTxn(commit): the coordinator writes
//!    the commit markers, and the records and offsets become visible together.
//! 5. `abort_transaction` fails what was not sent, waits for what is on the wire, and sends
//!    EndTxn(abort). Then the epoch moves (version 2: EndTxn's answer; version 1: InitProducerId
//!    with the current id, KIP-360), so that every partition's sequence starts again at 0 and
//!    no batch of the aborted transaction can land later.
//!
//! The errors, as Java sorts them: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH and an
//! authorization failure end the producer ([`ProduceError::Fenced`], fatal); a record that was
//! not written, TRANSACTION_ABORTABLE, or offsets the group refused make the transaction
//! abortable ([`ProduceError::TransactionAbortable`]); CONCURRENT_TRANSACTIONS (the previous
//! transaction is still completing), a coordinator that moved or is loading, and a lost
//! connection are retried until `max.block.ms`.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use super::error::ProduceError;
use crate::config::ProducerSettings;
use crate::wire::{
    Client, CommitIdentity, KafkaCode, OffsetCommitEntry, ProducerIdentity, TransactionVersion,
    WireError,
};
use crate::TopicPartition;

/// Each partition's answer to offsets sent into a transaction (the group's verdict).
pub(crate) type OffsetResults = Vec<(TopicPartition, Result<(), WireError>)>;

/// The consumer group a transaction's offsets belong to, and the member that sends them: what
/// the group coordinator checks before it accepts offsets from a transaction (KIP-447), so that
/// a member the group has moved on from cannot commit (Java's `ConsumerGroupMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// The generation (classic protocol) or member epoch (KIP-848) of the member.
    pub generation_id: i32,
    /// The member id the coordinator gave.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Metadata for offsets committed outside any group membership (generation -1, no member
    /// id): accepted only by a group with no members, so it fences nothing.
    pub fn without_member(group_id: impl Into<String>) -> Self {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }

    fn identity(&self) -> CommitIdentity<'_> {
        CommitIdentity {
            group_id: &self.group_id,
            generation_id_or_member_epoch: self.generation_id,
            member_id: &self.member_id,
            group_instance_id: self.group_instance_id.as_deref(),
        }
    }
}

/// What the caller's thread and the sender share of a transactional producer: the id and epoch
/// to stamp, the partitions already in the transaction (version 1), the first failure of a
/// record of the open transaction, and the aborts the sender has to apply.
#[derive(Debug)]
pub(crate) struct TxnLink {
    transactional_id: Arc<str>,
    state: Mutex<LinkState>,
    /// Signalled when the sender applied an abort.
    applied: Condvar,
}

#[derive(Debug)]
struct LinkState {
    identity: Option<ProducerIdentity>,
    version: TransactionVersion,
    added: HashSet<TopicPartition>,
    failed: Option<ProduceError>,
    fatal: Option<ProduceError>,
    aborts: u64,
    /// The aborts the sender has applied (its queued batches failed).
    aborts_applied: u64,
    /// The coordinator knows of the open transaction (a partition or offsets joined it): only
    /// then is there anything for EndTxn to end (an EndTxn of an empty one is refused).
    started: bool,
}

impl TxnLink {
    pub(crate) fn new(transactional_id: String) -> Self {
        TxnLink {
            transactional_id: Arc::from(transactional_id),
            state: Mutex::new(LinkState {
                identity: None,
                version: TransactionVersion::V1,
                added: HashSet::new(),
                failed: None,
                fatal: None,
                aborts: 0,
                aborts_applied: 0,
                started: false,
            }),
            applied: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `transactional.id`.
    pub(crate) fn transactional_id(&self) -> &Arc<str> {
        &self.transactional_id
    }

    /// The id and epoch the sender stamps batches with (`None` before `init_transactions`).
    pub(crate) fn identity(&self) -> Option<ProducerIdentity> {
        self.lock().identity
    }

    /// The protocol of the transactions (decided at `init_transactions`).
    pub(crate) fn version(&self) -> TransactionVersion {
        self.lock().version
    }

    /// Whether partitions must be added with AddPartitionsToTxn (version 1).
    pub(crate) fn adds_partitions(&self) -> bool {
        self.lock().version == TransactionVersion::V1
    }

    /// Of `partitions`, those not in the open transaction yet.
    pub(crate) fn not_added(&self, partitions: &[TopicPartition]) -> Vec<TopicPartition> {
        let state = self.lock();
        partitions
            .iter()
            .filter(|tp| !state.added.contains(*tp))
            .cloned()
            .collect()
    }

    /// Whether `tp` may be written in the open transaction.
    pub(crate) fn is_added(&self, tp: &TopicPartition) -> bool {
        let state = self.lock();
        state.version == TransactionVersion::V2 || state.added.contains(tp)
    }

    /// The coordinator accepted `tp` into the open transaction.
    pub(crate) fn added(&self, tp: TopicPartition) {
        let mut state = self.lock();
        state.added.insert(tp);
        state.started = true;
    }

    /// A batch of the open transaction went out (version 2: its Produce adds the partition).
    pub(crate) fn wrote(&self) {
        self.lock().started = true;
    }

    /// A record of the open transaction failed: the transaction can only abort.
    pub(crate) fn record_failed(&self, error: &ProduceError) {
        let mut state = self.lock();
        if state.failed.is_none() {
            state.failed = Some(error.clone());
        }
    }

    /// The producer is fenced (or refused for good): every later call fails with `error`.
    pub(crate) fn fatal(&self, error: ProduceError) {
        let mut state = self.lock();
        if state.fatal.is_none() {
            state.fatal = Some(error);
        }
    }

    /// How many aborts were asked for: the sender fails its queued batches once per new one.
    pub(crate) fn aborts(&self) -> u64 {
        self.lock().aborts
    }

    /// The sender failed its queued batches for every abort up to `aborts`.
    pub(crate) fn aborts_applied(&self, aborts: u64) {
        let mut state = self.lock();
        state.aborts_applied = state.aborts_applied.max(aborts);
        drop(state);
        self.applied.notify_all();
    }

    /// Asks the sender to fail its queued batches and waits (up to `bound`) until it did, so
    /// that no batch of the next transaction can be taken for one of this one.
    pub(crate) fn abort_queued(&self, wake: impl Fn(), bound: Duration) -> bool {
        let mut state = self.lock();
        state.aborts += 1;
        let wanted = state.aborts;
        drop(state);
        wake();
        let deadline = Instant::now() + bound;
        let mut state = self.lock();
        while state.aborts_applied < wanted && state.fatal.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .applied
                .wait_timeout(state, left.min(Duration::from_millis(50)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            drop(state);
            wake();
            state = self.lock();
        }
        true
    }
}

/// Where the caller's thread is in the transaction story.
#[derive(Clone, Debug)]
enum Phase {
    Uninitialized,
    Ready,
    InTransaction,
    /// A record or the offsets failed: only an abort is allowed.
    Abortable(String),
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Uninitialized => "not initialized (call init_transactions)",
            Phase::Ready => "not in a transaction (call begin_transaction)",
            Phase::InTransaction => "in a transaction",
            Phase::Abortable(_) => "in a transaction that must be aborted",
        }
    }
}

/// The caller's side of a transactional producer: its own client to the coordinators, and the
/// phase. One per producer, behind a mutex (transaction calls come from one thread at a time).
pub(crate) struct Transactions {
    link: Arc<TxnLink>,
    client: Client,
    phase: Phase,
    timeout: Duration,
    max_block: Duration,
    retry_backoff: Duration,
    /// Version 1: the groups whose offsets were added to the open transaction.
    offsets_added: HashSet<String>,
}

impl std::fmt::Debug for Transactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactions")
            .field("transactional_id", &self.link.transactional_id)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

/// How one failed transaction request is handled.
enum Verdict {
    Retry,
    Fenced(KafkaCode),
    Abortable(String),
}

fn verdict(e: &WireError) -> Verdict {
    match e.kafka_code() {
        Some(
            code @ (KafkaCode::PRODUCER_FENCED
            | KafkaCode::INVALID_PRODUCER_EPOCH
            | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            | KafkaCode::INVALID_PRODUCER_ID_MAPPING
            | KafkaCode::CLUSTER_AUTHORIZATION_FAILED
            | KafkaCode::UNSUPPORTED_VERSION
            | KafkaCode::INVALID_TXN_STATE),
        ) => Verdict::Fenced(code),
        Some(
            KafkaCode::CONCURRENT_TRANSACTIONS
            | KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
            | KafkaCode::NOT_COORDINATOR
            | KafkaCode::COORDINATOR_NOT_AVAILABLE
            | KafkaCode::REQUEST_TIMED_OUT
            | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
        ) => Verdict::Retry,
        Some(_) if e.retriable() => Verdict::Retry,
        Some(code) => Verdict::Abortable(format!("{}: {e}", code.name())),
        None if e.retriable() => Verdict::Retry,
        None => Verdict::Abortable(e.to_string()),
    }
}

/// Codes that say the coordinator must be looked up again.
fn coordinator_moved(e: &WireError) -> bool {
    matches!(
        e.kafka_code(),
        Some(KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE) | None
    )
}

impl Transactions {
    pub(crate) fn new(link: Arc<TxnLink>, client: Client, settings: &ProducerSettings) -> Self {
        Transactions {
            link,
            client,
            phase: Phase::Uninitialized,
            timeout: settings.transaction_timeout,
            max_block: settings.max_block,
            retry_backoff: settings.retry_backoff,
            offsets_added: HashSet::new(),
        }
    }

    fn fatal_error(&self) -> Option<ProduceError> {
        self.link.lock().fatal.clone()
    }

    fn refuse(&self, operation: &'static str) -> ProduceError {
        ProduceError::TransactionState {
            operation,
            state: self.phase.name(),
        }
    }

    /// Runs one transaction request until it succeeds, fails for good, or `max.block.ms`
    /// passed. `coordinator` names the cache to forget when the coordinator moved.
    fn retrying<T>(
        &mut self,
        operation: &'static str,
        group: Option<&str>,
        mut request: impl FnMut(&mut Client, &str) -> Result<T, WireError>,
    ) -> Result<T, ProduceError> {
        let began = Instant::now();
        let id = self.link.transactional_id.to_string();
        loop {
            let failure = match request(&mut self.client, &id) {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            match verdict(&failure) {
                Verdict::Fenced(code) => {
                    let error = ProduceError::Fenced {
                        transactional_id: id.clone(),
                        code,
                    };
                    warn!("producer {id}: {operation}: {failure}");
                    self.link.fatal(error.clone());
                    return Err(error);
                }
                Verdict::Abortable(reason) => {
                    return Err(ProduceError::TransactionAbortable {
                        reason: format!("{operation}: {reason}"),
                    })
                }
                Verdict::Retry => {}
            }
            if coordinator_moved(&failure) {
                self.client.invalidate_transaction_coordinator(&id);
                if let Some(group) = group {
                    self.client.invalidate_coordinator(group);
                }
            }
            let waited = began.elapsed();
            if waited >= self.max_block {
                return Err(ProduceError::TransactionTimeout {
                    operation,
                    waited,
                    last: failure.to_string(),
                });
            }
            // CONCURRENT_TRANSACTIONS clears within milliseconds (the previous transaction's
            // markers are being written): Java retries it after 20 ms, not the full backoff.
            let pause = if failure.kafka_code() == Some(KafkaCode::CONCURRENT_TRANSACTIONS) {
                Duration::from_millis(20).min(self.retry_backoff)
            } else {
                self.retry_backoff
            };
            debug!("producer {id}: {operation} will be retried: {failure}");
            thread::sleep(pause.min(self.max_block.saturating_sub(waited)));
        }
    }

    /// InitProducerId with the `transactional.id`: fences older producers of the id, learns
    /// the protocol version. Calling it again after a fatal error is refused.
    pub(crate) fn init(&mut self) -> Result<(), ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        if !matches!(self.phase, Phase::Uninitialized) {
            return Err(self.refuse("init_transactions"));
        }
        let timeout = self.timeout;
        let identity = self.retrying("init_transactions", None, |client, id| {
            client.init_transactional_producer(id, timeout, None)
        })?;
        let version = self.retrying("init_transactions", None, |client, id| {
            client.transaction_version(id)
        })?;
        info!(
            "producer {}: producer id {} epoch {}, transaction version {}",
            self.link.transactional_id,
            identity.producer_id,
            identity.epoch,
            if version == TransactionVersion::V2 {
                2
            } else {
                1
            }
        );
        {
            let mut state = self.link.lock();
            state.identity = Some(identity);
            state.version = version;
        }
        self.phase = Phase::Ready;
        Ok(())
    }

    /// Opens a transaction (local: the coordinator hears of it with its first partition).
    pub(crate) fn begin(&mut self) -> Result<(), ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        if !matches!(self.phase, Phase::Ready) {
            return Err(self.refuse("begin_transaction"));
        }
        {
            let mut state = self.link.lock();
            state.added.clear();
            state.failed = None;
            state.started = false;
        }
        self.offsets_added.clear();
        self.phase = Phase::InTransaction;
        Ok(())
    }

    /// Whether a record may be sent now (in a transaction, not fenced).
    pub(crate) fn may_send(&self) -> Result<(), ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        match self.phase {
            Phase::InTransaction | Phase::Abortable(_) => Ok(()),
            _ => Err(self.refuse("send")),
        }
    }

    /// Puts `offsets` of `group`'s member into the open transaction: they commit with it. Each
    /// partition's own result comes back (a refusal by the group, ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, makes the transaction abortable: a zombie's
    /// offsets must never commit).
    pub(crate) fn send_offsets(
        &mut self,
        who: &CommitIdentity<'_>,
        offsets: &[OffsetCommitEntry],
    ) -> Result<OffsetResults, ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        if !matches!(self.phase, Phase::InTransaction) {
            return Err(self.refuse("send_offsets_to_transaction"));
        }
        let identity = self.current_identity()?;
        let version = self.link.version();
        let group = who.group_id.to_string();
        self.link.lock().started = true;
        if self.link.adds_partitions() && !self.offsets_added.contains(&group) {
            self.retrying("send_offsets_to_transaction", None, |client, id| {
                client.add_offsets_to_txn(id, identity, &group)
            })?;
            self.offsets_added.insert(group.clone());
        }
        let results = self.retrying("send_offsets_to_transaction", Some(&group), |client, id| {
            let results = client.txn_offset_commit(id, identity, version, who, offsets)?;
            // A coordinator that moved or is loading says so for every partition: retry the
            // whole request. Every other per-partition answer is the group's verdict.
            match results.iter().find_map(|(_, r)| {
                r.as_ref()
                    .err()
                    .filter(|e| {
                        matches!(
                            e.kafka_code(),
                            Some(
                                KafkaCode::NOT_COORDINATOR
                                    | KafkaCode::COORDINATOR_NOT_AVAILABLE
                                    | KafkaCode::COORDINATOR_LOAD_IN_PROGRESS
                                    | KafkaCode::CONCURRENT_TRANSACTIONS
                                    | KafkaCode::REQUEST_TIMED_OUT
                            )
                        )
                    })
                    .map(|e| e.to_string())
            }) {
                Some(_) => {
                    let e = results
                        .into_iter()
                        .find_map(|(_, r)| r.err())
                        .unwrap_or(WireError::Protocol("no error".to_string()));
                    Err(e)
                }
                None => Ok(results),
            }
        });
        let results = match results {
            Ok(results) => results,
            Err(e) => {
                if let ProduceError::TransactionAbortable { reason } = &e {
                    self.phase = Phase::Abortable(reason.clone());
                }
                return Err(e);
            }
        };
        if let Some((tp, Err(e))) = results.iter().find(|(_, r)| r.is_err()) {
            let fenced = matches!(
                e.kafka_code(),
                Some(KafkaCode::PRODUCER_FENCED | KafkaCode::INVALID_PRODUCER_EPOCH)
            );
            if fenced {
                let error = ProduceError::Fenced {
                    transactional_id: self.link.transactional_id.to_string(),
                    code: e.kafka_code().unwrap_or(KafkaCode::PRODUCER_FENCED),
                };
                self.link.fatal(error.clone());
                return Err(error);
            }
            self.phase = Phase::Abortable(format!("offsets of {tp} refused: {e}"));
        }
        Ok(results)
    }

    fn current_identity(&self) -> Result<ProducerIdentity, ProduceError> {
        self.link
            .identity()
            .ok_or_else(|| self.refuse("a transaction request"))
    }

    /// Whether the open transaction can only abort, and why.
    pub(crate) fn doomed(&self) -> Option<String> {
        if let Phase::Abortable(why) = &self.phase {
            return Some(why.clone());
        }
        self.link.lock().failed.as_ref().map(ToString::to_string)
    }

    /// EndTxn(commit), after the caller flushed every record of the transaction. A record that
    /// failed makes it abortable instead.
    pub(crate) fn commit(&mut self) -> Result<(), ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        match &self.phase {
            Phase::InTransaction => {}
            Phase::Abortable(_) => {
                return Err(ProduceError::TransactionAbortable {
                    reason: self.doomed().unwrap_or_default(),
                })
            }
            _ => return Err(self.refuse("commit_transaction")),
        }
        if let Some(reason) = self.doomed() {
            self.phase = Phase::Abortable(reason.clone());
            return Err(ProduceError::TransactionAbortable { reason });
        }
        self.end(true)
    }

    /// EndTxn(abort), after the caller failed what was not sent and waited for what was on
    /// the wire; then the epoch moves, so every sequence starts again.
    pub(crate) fn abort(&mut self) -> Result<(), ProduceError> {
        if let Some(fatal) = self.fatal_error() {
            return Err(fatal);
        }
        match self.phase {
            Phase::InTransaction | Phase::Abortable(_) => {}
            _ => return Err(self.refuse("abort_transaction")),
        }
        let started = self.link.lock().started;
        self.end(false)?;
        if started && self.link.adds_partitions() {
            // Version 1 keeps the epoch over EndTxn; an aborted batch may have left a gap in a
            // partition's sequence, so the epoch is bumped (KIP-360) and every sequence restarts.
            let current = self.current_identity()?;
            let timeout = self.timeout;
            let bumped = self.retrying("abort_transaction", None, |client, id| {
                client.init_transactional_producer(id, timeout, Some(current))
            })?;
            self.link.lock().identity = Some(bumped);
        }
        Ok(())
    }

    /// The link the sender shares (for the abort's hand-shake).
    pub(crate) fn link(&self) -> &TxnLink {
        &self.link
    }

    fn end(&mut self, commit: bool) -> Result<(), ProduceError> {
        let identity = self.current_identity()?;
        let operation = if commit {
            "commit_transaction"
        } else {
            "abort_transaction"
        };
        let started = self.link.lock().started;
        let version = self.link.version();
        // Nothing reached the coordinator: nothing to end (EndTxn would be refused).
        let bumped = if started {
            self.retrying(operation, None, |client, id| {
                client.end_txn(id, identity, version, commit)
            })?
        } else {
            None
        };
        {
            let mut state = self.link.lock();
            if let Some(bumped) = bumped {
                state.identity = Some(bumped);
            }
            state.added.clear();
            state.failed = None;
            state.started = false;
        }
        self.offsets_added.clear();
        self.phase = Phase::Ready;
        Ok(())
    }

    /// The group metadata view of `metadata`, for the public `send_offsets_to_transaction`.
    pub(crate) fn send_group_offsets(
        &mut self,
        offsets: &[OffsetCommitEntry],
        metadata: &ConsumerGroupMetadata,
    ) -> Result<(), ProduceError> {
        let results = self.send_offsets(&metadata.identity(), offsets)?;
        match results
            .into_iter()
            .find_map(|(tp, r)| r.err().map(|e| (tp, e)))
        {
            None => Ok(()),
            Some((tp, e)) => Err(ProduceError::TransactionAbortable {
                reason: format!("the group refused the offset of {tp}: {e}"),
            }),
        }
    }
}

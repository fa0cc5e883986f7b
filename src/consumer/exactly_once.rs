//! The transactional loop as the application calls it: [`Consumer::with_transactions`] and
//! [`Consumer::run_transactional`] (the story is told in `transactions`, where the one
//! transactional commit is).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::{ConfigError, GroupProtocol};
use crate::group::commit::{commit_entries, commit_outcome};
use crate::group::CommitKind;
use crate::producer::{ProduceError, Producer, ProducerRecord};
use crate::wire::Record;

use super::context::WorkContext;
use super::error::ConsumerError;
use super::pacer::CommitPacer;
use super::poll_loop::Consumer;
use super::retry::{self, Settled};
use super::transactions::{
    lock, rewind_if_aborted, SharedTransactional, TransactionContext, Transactional,
};
use super::workers::{self, Finish};

impl Consumer {
    /// Makes this consumer exactly-once from Kafka to Kafka: its commits travel in `producer`'s
    /// transactions ([`run_transactional`](Self::run_transactional)), and [`close`](Self::close)
    /// commits the last one and closes the producer. Calls `init_transactions`, which fences
    /// any older producer with the same `transactional.id` and aborts what it left open.
    ///
    /// Refused (with [`ConsumerError::Transaction`]): a producer without `transactional.id`; a
    /// `transaction.timeout.ms` longer than the session (`session.timeout.ms`, or
    /// `session.bound.ms` with `group.protocol=consumer` when set), because a frozen member's
    /// open transaction would then hold back its partitions' next owner past the session; a
    /// consumer with an idempotency key, because an aborted transaction's records must be done
    /// again, and the key would refuse them as done.
    pub fn with_transactions(mut self, producer: Producer) -> Result<Self, ConsumerError> {
        let conflict = |name, other, rule: String| {
            ConsumerError::Transaction(ProduceError::Config(ConfigError::Conflict {
                name,
                other,
                rule,
            }))
        };
        if !producer.is_transactional() {
            return Err(ConsumerError::Transaction(ProduceError::Config(
                ConfigError::Missing {
                    name: "transactional.id",
                },
            )));
        }
        if self.key_fn.is_some() {
            return Err(conflict(
                "transactional.id",
                "with_idempotency_key",
                "a transactional consumer redoes the records of an aborted transaction, which \
                 an idempotency key would refuse as done; the transaction already makes each \
                 output visible once"
                    .to_string(),
            ));
        }
        let session = match self.config.group_protocol() {
            GroupProtocol::Classic => Some(self.config.session_timeout()),
            GroupProtocol::Consumer => self.config.session_bound(),
        };
        let timeout = producer.transaction_timeout();
        if let Some(session) = session {
            if timeout > session {
                return Err(conflict(
                    "transaction.timeout.ms",
                    "session.timeout.ms",
                    format!(
                        "transaction.timeout.ms ({} ms) must not exceed the session ({} ms): \
                         a frozen member's open transaction would hold its partitions' next \
                         owner back longer than the group takes to move them",
                        timeout.as_millis(),
                        session.as_millis()
                    ),
                ));
            }
        }
        producer
            .init_transactions()
            .map_err(ConsumerError::Transaction)?;
        // No plain commits any more: every commit travels in a transaction (the batch would
        // otherwise send paced OffsetCommits of progress whose outputs are not committed).
        self.pacer = CommitPacer::new(Duration::MAX);
        self.read_committed();
        let interval = self.config.transaction_interval();
        self.handoffs.transactional =
            Some(Arc::new(Mutex::new(Transactional::new(producer, interval))));
        Ok(self)
    }

    /// Runs poll-transform-produce until `stop` is set or an error occurs, exactly once into
    /// Kafka: each record's outputs ([`TransactionContext::send`]) and its offset commit in one
    /// transaction, every `transaction.interval.ms`, so that a `read_committed` reader sees
    /// every input's outputs once, across crashes and rebalances (the module docs give the
    /// story). Needs [`with_transactions`](Self::with_transactions) first; call
    /// [`close`](Self::close) afterwards, which commits the last transaction.
    ///
    /// Records are read with `read_committed` whatever `isolation.level` says: an input that
    /// is itself a transactional output must not be read before it commits. Retries and
    /// dead-letters are as in [`run`](Self::run); a dead-letter topic is written outside the
    /// transaction, so a record dead-lettered in a transaction that then aborts may be
    /// dead-lettered twice.
    ///
    /// ```no_run
    /// use std::sync::atomic::AtomicBool;
    /// use rebalance_guard::{Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord};
    ///
    /// let producer = Producer::new(
    ///     ProducerConfig::builder()
    ///         .bootstrap_servers(["127.0.0.1:9092"])
    ///         .set("transactional.id", "fills-worker-7")
    ///         .set("transaction.timeout.ms", "10000")
    ///         .build()?,
    /// )?;
    /// let config = ConsumerConfig::builder()
    ///     .bootstrap_servers(["127.0.0.1:9092"])
    ///     .group_id("order-workers")
    ///     .build()?;
    /// let stop = AtomicBool::new(false);
    /// let mut consumer = Consumer::subscribe(config, &["orders"])?.with_transactions(producer)?;
    /// consumer.run_transactional(&stop, |order, tx| {
    ///     let fill = format!("filled {:?}", order.value);
    ///     tx.send(ProducerRecord::new("fills", fill).key(order.key.clone().unwrap_or_default()));
    ///     Ok::<(), std::io::Error>(())
    /// })?;
    /// consumer.close()?; // commits the last transaction, hands the partitions back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_transactional<E>(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Record, &mut TransactionContext<'_>) -> Result<(), E>,
    ) -> Result<(), ConsumerError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let transactional = self.transactional("run_transactional")?;
        let (guard, retries) = (self.guard.clone(), self.retries.clone());
        let mut outputs: Vec<ProducerRecord> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Some(broken) = lock(&transactional).broken() {
                return Err(ConsumerError::Transaction(broken));
            }
            let mut failure = None;
            {
                let mut batch = self.poll(self.fetch.max_wait)?;
                while let Some(delivery) = batch.next() {
                    outputs.clear();
                    let settled = retry::handle(
                        &retries,
                        &guard,
                        &delivery.record,
                        delivery.lease(),
                        || true,
                        |record: &Record, work: &WorkContext<'_>| {
                            let mut context = TransactionContext {
                                work,
                                outputs: &mut outputs,
                            };
                            handler(record, &mut context)
                        },
                    );
                    match settled.unwrap_or(Settled::Release) {
                        Settled::Complete => {
                            if !guard.is_current(delivery.lease()) {
                                // Its partition moved while it ran: its outputs are not sent,
                                // and the record is not counted as finished here.
                                batch.fail(delivery);
                                break;
                            }
                            let sent = lock(&transactional).send_outputs(outputs.drain(..));
                            if let Err(e) = sent {
                                batch.fail(delivery);
                                failure = Some(ConsumerError::Transaction(e));
                                break;
                            }
                            batch.complete(delivery);
                        }
                        Settled::Release => {
                            batch.fail(delivery);
                            break;
                        }
                        Settled::Stop(error) => {
                            batch.fail(delivery);
                            failure = Some(error);
                            break;
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
            if failure.is_none() && lock(&transactional).due(Instant::now()) {
                match self.commit() {
                    Ok(_) | Err(ConsumerError::Commit(_)) => {}
                    Err(other) => return Err(other),
                }
                continue;
            }
            let Some(failure) = failure else {
                continue;
            };
            // Everything before the failed record commits with its outputs.
            match self.commit() {
                Ok(_) | Err(ConsumerError::Commit(_)) => {}
                Err(other) => return Err(other),
            }
            return Err(failure);
        }
        // Stopped: a producer that cannot go on (fenced while the stop came) is still reported.
        let broken = lock(&transactional).broken();
        broken.map_or(Ok(()), |broken| Err(ConsumerError::Transaction(broken)))
    }

    /// [`run_transactional`](Self::run_transactional) in the decoupled mode: `workers` threads
    /// run the handler (as in [`run_with_workers`](Self::run_with_workers), `processing.order`
    /// deciding which records may run at once). A record's outputs go into the open transaction
    /// and the record counts as finished under one lock, which the transaction's commit holds
    /// too, so a commit covers exactly the records whose outputs it makes visible: the
    /// contiguous completed prefix, and what finished beyond it in the completed-offsets map
    /// (`commit.metadata.max.bytes` must not be 0 outside `processing.order=partition`).
    pub fn run_transactional_with_workers<E, H>(
        &mut self,
        stop: &AtomicBool,
        workers: usize,
        queue: usize,
        handler: H,
    ) -> Result<(), ConsumerError>
    where
        H: Fn(&Record, &mut TransactionContext<'_>) -> Result<(), E> + Send + Sync + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let transactional = self.transactional("run_transactional_with_workers")?;
        if self.config.processing_order() != crate::config::ProcessingOrder::Partition
            && self.config.commit_metadata_max_bytes() == 0
        {
            return Err(ConsumerError::Transaction(ProduceError::Config(
                ConfigError::Conflict {
                    name: "commit.metadata.max.bytes",
                    other: "processing.order",
                    rule: "outside processing.order=partition, records finish beyond the \
                           contiguous prefix and their outputs commit in the transaction; \
                           without the completed-offsets map (commit.metadata.max.bytes=0) \
                           the next owner would do them again"
                        .to_string(),
                },
            )));
        }
        let guard = self.guard.clone();
        let finish: Finish = Arc::new(move |lease, outputs| {
            // One lock for the outputs and the completion: the commit takes it too.
            let mut open = lock(&transactional);
            if !guard.is_current(lease) {
                // Its partition moved (or was rewound after an abort) while it ran: nothing
                // of it is sent; it comes again.
                outputs.clear();
                if let Err(e) = guard.release(lease) {
                    log::debug!("not released: {e}");
                }
                return Ok(());
            }
            open.send_outputs(outputs.drain(..))
                .map_err(ConsumerError::Transaction)?;
            if let Err(e) = guard.complete(lease) {
                log::warn!("{e}");
            }
            Ok(())
        });
        let shared = self.transactional("run_transactional_with_workers")?;
        workers::run(
            self,
            stop,
            workers,
            queue,
            move |record: &Record, work: &WorkContext<'_>, outputs: &mut Vec<ProducerRecord>| {
                let mut context = TransactionContext { work, outputs };
                handler(record, &mut context)
            },
            Some(finish),
        )?;
        let broken = lock(&shared).broken();
        broken.map_or(Ok(()), |broken| Err(ConsumerError::Transaction(broken)))
    }

    fn transactional(&self, operation: &'static str) -> Result<SharedTransactional, ConsumerError> {
        self.handoffs.transactional.clone().ok_or_else(|| {
            ConsumerError::Transaction(ProduceError::TransactionState {
                operation,
                state: "without a transactional producer (call with_transactions first)",
            })
        })
    }

    /// The transactional form of [`commit`](Self::commit): the progress of every partition in
    /// hand in the open transaction, then EndTxn; an abort sends the partitions back to the
    /// committed offsets.
    pub(crate) fn commit_transactional(
        &mut self,
        transactional: &SharedTransactional,
    ) -> Result<Vec<crate::guard::CommitOffset>, ConsumerError> {
        let identity = self.member.identity();
        let result = {
            // The lock first: no worker's record finishes (outputs sent, completion counted)
            // between reading the progress and the commit that carries it.
            let mut open = lock(transactional);
            match self.guard.transaction_request(&[]) {
                None => Ok(Vec::new()),
                Some(request) => {
                    let answer = open.commit(
                        &self.guard,
                        &mut *self.member,
                        &identity,
                        &commit_entries(request.offsets()),
                        CommitKind::Application,
                    );
                    let outcome = commit_outcome(request.offsets(), answer);
                    let committed = self.guard.commit_answered(request, &outcome);
                    rewind_if_aborted(
                        &mut open,
                        &self.guard,
                        &mut self.intake,
                        &mut *self.member,
                        &self.config,
                    )?;
                    outcome.map(|()| committed)
                }
            }
        };
        result.map_err(|failure| {
            log::error!(
                "transactional commit in generation {} failed: {failure}",
                identity.generation_id
            );
            ConsumerError::Commit(failure)
        })
    }

    /// Fetches with `read_committed` from now on.
    fn read_committed(&mut self) {
        if self.config.isolation_level() != crate::wire::IsolationLevel::ReadCommitted {
            log::info!("isolation.level=read_committed for the transactional mode");
        }
        self.config.read_committed();
        self.fetch.isolation = crate::wire::IsolationLevel::ReadCommitted;
    }

    /// The close's end of the transactional mode: the last transaction was committed (or
    /// aborted) by the close's handoff; the producer is closed.
    pub(crate) fn close_transactions(&mut self) -> Result<(), ConsumerError> {
        let Some(transactional) = self.handoffs.transactional.take() else {
            return Ok(());
        };
        let owned = match Arc::try_unwrap(transactional) {
            Ok(mutex) => mutex.into_inner().unwrap_or_else(PoisonError::into_inner),
            Err(_) => return Ok(()),
        };
        let mut owned = owned;
        owned.abort("closing with a transaction still open");
        let broken = owned.broken();
        let closed = owned.close();
        // A producer fenced or broken during the run says so at the close too: its last
        // transaction did not commit.
        match (broken, closed) {
            (Some(broken), _) => Err(ConsumerError::Transaction(broken)),
            (None, closed) => closed.map_err(ConsumerError::Transaction),
        }
    }
}

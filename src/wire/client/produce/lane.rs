//! The producer's per-broker lanes: each broker's thread writes the Produce requests the
//! producer's sender hands it, up to `max.in.flight.requests.per.connection` on the wire at once,
//! and reads the answers back in order (the lane machine of `wire::lane`, pipelined).
//!
//! Why the order matters: a broker reads a connection's requests one after the other, so two
//! batches of one partition sent on one connection are appended in the order they were written.
//! With idempotence the leader also checks each batch's sequence, and a retry goes out only after
//! every earlier batch of its partition has answered (the sender's rule), so nothing is reordered
//! even when a request fails in the middle of the pipeline.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{self as msg, produce_request, ApiKey, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::txn::TransactionVersion;
use crate::wire::connection::Pending;
use crate::wire::error::{broker_text, KafkaCode, Result, WireError};
use crate::wire::lane::{Lane, Lanes, Link, Wait};
use crate::wire::{ClientConfig, Nudge};

/// How much longer than `request.timeout.ms` a lane waits for a Produce answer: the leader
/// itself waits up to `request.timeout.ms` for its replicas before it answers.
const PRODUCE_ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// One topic's part of a Produce request: per partition, one stamped batch.
pub(crate) type TopicBatches = (Arc<str>, Vec<(i32, Bytes)>);

/// One Produce request: the batches of several partitions led by one broker.
#[derive(Debug)]
pub(crate) struct ProduceJob {
    /// `acks` as the request carries it (-1, 0, 1).
    pub(crate) acks: i16,
    /// How long the leader may wait for its replicas (`request.timeout.ms`).
    pub(crate) timeout: Duration,
    /// `transactional.id`, inside a transaction.
    pub(crate) transactional_id: Option<Arc<str>>,
    /// The transaction's protocol (with `transactional_id`): it decides the Produce version.
    pub(crate) transaction_version: TransactionVersion,
    /// Per topic, per partition, one stamped batch.
    pub(crate) topics: Vec<TopicBatches>,
}

/// What the leader said of one partition's batch.
#[derive(Clone, Debug)]
pub(crate) struct PartitionAnswer {
    /// The topic.
    pub(crate) topic: Arc<str>,
    /// The partition.
    pub(crate) partition: i32,
    /// The error, if the batch was not written (or was a duplicate, on older brokers).
    pub(crate) error: Option<KafkaCode>,
    /// The broker's message for the error, if it sent one.
    pub(crate) message: Option<String>,
    /// The offset the leader gave the batch's first record (-1 with acks=0 or an error).
    pub(crate) base_offset: i64,
}

/// A Produce request's answer: one entry per partition it carried (none with acks=0).
#[derive(Clone, Debug, Default)]
pub(crate) struct ProduceAnswer {
    /// Per partition.
    pub(crate) partitions: Vec<PartitionAnswer>,
}

/// A job's outcome, as [`ProduceLanes::collect`] returns it.
#[derive(Debug)]
pub(crate) struct ProduceDone {
    /// The id [`ProduceLanes::submit`] returned.
    pub(crate) id: u64,
    /// The broker it went to.
    pub(crate) broker: i32,
    /// The answer, or why there is none (the request may still have been executed).
    pub(crate) result: Result<ProduceAnswer>,
}

/// The lane: writes Produce requests and keeps what it needs to read their answers.
#[derive(Default)]
pub(in crate::wire) struct ProduceLane {
    unanswered: VecDeque<Pending<msg::ProduceRequest>>,
}

impl Lane for ProduceLane {
    type Job = ProduceJob;
    type Answer = ProduceAnswer;
    const NAME: &'static str = "produce";
    const IDLE_WATCH: Option<Duration> = None;

    fn serve(
        &mut self,
        link: &mut Link,
        job: &ProduceJob,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<ProduceAnswer> {
        match self.write(link, job, sent)? {
            Some(answer) => Ok(answer),
            None => self.read(link),
        }
    }

    fn write(
        &mut self,
        link: &mut Link,
        job: &ProduceJob,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<Option<ProduceAnswer>> {
        let request_timeout = link.request_timeout();
        let conn = link.connection()?;
        // A transactional batch of protocol version 1 stays at v11: from v12 the leader adds
        // the partition to the transaction itself (KIP-890's version 2), which only a
        // transaction run under version 2 may ask for (and which it needs: a version-2
        // producer never sends AddPartitionsToTxn).
        let version = if job.transactional_id.is_some() {
            conn.version_within(ApiKey::Produce, job.transaction_version.produce_versions())?
        } else {
            conn.version_for(ApiKey::Produce)?
        };
        let timeout_ms = i32::try_from(job.timeout.as_millis()).unwrap_or(i32::MAX);
        let req = msg::ProduceRequest::default()
            .with_acks(job.acks)
            .with_timeout_ms(timeout_ms)
            .with_transactional_id(
                job.transactional_id
                    .as_ref()
                    .map(|t| msg::TransactionalId(StrBytes::from_string(t.to_string()))),
            )
            .with_topic_data(
                job.topics
                    .iter()
                    .map(|(topic, parts)| {
                        produce_request::TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                            .with_partition_data(
                                parts
                                    .iter()
                                    .map(|(p, batch)| {
                                        produce_request::PartitionProduceData::default()
                                            .with_index(*p)
                                            .with_records(Some(batch.clone()))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let pending = conn.send_request(&req, version)?;
        link.negotiated(version);
        sent(Instant::now(), request_timeout);
        if job.acks == 0 {
            if let Some(conn) = link.current() {
                conn.forget(pending);
            }
            return Ok(Some(ProduceAnswer::default()));
        }
        self.unanswered.push_back(pending);
        Ok(None)
    }

    fn read(&mut self, link: &mut Link) -> Result<ProduceAnswer> {
        let pending = self.unanswered.pop_front().ok_or_else(|| {
            WireError::Protocol("produce lane: an answer read with none owed".to_string())
        })?;
        // The leader may hold the request up to the job's timeout (`request.timeout.ms`, the
        // time it waits for its replicas) and then answers REQUEST_TIMED_OUT: wait that long
        // plus the trip back, so that the answer (a definite "not written") is read rather than
        // given up on one instant before it arrives (which would count the broker as not
        // answering and leave the batch's fate unknown).
        let timeout = link.request_timeout() + PRODUCE_ANSWER_MARGIN;
        let conn = link.current().ok_or_else(|| {
            WireError::io(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "produce lane: the connection closed with answers owed",
            ))
        })?;
        let resp = conn.receive(pending, timeout)?;
        let partitions = resp
            .responses
            .into_iter()
            .flat_map(|t| {
                let topic: Arc<str> = Arc::from(t.name.0.as_str());
                t.partition_responses
                    .into_iter()
                    .map(move |p| PartitionAnswer {
                        topic: Arc::clone(&topic),
                        partition: p.index,
                        error: KafkaCode::from_code(p.error_code),
                        message: p.error_message.map(|m| broker_text(m.as_str())),
                        base_offset: p.base_offset,
                    })
            })
            .collect();
        Ok(ProduceAnswer { partitions })
    }

    fn disconnecting(&mut self) {
        self.unanswered.clear();
    }
}

/// A producer's lanes, one per broker it writes to.
pub(crate) struct ProduceLanes {
    lanes: Lanes<ProduceLane>,
}

impl std::fmt::Debug for ProduceLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.lanes.fmt(f)
    }
}

impl ProduceLanes {
    /// Lanes that connect as `config` says and keep up to `depth` requests on the wire per
    /// broker.
    pub(crate) fn new(config: &ClientConfig, depth: usize) -> Self {
        ProduceLanes {
            lanes: Lanes::new(
                config.connection.clone(),
                config.retry_backoff,
                config.retry_backoff_max,
            )
            .with_depth(depth),
        }
    }

    /// Queues `job` on `broker`'s lane (at `addr`); returns its id.
    pub(crate) fn submit(&mut self, broker: i32, addr: &str, job: ProduceJob) -> Result<u64> {
        self.lanes.submit(broker, addr, job, Duration::ZERO)
    }

    /// What ends a [`collect`](Self::collect) early from another thread (a `send` that filled a
    /// batch, a `flush`, a `close`).
    pub(crate) fn nudge(&self) -> Nudge {
        self.lanes.nudge()
    }

    /// Waits until `until` for the next answers (or a nudge), and returns whatever came.
    pub(crate) fn collect(&mut self, until: Instant) -> Vec<ProduceDone> {
        let wait = Wait {
            jobs: Vec::new(),
            until,
            round: true,
            by_deadline: false,
            linger: true,
            any: false,
        };
        self.lanes
            .collect(&wait)
            .done
            .into_iter()
            .map(|d| ProduceDone {
                id: d.id,
                broker: d.broker,
                result: d.result,
            })
            .collect()
    }
}

//! Every answer of a [`ShareFetcher`]'s requests passes through one place, `absorb`, whichever
//! call collects it (a fetch round, a flush, a renewal, the close), so an answer that arrives
//! late is never lost: its records and outcomes are kept for the next round. Here too what an
//! answer says about leaders (`lead`, which ends the old leader's scope of a partition that
//! moved) and the acknowledgements it makes moot (`drop_reacquired`: those decided for a record
//! the answer acquired again).

use std::collections::BTreeSet;
use std::time::Duration;

use log::{debug, info};

use super::requests::Incoming;
use super::{Purpose, ShareFetcher};
use crate::guard::lease_now;
use crate::wire::error::WireError;
use crate::wire::lane::Done;
use crate::wire::share::answers::{self, Digest, MAX_OWED_PER_SESSION};
use crate::wire::share::session::Verdict;
use crate::wire::share::{AckError, AckType, AcquiredBatch, ShareAck};
use crate::wire::KafkaCode;
use crate::TopicPartition;

impl ShareFetcher {
    /// Takes in the answer (or failure) of a job, which arrived at `done.at` (stamped by the
    /// broker's lane, on the lease clock).
    pub(super) fn absorb(&mut self, done: Done<Incoming>) {
        let Done {
            broker,
            id,
            sent_at,
            at: arrived,
            version,
            result,
        } = done;
        let Some(flight) = self.in_flight.remove(&id) else {
            return;
        };
        if flight.purpose == Purpose::Fetch {
            if let Some(l) = self.sessions.get_mut(&broker) {
                l.fetching = false;
            }
        }
        if let Some(v) = version {
            self.renew_versions.insert(broker, v);
        }
        let sent_at = sent_at.unwrap_or_else(lease_now);
        let digest: Digest = match result {
            Err(e) => {
                debug!("share: request to broker {broker} failed: {e}");
                let unsupported = matches!(e, WireError::UnsupportedVersion { .. });
                if let Some(l) = self.sessions.get_mut(&broker) {
                    if !unsupported {
                        l.session.transport_failed(&flight.req);
                    }
                }
                if !unsupported {
                    self.client.mark_metadata_stale();
                }
                let err = if unsupported {
                    AckError::RenewUnsupported
                } else {
                    AckError::Transport(e.to_string())
                };
                self.stash
                    .ack_results
                    .extend(answers::all_failed(&flight.req, &err));
                if flight.purpose == Purpose::Renew {
                    self.renewed.insert(id, None);
                }
                return;
            }
            Ok(Incoming::Fetch(resp)) => {
                let bytes: usize = resp
                    .responses
                    .iter()
                    .flat_map(|topic| &topic.partitions)
                    .filter_map(|partition| partition.records.as_ref())
                    .map(|records| records.len())
                    .sum();
                self.fetched
                    .count(broker, u64::try_from(bytes).unwrap_or(u64::MAX));
                // What the session's partitions already owe counts against its bound.
                let queued: usize = flight
                    .asked
                    .iter()
                    .filter_map(|tp| self.pending.get(tp))
                    .map(Vec::len)
                    .sum();
                answers::fetch_answer(
                    resp,
                    &flight.req,
                    sent_at,
                    self.client.topic_names(),
                    self.config.fetch_decode_budget,
                    &flight.asked,
                    MAX_OWED_PER_SESSION.saturating_sub(queued),
                )
            }
            Ok(Incoming::Acknowledge(a)) => answers::acknowledge_answer(
                &a.v1,
                a.lock_timeout_ms,
                &flight.req,
                self.client.topic_names(),
            ),
        };
        if flight.purpose != Purpose::Close {
            if let Some(l) = self.sessions.get_mut(&broker) {
                if l.session.answered(&flight.req, digest.top_error) == Verdict::Reset {
                    info!(
                        "share: session with broker {broker} reset ({}); it reopens with the next fetch",
                        digest.top_error.map(KafkaCode::name).unwrap_or_default()
                    );
                }
            }
        }
        if flight.purpose == Purpose::Renew {
            self.renewed.insert(id, digest.lock);
        }
        for (node, host, port) in &digest.endpoints {
            self.client.endpoint_named(*node, host, *port);
        }
        for (tp, leader) in digest.leaders {
            debug!("share: {tp} is led by broker {leader} now");
            self.lead(tp, leader);
        }
        if digest.stale {
            self.client.mark_metadata_stale();
        }
        // Timed-out jobs had their acks taken (reported already): nothing to report twice.
        self.stash.ack_results.extend(digest.acks);
        self.stash.errors.extend(digest.errors);
        self.stash.refused.extend(digest.refused);
        let current = self.sessions.get(&broker).is_some_and(|l| {
            !flight.req.scope.has_ended() && l.session.scope() == &flight.req.scope
        });
        if !current {
            // Records of a session that ended are released at the broker already; the gaps
            // owed for them are moot.
            let dropped: usize = digest.batches.iter().map(|b| b.records.len()).sum();
            if dropped > 0 {
                info!(
                    "share: {dropped} record(s) of an ended session with broker {broker} dropped"
                );
            }
            return;
        }
        // Each partition's records belong to its scope as of the request: one whose leader
        // moved while the request was out has it ended (the old leader released them).
        let scope_of = |tp: &TopicPartition| {
            flight
                .scopes
                .get(tp)
                .filter(|scope| !scope.has_ended())
                .cloned()
        };
        // The answer's lock, for every partition (one with no usable record owes its gaps
        // under it too).
        let lock = digest.lock.unwrap_or(Duration::ZERO);
        let lock_ends_by = arrived.checked_add(lock).unwrap_or(arrived);
        let earliest_end = sent_at.checked_add(lock).unwrap_or(sent_at);
        let mut batches = Vec::with_capacity(digest.batches.len());
        for mut batch in digest.batches {
            let Some(scope) = scope_of(&batch.tp) else {
                info!(
                    "share: {} record(s) of {} dropped: the partition left the session while \
                     the request was out",
                    batch.records.len(),
                    batch.tp
                );
                continue;
            };
            batch.scope = scope;
            batch.lock_ends_by = arrived.checked_add(batch.lock_duration).unwrap_or(arrived);
            batches.push(batch);
        }
        // Acknowledgements still queued for a record acquired again were decided for its
        // earlier acquisition: the broker would apply them to this one.
        for batch in &batches {
            self.drop_reacquired(batch);
        }
        // Owed acknowledgements go first, before anything the caller queued since.
        for (tp, owed) in digest.owed {
            let Some(scope) = scope_of(&tp) else {
                // Released with the partition's scope: nothing to gap or release.
                continue;
            };
            let entry = self.pending.entry(tp.clone()).or_default();
            let mut list: Vec<ShareAck> = owed
                .into_iter()
                .map(|(offset, kind)| ShareAck {
                    tp: tp.clone(),
                    offset,
                    kind,
                    scope: scope.clone(),
                    lock_ends_by,
                    deadline: earliest_end,
                })
                .collect();
            list.append(entry);
            *entry = list;
        }
        self.stash.batches.extend(batches);
    }

    /// `tp` is led by `leader` from now on (an answer's hint), in the client's one leader
    /// cache: a different leader than before releases what the old leader's session acquired
    /// of it, so that partition's scope ends there.
    pub(in crate::wire::share) fn lead(&mut self, tp: TopicPartition, leader: i32) {
        if let Some(old) = self.client.leader_named(&tp, leader) {
            self.moved(&tp, old, leader);
        }
    }

    /// `tp`'s leader went from `old` to `new`: Kafka does not keep acquired records across a
    /// leader change, so the old leader's session's scope of `tp` ends.
    pub(super) fn moved(&mut self, tp: &TopicPartition, old: i32, new: i32) {
        if old != new {
            if let Some(l) = self.sessions.get_mut(&old) {
                l.session.end_partition(tp);
            }
        }
    }

    /// Drops (and reports) the queued acknowledgements of records `batch` acquired again.
    fn drop_reacquired(&mut self, batch: &AcquiredBatch) {
        let Some(list) = self.pending.get_mut(&batch.tp) else {
            return;
        };
        let offsets: BTreeSet<i64> = batch.records.iter().map(|r| r.record.offset).collect();
        let mut stale = Vec::new();
        list.retain(|ack| {
            let again = offsets.contains(&ack.offset) && ack.kind != AckType::Renew;
            if again {
                stale.push(ack.clone());
            }
            !again
        });
        if list.is_empty() {
            self.pending.remove(&batch.tp);
        }
        for ack in stale {
            debug!(
                "share: acknowledgement {:?} of {}@{} dropped: acquired again",
                ack.kind, ack.tp, ack.offset
            );
            self.fail(&ack, AckError::Reacquired);
        }
    }
}

//! [`ShareFetcher`]: what the share consumer's poll thread calls. It routes the assigned
//! partitions to their leaders (ShareFetch names topics by id, so the ids come from Metadata),
//! keeps one [`ShareSession`] per leader, queues acknowledgements until the next request to
//! that leader, and hands the requests to the brokers' share lanes (`requests.rs`, on the
//! request-lane machine of `wire/lane.rs`).
//!
//! Every answer passes through one place (`absorb`, in `absorb.rs`), whichever call collects
//! it, so an answer that arrives late (a fetch left in flight by an earlier call) is never
//! lost: its records and outcomes are kept for the next [`ShareFetcher::fetch`] (or the
//! outcomes for the next [`ShareFetcher::flush_acks`]).
//!
//! Acknowledgements belong to the acquisition they were decided for ([`ShareAck::scope`]):
//! one whose session ended, whose record was acquired again, or whose lock has certainly ended
//! is dropped before any request could carry it, and reported failed with the reason.
//!
//! The map: this file holds the fetcher, its calls and the acknowledgement queue;
//! `absorb.rs` takes in every answer (records, outcomes, leader hints, the acknowledgements an
//! answer makes moot); `requests.rs` turns session requests into ShareFetch and
//! ShareAcknowledge, submits them, and is the share lane that writes them on the broker's
//! thread. Leaders, broker endpoints and topic ids come from the client's one cache
//! (`wire/client/cluster.rs`); `absorb.rs` ends a partition's scope when its leader changes.

mod absorb;
mod requests;

use requests::{ShareLane, SHARE_VERSIONS};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::guard::lease_now;

use kafka_protocol::messages::ApiKey;
use log::{debug, info};

use super::session::{AckQueue, SessionRequest, ShareSession};
use super::{
    AckError, AckResult, AckType, RenewResult, SessionScope, ShareAck, ShareFetchRound,
    ShareFetchSettings,
};
use crate::wire::error::Result;
use crate::wire::lane::{Lanes, Wait};
use crate::wire::{Client, ClientConfig, FetchStats};
use crate::TopicPartition;

/// What a request in flight was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Fetch,
    Acknowledge,
    Renew,
    Close,
}

#[derive(Debug)]
struct InFlight {
    purpose: Purpose,
    req: SessionRequest,
    /// A fetch's session partitions as of the request: an answer may speak of these only.
    asked: BTreeSet<TopicPartition>,
    /// The scope of each of those partitions when the request was built: what the answer
    /// acquires belongs to it (a partition whose leader moved meanwhile has it ended, and the
    /// answer's records of it are dropped, not given a scope that is current).
    scopes: BTreeMap<TopicPartition, SessionScope>,
}

/// One leader's session.
#[derive(Debug, Default)]
struct Leader {
    session: ShareSession,
    /// A ShareFetch of this session is in flight (one at a time).
    fetching: bool,
}

/// The share fetch engine of one member: see the module documentation.
pub struct ShareFetcher {
    client: Client,
    config: ClientConfig,
    group_id: String,
    member_id: String,
    settings: ShareFetchSettings,
    assigned: BTreeSet<TopicPartition>,
    /// Acknowledgements waiting for the next request to their partition's leader.
    pending: AckQueue,
    sessions: BTreeMap<i32, Leader>,
    in_flight: HashMap<u64, InFlight>,
    /// The brokers' lanes (the request-lane machine the consumer's Fetch runs on too).
    lanes: Lanes<ShareLane>,
    /// Answers collected but not handed out yet.
    stash: ShareFetchRound,
    /// The lock durations of answered renewals, by job.
    renewed: HashMap<u64, Option<Duration>>,
    renew_versions: BTreeMap<i32, i16>,
    /// [`close`](Self::close) has ended the sessions: what is queued was checked before.
    closing: bool,
    /// What each broker's ShareFetch answers carried, counted as the consumer's fetcher counts.
    fetched: FetchStats,
}

impl std::fmt::Debug for ShareFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareFetcher")
            .field("group_id", &self.group_id)
            .field("member_id", &self.member_id)
            .field("assigned", &self.assigned.len())
            .field("sessions", &self.sessions.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ShareFetcher {
    /// Connects to the cluster (bootstrap and Metadata) for member `member_id` of share group
    /// `group_id`; nothing is fetched before [`ShareFetcher::assign`].
    pub fn new(
        config: ClientConfig,
        group_id: &str,
        member_id: &str,
        settings: ShareFetchSettings,
    ) -> Result<Self> {
        let mut client = Client::connect(config.clone())?;
        // What the brokers speak, as far as one connection tells before any share request.
        let mut renew_versions = BTreeMap::new();
        if let Some(node) = client.brokers().first().map(|b| b.node_id) {
            if let Ok(conn) = client.connection(node) {
                let v = conn
                    .version_within(ApiKey::ShareAcknowledge, SHARE_VERSIONS)
                    .unwrap_or(0);
                renew_versions.insert(node, v);
            }
        }
        let lanes = Lanes::new(
            config.connection.clone(),
            config.retry_backoff,
            config.retry_backoff_max,
        );
        Ok(ShareFetcher {
            client,
            config,
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            settings,
            assigned: BTreeSet::new(),
            pending: AckQueue::new(),
            sessions: BTreeMap::new(),
            in_flight: HashMap::new(),
            lanes,
            stash: ShareFetchRound::default(),
            renewed: HashMap::new(),
            renew_versions,
            closing: false,
            fetched: FetchStats::default(),
        })
    }

    /// The partitions to fetch from now on (the member's assignment). Partitions that left are
    /// forgotten by their session with the next fetch, after their queued acknowledgements.
    pub fn assign(&mut self, partitions: &BTreeSet<TopicPartition>) {
        if partitions
            .iter()
            .any(|tp| self.client.cached_leader(tp).is_none())
        {
            self.client.mark_metadata_stale();
        }
        self.assigned = partitions.clone();
    }

    /// The group and member this fetcher fetches for.
    pub fn identity(&self) -> (&str, &str) {
        (&self.group_id, &self.member_id)
    }

    /// The partitions fetched.
    pub fn assigned(&self) -> &BTreeSet<TopicPartition> {
        &self.assigned
    }

    /// Queues acknowledgements; each goes with the next ShareFetch (or
    /// [`flush_acks`](Self::flush_acks)) to its partition's leader, unless it is void by then
    /// (see the module notes). A RENEW is refused here (reported failed in the next round):
    /// renewals go through [`renew`](Self::renew). One whose record an answer collected but not
    /// handed out yet acquired again is dropped at once ([`AckError::Reacquired`]): the caller
    /// decided it for an earlier acquisition, since it has not seen that one.
    pub fn acknowledge(&mut self, acks: impl IntoIterator<Item = ShareAck>) {
        for ack in acks {
            if ack.kind == AckType::Renew {
                self.fail(&ack, AckError::RenewUnsupported);
                continue;
            }
            if self.stashed(&ack.tp, ack.offset) {
                debug!(
                    "share: acknowledgement {:?} of {}@{} dropped: acquired again",
                    ack.kind, ack.tp, ack.offset
                );
                self.fail(&ack, AckError::Reacquired);
                continue;
            }
            self.pending.entry(ack.tp.clone()).or_default().push(ack);
        }
    }

    /// Whether an answer collected and not handed out yet acquired `tp`'s record at `offset`.
    fn stashed(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.stash
            .batches
            .iter()
            .filter(|b| &b.tp == tp)
            .any(|b| b.records.iter().any(|r| r.record.offset == offset))
    }

    /// Reports `ack` failed with `error` in the next round.
    fn fail(&mut self, ack: &ShareAck, error: AckError) {
        self.stash.ack_results.push(AckResult {
            tp: ack.tp.clone(),
            acks: vec![(ack.offset, ack.kind)],
            outcome: Err(error),
        });
    }

    /// Why `ack` must not be sent in `session` now, if it must not: its session ended (or is
    /// not this one: the partition moved), or its lock has certainly ended. A RENEW is
    /// exempt: it names no decision, and the guard ignores a renewal sent before the record's
    /// latest acquisition.
    fn void_reason(ack: &ShareAck, session: &SessionScope, now: Instant) -> Option<AckError> {
        if ack.kind == AckType::Renew {
            None
        } else if ack.scope.has_ended() || !ack.scope.is_within(session) {
            Some(AckError::SessionEnded)
        } else if now >= ack.lock_ends_by {
            Some(AckError::LockEnded)
        } else {
            None
        }
    }

    /// The member was fenced (removed from the share group, to rejoin at epoch 0): its share
    /// sessions, and the records they acquired, may be gone (Kafka releases them when a
    /// session ends), so every session's scope ends now, as at a reset (each
    /// session reopens with its next request). Why here and not on the next answer: nothing
    /// the share sessions hear says so, and a lease must not read current while another member
    /// may hold its record.
    pub(crate) fn member_fenced(&mut self) {
        info!(
            "share: member {} fenced: its share sessions' leases end",
            self.member_id
        );
        self.end_sessions();
    }

    /// Ends every session's scope now: every lease they acquired reads not current, and
    /// acknowledgements queued for them from now on are dropped.
    fn end_sessions(&mut self) {
        for leader in self.sessions.values() {
            leader.session.scope().end();
        }
    }

    /// Sets `MaxRecords` for the next requests: the consumer asks for no more records than it
    /// can start before their locks end (each acquired record is a lock ticking).
    pub fn set_max_records(&mut self, max_records: i32) {
        self.settings.max_records = max_records.max(1);
        self.settings.batch_size = self.settings.batch_size.min(self.settings.max_records);
    }

    /// What each broker's ShareFetch answers carried so far (record bytes, answers), in the
    /// consumer's shape.
    pub fn fetch_stats(&self) -> FetchStats {
        self.fetched.clone()
    }

    /// Whether the cluster speaks ShareAcknowledge v2 (RENEW): every broker this fetcher
    /// negotiated with (the first one at [`new`](Self::new), then each leader) does.
    pub fn supports_renew(&self) -> bool {
        !self.renew_versions.is_empty() && self.renew_versions.values().all(|v| *v >= 2)
    }

    /// The waker of [`fetch`](Self::fetch): calling it from any thread ends the current or next
    /// wait for answers early.
    pub fn nudge(&self) -> crate::wire::Nudge {
        self.lanes.nudge()
    }

    /// One round: a ShareFetch to every leader of assigned partitions that has none in flight
    /// (carrying the acknowledgements queued for it), then the answers that arrive within
    /// `max_wait` plus [`FETCH_ANSWER_MARGIN`](crate::wire::FETCH_ANSWER_MARGIN) (plus
    /// [`FETCH_CONNECT_GRACE`](crate::wire::FETCH_CONNECT_GRACE) while nothing has answered and
    /// a request is not even sent), those of the fetches sent ahead
    /// ([`fetch_ahead`](Self::fetch_ahead)) included, by the rule the consumer's fetch lanes
    /// wait by ([`Wait::fetch_round`]); but the round ends as soon as an answer brought
    /// records: a leader with nothing to give holds its fetch for `max_wait`, and the records
    /// another leader gave must not wait for it (its answer comes with a later round). Late
    /// answers stay in flight and come with a later round. Fails only when the cluster's
    /// metadata cannot be read.
    pub fn fetch(&mut self) -> Result<ShareFetchRound> {
        self.refresh_metadata()?;
        let fresh = self.send_fetches();
        let waits = !self.settings.max_wait.is_zero();
        let jobs: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(id, f)| f.purpose == Purpose::Fetch && (waits || fresh.contains(id)))
            .map(|(id, _)| *id)
            .collect();
        let wait = Wait {
            any: true,
            ..Wait::fetch_round(jobs, self.settings.max_wait)
        };
        loop {
            let woken = self.collect(&wait);
            let records = self.stash.batches.iter().any(|b| !b.records.is_empty());
            let open = wait.jobs.iter().any(|id| self.in_flight.contains_key(id));
            if woken || records || !open || Instant::now() >= wait.until {
                break;
            }
        }
        Ok(std::mem::take(&mut self.stash))
    }

    /// The first half of [`fetch`](Self::fetch), without waiting: a ShareFetch to every leader
    /// of assigned partitions that has none in flight, carrying the acknowledgements queued
    /// for it; the answers come with the next `fetch`. Why: the broker acquires the next
    /// records while the caller's handlers run, instead of after them (the consumer's fetch
    /// lanes prefetch the same way). Sends nothing while a leader or topic id is unknown or
    /// the metadata is stale: the next `fetch` reads it first (this call never blocks).
    pub fn fetch_ahead(&mut self) {
        let unknown = self.assigned.iter().any(|tp| {
            self.client.cached_leader(tp).is_none() || self.client.topic_id(&tp.topic).is_none()
        });
        if !unknown && !self.client.metadata_is_stale() {
            self.send_fetches();
        }
    }

    /// A ShareFetch to every leader of assigned partitions (and every leader whose session
    /// still has partitions to forget) that has none in flight, carrying the acknowledgements
    /// queued for it: the jobs sent.
    fn send_fetches(&mut self) -> Vec<u64> {
        let mut wanted: BTreeMap<i32, BTreeSet<TopicPartition>> = BTreeMap::new();
        for tp in &self.assigned {
            match self.client.cached_leader(tp) {
                Some(l) if l >= 0 => {
                    wanted.entry(l).or_default().insert(tp.clone());
                }
                _ => self.client.mark_metadata_stale(),
            }
        }
        // Leaders that lost every partition still forget them (and deliver their acks).
        for (broker, leader) in &self.sessions {
            if !leader.session.members().is_empty() {
                wanted.entry(*broker).or_default();
            }
        }
        let mut fresh = Vec::new();
        for (broker, parts) in wanted {
            if self.sessions.get(&broker).is_some_and(|l| l.fetching) {
                continue;
            }
            let now = lease_now();
            let mut acks = self.take_pending(broker, now);
            let leader = self.sessions.entry(broker).or_default();
            let req = leader.session.fetch(&parts, &mut acks, now);
            let asked = leader.session.members().clone();
            let scopes = asked
                .iter()
                .map(|tp| (tp.clone(), leader.session.partition_scope(tp)))
                .collect();
            self.requeue(acks);
            if req.epoch == 0 && parts.is_empty() {
                continue;
            }
            if let Some(id) = self.submit_fetch(broker, req, asked, scopes) {
                fresh.push(id);
            }
        }
        fresh
    }

    /// Sends the queued acknowledgements now, in a ShareAcknowledge per leader, without waiting
    /// for the answers: returns the outcomes collected so far (their answers' outcomes come
    /// with a later call). Why not wait: the caller is a poll with its own timeout, or `run`
    /// between two records, and a leader that does not answer must hold neither.
    ///
    /// A leader with a ShareFetch in flight gets none: its fetch thread would write the request
    /// only after the fetch's answer, and that answer may have acquired the same record again
    /// for this member (Kafka's acknowledge checks only that the record is acquired by this
    /// member, not which delivery), so the acknowledgement could land on the later delivery.
    /// Those stay queued and ride on the next fetch, once the answer dropped what it acquired
    /// again.
    pub(crate) fn send_acks_now(&mut self) -> Vec<AckResult> {
        self.send_acks(Purpose::Acknowledge, false);
        self.collect(&Wait::until(Vec::new(), Instant::now()));
        std::mem::take(&mut self.stash.ack_results)
    }

    /// Whether acknowledgements wait in the queue (for a leader's next fetch, or for the next
    /// send).
    pub(crate) fn has_queued_acks(&self) -> bool {
        self.pending.values().any(|list| !list.is_empty())
    }

    /// Sends every queued acknowledgement now, as `send_acks_now` (a
    /// leader with a fetch in flight gets its acknowledgements with the next fetch), and waits up
    /// to `timeout` for the outcomes of what was sent. Returns every outcome collected
    /// meanwhile (piggybacked ones included); acknowledgements not answered in time are
    /// reported [`AckError::TimedOut`].
    pub fn flush_acks(&mut self, timeout: Duration) -> Vec<AckResult> {
        let deadline = Instant::now() + timeout;
        let ids = self.send_acks(Purpose::Acknowledge, false);
        self.collect(&Wait::until(ids.clone(), deadline));
        self.time_out(&ids);
        std::mem::take(&mut self.stash.ack_results)
    }

    /// Renews the locks of `records` (RENEW in a ShareAcknowledge v2 per leader) and waits up
    /// to `timeout`. The new locks run from [`RenewResult::sent_at`] for
    /// [`RenewResult::lock_duration`].
    pub fn renew(&mut self, records: &[(TopicPartition, i64)], timeout: Duration) -> RenewResult {
        let deadline = Instant::now() + timeout;
        let sent_at = lease_now();
        let mut renewals = AckQueue::new();
        for (tp, offset) in records {
            renewals.entry(tp.clone()).or_default().push(ShareAck {
                tp: tp.clone(),
                offset: *offset,
                kind: AckType::Renew,
                scope: SessionScope::new(),
                lock_ends_by: deadline,
                deadline,
            });
        }
        // Renewals travel alone: the queued acknowledgements wait for their own request.
        let queued = std::mem::replace(&mut self.pending, renewals);
        let ids = self.send_acks(Purpose::Renew, true);
        let unsent = std::mem::replace(&mut self.pending, queued);
        let mut results: Vec<AckResult> = unsent
            .into_iter()
            .map(|(tp, acks)| AckResult {
                tp,
                acks: acks.iter().map(|a| (a.offset, a.kind)).collect(),
                outcome: Err(AckError::NoSession),
            })
            .collect();
        self.collect(&Wait::until(ids.clone(), deadline));
        self.time_out(&ids);
        let mut lock: Option<Duration> = None;
        for id in &ids {
            if let Some(Some(l)) = self.renewed.remove(id) {
                lock = Some(lock.map_or(l, |m| m.min(l)));
            }
        }
        // The renewals' outcomes are this call's; other outcomes stay for the next round.
        let mut rest = Vec::new();
        for r in std::mem::take(&mut self.stash.ack_results) {
            if r.acks.iter().all(|(_, k)| *k == AckType::Renew) {
                results.push(r);
            } else {
                rest.push(r);
            }
        }
        self.stash.ack_results = rest;
        RenewResult {
            sent_at,
            lock_duration: lock,
            results,
        }
    }

    /// Sends the queued acknowledgements with the closing request (epoch -1) of every open
    /// session, waits up to `timeout`, and returns every outcome not reported yet.
    ///
    /// Every session's scope ends before anything is sent (the queued acknowledgements are
    /// checked first): a delivery the application still holds reads not current from here on,
    /// since the broker releases its record when the close arrives.
    pub fn close(mut self, timeout: Duration) -> Vec<AckResult> {
        let deadline = Instant::now() + timeout;
        let brokers: Vec<i32> = self.sessions.keys().copied().collect();
        let mut vetted = AckQueue::new();
        let now = lease_now();
        for broker in brokers {
            vetted.append(&mut self.take_pending(broker, now));
        }
        self.requeue(vetted);
        self.end_sessions();
        self.closing = true;
        let ids = self.send_acks(Purpose::Close, false);
        self.collect(&Wait::until(ids.clone(), deadline));
        self.time_out(&ids);
        let mut out = std::mem::take(&mut self.stash.ack_results);
        for (tp, acks) in std::mem::take(&mut self.pending) {
            out.push(AckResult {
                tp,
                acks: acks.iter().map(|a| (a.offset, a.kind)).collect(),
                outcome: Err(AckError::NoSession),
            });
        }
        out
    }

    /// The acknowledgements queued for partitions `broker` leads, taken out of the queue; those
    /// that must not be sent in its current session are dropped and reported (unless the
    /// fetcher is closing: they were checked before the close ended the sessions). `now`: the
    /// instant the request that takes them is built.
    fn take_pending(&mut self, broker: i32, now: Instant) -> AckQueue {
        let mine: Vec<TopicPartition> = self
            .pending
            .keys()
            .filter(|tp| self.client.cached_leader(tp) == Some(broker))
            .cloned()
            .collect();
        let mut taken: AckQueue = mine
            .into_iter()
            .filter_map(|tp| self.pending.remove_entry(&tp))
            .collect();
        if self.closing {
            return taken;
        }
        let session = self
            .sessions
            .entry(broker)
            .or_default()
            .session
            .scope()
            .clone();
        let mut void = Vec::new();
        for list in taken.values_mut() {
            list.retain(|ack| match Self::void_reason(ack, &session, now) {
                Some(why) => {
                    void.push((ack.clone(), why));
                    false
                }
                None => true,
            });
        }
        taken.retain(|_, list| !list.is_empty());
        for (ack, why) in void {
            debug!(
                "share: acknowledgement {:?} of {}@{} dropped: {why}",
                ack.kind, ack.tp, ack.offset
            );
            self.fail(&ack, why);
        }
        taken
    }

    fn requeue(&mut self, acks: AckQueue) {
        for (tp, mut list) in acks {
            let entry = self.pending.entry(tp).or_default();
            list.append(entry);
            *entry = list;
        }
    }

    /// A ShareAcknowledge (or the closing one) to every leader with queued acknowledgements
    /// (every open session when closing). Acknowledgements with no leader or no session are
    /// reported failed. Decisions (not renewals, not the close) wait for the next fetch of a
    /// leader with a fetch in flight (see [`send_acks_now`](Self::send_acks_now)); the close
    /// goes behind it: it ends the session, so a delivery its answer acquired is released
    /// whatever the close's acknowledgements do to it, and this member never runs it.
    fn send_acks(&mut self, purpose: Purpose, renew: bool) -> Vec<u64> {
        if self
            .pending
            .keys()
            .any(|tp| self.client.cached_leader(tp).is_none())
        {
            self.client.mark_metadata_stale();
            if let Err(e) = self.refresh_metadata_for(self.pending.keys().cloned().collect()) {
                debug!("share: no metadata for the acknowledgements: {e}");
            }
        }
        let mut ids = Vec::new();
        let mut brokers: BTreeSet<i32> = self
            .pending
            .keys()
            .filter_map(|tp| self.client.cached_leader(tp))
            .filter(|l| *l >= 0)
            .collect();
        if purpose == Purpose::Close {
            brokers.extend(
                self.sessions
                    .iter()
                    .filter(|(_, l)| l.session.is_open())
                    .map(|(b, _)| *b),
            );
        }
        let mut deferred = AckQueue::new();
        for broker in brokers {
            if purpose == Purpose::Acknowledge
                && self.sessions.get(&broker).is_some_and(|l| l.fetching)
            {
                let theirs: Vec<TopicPartition> = self
                    .pending
                    .keys()
                    .filter(|tp| self.client.cached_leader(tp) == Some(broker))
                    .cloned()
                    .collect();
                for tp in theirs {
                    if let Some(list) = self.pending.remove(&tp) {
                        deferred.insert(tp, list);
                    }
                }
                continue;
            }
            let now = lease_now();
            let mut acks = self.take_pending(broker, now);
            let leader = self.sessions.entry(broker).or_default();
            let req = if purpose == Purpose::Close {
                leader.session.close(&mut acks, now)
            } else {
                leader.session.acknowledge(&mut acks, now)
            };
            self.requeue(acks);
            let Some(req) = req else { continue };
            if let Some(id) = self.submit_ack(broker, req, purpose, renew) {
                ids.push(id);
            }
        }
        // What is left has no leader, or no open session with it.
        let left = std::mem::replace(&mut self.pending, deferred);
        for (tp, acks) in left {
            let reason = if self.client.cached_leader(&tp).is_some_and(|l| l >= 0) {
                AckError::NoSession
            } else {
                AckError::NoLeader
            };
            self.stash.ack_results.push(AckResult {
                tp,
                acks: acks.iter().map(|a| (a.offset, a.kind)).collect(),
                outcome: Err(reason),
            });
        }
        ids
    }

    /// Absorbs answers as `wait` says, by the lanes' one rule: until its jobs answered or its
    /// bound passes (a fetch round: the wait plus the margin, with the connect grace while
    /// nothing answered and a job is unsent; the nudge ends it).
    fn collect(&mut self, wait: &Wait) -> bool {
        let collected = self.lanes.collect(wait);
        for done in collected.done {
            self.absorb(done);
        }
        collected.woken
    }

    /// Reports the acknowledgements of `ids` still unanswered as timed out (their answers,
    /// when they come, update the session but are not reported again).
    fn time_out(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(f) = self.in_flight.get_mut(id) {
                let req = std::mem::take(&mut f.req.acks);
                for (tp, acks) in req {
                    self.stash.ack_results.push(AckResult {
                        tp,
                        acks,
                        outcome: Err(AckError::TimedOut),
                    });
                }
            }
        }
    }

    /// Metadata for the assigned topics when a leader or topic id is missing or a broker said
    /// the cache is stale: leaders, broker endpoints and topic ids, into the client's caches.
    fn refresh_metadata(&mut self) -> Result<()> {
        let missing = self.assigned.iter().any(|tp| {
            self.client.cached_leader(tp).is_none() || self.client.topic_id(&tp.topic).is_none()
        });
        if !self.client.metadata_is_stale() && !missing {
            return Ok(());
        }
        self.refresh_metadata_for(self.assigned.clone())
    }

    /// Metadata for the topics of `partitions` (Metadata v10+, for the topic ids); every
    /// partition the sessions, the assignment or the queue name whose leader changed has its
    /// old leader's scope ended.
    fn refresh_metadata_for(&mut self, partitions: BTreeSet<TopicPartition>) -> Result<()> {
        let topics: BTreeSet<String> = partitions.iter().map(|tp| tp.topic.to_string()).collect();
        if topics.is_empty() {
            return Ok(());
        }
        let watched: BTreeSet<TopicPartition> = self
            .sessions
            .values()
            .flat_map(|l| l.session.members().iter().cloned())
            .chain(self.assigned.iter().cloned())
            .chain(self.pending.keys().cloned())
            .chain(partitions)
            .collect();
        let before: Vec<(TopicPartition, i32)> = watched
            .into_iter()
            .filter_map(|tp| self.client.cached_leader(&tp).map(|l| (tp, l)))
            .collect();
        let topics: Vec<String> = topics.into_iter().collect();
        self.client.refresh_topic_ids(&topics)?;
        for (tp, old) in before {
            // A partition the answer left out keeps its leader, as a hint does.
            if let Some(new) = self.client.cached_leader(&tp) {
                self.moved(&tp, old, new);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::{KafkaCode, FETCH_ANSWER_MARGIN};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    use std::thread;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::{metadata_response as md, share_fetch_response as sf};
    use kafka_protocol::messages::{BrokerId, RequestHeader};
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;
    use crate::wire::records::tests::batches;
    use kafka_protocol::messages::{self as msg, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use std::sync::Arc;
    use uuid::Uuid;

    const TOPIC_ID: Uuid = Uuid::from_u128(0x5eed);

    /// How a fake broker answers ShareFetch.
    #[derive(Clone, Copy, PartialEq)]
    enum Fake {
        /// Records 0..=2 of every partition it leads, acquired, each time.
        Serving,
        /// Never (a stopped broker whose connection stays open).
        Silent,
        /// Closes the connection instead of answering the second ShareFetch.
        DropsTheSecond,
        /// Answers NOT_LEADER_OR_FOLLOWER naming broker 2 as the leader, with its endpoint.
        Moved,
        /// As `Serving`, but answers the second ShareFetch only after [`SLOW`], acquiring the
        /// same records again (delivery 2).
        SlowSecond,
        /// As `Serving`, but never answers a ShareAcknowledge (the connection stays open).
        AckSilent,
        /// Acquires 0..=2 of every partition it leads with no record data: every offset is owed
        /// a GAP.
        Gaps,
        /// Has nothing to acquire: holds every ShareFetch for its `MaxWaitMs`, then answers
        /// with no records, as Kafka does for a partition with nothing available.
        Idle,
    }

    /// How long [`Fake::SlowSecond`] holds its second answer.
    const SLOW: Duration = Duration::from_millis(700);

    /// The epochs of the ShareFetch requests each fake broker saw.
    type Seen = Arc<Mutex<Vec<(i32, i32)>>>;

    /// The acknowledgements each ShareFetch (78) or ShareAcknowledge (79) carried, in the order
    /// they were read: (api key, epoch, (offset, type) list).
    type Carried = Arc<Mutex<Vec<(i16, i32, Vec<(i64, i8)>)>>>;

    /// Two fake brokers: 1 leads t-0, 2 leads t-1.
    fn cluster(behaviour: [Fake; 2]) -> (Vec<String>, Seen) {
        let (addrs, seen, _) = recording_cluster(behaviour);
        (addrs, seen)
    }

    /// [`cluster`], also recording the acknowledgements every request carried.
    fn recording_cluster(behaviour: [Fake; 2]) -> (Vec<String>, Seen, Carried) {
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr").to_string())
            .collect();
        let seen: Seen = Arc::default();
        let carried: Carried = Arc::default();
        for (i, listener) in listeners.into_iter().enumerate() {
            let (addrs, seen, carried) = (addrs.clone(), Arc::clone(&seen), Arc::clone(&carried));
            let fake = behaviour[i];
            thread::spawn(move || {
                let fetches = Arc::new(AtomicU32::new(0));
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { return };
                    let (addrs, seen, carried, fetches) = (
                        addrs.clone(),
                        Arc::clone(&seen),
                        Arc::clone(&carried),
                        Arc::clone(&fetches),
                    );
                    let node = i as i32 + 1;
                    thread::spawn(move || {
                        serve(conn, node, fake, &addrs, (&seen, &carried), &fetches)
                    });
                }
            });
        }
        (addrs, seen, carried)
    }

    fn serve(
        mut s: TcpStream,
        node: i32,
        fake: Fake,
        addrs: &[String],
        (seen, carried): (&Seen, &Carried),
        fetches: &AtomicU32,
    ) {
        loop {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).is_err() {
                return;
            }
            let mut req = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
            if s.read_exact(&mut req).is_err() || req.len() < 8 {
                return;
            }
            let key = i16::from_be_bytes([req[0], req[1]]);
            let version = i16::from_be_bytes([req[2], req[3]]);
            let mut out = BytesMut::new();
            out.put_slice(&req[4..8]);
            match key {
                18 => {
                    out.put_i16(if version > 0 { 35 } else { 0 });
                    out.put_i32(4);
                    for (k, lo, hi) in [(18i16, 0i16, 0i16), (3, 12, 12), (78, 1, 1), (79, 1, 1)] {
                        out.put_i16(k);
                        out.put_i16(lo);
                        out.put_i16(hi);
                    }
                }
                3 => {
                    out.put_u8(0);
                    let brokers = addrs
                        .iter()
                        .enumerate()
                        .map(|(i, a)| {
                            let (host, port) = a.rsplit_once(':').expect("host:port");
                            md::MetadataResponseBroker::default()
                                .with_node_id(BrokerId(i as i32 + 1))
                                .with_host(StrBytes::from_string(host.to_string()))
                                .with_port(port.parse().expect("port"))
                        })
                        .collect();
                    let partitions = (0..2)
                        .map(|p| {
                            md::MetadataResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_id(BrokerId(p + 1))
                        })
                        .collect();
                    msg::MetadataResponse::default()
                        .with_brokers(brokers)
                        .with_topics(vec![md::MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                            .with_topic_id(TOPIC_ID)
                            .with_partitions(partitions)])
                        .encode(&mut out, 12)
                        .expect("metadata");
                }
                78 => {
                    let nth = fetches.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut body = Bytes::from(req);
                    let _ = RequestHeader::decode(&mut body, 2).expect("header");
                    let fetch = msg::ShareFetchRequest::decode(&mut body, 1).expect("request");
                    seen.lock()
                        .expect("seen")
                        .push((node, fetch.share_session_epoch));
                    let acks: Vec<(i64, i8)> = fetch
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .flat_map(|p| &p.acknowledgement_batches)
                        .flat_map(|b| {
                            (b.first_offset..=b.last_offset).enumerate().map(|(i, o)| {
                                let t = b.acknowledge_types.get(i).or(b.acknowledge_types.first());
                                (o, t.copied().unwrap_or(-1))
                            })
                        })
                        .collect();
                    carried
                        .lock()
                        .expect("carried")
                        .push((78, fetch.share_session_epoch, acks));
                    match fake {
                        Fake::Silent => {
                            thread::sleep(Duration::from_secs(30));
                            return;
                        }
                        Fake::Idle => {
                            let wait = u64::try_from(fetch.max_wait_ms).unwrap_or(0);
                            thread::sleep(Duration::from_millis(wait));
                        }
                        Fake::DropsTheSecond if nth == 2 => return,
                        Fake::SlowSecond if nth == 2 => thread::sleep(SLOW),
                        _ => {}
                    }
                    let delivery = if fake == Fake::SlowSecond && nth >= 2 {
                        2
                    } else {
                        1
                    };
                    out.put_u8(0);
                    let mut asked: Vec<i32> = fetch
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                        .collect();
                    if asked.is_empty() {
                        asked.push(node - 1);
                    }
                    let partitions = asked
                        .into_iter()
                        .map(|p| {
                            let data = sf::PartitionData::default().with_partition_index(p);
                            if fake == Fake::Moved {
                                return data.with_error_code(6).with_current_leader(
                                    sf::LeaderIdAndEpoch::default()
                                        .with_leader_id(2)
                                        .with_leader_epoch(1),
                                );
                            }
                            if fake == Fake::Idle {
                                return data;
                            }
                            let records = if fake == Fake::Gaps {
                                None
                            } else {
                                Some(batches(&[(0, 2)]))
                            };
                            data.with_records(records).with_acquired_records(vec![
                                sf::AcquiredRecords::default()
                                    .with_first_offset(0)
                                    .with_last_offset(2)
                                    .with_delivery_count(delivery),
                            ])
                        })
                        .collect();
                    let (host, port) = addrs[1].rsplit_once(':').expect("host:port");
                    let endpoints = if fake == Fake::Moved {
                        vec![sf::NodeEndpoint::default()
                            .with_node_id(BrokerId(2))
                            .with_host(StrBytes::from_string(host.to_string()))
                            .with_port(port.parse().expect("port"))]
                    } else {
                        Vec::new()
                    };
                    msg::ShareFetchResponse::default()
                        .with_acquisition_lock_timeout_ms(1000)
                        .with_responses(vec![sf::ShareFetchableTopicResponse::default()
                            .with_topic_id(TOPIC_ID)
                            .with_partitions(partitions)])
                        .with_node_endpoints(endpoints)
                        .encode(&mut out, 1)
                        .expect("share fetch");
                }
                79 => {
                    let mut body = Bytes::from(req);
                    let _ = RequestHeader::decode(&mut body, 2).expect("header");
                    let ack = msg::ShareAcknowledgeRequest::decode(&mut body, 1).expect("request");
                    let acks: Vec<(i64, i8)> = ack
                        .topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .flat_map(|p| &p.acknowledgement_batches)
                        .flat_map(|b| {
                            (b.first_offset..=b.last_offset).enumerate().map(|(i, o)| {
                                let t = b.acknowledge_types.get(i).or(b.acknowledge_types.first());
                                (o, t.copied().unwrap_or(-1))
                            })
                        })
                        .collect();
                    carried
                        .lock()
                        .expect("carried")
                        .push((79, ack.share_session_epoch, acks));
                    if fake == Fake::AckSilent {
                        thread::sleep(Duration::from_secs(30));
                        return;
                    }
                    out.put_u8(0);
                    let topics = ack
                        .topics
                        .iter()
                        .map(|t| {
                            msg::share_acknowledge_response::ShareAcknowledgeTopicResponse::default(
                            )
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        msg::share_acknowledge_response::PartitionData::default()
                                            .with_partition_index(p.partition_index)
                                    })
                                    .collect(),
                            )
                        })
                        .collect();
                    msg::ShareAcknowledgeResponse::default()
                        .with_responses(topics)
                        .encode(&mut out, 1)
                        .expect("share acknowledge");
                }
                _ => return,
            }
            let mut frame = (out.len() as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&out);
            if s.write_all(&frame).is_err() {
                return;
            }
        }
    }

    fn fetcher(addrs: &[String], partitions: &[i32]) -> ShareFetcher {
        fetcher_waiting(addrs, partitions, Duration::from_millis(100))
    }

    /// A fetcher of `partitions` whose ShareFetch may wait `max_wait` at the broker.
    fn fetcher_waiting(addrs: &[String], partitions: &[i32], max_wait: Duration) -> ShareFetcher {
        let mut config = ClientConfig::new([addrs[0].clone()]);
        config.connection.request_timeout = Duration::from_secs(20);
        let settings = ShareFetchSettings {
            max_wait,
            ..ShareFetchSettings::default()
        };
        let mut f = ShareFetcher::new(config, "g", "m", settings).expect("fetcher");
        f.assign(
            &partitions
                .iter()
                .map(|p| TopicPartition::new("t", *p))
                .collect(),
        );
        f
    }

    /// The share fetcher counts each broker's answers and record bytes as the consumer's
    /// fetcher does: a silent broker has none.
    #[test]
    fn fetch_stats_count_each_brokers_answers_and_bytes() {
        let (addrs, _seen) = cluster([Fake::Serving, Fake::Silent]);
        let mut f = fetcher(&addrs, &[0, 1]);
        for _ in 0..2 {
            let got = f.fetch().expect("fetch");
            assert_eq!(got.batches.len(), 1, "{got:?}");
        }
        let stats = f.fetch_stats();
        let serving = stats.brokers.get(&1).copied().unwrap_or_default();
        assert_eq!(serving.answers, 2, "{stats:?}");
        assert!(serving.bytes > 0, "{stats:?}");
        assert_eq!(stats.bytes_from(2), 0, "{stats:?}");
    }

    #[test]
    fn a_hung_leader_holds_only_its_own_partitions() {
        let (addrs, seen) = cluster([Fake::Serving, Fake::Silent]);
        let mut f = fetcher(&addrs, &[0, 1]);
        let bound = Duration::from_millis(100) + FETCH_ANSWER_MARGIN + Duration::from_millis(400);
        for round in 0..4 {
            let started = Instant::now();
            let got = f.fetch().expect("fetch");
            let took = started.elapsed();
            assert!(took < bound, "round {round} took {took:?}");
            assert_eq!(got.batches.len(), 1, "round {round}: {got:?}");
            let b = &got.batches[0];
            assert_eq!(b.tp, TopicPartition::new("t", 0));
            assert_eq!(b.records.len(), 3);
            assert!(b.sent_at >= started);
            assert_eq!(b.lock_duration, Duration::from_secs(1));
        }
        // The rounds ended with the serving leader's answers: the hung one may read its one
        // request only now.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !seen.lock().expect("seen").iter().any(|s| s.0 == 2) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let seen = seen.lock().expect("seen").clone();
        let epochs: Vec<i32> = seen.iter().filter(|s| s.0 == 1).map(|s| s.1).collect();
        assert_eq!(epochs, vec![0, 1, 2, 3]);
        assert_eq!(
            seen.iter().filter(|s| s.0 == 2).count(),
            1,
            "one request left in flight"
        );
    }

    /// A leader with nothing to give holds its fetch for the whole `MaxWaitMs`: the records
    /// another leader gave are handed over at once, not after that wait, and the next round
    /// fetches from the leader that gave records again while the idle one's fetch is still
    /// out (its answer comes with a later round).
    #[test]
    fn a_leader_with_nothing_to_give_does_not_hold_the_records_of_another() {
        let (addrs, seen) = cluster([Fake::Serving, Fake::Idle]);
        let mut f = fetcher_waiting(&addrs, &[0, 1], Duration::from_secs(3));
        let first = f.fetch().expect("fetch");
        assert_eq!(first.batches.len(), 1, "{first:?}");
        let idle_asked = || {
            seen.lock()
                .expect("seen")
                .iter()
                .filter(|s| s.0 == 2)
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while idle_asked() == 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(idle_asked(), 1, "the idle leader got its fetch");
        let started = Instant::now();
        for round in 0..3 {
            let got = f.fetch().expect("fetch");
            assert_eq!(got.batches.len(), 1, "round {round}: {got:?}");
            assert_eq!(got.batches[0].tp, TopicPartition::new("t", 0));
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "three rounds from the serving leader took {took:?}: they waited for the idle one"
        );
        let from_serving = seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| s.0 == 1)
            .count();
        assert_eq!(from_serving, 4);
        assert_eq!(idle_asked(), 1, "the idle leader's one fetch stays out");
    }

    #[test]
    fn a_broken_connection_fails_its_acks_and_reopens_the_session() {
        let (addrs, seen, carried) = recording_cluster([Fake::DropsTheSecond, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let first = f.fetch().expect("fetch");
        assert_eq!(first.batches.len(), 1);
        let held = &first.batches[0];
        assert!(!held.scope.has_ended());
        f.acknowledge([held.ack(0, AckType::Accept)]);
        let second = f.fetch().expect("fetch");
        // The fetch thread ended the session before it dropped the connection: the leases of
        // what it acquired read not current from then on.
        assert!(
            held.scope.has_ended(),
            "the session outlived its connection"
        );
        assert_eq!(second.ack_results.len(), 1, "{second:?}");
        assert_eq!(second.ack_results[0].acks, vec![(0, AckType::Accept)]);
        assert!(
            matches!(second.ack_results[0].outcome, Err(AckError::Transport(_))),
            "{second:?}"
        );
        let mut third = f.fetch().expect("fetch");
        for _ in 0..5 {
            if !third.batches.is_empty() {
                break;
            }
            third = f.fetch().expect("fetch");
        }
        assert_eq!(third.batches.len(), 1, "{third:?}");
        assert!(third.ack_results.is_empty(), "the failed ack is not resent");
        let again = &third.batches[0];
        assert!(!again.scope.has_ended() && !again.scope.is_within(&held.scope));
        // A handler of the first acquisition finishes only now: its RELEASE of offset 1 was
        // decided for a session that ended, and the broker would apply it to offset 1 as
        // acquired again (delivery 2, which this member runs under a current lease).
        f.acknowledge([held.ack(1, AckType::Release)]);
        let fourth = f.fetch().expect("fetch");
        let outcomes: Vec<_> = fourth
            .ack_results
            .iter()
            .map(|r| (r.acks.clone(), r.outcome.clone()))
            .collect();
        assert_eq!(
            outcomes,
            vec![(vec![(1, AckType::Release)], Err(AckError::SessionEnded))],
            "dropped, never sent"
        );
        let epochs: Vec<i32> = seen.lock().expect("seen").iter().map(|s| s.1).collect();
        assert_eq!(epochs, vec![0, 1, 0, 1]);
        let carried = carried.lock().expect("carried").clone();
        assert_eq!(
            carried[1],
            (78, 1, vec![(0, 1)]),
            "the ACCEPT went out before the break"
        );
        assert_eq!(
            carried[3],
            (78, 1, vec![]),
            "the next request carries no acknowledgement: {carried:?}"
        );
    }

    #[test]
    fn a_partition_whose_leader_moved_goes_to_the_new_leaders_session() {
        let (addrs, seen) = cluster([Fake::Moved, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let tp = TopicPartition::new("t", 0);
        let first = f.fetch().expect("fetch");
        assert_eq!(
            first.errors,
            vec![(tp.clone(), KafkaCode::NOT_LEADER_OR_FOLLOWER)]
        );
        let mut batches = Vec::new();
        for _ in 0..5 {
            batches = f.fetch().expect("fetch").batches;
            if !batches.is_empty() {
                break;
            }
        }
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].tp, tp);
        // The round ended with broker 2's records: broker 1 may read its request later.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !seen.lock().expect("seen").contains(&(1, 1)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let seen = seen.lock().expect("seen").clone();
        // Broker 2 opened a session for t-0; broker 1's session forgets it.
        assert!(seen.contains(&(2, 0)), "{seen:?}");
        assert_eq!(seen.first(), Some(&(1, 0)));
        assert!(seen.contains(&(1, 1)), "the forgetting request: {seen:?}");
    }

    #[test]
    fn renew_and_acknowledge_refuse_what_they_cannot_send() {
        let (addrs, _seen) = cluster([Fake::Serving, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let tp = TopicPartition::new("t", 0);
        let scoped = |offset, kind| ShareAck {
            tp: tp.clone(),
            offset,
            kind,
            scope: SessionScope::new(),
            lock_ends_by: Instant::now() + Duration::from_secs(60),
            deadline: Instant::now() + Duration::from_secs(60),
        };
        f.acknowledge([scoped(1, AckType::Renew)]);
        // No session yet (and a scope of none of ours): a flush cannot send.
        f.acknowledge([scoped(2, AckType::Accept)]);
        let flushed = f.flush_acks(Duration::from_secs(1));
        let outcomes: Vec<_> = flushed.iter().map(|r| r.outcome.clone()).collect();
        assert_eq!(
            outcomes,
            vec![Err(AckError::RenewUnsupported), Err(AckError::SessionEnded)]
        );
        let _ = f.fetch().expect("fetch");
        assert!(
            !f.supports_renew(),
            "the fake speaks ShareAcknowledge v1 only"
        );
        let renewed = f.renew(&[(tp, 0)], Duration::from_secs(5));
        assert_eq!(renewed.lock_duration, None);
        assert_eq!(renewed.results.len(), 1);
        assert_eq!(renewed.results[0].outcome, Err(AckError::RenewUnsupported));
    }

    /// The one fetch job in flight, if any.
    fn fetch_in_flight(f: &ShareFetcher) -> Option<u64> {
        f.in_flight
            .iter()
            .find(|(_, job)| job.purpose == Purpose::Fetch)
            .map(|(id, _)| *id)
    }

    /// The acknowledgements of `carried` that went in ShareAcknowledge requests.
    fn acknowledged(carried: &Carried) -> Vec<(i32, Vec<(i64, i8)>)> {
        carried
            .lock()
            .expect("carried")
            .iter()
            .filter(|c| c.0 == 79)
            .map(|c| (c.1, c.2.clone()))
            .collect()
    }

    #[test]
    fn an_acknowledgement_is_never_queued_behind_a_fetch_of_its_leader_that_may_acquire_its_record_again(
    ) {
        let (addrs, _seen, carried) = recording_cluster([Fake::SlowSecond, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let first = f.fetch().expect("fetch");
        assert_eq!(first.batches.len(), 1, "{first:?}");
        let held = first.batches[0].clone();
        // The second fetch is held past the round: it stays in flight.
        let second = f.fetch().expect("fetch");
        assert!(second.batches.is_empty(), "{second:?}");
        assert!(fetch_in_flight(&f).is_some(), "the second fetch is out");
        // A handler of delivery 1 finishes now; its RELEASE must not follow the fetch whose
        // answer acquires the record again (delivery 2) for this member.
        f.acknowledge([held.ack(0, AckType::Release)]);
        let mut outcomes = f.flush_acks(Duration::from_secs(3));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut again = Vec::new();
        while again.is_empty() && Instant::now() < deadline {
            let round = f.fetch().expect("fetch");
            outcomes.extend(round.ack_results);
            again.extend(round.batches);
        }
        assert_eq!(
            acknowledged(&carried),
            vec![],
            "no ShareAcknowledge went behind the fetch"
        );
        assert!(!again.is_empty(), "delivery 2 came");
        assert_eq!(again[0].records[0].delivery_count, 2);
        let carried_by_fetches: Vec<(i64, i8)> = carried
            .lock()
            .expect("carried")
            .iter()
            .flat_map(|c| c.2.clone())
            .collect();
        assert_eq!(carried_by_fetches, vec![], "nor rode on a later fetch");
        assert_eq!(
            outcomes
                .iter()
                .map(|r| (r.acks.clone(), r.outcome.clone()))
                .collect::<Vec<_>>(),
            vec![(vec![(0, AckType::Release)], Err(AckError::Reacquired))]
        );
    }

    #[test]
    fn an_answer_absorbed_late_keeps_its_arrival_and_voids_acks_decided_for_what_it_acquired_again()
    {
        let (addrs, _seen, carried) = recording_cluster([Fake::SlowSecond, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let first = f.fetch().expect("fetch");
        let held = first.batches[0].clone();
        let _ = f.fetch().expect("fetch");
        let id = fetch_in_flight(&f).expect("the second fetch is out");
        let sent = f
            .in_flight
            .get(&id)
            .and(f.lanes.flight(id))
            .and_then(|flight| flight.sent_at)
            .expect("sent");
        // The answer arrives about SLOW after the send; the poll thread gets to it much later
        // (a long handler, a slow flush).
        let absorb_at = sent + SLOW * 3;
        while lease_now() < absorb_at {
            thread::sleep(absorb_at.saturating_duration_since(lease_now()));
        }
        let absorbed = lease_now();
        f.collect(&Wait::until(vec![id], absorbed + Duration::from_secs(5)));
        assert_eq!(f.stash.batches.len(), 1, "delivery 2 is stashed");
        let lock = f.stash.batches[0].lock_duration;
        let ends = f.stash.batches[0].lock_ends_by;
        assert!(
            ends + SLOW <= absorbed + lock,
            "the lock's certain end is counted from the arrival, not the absorb: ends {:?} after \
             the absorb",
            ends.saturating_duration_since(absorbed)
        );
        // A decision for delivery 1 made before the stash is handed over, while this member's
        // estimate of its lock's certain end (counted from an arrival, later than the broker's
        // start) has not passed: the broker's own lock ended earlier, which is how it could
        // deliver the record again.
        let mut decided = held.ack(1, AckType::Accept);
        decided.lock_ends_by = lease_now() + Duration::from_secs(60);
        f.acknowledge([decided]);
        let round = f.fetch().expect("fetch");
        assert!(!round.batches.is_empty());
        assert_eq!(
            round
                .ack_results
                .iter()
                .map(|r| (r.acks.clone(), r.outcome.clone()))
                .collect::<Vec<_>>(),
            vec![(vec![(1, AckType::Accept)], Err(AckError::Reacquired))]
        );
        let _ = f.fetch().expect("fetch");
        let sent_acks: Vec<(i64, i8)> = carried
            .lock()
            .expect("carried")
            .iter()
            .flat_map(|c| c.2.clone())
            .collect();
        assert_eq!(sent_acks, vec![], "the ACCEPT of delivery 1 never went out");
    }

    #[test]
    fn records_an_answer_acquired_after_the_partition_left_the_session_get_no_current_lease() {
        let (addrs, _seen) = cluster([Fake::SlowSecond, Fake::Silent]);
        let mut f = fetcher(&addrs, &[0]);
        let tp = TopicPartition::new("t", 0);
        assert_eq!(f.fetch().expect("fetch").batches.len(), 1);
        let _ = f.fetch().expect("fetch");
        assert!(fetch_in_flight(&f).is_some(), "the second fetch is out");
        // A metadata refresh moves t-0 to broker 2 while broker 1's fetch is out.
        f.lead(tp.clone(), 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while f.sessions.get(&1).is_some_and(|l| l.fetching) && Instant::now() < deadline {
            got.extend(f.fetch().expect("fetch").batches);
        }
        assert!(!f.sessions[&1].fetching, "broker 1 answered");
        assert!(
            got.iter().all(|b| b.scope.has_ended()),
            "records broker 1 gave up were handed out under a current scope: {got:?}"
        );
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn gaps_owed_for_a_partition_without_a_usable_record_are_sent_under_the_answers_lock() {
        let (addrs, _seen, carried) = recording_cluster([Fake::Gaps, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let first = f.fetch().expect("fetch");
        assert!(first.batches.is_empty(), "{first:?}");
        // Nothing was decoded, so every acquired offset is owed a RELEASE, under the lock the
        // answer gave (no batch of the partition carries it).
        let second = f.fetch().expect("fetch");
        assert_eq!(
            second
                .ack_results
                .iter()
                .map(|r| (r.acks.clone(), r.outcome.clone()))
                .collect::<Vec<_>>(),
            vec![(
                vec![
                    (0, AckType::Release),
                    (1, AckType::Release),
                    (2, AckType::Release)
                ],
                Ok(())
            )],
            "sent and answered, not dropped as LockEnded"
        );
        let carried = carried.lock().expect("carried").clone();
        assert_eq!(
            carried[1],
            (78, 1, vec![(0, 2), (1, 2), (2, 2)]),
            "the owed acknowledgements ride on the next fetch: {carried:?}"
        );
    }

    #[test]
    fn an_ack_decided_inside_its_lease_that_waits_past_the_deadline_travels_apart_from_fresh_ones()
    {
        let (addrs, _seen, carried) = recording_cluster([Fake::Serving, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let held = f.fetch().expect("fetch").batches.remove(0);
        // Offset 0 was decided inside its lease, whose deadline passes before the request is
        // built; offset 1 has a lease that is still running then.
        let mut waited = held.ack(0, AckType::Accept);
        waited.deadline = lease_now() + Duration::from_millis(50);
        let mut fresh = held.ack(1, AckType::Accept);
        fresh.deadline = lease_now() + Duration::from_secs(60);
        f.acknowledge([waited.clone(), fresh]);
        while lease_now() < waited.deadline {
            thread::sleep(waited.deadline.saturating_duration_since(lease_now()));
        }
        let round = f.fetch().expect("fetch");
        let carried = carried.lock().expect("carried").clone();
        assert_eq!(
            carried[1].2,
            vec![(1, 1)],
            "the late ACCEPT stays out of the fresh one's batch: {carried:?}"
        );
        // The fake acquires the same records each time, so the late one, left for a request of
        // its own, was then decided for an earlier acquisition: dropped, never sent.
        assert!(
            round
                .ack_results
                .iter()
                .any(|r| r.acks == vec![(0, AckType::Accept)]
                    && r.outcome == Err(AckError::Reacquired)),
            "{round:?}"
        );
    }

    #[test]
    fn sending_acknowledgements_does_not_wait_for_a_leader_that_never_answers_them() {
        let (addrs, _seen, carried) = recording_cluster([Fake::AckSilent, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0]);
        let held = f.fetch().expect("fetch").batches.remove(0);
        f.acknowledge([held.ack(0, AckType::Accept)]);
        let started = Instant::now();
        let outcomes = f.send_acks_now();
        let took = started.elapsed();
        assert!(took < Duration::from_millis(500), "took {took:?}");
        assert!(outcomes.is_empty(), "{outcomes:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while acknowledged(&carried).is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            acknowledged(&carried),
            vec![(1, vec![(0, 1)])],
            "it was sent"
        );
        assert!(!f.has_queued_acks());
    }

    #[test]
    fn a_fence_ends_every_share_sessions_leases_and_voids_their_queued_acks() {
        let (addrs, seen, carried) = recording_cluster([Fake::Serving, Fake::Serving]);
        let mut f = fetcher(&addrs, &[0, 1]);
        // A round ends with the first answer that brought records: the other leader's is
        // collected here without a fetch more.
        let mut held = f.fetch().expect("fetch").batches;
        let out: Vec<u64> = f.in_flight.keys().copied().collect();
        f.collect(&Wait::until(out, Instant::now() + Duration::from_secs(5)));
        held.append(&mut f.stash.batches);
        assert_eq!(held.len(), 2);
        f.member_fenced();
        assert!(held.iter().all(|b| b.scope.has_ended()));
        f.acknowledge([held[0].ack(1, AckType::Accept)]);
        let round = f.fetch().expect("fetch");
        assert_eq!(
            round
                .ack_results
                .iter()
                .map(|r| r.outcome.clone())
                .collect::<Vec<_>>(),
            vec![Err(AckError::SessionEnded)]
        );
        // The round ended with the first answer: the other leader may read its request later.
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().expect("seen").len() < 4 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let epochs: Vec<i32> = seen.lock().expect("seen").iter().map(|s| s.1).collect();
        assert_eq!(epochs, vec![0, 0, 0, 0], "both sessions reopen");
        assert!(carried
            .lock()
            .expect("carried")
            .iter()
            .all(|c| c.2.is_empty()));
    }
}

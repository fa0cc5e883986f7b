//! The requests of a [`ShareFetcher`]: a session request (epoch, partitions, acknowledgements,
//! forgotten partitions) turned into a ShareFetch or a ShareAcknowledge (topic ids from the
//! client's metadata cache, acknowledgements coalesced into batches) and handed to the broker's
//! lane, with what it was for kept until its answer comes; and the share lane itself
//! ([`ShareLane`]): what a broker's thread of the request-lane machine (`wire/lane.rs`, the one
//! the consumer's Fetch runs on) does with such a request: write it, read its answer, and
//! carry the share sessions that went over the connection.
//!
//! A broker ends a share session when its connection closes, and releases every record the
//! session acquired at once. So the lane ends the [`SessionScope`] of every session it carried
//! *before* the machine drops the connection (an error, a timeout, a peer that closed it, seen
//! by the idle watch within [`IDLE_WATCH`], the lane's own end): a worker thread asking its
//! lease sees "not current" no later than the broker can see the connection gone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    self as msg, share_acknowledge_request as ackreq, share_fetch_request as fetchreq, ApiKey,
};
use kafka_protocol::protocol::StrBytes;
use log::{debug, warn};
use uuid::Uuid;

use super::{InFlight, Purpose, ShareFetcher};
use crate::guard::lease_now;
use crate::wire::error::{Result, WireError};
use crate::wire::lane::{Lane, Link};
use crate::wire::share::acks::coalesce;
use crate::wire::share::answers;
use crate::wire::share::codec::{ShareAcknowledgeAnswer, ShareAcknowledgeV2, ShareFetchV2};
use crate::wire::share::session::SessionRequest;
use crate::wire::share::{AckError, SessionScope};
use crate::wire::versions::VersionRange;
use crate::TopicPartition;

impl ShareFetcher {
    pub(super) fn topics<T>(
        &self,
        req: &SessionRequest,
        make: impl Fn(i32, Vec<(i64, i64, Vec<i8>)>) -> T,
    ) -> Vec<(Uuid, Vec<T>)> {
        let mut by_topic: BTreeMap<Uuid, Vec<T>> = BTreeMap::new();
        for tp in &req.listed {
            let Some(id) = self.client.topic_id(&tp.topic) else {
                continue;
            };
            let batches = req
                .acks
                .get(tp)
                .map(|a| coalesce(a))
                .unwrap_or_default()
                .into_iter()
                .map(|b| (b.first, b.last, b.types))
                .collect();
            by_topic
                .entry(id)
                .or_default()
                .push(make(tp.partition, batches));
        }
        by_topic.into_iter().collect()
    }

    pub(super) fn submit_fetch(
        &mut self,
        broker: i32,
        req: SessionRequest,
        asked: BTreeSet<TopicPartition>,
        scopes: BTreeMap<TopicPartition, SessionScope>,
    ) -> Option<u64> {
        let topics = self
            .topics(&req, |p, batches| {
                fetchreq::FetchPartition::default()
                    .with_partition_index(p)
                    .with_acknowledgement_batches(
                        batches
                            .into_iter()
                            .map(|(first, last, types)| {
                                fetchreq::AcknowledgementBatch::default()
                                    .with_first_offset(first)
                                    .with_last_offset(last)
                                    .with_acknowledge_types(types)
                            })
                            .collect(),
                    )
            })
            .into_iter()
            .map(|(id, partitions)| {
                fetchreq::FetchTopic::default()
                    .with_topic_id(id)
                    .with_partitions(partitions)
            })
            .collect();
        let mut forgotten: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        for tp in &req.forgotten {
            if let Some(id) = self.client.topic_id(&tp.topic) {
                forgotten.entry(id).or_default().push(tp.partition);
            }
        }
        let s = &self.settings;
        let v1 = msg::ShareFetchRequest::default()
            .with_group_id(Some(StrBytes::from_string(self.group_id.clone()).into()))
            .with_member_id(Some(StrBytes::from_string(self.member_id.clone())))
            .with_share_session_epoch(req.epoch)
            .with_max_wait_ms(i32::try_from(s.max_wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(s.min_bytes)
            .with_max_bytes(s.max_bytes)
            .with_max_records(s.max_records)
            .with_batch_size(s.batch_size)
            .with_topics(topics)
            .with_forgotten_topics_data(
                forgotten
                    .into_iter()
                    .map(|(id, ps)| {
                        fetchreq::ForgottenTopic::default()
                            .with_topic_id(id)
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let request = Request::Fetch(ShareFetchV2 {
            v1,
            acquire_mode: s.acquire_mode,
            is_renew_ack: false,
        });
        let flight = InFlight {
            purpose: Purpose::Fetch,
            req,
            asked,
            scopes,
        };
        let id = self.submit(broker, request, s.max_wait, flight)?;
        if let Some(l) = self.sessions.get_mut(&broker) {
            l.fetching = true;
        }
        Some(id)
    }

    pub(super) fn submit_ack(
        &mut self,
        broker: i32,
        req: SessionRequest,
        purpose: Purpose,
        renew: bool,
    ) -> Option<u64> {
        let topics = self
            .topics(&req, |p, batches| {
                ackreq::AcknowledgePartition::default()
                    .with_partition_index(p)
                    .with_acknowledgement_batches(
                        batches
                            .into_iter()
                            .map(|(first, last, types)| {
                                ackreq::AcknowledgementBatch::default()
                                    .with_first_offset(first)
                                    .with_last_offset(last)
                                    .with_acknowledge_types(types)
                            })
                            .collect(),
                    )
            })
            .into_iter()
            .map(|(id, partitions)| {
                ackreq::AcknowledgeTopic::default()
                    .with_topic_id(id)
                    .with_partitions(partitions)
            })
            .collect();
        let v1 = msg::ShareAcknowledgeRequest::default()
            .with_group_id(Some(StrBytes::from_string(self.group_id.clone()).into()))
            .with_member_id(Some(StrBytes::from_string(self.member_id.clone())))
            .with_share_session_epoch(req.epoch)
            .with_topics(topics);
        let request = Request::Acknowledge(ShareAcknowledgeV2 {
            v1,
            is_renew_ack: renew,
        });
        let flight = InFlight {
            purpose,
            req,
            asked: BTreeSet::new(),
            scopes: BTreeMap::new(),
        };
        self.submit(broker, request, Duration::ZERO, flight)
    }

    pub(super) fn submit(
        &mut self,
        broker: i32,
        request: Request,
        wait: Duration,
        flight: InFlight,
    ) -> Option<u64> {
        let out = Outgoing {
            request,
            wait,
            scope: flight.req.scope.clone(),
        };
        let addr = self.client.broker(broker).map(|b| b.addr());
        let submitted = match addr {
            Some(addr) => self.lanes.submit(broker, &addr, out, wait),
            None => Err(WireError::UnknownBroker { node_id: broker }),
        };
        match submitted {
            Ok(id) => {
                self.in_flight.insert(id, flight);
                Some(id)
            }
            Err(e) => {
                let req = flight.req;
                warn!("share: cannot send to broker {broker}: {e}");
                if let Some(l) = self.sessions.get_mut(&broker) {
                    l.session.transport_failed(&req);
                }
                self.client.mark_metadata_stale();
                let err = AckError::Transport(e.to_string());
                self.stash
                    .ack_results
                    .extend(answers::all_failed(&req, &err));
                None
            }
        }
    }
}

/// How often an idle share lane looks whether the broker closed its connection: the longest a
/// lease of a session the broker ended with the connection can still read current while no
/// request is out (a request in flight finds out by itself, at once).
pub(in crate::wire::share) const IDLE_WATCH: Duration = Duration::from_millis(20);

/// The versions of ShareFetch and ShareAcknowledge this layer speaks.
pub(in crate::wire::share) const SHARE_VERSIONS: VersionRange = VersionRange::new(1, 2);

/// A request for a broker's lane, with the scope of the session incarnation it belongs to
/// (taken when the request was built).
#[derive(Debug)]
pub(in crate::wire) struct Outgoing {
    pub(in crate::wire::share) request: Request,
    /// How long the broker may hold it (a fetch's `max_wait`), on top of the request timeout.
    pub(in crate::wire::share) wait: Duration,
    pub(in crate::wire::share) scope: SessionScope,
}

/// The request itself.
#[derive(Debug)]
pub(in crate::wire::share) enum Request {
    Fetch(ShareFetchV2),
    Acknowledge(ShareAcknowledgeV2),
}

/// A broker's answer.
#[derive(Debug)]
pub(in crate::wire) enum Incoming {
    Fetch(msg::ShareFetchResponse),
    Acknowledge(ShareAcknowledgeAnswer),
}

/// One broker's share lane: the scopes of the sessions whose requests went over its
/// connection, which end with it.
#[derive(Debug, Default)]
pub(in crate::wire) struct ShareLane {
    carried: Vec<SessionScope>,
}

impl Lane for ShareLane {
    type Job = Outgoing;
    type Answer = Incoming;
    const NAME: &'static str = "share";
    const IDLE_WATCH: Option<Duration> = Some(IDLE_WATCH);

    /// The lease clock: the send stamp the records' lock leases are counted from, and the
    /// arrival a lock's certain end is counted from (a poll thread that absorbs it later does
    /// not move that end later).
    fn now() -> Instant {
        lease_now()
    }

    fn serve(
        &mut self,
        link: &mut Link,
        job: &Outgoing,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<Incoming> {
        link.connection()?;
        let wait = job.wait;
        let timeout = link.request_timeout() + wait;
        if !self.carried.contains(&job.scope) {
            self.carried.retain(|s| !s.has_ended());
            self.carried.push(job.scope.clone());
        }
        let key = match &job.request {
            Request::Fetch(_) => ApiKey::ShareFetch,
            Request::Acknowledge(_) => ApiKey::ShareAcknowledge,
        };
        let v = link.connection()?.version_within(key, SHARE_VERSIONS)?;
        link.negotiated(v);
        let conn = link.connection()?;
        let renew = match &job.request {
            Request::Fetch(r) => r.is_renew_ack,
            Request::Acknowledge(r) => r.is_renew_ack,
        };
        if renew && v < 2 {
            return Err(WireError::UnsupportedVersion {
                api: key as i16,
                ours: (2, 2),
                broker: conn.versions().broker_range(key).map(|r| (r.min, r.max)),
            });
        }
        // The send stamp that the records' lock leases are counted from: on the lease clock.
        let at = lease_now();
        match &job.request {
            Request::Fetch(r) => {
                let pending = conn.send_request(r, v)?;
                sent(at, wait);
                conn.receive(pending, timeout).map(|a| Incoming::Fetch(a.0))
            }
            Request::Acknowledge(r) => {
                let pending = conn.send_request(r, v)?;
                sent(at, wait);
                conn.receive(pending, timeout).map(Incoming::Acknowledge)
            }
        }
    }

    /// Ends the scopes of the sessions the connection carried: the broker releases their
    /// records when it sees the connection close.
    fn disconnecting(&mut self) {
        let ended = self.carried.drain(..).filter(SessionScope::end).count();
        if ended > 0 {
            debug!("share: a connection dropped: {ended} session(s) ended");
        }
    }
}

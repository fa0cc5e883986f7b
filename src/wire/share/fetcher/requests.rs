//! The requests of a [`ShareFetcher`]: a session request (epoch, partitions, acknowledgements,
//! forgotten partitions) turned into a ShareFetch or a ShareAcknowledge (topic ids from the
//! client's metadata cache, acknowledgements coalesced into batches) and handed to the broker's lane,
//! with what it was for kept until its answer comes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::{
    self as msg, share_acknowledge_request as ackreq, share_fetch_request as fetchreq,
};
use kafka_protocol::protocol::StrBytes;
use log::warn;
use uuid::Uuid;

use super::{InFlight, Purpose, ShareFetcher};
use crate::wire::error::WireError;
use crate::wire::share::acks::coalesce;
use crate::wire::share::answers;
use crate::wire::share::codec::{ShareAcknowledgeV2, ShareFetchV2};
use crate::wire::share::lane::{Outgoing, Request};
use crate::wire::share::session::SessionRequest;
use crate::wire::share::{AckError, SessionScope};
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

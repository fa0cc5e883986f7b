//! Where a [`ShareFetcher`]'s partitions live: leaders, broker addresses and topic ids from
//! Metadata (ShareFetch names topics by id), and what a leader change means for the sessions
//! (the old leader's scope of the partition ends: Kafka does not keep acquired records across
//! a leader change).

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::{self as msg, metadata_request, ApiKey, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::ShareFetcher;
use crate::wire::error::{Result, WireError};
use crate::TopicPartition;

impl ShareFetcher {
    /// `tp` is led by `leader` from now on: a different leader than before releases what the
    /// old leader's session acquired of it, so that partition's scope ends there.
    pub(super) fn lead(&mut self, tp: TopicPartition, leader: i32) {
        if let Some(old) = self.leaders.insert(tp.clone(), leader) {
            if old != leader {
                if let Some(l) = self.sessions.get_mut(&old) {
                    l.session.end_partition(&tp);
                }
            }
        }
    }

    /// Metadata for the assigned topics when a leader or topic id is missing or a broker said
    /// the cache is stale: leaders, broker addresses and topic ids (Metadata v10+).
    pub(super) fn refresh_metadata(&mut self) -> Result<()> {
        let missing = self
            .assigned
            .iter()
            .any(|tp| !self.leaders.contains_key(tp) || !self.ids.contains_key(&tp.topic));
        if !self.stale && !missing {
            return Ok(());
        }
        self.refresh_metadata_for(self.assigned.clone())
    }

    /// Metadata for the topics of `partitions`.
    pub(super) fn refresh_metadata_for(
        &mut self,
        partitions: BTreeSet<TopicPartition>,
    ) -> Result<()> {
        let topics: BTreeSet<Arc<str>> =
            partitions.iter().map(|tp| Arc::clone(&tp.topic)).collect();
        if topics.is_empty() {
            self.stale = false;
            return Ok(());
        }
        let req = msg::MetadataRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                })
                .collect(),
        ));
        let mut last = None;
        let brokers: Vec<i32> = self.client.brokers().iter().map(|b| b.node_id).collect();
        for node in brokers {
            let sent = self.client.connection(node).and_then(|conn| {
                let v = conn.version_for(ApiKey::Metadata)?;
                if v < 10 {
                    return Err(WireError::UnsupportedVersion {
                        api: ApiKey::Metadata as i16,
                        ours: (10, 12),
                        broker: Some((0, v)),
                    });
                }
                conn.send(&req, v)
            });
            match sent {
                Ok(resp) => {
                    self.apply_metadata(&resp);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(WireError::Config("no broker known".to_string())))
    }

    pub(super) fn apply_metadata(&mut self, resp: &msg::MetadataResponse) {
        for b in &resp.brokers {
            self.addrs
                .insert(b.node_id.0, format!("{}:{}", b.host, b.port));
        }
        for t in &resp.topics {
            let Some(name) = &t.name else { continue };
            if t.error_code != 0 {
                continue;
            }
            let name: Arc<str> = self
                .ids
                .get_key_value(name.as_str())
                .map(|(k, _)| Arc::clone(k))
                .unwrap_or_else(|| Arc::from(name.as_str()));
            self.ids.insert(Arc::clone(&name), t.topic_id);
            self.names.insert(t.topic_id, Arc::clone(&name));
            for p in &t.partitions {
                self.lead(
                    TopicPartition::new(Arc::clone(&name), p.partition_index),
                    p.leader_id.0,
                );
            }
        }
        self.stale = false;
    }
}

//! The classic member's metadata refresh: every `metadata.max.age.ms` the heartbeat thread asks
//! the cluster about the member's subscription (a pattern's: about every topic) and feeds the
//! answer to the [`TopicWatch`], which decides whether the subscription changed or a partition
//! count moved; then the member rejoins (Java's consumer does the same at the same interval).
//! The watch itself, and the rules, are in `group/watch.rs`.

use crate::group::config::GroupConfig;
use crate::group::error::GroupError;
use crate::group::session::Shared;
use crate::group::watch::{TopicView, TopicWatch};
use crate::wire::{Client, ErrorChain, KafkaCode, TopicMetadata};

/// The watch a member starts with: its fixed topics, or what its pattern matches now (one
/// Metadata request for every topic; a failure fails the subscribe, as a first connection
/// would).
pub(super) fn first_watch(
    config: &GroupConfig,
    client: &mut Client,
) -> Result<TopicWatch, GroupError> {
    let mut watch = TopicWatch::new(
        config.topics.clone(),
        config.pattern.clone(),
        config.exclude_internal_topics,
    );
    if let Some(pattern) = &config.pattern {
        let metadata = client.metadata(&[])?;
        watch.on_metadata(&views(&metadata));
        log::info!(
            "group {}: pattern {pattern:?} selects {} topic(s): {:?}",
            config.group_id,
            watch.subscription().len(),
            watch.subscription()
        );
    }
    Ok(watch)
}

/// One refresh: Metadata for what the watch wants, fed to it; a change asks the session for a
/// rejoin (and wakes the thread that runs it). A failed request changes nothing: the next
/// refresh tries again.
pub(super) fn refresh(shared: &Shared, client: &mut Client, group_id: &str) {
    let wanted = shared.topics().wanted();
    let names: Vec<&str> = wanted.iter().flatten().map(String::as_str).collect();
    if wanted.is_some() && names.is_empty() {
        return;
    }
    // An empty list asks for every topic, which is what a pattern needs.
    let metadata = match client.metadata(&names) {
        Ok(metadata) => metadata,
        Err(e) => {
            log::warn!(
                "group {group_id}: metadata refresh failed: {}; the subscription is checked \
                 again at the next refresh",
                ErrorChain(&e)
            );
            return;
        }
    };
    let Some(reason) = shared.topics().on_metadata(&views(&metadata)) else {
        return;
    };
    if shared.lock().request_rejoin(&reason) {
        log::info!("group {group_id}: {reason}: rejoining");
        shared.wake.notify_all();
    }
}

/// The watch's reading of a metadata answer: a topic the cluster does not have counts zero
/// partitions, one whose answer carries another error is unknown this time.
fn views(metadata: &[TopicMetadata]) -> Vec<TopicView<'_>> {
    metadata
        .iter()
        .map(|t| TopicView {
            name: &t.name,
            partitions: match t.error {
                None => Some(t.partitions.len() as i32),
                Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION) => Some(0),
                Some(_) => None,
            },
            internal: t.is_internal,
        })
        .collect()
}

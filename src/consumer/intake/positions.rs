//! Where fetching starts: the lookup of a starting position for each owned partition, retried
//! until it succeeds.
//!
//! A newly assigned partition starts at its committed offset, or where `auto.offset.reset` says
//! when it has none; a partition whose fetch position fell out of the log (OFFSET_OUT_OF_RANGE)
//! restarts where `auto.offset.reset` says. Until its lookup succeeds a partition is owned but
//! not fetched, so a lookup that fails (the coordinator unreachable beyond the client's retries,
//! a partition missing from the answer, `auto.offset.reset=none` without a committed offset) is
//! never the end: it is retried on later polls with a doubling backoff, reported each time it
//! still fails, and shown in the partition's stats.

use std::collections::HashMap;
use std::time::Instant;

use crate::wire::{CommittedOffset, ErrorChain, OffsetSpec, RecordSource};
use crate::TopicPartition;

use crate::config::{AutoOffsetReset, ConsumerConfig};
use crate::consumer::error::ConsumerError;

/// Which position a pending partition is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Newly assigned: the committed offset, else `auto.offset.reset`.
    Committed,
    /// The fetch position fell out of the log: `auto.offset.reset` only.
    Reset,
}

/// One partition waiting for its position, and how its lookups went so far.
#[derive(Clone, Debug)]
pub(crate) struct Lookup {
    start: Start,
    retry_at: Instant,
    /// Failed attempts in a row.
    pub(crate) failures: u32,
    /// Why the last attempt failed.
    pub(crate) last_error: Option<String>,
}

/// Owned partitions without a fetch position yet.
#[derive(Debug, Default)]
pub(crate) struct PendingPositions {
    entries: HashMap<TopicPartition, Lookup>,
}

/// What one lookup found for one partition: the position, and the metadata committed with it
/// (the completed-offsets map, when this library committed it).
pub(crate) type Found = Result<(i64, Option<String>), ConsumerError>;

/// A partition whose starting position was found: where, the committed metadata, and why.
pub(crate) type Placed = (TopicPartition, i64, Option<String>, Start);

impl PendingPositions {
    /// Partitions to look up at the next chance.
    pub(crate) fn add(&mut self, partitions: &[TopicPartition], start: Start, now: Instant) {
        for tp in partitions {
            self.entries.insert(
                tp.clone(),
                Lookup {
                    start,
                    retry_at: now,
                    failures: 0,
                    last_error: None,
                },
            );
        }
    }

    /// The partition left (revoked or lost): nothing to look up any more.
    pub(crate) fn remove(&mut self, tp: &TopicPartition) {
        self.entries.remove(tp);
    }

    /// The lookup state of a partition still waiting for its position.
    pub(crate) fn get(&self, tp: &TopicPartition) -> Option<&Lookup> {
        self.entries.get(tp)
    }

    /// Looks up the partitions whose retry is due and returns those found, with their position,
    /// no longer pending. Failures stay pending with a doubled backoff and are logged; with them
    /// comes the error to surface from `poll` (`auto.offset.reset=none` without a committed
    /// offset, as Java's consumer reports it on every poll), once per failed attempt.
    pub(crate) fn resolve(
        &mut self,
        client: &mut dyn RecordSource,
        config: &ConsumerConfig,
        now: Instant,
    ) -> (Vec<Placed>, Option<ConsumerError>) {
        let due = |start: Start| -> Vec<TopicPartition> {
            let mut due: Vec<TopicPartition> = self
                .entries
                .iter()
                .filter(|(_, l)| l.start == start && l.retry_at <= now)
                .map(|(tp, _)| tp.clone())
                .collect();
            due.sort();
            due
        };
        let (committed, reset) = (due(Start::Committed), due(Start::Reset));
        let mut found: Vec<(TopicPartition, Found)> = Vec::new();
        if !committed.is_empty() {
            found.extend(per_partition(
                &committed,
                committed_or_reset(client, config, &committed),
            ));
        }
        if !reset.is_empty() {
            found.extend(per_partition(
                &reset,
                reset_positions(client, config, &reset),
            ));
        }
        let mut surfaced = None;
        let mut placed = Vec::new();
        for (tp, result) in found {
            match result {
                Ok((offset, metadata)) => {
                    if let Some(lookup) = self.entries.remove(&tp) {
                        log::info!("{tp}: fetching from offset {offset}");
                        placed.push((tp, offset, metadata, lookup.start));
                    }
                }
                Err(error) => {
                    let Some(lookup) = self.entries.get_mut(&tp) else {
                        continue;
                    };
                    lookup.failures += 1;
                    let backoff = config.retry_backoff_after(lookup.failures);
                    lookup.retry_at = now + backoff;
                    let shown = ErrorChain(&error).to_string();
                    log::error!(
                        "{tp}: no starting position (attempt {}): {shown}; the partition is owned \
                         but not fetched, retrying in {backoff:?}",
                        lookup.failures
                    );
                    lookup.last_error = Some(shown);
                    if matches!(error, ConsumerError::NoOffset { .. }) && surfaced.is_none() {
                        surfaced = Some(error);
                    }
                }
            }
        }
        (placed, surfaced)
    }
}

/// A request that failed as a whole fails each of its partitions with the same error.
fn per_partition(
    partitions: &[TopicPartition],
    outcome: Result<Vec<(TopicPartition, Found)>, ConsumerError>,
) -> Vec<(TopicPartition, Found)> {
    match outcome {
        Ok(found) => found,
        Err(error) => {
            let text = ErrorChain(&error).to_string();
            partitions
                .iter()
                .map(|tp| {
                    (
                        tp.clone(),
                        Err(ConsumerError::PositionUnknown {
                            tp: tp.clone(),
                            reason: text.clone(),
                        }),
                    )
                })
                .collect()
        }
    }
}

/// The committed offset of each partition, or its `auto.offset.reset` position without one.
pub(crate) fn committed_or_reset(
    client: &mut dyn RecordSource,
    config: &ConsumerConfig,
    partitions: &[TopicPartition],
) -> Result<Vec<(TopicPartition, Found)>, ConsumerError> {
    let fetched = client.offset_fetch(config.group_id(), partitions)?;
    let (mut found, without) = split_committed(partitions, fetched);
    if !without.is_empty() {
        found.extend(per_partition(
            &without,
            reset_positions(client, config, &without),
        ));
    }
    Ok(found)
}

/// Splits an OffsetFetch answer into the partitions with a committed offset (or an error) and
/// those without one. A partition absent from the answer is not "without an offset": the broker
/// said nothing about it, so it fails and is asked again.
fn split_committed(
    asked: &[TopicPartition],
    fetched: Vec<CommittedOffset>,
) -> (Vec<(TopicPartition, Found)>, Vec<TopicPartition>) {
    let mut by_tp: HashMap<TopicPartition, (Option<i64>, Option<String>)> = fetched
        .into_iter()
        .map(|c| (c.tp, (c.offset, c.metadata)))
        .collect();
    let mut found = Vec::new();
    let mut without = Vec::new();
    for tp in asked {
        match by_tp.remove(tp) {
            Some((Some(offset), metadata)) if offset >= 0 => {
                found.push((tp.clone(), Ok((offset, metadata))))
            }
            Some(_) => without.push(tp.clone()),
            None => found.push((
                tp.clone(),
                Err(ConsumerError::PositionUnknown {
                    tp: tp.clone(),
                    reason: "absent from the OffsetFetch response".to_string(),
                }),
            )),
        }
    }
    (found, without)
}

/// The position `auto.offset.reset` gives each partition.
fn reset_positions(
    client: &mut dyn RecordSource,
    config: &ConsumerConfig,
    partitions: &[TopicPartition],
) -> Result<Vec<(TopicPartition, Found)>, ConsumerError> {
    let spec = match config.auto_offset_reset() {
        AutoOffsetReset::Earliest => OffsetSpec::Earliest,
        AutoOffsetReset::Latest => OffsetSpec::Latest,
        AutoOffsetReset::None => {
            return Ok(partitions
                .iter()
                .map(|tp| (tp.clone(), Err(ConsumerError::NoOffset { tp: tp.clone() })))
                .collect())
        }
    };
    let offsets = client.list_offsets(partitions, spec, config.isolation_level())?;
    Ok(partitions
        .iter()
        .map(|tp| match offsets.get(tp) {
            Some(&offset) => {
                log::info!(
                    "{tp}: starting at {offset} (auto.offset.reset={})",
                    config.auto_offset_reset().as_str()
                );
                (tp.clone(), Ok((offset, None)))
            }
            None => (
                tp.clone(),
                Err(ConsumerError::PositionUnknown {
                    tp: tp.clone(),
                    reason: "absent from the ListOffsets response".to_string(),
                }),
            ),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    fn committed(p: i32, offset: Option<i64>) -> CommittedOffset {
        CommittedOffset {
            tp: tp(p),
            offset,
            leader_epoch: None,
            metadata: None,
        }
    }

    #[test]
    fn a_partition_absent_from_the_offset_fetch_answer_fails_instead_of_resetting() {
        let (found, without) = split_committed(
            &[tp(0), tp(1), tp(2)],
            vec![committed(0, Some(7)), committed(2, None)],
        );
        assert_eq!(without, vec![tp(2)], "2 has no committed offset: reset");
        assert_eq!(found.len(), 2);
        assert!(matches!(found[0], (ref p, Ok((7, None))) if *p == tp(0)));
        assert!(
            matches!(found[1], (ref p, Err(ConsumerError::PositionUnknown { .. })) if *p == tp(1)),
            "1 was not in the answer: {:?}",
            found[1]
        );
    }
}

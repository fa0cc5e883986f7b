//! Where the consumer stands and where it moves: the calls a Java `KafkaConsumer` or a
//! rust-rdkafka `BaseConsumer` user looks for (`position`, `committed`, `offsets_for_times`,
//! `beginning_offsets`, `end_offsets`, `seek`, `seek_to_beginning`, `seek_to_end`).
//!
//! The lookups are one request each on the member's connection, on the calling thread. A seek
//! is a guard event before it is a fetch position (see `RebalanceGuard::seek`): only the owner
//! of a partition moves it, work admitted at or after the seek point is taken away (a handler
//! still running it sees its lease not current), and the commit never passes work before the
//! seek point that did not finish.

use std::collections::HashMap;

use crate::wire::OffsetSpec;
use crate::TopicPartition;

use super::error::ConsumerError;
use super::poll_loop::Consumer;

impl Consumer {
    /// The offset of the next record of `tp` this consumer hands out (Java: `position`), or
    /// `None` when `tp` is not owned or its starting position is not known yet (it is looked up
    /// at the next poll).
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        if !self.guard.owned().contains(tp) {
            return None;
        }
        self.intake.position(tp)
    }

    /// What the group has committed for each partition (Java: `committed`; rust-rdkafka:
    /// `committed_offsets`): `None` where it has nothing. Any partition, owned or not.
    pub fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, Option<i64>>, ConsumerError> {
        let group = self.config.group_id().to_string();
        let found = self.member.records().offset_fetch(&group, partitions)?;
        Ok(found.into_iter().map(|c| (c.tp, c.offset)).collect())
    }

    /// For each partition, the first offset whose record timestamp is at or after the given
    /// milliseconds since the epoch (Java: `offsetsForTimes`; rust-rdkafka: `offsets_for_times`),
    /// `None` where no record is that late.
    pub fn offsets_for_times(
        &mut self,
        times: &[(TopicPartition, i64)],
    ) -> Result<HashMap<TopicPartition, Option<i64>>, ConsumerError> {
        // One ListOffsets per distinct timestamp (the request carries one per partition, but
        // the wire client asks one spec at a time; a replay tool asks one or two).
        let mut by_time: HashMap<i64, Vec<TopicPartition>> = HashMap::new();
        for (tp, at) in times {
            by_time.entry(*at).or_default().push(tp.clone());
        }
        let isolation = self.config.isolation_level();
        let mut out = HashMap::new();
        for (at, partitions) in by_time {
            let found = self.member.records().list_offsets(
                &partitions,
                OffsetSpec::Timestamp(at),
                isolation,
            )?;
            // The broker answers -1 when no record is at or after the timestamp.
            out.extend(
                found
                    .into_iter()
                    .map(|(tp, offset)| (tp, (offset >= 0).then_some(offset))),
            );
        }
        Ok(out)
    }

    /// The first offset of each partition's log (Java: `beginningOffsets`).
    pub fn beginning_offsets(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>, ConsumerError> {
        self.list_offsets(partitions, OffsetSpec::Earliest)
    }

    /// The end of each partition's log as this consumer may read it: the high watermark, or
    /// the last stable offset under `isolation.level=read_committed` (Java: `endOffsets`).
    pub fn end_offsets(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>, ConsumerError> {
        self.list_offsets(partitions, OffsetSpec::Latest)
    }

    /// One ListOffsets of `partitions` at `spec`, under this consumer's `isolation.level`.
    fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        spec: OffsetSpec,
    ) -> Result<HashMap<TopicPartition, i64>, ConsumerError> {
        let isolation = self.config.isolation_level();
        Ok(self
            .member
            .records()
            .list_offsets(partitions, spec, isolation)?)
    }

    /// Reads `tp` from `offset` next (Java: `seek`), a partition this member owns. Work
    /// admitted at or after `offset` is taken away (its handler's lease is not current from
    /// now on); work before it still holds the commit back until it finished; then the commit
    /// carries `offset`. Refused ([`ConsumerError::Seek`]) for a partition not owned.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ConsumerError> {
        self.intake.seek_owned(&self.guard, tp, offset)
    }

    /// Seeks each partition to the first offset of its log (Java: `seekToBeginning`).
    pub fn seek_to_beginning(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<(), ConsumerError> {
        let offsets = self.beginning_offsets(partitions)?;
        self.seek_each(partitions, &offsets)
    }

    /// Seeks each partition to the end of its log (Java: `seekToEnd`): only records written
    /// from now on are read.
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        let offsets = self.end_offsets(partitions)?;
        self.seek_each(partitions, &offsets)
    }

    fn seek_each(
        &mut self,
        partitions: &[TopicPartition],
        offsets: &HashMap<TopicPartition, i64>,
    ) -> Result<(), ConsumerError> {
        for tp in partitions {
            let Some(&offset) = offsets.get(tp) else {
                return Err(ConsumerError::PositionUnknown {
                    tp: tp.clone(),
                    reason: "absent from the ListOffsets answer".to_string(),
                });
            };
            self.seek(tp, offset)?;
        }
        Ok(())
    }
}

//! The in-memory share coordinator: a share group's broker side (KIP-932) with time passed in,
//! so that the share consumer's turns, leases and acknowledgements are tested with no broker, on
//! a [`ManualClock`], without a sleep.
//!
//! What it keeps, as a Kafka broker does (the group coordinator and the partitions' leaders in
//! one value):
//! - **membership** by heartbeat: members join, are assigned the subscribed topics' partitions
//!   (spread over the members while there are enough partitions, shared once there are more
//!   members than partitions, as Kafka's simple assignor does), are removed when they leave or
//!   when no heartbeat came for `session_timeout` (fenced: their next heartbeat rejoins them);
//!   every change of membership is a new group epoch;
//! - **records** of the [`InMemoryLog`] the test produces into (one store), acquired per fetch
//!   under a lock with a delivery count, acknowledged, expired, archived at the delivery count
//!   limit, and released with their member's share session (`partition.rs` has the rules);
//! - **share sessions**: one per member; it ends when the member leaves, is fenced or closes,
//!   and the member's next fetch learns so (its records' scope ends, as the wire layer ends it
//!   on a session error) and opens a new one.
//!
//! Each acknowledgement is judged alone (Kafka judges a partition's batch as a whole and rolls
//! back the batch at its first invalid offset); what the consumer decides per record is what the
//! tests read. The coordinator answers at once: a fetch with nothing to acquire returns empty
//! instead of waiting `fetch.max.wait.ms`.
//!
//! # Map
//!
//! - this file: [`ShareCoordinator`], its settings and counters, and the group's state;
//! - `partition.rs`: one share partition's records and their rules;
//! - `member.rs`: [`InMemoryShareMember`] and [`InMemoryShareSource`], the two halves of one
//!   member that the share consumer holds through its seams
//!   ([`ShareMember`](crate::share::ShareMember), [`ShareSource`](crate::share::ShareSource));
//! - `tests.rs`: the coordinator's answers, request by request, with no consumer in between.

mod member;
mod partition;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use member::{InMemoryShareMember, InMemoryShareSource};
pub use partition::{InFlight, RecordState};

use partition::{Applied, SharePartition};

use super::InMemoryLog;
use crate::config::AcquireMode;
use crate::guard::{AckType, Clock, ManualClock};
use crate::share::ShareSource;
use crate::share::{ShareConfig, ShareConsumer, ShareError};
use crate::wire::KafkaCode;
use crate::TopicPartition;

/// The group's settings, named as Kafka names them.
#[derive(Clone, Debug)]
pub struct ShareGroupSettings {
    /// `group.share.record.lock.duration.ms`: how long an acquired record stays locked.
    pub lock_duration: Duration,
    /// `group.share.delivery.count.limit`: deliveries after which a record is archived.
    pub delivery_count_limit: u16,
    /// `group.share.session.timeout.ms`: a member not heard from for this long is removed.
    pub session_timeout: Duration,
    /// The most records one fetch acquires (`MaxRecords`) when the member's fetch side was not
    /// told (a consumer built by [`ShareCoordinator::consumer`] asks for `max.poll.records`, as
    /// the broker's fetcher does), and a cap on what any fetch asks for.
    pub max_records: usize,
    /// `share.auto.offset.reset`: true starts a partition at its log start, false at its end
    /// (Kafka's default is the end; the broker tests set the start, and so does this default).
    pub from_earliest: bool,
    /// Whether the broker speaks ShareAcknowledge v2 (RENEW).
    pub renew: bool,
}

impl Default for ShareGroupSettings {
    fn default() -> Self {
        ShareGroupSettings {
            lock_duration: Duration::from_secs(30),
            delivery_count_limit: 5,
            session_timeout: Duration::from_secs(45),
            max_records: 500,
            from_earliest: true,
            renew: true,
        }
    }
}

/// What the coordinator did so far, for tests to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareCoordinatorStats {
    /// Deliveries (a record delivered again counts again).
    pub delivered: u64,
    /// ACCEPTs applied.
    pub accepted: u64,
    /// RELEASEs applied (the record available again).
    pub released: u64,
    /// Records archived by REJECT, a gap, or a release at the limit.
    pub archived: u64,
    /// Records archived because their lock ended at the delivery count limit.
    pub archived_on_expiry: u64,
    /// RENEWs applied.
    pub renewed: u64,
    /// Acknowledgements (RENEW included) refused with INVALID_RECORD_STATE.
    pub refused: u64,
    /// Locks that ended by time.
    pub lock_expiries: u64,
    /// Records released because their member's share session closed or the member left.
    pub released_with_session: u64,
    /// Members removed for want of a heartbeat.
    pub fenced: u64,
}

/// One member as the coordinator knows it.
#[derive(Debug)]
struct MemberState {
    topics: Vec<String>,
    assigned: BTreeSet<TopicPartition>,
    /// The group epoch of the assignment last given.
    epoch: i32,
    last_heartbeat: Instant,
}

/// The group's state, behind one lock.
#[derive(Debug, Default)]
struct Group {
    epoch: i32,
    members: BTreeMap<String, MemberState>,
    /// Times each member id was removed from the group (left or fenced): the session
    /// generation its share session belongs to.
    removals: HashMap<String, u64>,
    /// Fences only, as the member's assignment reports them.
    fences: HashMap<String, u64>,
    partitions: HashMap<TopicPartition, SharePartition>,
    next_member: u64,
    stats: ShareCoordinatorStats,
}

/// A share group's broker side, in memory (see the module notes). Every clone is a handle on
/// the same group.
#[derive(Clone, Debug)]
pub struct ShareCoordinator {
    group: Arc<Mutex<Group>>,
    clock: Arc<ManualClock>,
    log: InMemoryLog,
    settings: ShareGroupSettings,
}

impl ShareCoordinator {
    /// A share group over `log`'s records, on a manual clock of its own.
    pub fn new(log: &InMemoryLog, settings: ShareGroupSettings) -> Self {
        ShareCoordinator {
            group: Arc::default(),
            clock: Arc::new(ManualClock::new()),
            log: log.clone(),
            settings,
        }
    }

    /// The clock the group's locks and the members' leases read.
    pub fn clock(&self) -> Arc<ManualClock> {
        self.clock.clone()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Now on the group's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The settings.
    pub fn settings(&self) -> &ShareGroupSettings {
        &self.settings
    }

    /// A new member subscribed to `topics`: its membership and its fetch side, for
    /// [`ShareConsumer::with_parts`] (or [`consumer`](Self::consumer), which does both).
    pub fn join(&self, topics: &[&str]) -> (InMemoryShareMember, InMemoryShareSource) {
        let member_id = {
            let mut group = self.lock();
            group.next_member += 1;
            let id = format!("member-{}", group.next_member);
            self.add_member(
                &mut group,
                &id,
                topics.iter().map(|t| t.to_string()).collect(),
            );
            id
        };
        (
            InMemoryShareMember::new(self.clone(), member_id.clone()),
            InMemoryShareSource::new(self.clone(), member_id),
        )
    }

    /// A share consumer of a new member subscribed to `topics`, whose leases read the group's
    /// clock.
    pub fn consumer(
        &self,
        config: ShareConfig,
        topics: &[&str],
    ) -> Result<ShareConsumer, ShareError> {
        let (member, mut source) = self.join(topics);
        // What `ShareConsumer::subscribe` asks of the broker's fetcher.
        source.set_max_records(
            i32::try_from(config.consumer().max_poll_records()).unwrap_or(i32::MAX),
        );
        source.acquire_whole_batches(config.acquire_mode() == AcquireMode::BatchOptimized);
        let clock: Arc<dyn Clock> = self.clock.clone();
        ShareConsumer::with_parts(config, Box::new(member), Box::new(source), clock)
    }

    /// The members now, by id.
    pub fn members(&self) -> Vec<String> {
        self.lock().members.keys().cloned().collect()
    }

    /// The partitions `member` is assigned now (empty when it is not a member).
    pub fn assignment_of(&self, member: &str) -> BTreeSet<TopicPartition> {
        self.lock()
            .members
            .get(member)
            .map(|m| m.assigned.clone())
            .unwrap_or_default()
    }

    /// The record at `offset` of `tp` as the broker holds it now (locks that ran out by now
    /// ended first); `None` before its first delivery.
    pub fn record(&self, tp: &TopicPartition, offset: i64) -> Option<InFlight> {
        let mut group = self.lock();
        self.expire(&mut group);
        group.partitions.get(tp)?.record(offset).cloned()
    }

    /// The counters so far.
    pub fn stats(&self) -> ShareCoordinatorStats {
        self.lock().stats.clone()
    }

    /// Removes members not heard from for the session timeout, as the broker's session timer
    /// does; also done by every request.
    pub fn expire_sessions(&self) {
        let mut group = self.lock();
        self.expire(&mut group);
    }

    fn lock(&self) -> MutexGuard<'_, Group> {
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add_member(&self, group: &mut Group, id: &str, topics: Vec<String>) {
        group.members.insert(
            id.to_string(),
            MemberState {
                topics,
                assigned: BTreeSet::new(),
                epoch: 0,
                last_heartbeat: self.clock.now(),
            },
        );
        self.reassign(group);
    }

    /// Removes `id` from the group: its share session ends and its records are released.
    fn remove_member(&self, group: &mut Group, id: &str) {
        if group.members.remove(id).is_none() {
            return;
        }
        *group.removals.entry(id.to_string()).or_default() += 1;
        self.release_member(group, id);
        self.reassign(group);
    }

    fn release_member(&self, group: &mut Group, id: &str) {
        let limit = self.settings.delivery_count_limit;
        let released: u64 = group
            .partitions
            .values_mut()
            .map(|p| p.release_member(id, limit))
            .sum();
        group.stats.released_with_session += released;
    }

    /// A new group epoch, and each member's share of the subscribed topics' partitions.
    fn reassign(&self, group: &mut Group) {
        group.epoch += 1;
        let epoch = group.epoch;
        let topics: BTreeSet<String> = group
            .members
            .values()
            .flat_map(|m| m.topics.iter().cloned())
            .collect();
        let mut assigned: BTreeMap<String, BTreeSet<TopicPartition>> = BTreeMap::new();
        for topic in topics {
            let count = self.log.partition_count(&topic).unwrap_or(0);
            let subscribers: Vec<&String> = group
                .members
                .iter()
                .filter(|(_, m)| m.topics.contains(&topic))
                .map(|(id, _)| id)
                .collect();
            let (Ok(partitions), n) = (usize::try_from(count), subscribers.len()) else {
                continue;
            };
            if partitions == 0 || n == 0 {
                continue;
            }
            let partition = |p: usize| TopicPartition::new(topic.as_str(), p as i32);
            if n <= partitions {
                for p in 0..partitions {
                    let owner = subscribers[p % n];
                    assigned
                        .entry(owner.clone())
                        .or_default()
                        .insert(partition(p));
                }
            } else {
                for (i, member) in subscribers.iter().enumerate() {
                    let parts = assigned.entry((*member).clone()).or_default();
                    parts.insert(partition(i % partitions));
                }
            }
        }
        for (id, member) in group.members.iter_mut() {
            let mine = assigned.remove(id).unwrap_or_default();
            if mine != member.assigned || member.epoch == 0 {
                member.assigned = mine;
                member.epoch = epoch;
            }
        }
    }

    /// Ends what time ended by now: members without a heartbeat, and record locks.
    fn expire(&self, group: &mut Group) {
        let now = self.clock.now();
        let timeout = self.settings.session_timeout;
        let silent: Vec<String> = group
            .members
            .iter()
            .filter(|(_, m)| m.last_heartbeat + timeout <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            log::info!("share coordinator: member {id} fenced: no heartbeat for {timeout:?}");
            group.stats.fenced += 1;
            *group.fences.entry(id.clone()).or_default() += 1;
            self.remove_member(group, &id);
        }
        let limit = self.settings.delivery_count_limit;
        for partition in group.partitions.values_mut() {
            let (expired, archived) = partition.expire(now, limit);
            group.stats.lock_expiries += expired;
            group.stats.archived_on_expiry += archived;
        }
    }

    /// A heartbeat of `id` now: the member's assignment (rejoining it if the group removed it
    /// for want of a heartbeat).
    fn heartbeat(&self, id: &str, topics: &[String]) -> (i32, BTreeSet<TopicPartition>, u64) {
        let mut group = self.lock();
        self.expire(&mut group);
        if !group.members.contains_key(id) {
            self.add_member(&mut group, id, topics.to_vec());
        }
        let now = self.clock.now();
        let fenced = group.fences.get(id).copied().unwrap_or(0);
        match group.members.get_mut(id) {
            Some(member) => {
                member.last_heartbeat = now;
                (member.epoch, member.assigned.clone(), fenced)
            }
            None => (0, BTreeSet::new(), fenced),
        }
    }

    /// The share session generation of `id`: it changes each time the group removed the member.
    fn session_generation(&self, id: &str) -> u64 {
        self.lock().removals.get(id).copied().unwrap_or(0)
    }

    /// A fetch of `id` for `partitions`: the records acquired, per partition, with their
    /// delivery counts; at most `max_records` in all (`MaxRecords`), or, with `whole_batches`
    /// (batch-optimized acquisition), past it to the end of the batch that reached it.
    fn fetch(
        &self,
        id: &str,
        partitions: &BTreeSet<TopicPartition>,
        max_records: usize,
        whole_batches: bool,
    ) -> Vec<(TopicPartition, Vec<(crate::wire::Record, u16)>)> {
        let mut group = self.lock();
        self.expire(&mut group);
        let now = self.clock.now();
        let mut left = max_records.min(self.settings.max_records).max(1);
        let mut out = Vec::new();
        for tp in partitions {
            if left == 0 {
                break;
            }
            let exists = self
                .log
                .partition_count(&tp.topic)
                .is_some_and(|count| (0..count).contains(&tp.partition));
            if !exists {
                continue;
            }
            let log_end = self.log.high_watermark(tp);
            let partition = group.partitions.entry(tp.clone()).or_default();
            if !partition.started() {
                let start = if self.settings.from_earliest {
                    self.log.log_start(tp)
                } else {
                    log_end
                };
                partition.start(start);
            }
            let batch_end = |offset: i64| self.log.batch_end(tp, offset);
            let acquired = partition.acquire(
                id,
                now,
                self.settings.lock_duration,
                log_end,
                left,
                whole_batches.then_some(&batch_end as &dyn Fn(i64) -> i64),
            );
            left = left.saturating_sub(acquired.len());
            let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
                continue;
            };
            let span = usize::try_from(last.0 - first.0 + 1).unwrap_or(usize::MAX);
            let records = self.log.records_from(tp, first.0, span);
            let mut batch = Vec::new();
            for (offset, count) in acquired {
                match records.iter().find(|r| r.offset == offset) {
                    Some(record) => batch.push((record.clone(), count)),
                    None => partition.drop_missing(offset),
                }
            }
            group.stats.delivered += batch.len() as u64;
            if !batch.is_empty() {
                out.push((tp.clone(), batch));
            }
        }
        out
    }

    /// Applies `id`'s acknowledgement of `tp`'s record at `offset`.
    fn acknowledge(
        &self,
        id: &str,
        tp: &TopicPartition,
        offset: i64,
        kind: AckType,
    ) -> Result<(), KafkaCode> {
        let mut group = self.lock();
        self.expire(&mut group);
        let now = self.clock.now();
        let (lock, limit) = (
            self.settings.lock_duration,
            self.settings.delivery_count_limit,
        );
        let result = match group.partitions.get_mut(tp) {
            Some(partition) => partition.acknowledge(id, offset, kind, now, lock, limit),
            None => Err(KafkaCode::INVALID_RECORD_STATE),
        };
        let stats = &mut group.stats;
        match result {
            Ok(Applied::Accepted) => stats.accepted += 1,
            Ok(Applied::Released) => stats.released += 1,
            Ok(Applied::Archived) => stats.archived += 1,
            Ok(Applied::Renewed) => stats.renewed += 1,
            Err(_) => stats.refused += 1,
        }
        result.map(|_| ())
    }

    /// `id`'s share session closed: its records are released at once.
    fn close_session(&self, id: &str) {
        let mut group = self.lock();
        self.expire(&mut group);
        self.release_member(&mut group, id);
    }

    /// `id` leaves the group.
    fn leave(&self, id: &str) {
        let mut group = self.lock();
        self.remove_member(&mut group, id);
    }
}

//! Fetching from followers (KIP-392): which replica each partition is read from, and how many
//! bytes each broker sent.
//!
//! Why: with `client.rack` set, a leader with a rack-aware replica selector names a replica in
//! the consumer's rack as the partition's preferred read replica, and reading from it instead of
//! the leader keeps the bytes inside the zone (cross-zone traffic is billed). The leader answers
//! such a fetch with no records and the replica's id; the later fetches of that partition go to
//! that replica, on its broker's fetch thread like any other. A follower only ever returns
//! records up to its own high watermark, so what it hands out is committed data at the same
//! offsets the leader has: positions mean the same whichever replica answered.
//!
//! A preference is given up, and the partition read from its leader again, on any error the
//! replica reports for it (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, OFFSET_OUT_OF_RANGE
//! from a follower that lags, ...), when its broker fails or is overdue, and after
//! [`PREFERENCE_MAX_AGE`]. None of these reach the caller as errors: a follower's view is never
//! the last word (an out-of-range answer from a lagging follower must not reset a position), so
//! the leader is simply asked next time.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use log::{debug, info};

use crate::TopicPartition;

/// How long a preferred read replica is followed before the leader is asked again.
///
/// Why five minutes: the leader chooses the replica from what it knows when asked (the ISR, the
/// replicas' racks, how far each has read); asking again now and then follows changes the
/// consumer cannot see (a reassignment, a new follower in its rack, a changed selector). The
/// Java client re-asks when its metadata ages out, `metadata.max.age.ms`, 300000 by default;
/// this is the same bound. Asking costs one fetch round of that partition with no records.
pub const PREFERENCE_MAX_AGE: Duration = Duration::from_secs(300);

/// How long a partition stays on its leader after its preferred replica failed it, and a broker
/// that failed as a replica (refused or dropped the connection, did not answer in time) is not
/// used as one.
///
/// Why 30 s: a leader names only replicas in its ISR, and a follower that stops fetching leaves
/// the ISR after the broker's `replica.lag.time.max.ms`, 30 s by default. Past that the leader's
/// choice reflects the failure, so following it again does not send the partition back to a
/// dead or lagging replica at once.
pub const REPLICA_RETRY_AFTER: Duration = Duration::from_secs(30);

/// What a fetch client knows about where its bytes came from (the consumer reports it in its stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Per broker id: what its Fetch answers carried.
    pub brokers: BTreeMap<i32, BrokerFetchStats>,
    /// Partitions read from a preferred read replica rather than their leader: those with a
    /// preference in force (younger than the preference's maximum age; a partition this client no
    /// longer fetches counts until its preference ages out).
    pub from_replicas: usize,
    /// Times a partition went back from its preferred read replica to its leader because the
    /// replica failed it (not counting preferences that merely aged out).
    pub fallbacks: u64,
}

impl FetchStats {
    /// Counts one answer of `broker` carrying `bytes` of record data: the one way both fetchers
    /// (the consumer's and the share consumer's) count what crossed the network.
    pub(crate) fn count(&mut self, broker: i32, bytes: u64) {
        let entry = self.brokers.entry(broker).or_default();
        entry.bytes = entry.bytes.saturating_add(bytes);
        entry.answers += 1;
    }

    /// Record bytes received from `broker` (0 if none).
    pub fn bytes_from(&self, broker: i32) -> u64 {
        self.brokers.get(&broker).map_or(0, |b| b.bytes)
    }

    /// Writes the record bytes per broker as `broker:bytes,...`, as both consumers' stats lines
    /// print them.
    pub(crate) fn write_bytes(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (broker, b)) in self.brokers.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{broker}:{}", b.bytes)?;
        }
        Ok(())
    }

    /// Record bytes received from every broker together.
    pub fn total_bytes(&self) -> u64 {
        self.brokers.values().map(|b| b.bytes).sum()
    }
}

/// One broker's share of the fetching (see [`FetchStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BrokerFetchStats {
    /// Bytes of record data (the partitions' record sets, compressed as sent) in its answers,
    /// whether or not the caller still wanted them: what crossed the network from it.
    pub bytes: u64,
    /// Fetch answers it gave.
    pub answers: u64,
}

/// Where one partition is read from, when not simply its leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Preference {
    /// The leader named this replica; it is followed until `since + PREFERENCE_MAX_AGE`.
    Replica { broker: i32, since: Instant },
    /// The replica failed this partition: the leader is used, and its choice ignored, until then.
    Leader { until: Instant },
}

/// The preferred read replicas of one client and the bytes per broker.
#[derive(Debug, Default)]
pub(in crate::wire) struct ReadReplicas {
    preferred: HashMap<TopicPartition, Preference>,
    /// Brokers that failed as replicas, not used as one until then.
    avoided: HashMap<i32, Instant>,
    stats: FetchStats,
}

impl ReadReplicas {
    /// The broker to fetch `tp` from: its preferred replica while that holds and `usable` says
    /// the broker can be asked now (it is known, its fetch thread is not overdue), its `leader`
    /// otherwise.
    pub(super) fn route(
        &mut self,
        tp: &TopicPartition,
        leader: i32,
        now: Instant,
        usable: impl Fn(i32) -> bool,
    ) -> i32 {
        let Some(&preference) = self.preferred.get(tp) else {
            return leader;
        };
        match preference {
            Preference::Leader { until } => {
                if until <= now {
                    self.preferred.remove(tp);
                }
                leader
            }
            Preference::Replica { broker, .. } if broker == leader => {
                self.preferred.remove(tp);
                leader
            }
            Preference::Replica { broker, since } => {
                if now.saturating_duration_since(since) >= PREFERENCE_MAX_AGE {
                    debug!(
                        "fetch: {tp}: preferred replica {broker} aged out; asking leader {leader}"
                    );
                    self.preferred.remove(tp);
                    leader
                } else if self.is_avoided(broker, now) || !usable(broker) {
                    self.fall_back(tp, broker, now, "its broker is not usable now");
                    leader
                } else {
                    broker
                }
            }
        }
    }

    /// The leader of `tp` answered naming `replica` (-1: none) as where to read it from.
    /// Returns whether that replica is a broker to learn first (not in `known`).
    pub(super) fn leader_named(
        &mut self,
        tp: &TopicPartition,
        leader: i32,
        replica: i32,
        now: Instant,
        known: impl Fn(i32) -> bool,
    ) -> bool {
        if replica < 0 || replica == leader {
            if matches!(self.preferred.get(tp), Some(Preference::Replica { .. })) {
                self.preferred.remove(tp);
            }
            return false;
        }
        match self.preferred.get(tp) {
            Some(Preference::Leader { until }) if *until > now => return false,
            Some(Preference::Replica { broker, .. }) if *broker == replica => return false,
            _ => {}
        }
        if self.is_avoided(replica, now) {
            // The leader sent nothing (it never does when it names another replica): the
            // partition must be asked for without the rack until the broker may be used again.
            if let Some(&until) = self.avoided.get(&replica) {
                self.preferred
                    .insert(tp.clone(), Preference::Leader { until });
            }
            return false;
        }
        if !known(replica) {
            debug!("fetch: {tp}: leader {leader} names replica {replica}, not in the metadata yet");
            return true;
        }
        info!("fetch: {tp}: leader {leader} names replica {replica} to read from (KIP-392)");
        self.preferred.insert(
            tp.clone(),
            Preference::Replica {
                broker: replica,
                since: now,
            },
        );
        false
    }

    /// Whether `tp` went back to its leader because its replica failed it, and stays there
    /// now. Its leader is then asked without `client.rack`: a leader that still counts the
    /// failed replica in its ISR (a dead broker is fenced only after `broker.session.timeout.ms`)
    /// would otherwise keep naming it and answer with no records.
    pub(super) fn falling_back(&self, tp: &TopicPartition, now: Instant) -> bool {
        matches!(self.preferred.get(tp), Some(Preference::Leader { until }) if *until > now)
    }

    /// A follower that answered for `tp` names another replica (a follower itself names none:
    /// only the leader chooses).
    pub(super) fn follower_named(&mut self, tp: &TopicPartition, follower: i32, replica: i32) {
        if replica >= 0 && replica != follower {
            if let Some(Preference::Replica { broker, .. }) = self.preferred.get_mut(tp) {
                *broker = replica;
            }
        }
    }

    /// Replica `broker` failed `tp` (an error for it, or a failed answer): the partition goes
    /// back to its leader for [`REPLICA_RETRY_AFTER`].
    pub(super) fn fall_back(&mut self, tp: &TopicPartition, broker: i32, now: Instant, why: &str) {
        info!("fetch: {tp}: replica {broker} failed it ({why}); reading from the leader again");
        self.stats.fallbacks += 1;
        self.preferred.insert(
            tp.clone(),
            Preference::Leader {
                until: now + REPLICA_RETRY_AFTER,
            },
        );
    }

    /// Broker `broker` failed as a replica as a whole (its connection, or no answer in time):
    /// it is not used as one for [`REPLICA_RETRY_AFTER`].
    pub(super) fn avoid(&mut self, broker: i32, now: Instant) {
        self.avoided.insert(broker, now + REPLICA_RETRY_AFTER);
    }

    fn is_avoided(&mut self, broker: i32, now: Instant) -> bool {
        match self.avoided.get(&broker) {
            Some(&until) if until > now => true,
            Some(_) => {
                self.avoided.remove(&broker);
                false
            }
            None => false,
        }
    }

    /// Counts one answer of `broker` carrying `bytes` of record data.
    pub(super) fn count(&mut self, broker: i32, bytes: u64) {
        self.stats.count(broker, bytes);
    }

    /// The counters now.
    pub(super) fn stats(&self) -> FetchStats {
        let mut stats = self.stats.clone();
        let now = Instant::now();
        stats.from_replicas = self
            .preferred
            .values()
            .filter(|p| match p {
                Preference::Replica { since, .. } => {
                    now.saturating_duration_since(*since) < PREFERENCE_MAX_AGE
                }
                Preference::Leader { .. } => false,
            })
            .count();
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn a_named_replica_is_followed_until_it_ages_out() {
        let mut r = ReadReplicas::default();
        let t0 = Instant::now();
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 1);
        assert!(!r.leader_named(&tp(), 1, 2, t0, |_| true));
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 2);
        assert_eq!(r.stats().from_replicas, 1);
        let later = t0 + PREFERENCE_MAX_AGE;
        assert_eq!(r.route(&tp(), 1, later, |_| true), 1);
        assert_eq!(r.stats().from_replicas, 0);
        assert_eq!(r.stats().fallbacks, 0, "ageing out is no fallback");
    }

    #[test]
    fn a_failed_replica_is_not_followed_again_for_a_while() {
        let mut r = ReadReplicas::default();
        let t0 = Instant::now();
        r.leader_named(&tp(), 1, 2, t0, |_| true);
        r.fall_back(&tp(), 2, t0, "test");
        assert!(r.falling_back(&tp(), t0));
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 1);
        // The leader names it again at once: ignored until the retry time.
        r.leader_named(&tp(), 1, 2, t0, |_| true);
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 1);
        let later = t0 + REPLICA_RETRY_AFTER;
        assert!(!r.falling_back(&tp(), later));
        r.leader_named(&tp(), 1, 2, later, |_| true);
        assert_eq!(r.route(&tp(), 1, later, |_| true), 2);
        assert_eq!(r.stats().fallbacks, 1);
    }

    #[test]
    fn an_unusable_or_avoided_broker_sends_the_partition_to_its_leader() {
        let mut r = ReadReplicas::default();
        let t0 = Instant::now();
        r.leader_named(&tp(), 1, 2, t0, |_| true);
        assert_eq!(r.route(&tp(), 1, t0, |b| b != 2), 1);
        assert_eq!(r.stats().fallbacks, 1);

        let other = TopicPartition::new("t", 1);
        r.avoid(3, t0);
        r.leader_named(&other, 1, 3, t0, |_| true);
        assert_eq!(
            r.route(&other, 1, t0, |_| true),
            1,
            "an avoided broker is not taken"
        );
        assert!(
            r.falling_back(&other, t0),
            "its leader is asked without the rack, else it names the avoided broker again"
        );
        assert_eq!(
            r.stats().fallbacks,
            1,
            "no fallback: it never read from broker 3"
        );
    }

    #[test]
    fn the_leader_naming_nobody_ends_the_preference_and_unknown_brokers_ask_for_metadata() {
        let mut r = ReadReplicas::default();
        let t0 = Instant::now();
        assert!(r.leader_named(&tp(), 1, 7, t0, |b| b != 7));
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 1);
        r.leader_named(&tp(), 1, 2, t0, |_| true);
        r.leader_named(&tp(), 1, -1, t0, |_| true);
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 1);
        // A follower naming no one keeps the preference.
        r.leader_named(&tp(), 1, 2, t0, |_| true);
        r.follower_named(&tp(), 2, -1);
        assert_eq!(r.route(&tp(), 1, t0, |_| true), 2);
    }

    #[test]
    fn bytes_are_counted_per_broker() {
        let mut r = ReadReplicas::default();
        r.count(1, 10);
        r.count(2, 5);
        r.count(1, 1);
        let s = r.stats();
        assert_eq!(
            (s.bytes_from(1), s.bytes_from(2), s.bytes_from(3)),
            (11, 5, 0)
        );
        assert_eq!(s.total_bytes(), 16);
        assert_eq!(s.brokers[&1].answers, 2);
    }
}

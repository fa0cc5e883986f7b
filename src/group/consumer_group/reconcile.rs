//! Reconciliation decisions, free of state: which partitions of a target assignment can be named
//! yet, what to revoke and what to assign, and which partitions a commit refused with
//! STALE_MEMBER_EPOCH may be retried.
//!
//! Why pure functions: each rule (an unresolvable topic id is kept for later, never dropped; an
//! owned partition is revoked only when the target no longer has it; a retried commit covers only
//! partitions still owned) is checked by unit tests on its own, and the machine only sequences
//! them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::types::IdAssignment;
use crate::group::commit::stale_epoch_retry_named;
pub use crate::group::commit::StaleEpochRetry;
use crate::group::ids::TopicId;
use crate::TopicPartition;

/// One partition known both by topic id (for the broker) and by name (for everyone else).
pub(crate) type Owned = BTreeMap<(TopicId, i32), Arc<str>>;

/// The part of a target assignment that can be named, and the topic ids that cannot be yet.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The resolvable partitions of the target.
    pub partitions: Owned,
    /// Topic ids with no known name; asked of Metadata again, and kept in the target meanwhile.
    pub unresolved: BTreeSet<TopicId>,
}

/// Names what it can of `target` with `names`.
pub(crate) fn resolve(target: &IdAssignment, names: &HashMap<TopicId, Arc<str>>) -> Resolved {
    let mut out = Resolved::default();
    for (id, partitions) in target {
        match names.get(id) {
            Some(name) => {
                for &p in partitions {
                    out.partitions.insert((*id, p), Arc::clone(name));
                }
            }
            None => {
                out.unresolved.insert(*id);
            }
        }
    }
    out
}

/// What moving from `owned` to the resolvable `target` takes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Owned partitions the target no longer has.
    pub revoke: Owned,
    /// Target partitions not owned yet.
    pub assign: Owned,
}

/// The difference between what is owned and the resolvable target. A partition of an
/// unresolvable topic is not in `target`, so is never assigned here; an owned one was resolved
/// when it was assigned, so it stays unless the broker's target dropped it.
pub(crate) fn changes(owned: &Owned, target: &Owned) -> Changes {
    Changes {
        revoke: owned
            .iter()
            .filter(|(k, _)| !target.contains_key(k))
            .map(|(k, v)| (*k, Arc::clone(v)))
            .collect(),
        assign: target
            .iter()
            .filter(|(k, _)| !owned.contains_key(k))
            .map(|(k, v)| (*k, Arc::clone(v)))
            .collect(),
    }
}

/// The partitions as the consumer names them, in topic-id then partition order.
pub(crate) fn named(partitions: &Owned) -> Vec<TopicPartition> {
    partitions
        .iter()
        .map(|((_, p), name)| TopicPartition::new(Arc::clone(name), *p))
        .collect()
}

/// The owned partitions as the heartbeat reports them.
pub(crate) fn by_id(partitions: &Owned) -> IdAssignment {
    let mut out = IdAssignment::new();
    for (id, p) in partitions.keys() {
        out.entry(*id).or_default().push(*p);
    }
    out
}

/// The STALE_MEMBER_EPOCH decision: a commit made with `attempted` is retried only for the
/// partitions still `owned` (which includes those being revoked, whose commit this usually is),
/// with the member's `current` epoch if it is newer, else after the next heartbeat.
pub(crate) fn stale_epoch_retry(
    attempted: i32,
    current: Option<i32>,
    owned: &Owned,
    refused: &[TopicPartition],
) -> StaleEpochRetry {
    stale_epoch_retry_named(attempted, current, &named(owned), refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> TopicId {
        TopicId([n; 16])
    }

    fn owned(items: &[(u8, &str, i32)]) -> Owned {
        items
            .iter()
            .map(|(i, n, p)| ((id(*i), *p), Arc::from(*n)))
            .collect()
    }

    #[test]
    fn an_unresolvable_topic_id_is_kept_aside_and_the_rest_is_named() {
        let target: IdAssignment = [(id(1), vec![0, 1]), (id(2), vec![0])].into();
        let names: HashMap<TopicId, Arc<str>> = [(id(1), Arc::from("a"))].into();
        let r = resolve(&target, &names);
        assert_eq!(r.partitions, owned(&[(1, "a", 0), (1, "a", 1)]));
        assert_eq!(r.unresolved, [id(2)].into());
    }

    #[test]
    fn changes_revoke_what_the_target_dropped_and_assign_what_it_added() {
        let mine = owned(&[(1, "a", 0), (1, "a", 1)]);
        let target = owned(&[(1, "a", 1), (1, "a", 2)]);
        let c = changes(&mine, &target);
        assert_eq!(c.revoke, owned(&[(1, "a", 0)]));
        assert_eq!(c.assign, owned(&[(1, "a", 2)]));
        assert_eq!(changes(&mine, &mine), Changes::default());
    }

    #[test]
    fn owned_partitions_are_reported_by_topic_id_sorted() {
        let mine = owned(&[(2, "b", 3), (1, "a", 1), (1, "a", 0)]);
        let ids = by_id(&mine);
        assert_eq!(ids, [(id(1), vec![0, 1]), (id(2), vec![3])].into());
    }

    #[test]
    fn a_stale_epoch_commit_is_retried_only_for_partitions_still_owned() {
        let mine = owned(&[(1, "a", 0)]);
        let refused = vec![TopicPartition::new("a", 0), TopicPartition::new("a", 1)];
        assert_eq!(
            stale_epoch_retry(4, Some(6), &mine, &refused),
            StaleEpochRetry::Retry {
                epoch: 6,
                partitions: vec![TopicPartition::new("a", 0)],
                dropped: vec![TopicPartition::new("a", 1)],
            }
        );
        assert_eq!(
            stale_epoch_retry(6, Some(6), &mine, &refused),
            StaleEpochRetry::AfterHeartbeat {
                partitions: vec![TopicPartition::new("a", 0)],
                dropped: vec![TopicPartition::new("a", 1)],
            }
        );
        assert_eq!(
            stale_epoch_retry(6, None, &mine, &refused),
            StaleEpochRetry::Drop { dropped: refused }
        );
    }
}

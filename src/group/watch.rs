//! What a classic member's periodic metadata refresh (`metadata.max.age.ms`) changes between
//! rebalances: the topics a pattern subscription selects, and whether partition counts moved.
//!
//! Why: under the classic protocol the broker never looks inside a subscription, so the members
//! themselves must notice what the cluster changed. Java's consumer does it with the same two
//! rules, kept here:
//! - a pattern subscription (`subscribe(Pattern)`) is matched against the cluster's topics at
//!   every refresh; when the matched set differs from the one the member joined with (a topic
//!   created or deleted), the member rejoins with the new set;
//! - the leader remembers the partition count of every topic of the group's subscription its
//!   assignment used, and any member watches its own subscription's counts: a topic that gained
//!   partitions (CreatePartitions), appeared or vanished triggers a rejoin, so the new partitions
//!   are assigned and a deleted topic's partitions are revoked through the normal handoff (the
//!   guard fences them).
//!
//! Sans I/O: the heartbeat thread fetches the metadata ([`TopicWatch::wanted`] says which) and
//! feeds it in; the round records what it joined with and what it assigned.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::pattern::TopicPattern;

/// One topic of a metadata answer, as the watch reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TopicView<'a> {
    /// The topic's name.
    pub(crate) name: &'a str,
    /// Its partition count: `Some(0)` when the cluster does not have it, `None` when the answer
    /// could not tell (a transient error such as LEADER_NOT_AVAILABLE: the previous count stands).
    pub(crate) partitions: Option<i32>,
    /// Kafka's internal-topic flag (`__consumer_offsets`, `__transaction_state`, ...).
    pub(crate) internal: bool,
}

/// The subscription of a classic member and what it last knew of the cluster's topics.
#[derive(Clone, Debug, Default)]
pub(crate) struct TopicWatch {
    pattern: Option<TopicPattern>,
    /// `exclude.internal.topics`.
    exclude_internal: bool,
    /// What the next JoinGroup subscribes to: the fixed list, or the pattern's current match
    /// (sorted).
    subscription: Vec<String>,
    /// What the last JoinGroup carried; `None` before the first.
    joined: Option<Vec<String>>,
    /// Partition counts of our own subscription at the last refresh (0: absent).
    seen: Option<BTreeMap<String, i32>>,
    /// As leader of the current generation: the count of every topic of the group's
    /// subscription that its assignment used (0: absent).
    assigned: Option<BTreeMap<String, i32>>,
}

impl TopicWatch {
    /// A subscription to the fixed list `topics`, or (with `pattern`) to what the pattern
    /// matches, which is empty until the first [`on_metadata`](Self::on_metadata).
    pub(crate) fn new(
        topics: Vec<String>,
        pattern: Option<TopicPattern>,
        exclude_internal: bool,
    ) -> Self {
        TopicWatch {
            subscription: if pattern.is_some() {
                Vec::new()
            } else {
                topics
            },
            pattern,
            exclude_internal,
            ..TopicWatch::default()
        }
    }

    /// The topics the next JoinGroup subscribes to.
    pub(crate) fn subscription(&self) -> &[String] {
        &self.subscription
    }

    /// The topics a JoinGroup subscribes to now, remembered as what the member joined with.
    pub(crate) fn joining(&mut self) -> Vec<String> {
        self.joined = Some(self.subscription.clone());
        self.subscription.clone()
    }

    /// After a completed round: the counts the assignment used when this member led it, `None`
    /// when it followed (another member watches the group's subscription then).
    pub(crate) fn led(&mut self, assigned: Option<BTreeMap<String, i32>>) {
        self.assigned = assigned;
    }

    /// The topics whose metadata the next refresh needs: `None` for all of them (a pattern
    /// matches against every topic), else our subscription and, as leader, the group's.
    pub(crate) fn wanted(&self) -> Option<Vec<String>> {
        if self.pattern.is_some() {
            return None;
        }
        let mut topics: BTreeSet<String> = self.subscription.iter().cloned().collect();
        if let Some(assigned) = &self.assigned {
            topics.extend(assigned.keys().cloned());
        }
        Some(topics.into_iter().collect())
    }

    /// Applies a metadata answer ([`wanted`](Self::wanted)'s topics, or all of them): the
    /// pattern's match becomes the subscription, and the reason to rejoin is returned when the
    /// subscription differs from what the member joined with, or a partition count it watches
    /// moved. Nothing asks for a rejoin before the first join (which carries the subscription
    /// anyway).
    pub(crate) fn on_metadata(&mut self, topics: &[TopicView<'_>]) -> Option<String> {
        if let Some(pattern) = &self.pattern {
            let matched: BTreeSet<&str> = topics
                .iter()
                .filter(|t| t.partitions != Some(0))
                .filter(|t| pattern.selects(t.name, t.internal, self.exclude_internal))
                .map(|t| t.name)
                .collect();
            self.subscription = matched.into_iter().map(str::to_string).collect();
        }
        // By name once: a pattern's answer lists every topic of the cluster.
        let answered: HashMap<&str, Option<i32>> =
            topics.iter().map(|t| (t.name, t.partitions)).collect();
        let counts = |names: &mut dyn Iterator<Item = &String>,
                      before: Option<&BTreeMap<String, i32>>| {
            names
                .map(|name| {
                    let now = answered.get(name.as_str()).copied().unwrap_or(Some(0));
                    let count = now
                        .or_else(|| before.and_then(|b| b.get(name).copied()))
                        .unwrap_or(0);
                    (name.clone(), count)
                })
                .collect::<BTreeMap<String, i32>>()
        };
        let seen = counts(&mut self.subscription.iter(), self.seen.as_ref());
        let previous = self.seen.replace(seen.clone());
        let joined = self.joined.as_ref()?;
        if *joined != self.subscription {
            return Some(describe_change(joined, &self.subscription));
        }
        if let Some(assigned) = &self.assigned {
            let now = counts(&mut assigned.keys(), Some(assigned));
            if now != *assigned {
                return Some(format!(
                    "partition counts of the group's subscription changed: {}",
                    describe_counts(assigned, &now)
                ));
            }
        }
        match previous {
            Some(previous) if previous != seen => Some(format!(
                "partition counts of the subscribed topics changed: {}",
                describe_counts(&previous, &seen)
            )),
            _ => None,
        }
    }
}

/// "subscribed topics changed: +[a] -[b]", for the rejoin's reason and the log.
fn describe_change(before: &[String], after: &[String]) -> String {
    let before: BTreeSet<&String> = before.iter().collect();
    let after: BTreeSet<&String> = after.iter().collect();
    let added: Vec<&&String> = after.difference(&before).collect();
    let removed: Vec<&&String> = before.difference(&after).collect();
    format!("subscribed topics changed: +{added:?} -{removed:?}")
}

/// "t: 2 -> 4, u: 1 -> 0" for the counts that differ.
fn describe_counts(before: &BTreeMap<String, i32>, after: &BTreeMap<String, i32>) -> String {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (b, a) = (before.get(name), after.get(name));
            (b != a).then(|| format!("{name}: {} -> {}", b.unwrap_or(&0), a.unwrap_or(&0)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, partitions: i32) -> TopicView<'_> {
        TopicView {
            name,
            partitions: Some(partitions),
            internal: false,
        }
    }

    fn pattern_watch(p: &str) -> TopicWatch {
        TopicWatch::new(Vec::new(), Some(TopicPattern::new(p).unwrap()), true)
    }

    #[test]
    fn a_pattern_selects_matching_topics_without_internal_ones() {
        let mut w = pattern_watch("orders-.*|__.*");
        let internal = TopicView {
            internal: true,
            ..view("__consumer_offsets", 1)
        };
        let before_join = w.on_metadata(&[
            view("orders-b", 1),
            view("orders-a", 2),
            view("fills", 1),
            internal,
        ]);
        assert_eq!(before_join, None, "nothing to rejoin before the first join");
        assert_eq!(w.subscription(), ["orders-a", "orders-b"]);
        assert_eq!(w.wanted(), None, "a pattern needs every topic");
    }

    #[test]
    fn a_created_or_deleted_matching_topic_asks_for_a_rejoin_with_the_new_set() {
        let mut w = pattern_watch("orders-.*");
        w.on_metadata(&[view("orders-a", 1)]);
        assert_eq!(w.joining(), ["orders-a"]);
        assert_eq!(w.on_metadata(&[view("orders-a", 1)]), None);
        let why = w
            .on_metadata(&[view("orders-a", 1), view("orders-b", 3)])
            .expect("created");
        assert!(why.contains("+[\"orders-b\"]"), "{why}");
        // Until the rejoin happened, every refresh asks again (the request is idempotent).
        assert!(w
            .on_metadata(&[view("orders-a", 1), view("orders-b", 3)])
            .is_some());
        assert_eq!(w.joining(), ["orders-a", "orders-b"]);
        assert_eq!(
            w.on_metadata(&[view("orders-a", 1), view("orders-b", 3)]),
            None
        );
        let why = w.on_metadata(&[view("orders-b", 3)]).expect("deleted");
        assert!(why.contains("-[\"orders-a\"]"), "{why}");
    }

    #[test]
    fn added_partitions_of_a_subscribed_topic_ask_for_a_rejoin() {
        let mut w = TopicWatch::new(vec!["t".into()], None, true);
        assert_eq!(w.wanted(), Some(vec!["t".to_string()]));
        w.joining();
        assert_eq!(
            w.on_metadata(&[view("t", 2)]),
            None,
            "the first look is the baseline"
        );
        assert_eq!(w.on_metadata(&[view("t", 2)]), None);
        let why = w.on_metadata(&[view("t", 4)]).expect("grown");
        assert!(why.contains("t: 2 -> 4"), "{why}");
        assert_eq!(w.on_metadata(&[view("t", 4)]), None, "once per change");
    }

    #[test]
    fn a_transient_error_keeps_the_previous_count() {
        let mut w = TopicWatch::new(vec!["t".into()], None, true);
        w.joining();
        w.on_metadata(&[view("t", 2)]);
        let unknown = TopicView {
            partitions: None,
            ..view("t", 0)
        };
        assert_eq!(w.on_metadata(&[unknown]), None);
        assert_eq!(w.on_metadata(&[view("t", 2)]), None);
    }

    #[test]
    fn the_leader_watches_the_whole_group_subscription_from_its_assignment() {
        let mut w = TopicWatch::new(vec!["mine".into()], None, true);
        w.joining();
        w.led(Some(
            [("mine".to_string(), 1), ("theirs".to_string(), 2)].into(),
        ));
        assert_eq!(
            w.wanted(),
            Some(vec!["mine".to_string(), "theirs".to_string()])
        );
        // The first refresh after the assignment already compares with it: partitions added
        // between the assignment and the refresh are not missed.
        let why = w
            .on_metadata(&[view("mine", 1), view("theirs", 3)])
            .expect("their topic grew");
        assert!(why.contains("theirs: 2 -> 3"), "{why}");
        // A deleted topic of the group counts as zero partitions.
        w.led(Some(
            [("mine".to_string(), 1), ("theirs".to_string(), 3)].into(),
        ));
        let why = w
            .on_metadata(&[view("mine", 1), view("theirs", 0)])
            .expect("deleted");
        assert!(why.contains("theirs: 3 -> 0"), "{why}");
        // A follower stops watching the group's topics.
        w.led(None);
        assert_eq!(w.wanted(), Some(vec!["mine".to_string()]));
    }
}

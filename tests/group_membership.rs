//! Our group member against real coordinators: joining, eager and cooperative rebalances among our
//! own members, and every fault the librdkafka mock cluster can inject into the protocol.
//!
//! Broker coverage: each test says which brokers it runs on. tansu runs the eager classic tests;
//! the fault-injection tests need the mock's controls; cooperative tests run on the mock because
//! tansu's coordinator did not complete a cooperative-sticky follow-up in our probes.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::ours::{OurEvent, OurMember, OurMemberSpec};
use support::{unique_name, BrokerKind, MockCluster, MockOptions};

const WAIT: Duration = Duration::from_secs(30);

fn all_partitions(topic: &str, n: i32) -> BTreeSet<(String, i32)> {
    (0..n).map(|p| (topic.to_string(), p)).collect()
}

/// Every partition owned by exactly one member.
fn exactly_once(topic: &str, n: i32, members: &[&BTreeSet<(String, i32)>]) -> Result<(), String> {
    let mut owners: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for owned in members {
        for tp in owned.iter() {
            *owners.entry(tp.clone()).or_default() += 1;
        }
    }
    let expected = all_partitions(topic, n);
    let bad: Vec<_> = expected
        .iter()
        .filter(|tp| owners.get(*tp).copied().unwrap_or(0) != 1)
        .collect();
    if bad.is_empty() && owners.len() == expected.len() {
        Ok(())
    } else {
        Err(format!("ownership not exactly-once: {owners:?}"))
    }
}

/// Waits until every partition is owned by exactly one member and every member owns some.
fn wait_exactly_once(topic: &str, n: i32, members: &[&OurMember]) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let owned: Vec<_> = members.iter().map(|m| m.owned()).collect();
        let refs: Vec<_> = owned.iter().collect();
        let everyone = if owned.iter().all(|o| !o.is_empty()) {
            exactly_once(topic, n, &refs)
        } else {
            Err(format!("a member owns nothing yet: {owned:?}"))
        };
        match everyone {
            Ok(()) => return,
            Err(e) if std::time::Instant::now() > deadline => {
                let events: Vec<_> = members.iter().map(|m| m.events()).collect();
                panic!("{e}; events: {events:#?}");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn generation_of_last_assign(events: &[OurEvent]) -> Option<i32> {
    events.iter().rev().find_map(|e| match e {
        OurEvent::Assigned(_, g) => Some(*g),
        _ => None,
    })
}

fn mock_with_topic(topic: &str, partitions: u32, brokers: u32) -> MockCluster {
    MockCluster::start(MockOptions {
        brokers,
        topics: vec![(topic.to_string(), partitions)],
        ..MockOptions::default()
    })
}

/// Eager range on both brokers: one member takes everything, a second splits it, closing the
/// second hands everything back, and the eager protocol revokes before every rejoin.
#[test]
fn eager_members_split_and_hand_back_on_both_brokers() {
    for kind in BrokerKind::ALL {
        let broker = kind.start();
        let topic = unique_name("orders");
        broker.create_topic(&topic, 6);
        let group = unique_name("group");
        let spec = OurMemberSpec::new(&broker.bootstrap(), &group, &topic, "range");
        let a = OurMember::start(spec.clone());
        a.wait_for("a owns all", WAIT, |_, owned| owned.len() == 6)
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let b = OurMember::start(spec.clone());
        wait_exactly_once(&topic, 6, &[&a, &b]);
        assert_eq!((a.owned().len(), b.owned().len()), (3, 3), "{kind:?}");
        // Eager: a revoked all six before rejoining, in the old generation.
        assert!(
            a.events()
                .iter()
                .any(|e| matches!(e, OurEvent::Revoked(p, _) if p.len() == 6)),
            "{kind:?}: {:?}",
            a.events()
        );
        let b_events = b.close();
        assert!(b_events
            .iter()
            .any(|e| matches!(e, OurEvent::Revoked(p, _) if p.len() == 3)));
        a.wait_for("a owns all again", WAIT, |_, owned| owned.len() == 6)
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        drop(broker);
    }
}

/// Cooperative-sticky (mock): a joining member receives partitions only after their owner revoked
/// them, the owner never loses a partition it keeps, and nothing is owned twice at any instant.
#[test]
fn cooperative_sticky_moves_only_what_moves_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 6, 1);
    let group = unique_name("group");
    let spec = OurMemberSpec::new(mock.bootstrap(), &group, &topic, "cooperative-sticky");
    let a = OurMember::start(spec.clone());
    a.wait_for("a owns all", WAIT, |_, owned| owned.len() == 6)
        .unwrap();
    let b = OurMember::start(spec);
    wait_exactly_once(&topic, 6, &[&a, &b]);
    let kept = a.owned();
    assert_eq!(kept.len(), 3);
    let revoked_from_a: BTreeSet<_> = a
        .events()
        .iter()
        .filter_map(|e| match e {
            OurEvent::Revoked(p, _) => Some(p.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(revoked_from_a.len(), 3, "{:?}", a.events());
    assert!(
        revoked_from_a.is_disjoint(&kept),
        "a partition a kept was revoked: {:?}",
        a.events()
    );
    assert!(a.events().iter().all(|e| !matches!(e, OurEvent::Lost(..))));
}

/// Heartbeat answered REBALANCE_IN_PROGRESS (mock): the member rejoins in a new generation
/// without losing anything.
#[test]
fn heartbeat_rebalance_in_progress_rejoins_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 4, 1);
    let spec = OurMemberSpec::new(mock.bootstrap(), &unique_name("group"), &topic, "range");
    let a = OurMember::start(spec);
    a.wait_for("joined", WAIT, |_, owned| owned.len() == 4)
        .unwrap();
    let first = generation_of_last_assign(&a.events()).unwrap();
    mock.must("push_errors Heartbeat REBALANCE_IN_PROGRESS");
    a.wait_for("a later generation", WAIT, |events, owned| {
        owned.len() == 4 && generation_of_last_assign(events).is_some_and(|g| g > first)
    })
    .unwrap();
    assert!(a
        .events()
        .iter()
        .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Fenced(..))));
}

/// Heartbeat answered ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (mock): the assignment is lost
/// (fenced at once through the hook, reported as lost, never revoked), then the member rejoins.
#[test]
fn heartbeat_fencing_errors_lose_the_assignment_then_rejoin_mock() {
    for error in ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"] {
        let topic = unique_name("orders");
        let mock = mock_with_topic(&topic, 4, 1);
        let spec = OurMemberSpec::new(mock.bootstrap(), &unique_name("group"), &topic, "range");
        let a = OurMember::start(spec);
        a.wait_for("joined", WAIT, |_, owned| owned.len() == 4)
            .unwrap();
        mock.must(&format!("push_errors Heartbeat {error}"));
        a.wait_for("fenced, lost, and assigned again", WAIT, |events, owned| {
            let fenced = events
                .iter()
                .position(|e| matches!(e, OurEvent::Fenced(p) if p.len() == 4));
            let lost = events
                .iter()
                .position(|e| matches!(e, OurEvent::Lost(p, _) if p.len() == 4));
            let reassigned = events
                .iter()
                .rposition(|e| matches!(e, OurEvent::Assigned(p, _) if p.len() == 4));
            matches!((fenced, lost, reassigned), (Some(f), Some(l), Some(r)) if f < l && l < r)
                && owned.len() == 4
        })
        .unwrap_or_else(|e| panic!("{error}: {e}"));
        // A lost partition is never revoked (a revocation would commit).
        let events = a.events();
        let lost_at = events
            .iter()
            .position(|e| matches!(e, OurEvent::Lost(..)))
            .unwrap();
        assert!(
            !events[..lost_at]
                .iter()
                .any(|e| matches!(e, OurEvent::Revoked(..))),
            "{error}: {events:?}"
        );
    }
}

/// JoinGroup and SyncGroup errors (mock): transient ones are retried until the member joins.
#[test]
fn join_and_sync_errors_are_retried_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 2, 1);
    mock.must(
        "push_errors JoinGroup COORDINATOR_NOT_AVAILABLE REBALANCE_IN_PROGRESS NOT_COORDINATOR",
    );
    mock.must("push_errors SyncGroup REBALANCE_IN_PROGRESS");
    let spec = OurMemberSpec::new(
        mock.bootstrap(),
        &unique_name("group"),
        &topic,
        "roundrobin",
    );
    let a = OurMember::start(spec);
    a.wait_for("joined despite errors", WAIT, |_, owned| owned.len() == 2)
        .unwrap();
    assert!(a.events().iter().all(|e| !matches!(e, OurEvent::Error(_))));
}

/// A fatal JoinGroup error is surfaced with a clear message (mock).
#[test]
fn fatal_join_error_is_reported_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 2, 1);
    mock.must("push_errors JoinGroup GROUP_AUTHORIZATION_FAILED");
    let spec = OurMemberSpec::new(mock.bootstrap(), &unique_name("group"), &topic, "range");
    let a = OurMember::start(spec);
    a.wait_for("an error", WAIT, |events, _| {
        events.iter().any(|e| matches!(e, OurEvent::Error(m) if m.contains("GroupAuthorizationFailed") || m.contains("authorized")))
    })
    .unwrap();
}

/// FENCED_INSTANCE_ID on a heartbeat (mock): fatal, the assignment is fenced, and the message
/// names the duplicated group.instance.id.
#[test]
fn fenced_instance_id_is_fatal_and_named_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 2, 1);
    let mut spec = OurMemberSpec::new(mock.bootstrap(), &unique_name("group"), &topic, "range");
    spec.instance_id = Some("worker-7".to_string());
    let a = OurMember::start(spec);
    a.wait_for("joined", WAIT, |_, owned| owned.len() == 2)
        .unwrap();
    mock.must("push_errors Heartbeat FENCED_INSTANCE_ID");
    a.wait_for("fatal error naming the instance", WAIT, |events, _| {
        events
            .iter()
            .any(|e| matches!(e, OurEvent::Error(m) if m.contains("worker-7")))
    })
    .unwrap();
    assert!(a
        .events()
        .iter()
        .any(|e| matches!(e, OurEvent::Fenced(p) if p.len() == 2)));
}

/// The coordinator goes down and the group moves to another broker (mock, 3 brokers): the member
/// rediscovers it and stays (or becomes again) the owner of every partition.
#[test]
fn coordinator_down_and_moved_is_rediscovered_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 3, 3);
    let group = unique_name("group");
    mock.must(&format!("coordinator group {group} 1"));
    let spec = OurMemberSpec::new(mock.bootstrap(), &group, &topic, "range");
    let a = OurMember::start(spec);
    a.wait_for("joined", WAIT, |_, owned| owned.len() == 3)
        .unwrap();
    mock.must(&format!("coordinator group {group} 2"));
    mock.must("broker_down 1");
    // A second member can only get its share if `a` found the new coordinator and took part in
    // the rebalance there.
    let b = OurMember::start(OurMemberSpec::new(
        mock.bootstrap(),
        &group,
        &topic,
        "range",
    ));
    wait_exactly_once(&topic, 3, &[&a, &b]);
    mock.must("broker_up 1");
    for member in [&a, &b] {
        let events = member.events();
        assert!(
            events.iter().all(|e| !matches!(e, OurEvent::Error(_))),
            "{events:?}"
        );
    }
}

/// A poll thread stuck past max.poll.interval.ms (mock): the heartbeat thread leaves the group and
/// fences the assignment as lost; when the thread polls again, the member rejoins cleanly.
#[test]
fn poll_timeout_leaves_fences_and_rejoins_mock() {
    let topic = unique_name("orders");
    let mock = mock_with_topic(&topic, 2, 1);
    let mut spec = OurMemberSpec::new(mock.bootstrap(), &unique_name("group"), &topic, "range");
    spec.max_poll_interval_ms = 1500;
    let a = OurMember::start(spec);
    a.wait_for("joined", WAIT, |_, owned| owned.len() == 2)
        .unwrap();
    a.stall(Duration::from_millis(3000));
    a.wait_for("fenced by the poll timeout", WAIT, |events, _| {
        events
            .iter()
            .any(|e| matches!(e, OurEvent::Fenced(p) if p.len() == 2))
    })
    .unwrap();
    a.wait_for(
        "lost reported, then assigned again",
        WAIT,
        |events, owned| {
            let lost = events
                .iter()
                .position(|e| matches!(e, OurEvent::Lost(_, r) if r.contains("PollTimeout")));
            let again = events
                .iter()
                .rposition(|e| matches!(e, OurEvent::Assigned(p, _) if p.len() == 2));
            matches!((lost, again), (Some(l), Some(r)) if l < r) && owned.len() == 2
        },
    )
    .unwrap();
}

/// Static membership: a static member that restarts within the session timeout gets the same
/// partitions back, and the other member keeps its own partitions and loses nothing.
///
/// KIP-345 also promises that the others see no rebalance at all; that is asserted on tansu, which
/// implements it (it needs a 10 s session there: tansu holds a static member's JoinGroup for about
/// half the session timeout and its SyncGroup for about 3 s while the old incarnation's session
/// runs). librdkafka's mock has no static membership (it matches members by member id only), so
/// there the restarted member is a new member and the survivor is rebalanced.
fn static_member_restart_keeps_its_partitions(kind: BrokerKind) {
    let broker = kind.start();
    let topic = unique_name("orders");
    broker.create_topic(&topic, 4);
    let group = unique_name("group");
    let mut spec_a = OurMemberSpec::new(&broker.bootstrap(), &group, &topic, "range");
    spec_a.instance_id = Some("static-a".to_string());
    if kind == BrokerKind::Tansu {
        spec_a.session_timeout_ms = 10_000;
    }
    let mut spec_b = spec_a.clone();
    spec_b.instance_id = Some("static-b".to_string());
    let a = OurMember::start(spec_a.clone());
    let b = OurMember::start(spec_b);
    wait_exactly_once(&topic, 4, &[&a, &b]);
    // Let the group settle: no event for a second.
    let mut seen = b.events().len();
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = b.events().len();
        if now == seen {
            break;
        }
        seen = now;
    }
    let (a_owned, b_owned) = (a.owned(), b.owned());
    let b_events_before = b.events().len();
    let closed = a.close();
    assert!(
        closed.iter().any(|e| matches!(e, OurEvent::Revoked(..))),
        "{kind:?}: closing commits through a revocation: {closed:?}"
    );
    let a2 = OurMember::start(spec_a);
    a2.wait_for("same partitions back", WAIT, |_, owned| owned == &a_owned)
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    wait_exactly_once(&topic, 4, &[&a2, &b]);
    assert_eq!(b.owned(), b_owned, "{kind:?}");
    let b_events = b.events();
    assert!(
        b_events
            .iter()
            .all(|e| !matches!(e, OurEvent::Lost(..) | OurEvent::Fenced(..))),
        "{kind:?}: {b_events:?}"
    );
    if kind == BrokerKind::Tansu {
        assert_eq!(
            &b_events[b_events_before..],
            &[],
            "{kind:?}: the other static member saw a rebalance"
        );
    }
}

#[test]
fn static_member_restart_keeps_its_partitions_mock() {
    static_member_restart_keeps_its_partitions(BrokerKind::Mock);
}

#[test]
fn static_member_restart_keeps_its_partitions_tansu() {
    static_member_restart_keeps_its_partitions(BrokerKind::Tansu);
}

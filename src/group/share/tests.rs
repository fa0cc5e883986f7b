//! The share-group machine through whole lives, time passed in: join, assignments by topic id,
//! fences, coordinator moves, subscription changes, fatal answers and the leave.

use std::time::{Duration, Instant};

use super::*;
use crate::group::ids::TopicId;
use crate::group::outcome::GroupApi;
use crate::wire::KafkaCode;
use crate::TopicPartition;

const ORDERS: TopicId = TopicId([1; 16]);
const FILLS: TopicId = TopicId([2; 16]);
const MS: Duration = Duration::from_millis(1);

fn machine() -> ShareGroupMachine {
    ShareGroupMachine::new(ShareMachineConfig {
        group_id: "g".into(),
        member_id: "m-1".into(),
        topics: vec!["orders".into(), "fills".into(), "orders".into()],
        rack: Some("zone-a".into()),
        retry_backoff: 100 * MS,
        retry_backoff_max: 400 * MS,
    })
}

fn ok(epoch: i32, assignment: Option<ShareIdAssignment>) -> ShareHeartbeatAnswer {
    ShareHeartbeatAnswer {
        error: KafkaCode::NONE,
        error_message: None,
        member_epoch: epoch,
        heartbeat_interval_ms: 500,
        assignment,
    }
}

fn err(code: KafkaCode) -> ShareHeartbeatAnswer {
    ShareHeartbeatAnswer {
        error: code,
        error_message: Some("said the broker".into()),
        member_epoch: -1,
        heartbeat_interval_ms: 0,
        assignment: None,
    }
}

fn tps(list: &[(&str, i32)]) -> std::collections::BTreeSet<TopicPartition> {
    list.iter()
        .map(|(t, p)| TopicPartition::new(*t, *p))
        .collect()
}

/// A member that joined at `t0` and holds orders-0, orders-1 at epoch 3 (both names known).
fn joined(t0: Instant) -> ShareGroupMachine {
    let mut m = machine();
    m.coordinator_found();
    m.poll_transmit(t0).expect("join");
    m.on_response(t0, ok(3, Some([(ORDERS, vec![0, 1])].into())));
    let ids = m.poll_metadata(t0).expect("look-up");
    assert_eq!(ids, vec![ORDERS]);
    m.on_metadata(t0, [(ORDERS, "orders"), (FILLS, "fills")]);
    assert_eq!(
        m.take_assignment_change().map(|a| (a.epoch, a.partitions)),
        Some((3, tps(&[("orders", 0), ("orders", 1)])))
    );
    m
}

#[test]
fn the_join_carries_every_field_and_later_heartbeats_none_at_the_broker_interval() {
    let t0 = Instant::now();
    let mut m = machine();
    assert!(m.needs_coordinator());
    assert_eq!(
        m.poll_transmit(t0),
        None,
        "nothing before the coordinator is known"
    );
    m.coordinator_found();
    let join = m.poll_transmit(t0).expect("join due at once");
    assert_eq!(
        join,
        ShareHeartbeat {
            group_id: "g".into(),
            member_id: "m-1".into(),
            member_epoch: SHARE_JOIN_EPOCH,
            rack_id: Some("zone-a".into()),
            subscribed_topic_names: Some(vec!["fills".into(), "orders".into()]),
        }
    );
    assert_eq!(m.poll_transmit(t0), None, "not again before the answer");
    assert!(!m.has_joined());
    // Kafka 4.4 answers a join with its epoch and an empty assignment: the share partitions
    // are initialised first, and assigned at the next group epoch.
    m.on_response(t0 + MS, ok(2, Some(Default::default())));
    assert!(m.has_joined());
    assert_eq!(m.state(), ShareState::Stable);
    assert_eq!(
        m.take_assignment_change(),
        Some(ShareAssignment {
            epoch: 2,
            partitions: Default::default(),
            fenced: 0,
        })
    );
    assert_eq!(m.interval(), 500 * MS);
    assert_eq!(m.poll_timeout(), Some(t0 + 501 * MS));
    assert_eq!(m.poll_transmit(t0 + 500 * MS), None);
    let hb = m.poll_transmit(t0 + 501 * MS).expect("due");
    assert_eq!(
        (hb.member_epoch, hb.rack_id, hb.subscribed_topic_names),
        (2, None, None)
    );
    assert_eq!(m.member_id(), "m-1");
}

#[test]
fn an_assignment_is_published_once_its_topic_ids_are_named_and_names_are_kept() {
    let t0 = Instant::now();
    let mut m = joined(t0);
    let t1 = t0 + 600 * MS;
    m.poll_transmit(t1).expect("due");
    m.on_response(
        t1,
        ok(4, Some([(ORDERS, vec![2]), (FILLS, vec![0])].into())),
    );
    assert_eq!(m.poll_metadata(t1), None, "both names known from before");
    let a = m.take_assignment_change().expect("published at once");
    assert_eq!(a.epoch, 4);
    assert_eq!(a.partitions, tps(&[("orders", 2), ("fills", 0)]));
    // An answer without an assignment changes nothing.
    let t2 = t1 + 600 * MS;
    m.poll_transmit(t2).expect("due");
    m.on_response(t2, ok(4, None));
    assert_eq!(m.take_assignment_change(), None);
    assert_eq!(m.assignment().epoch, 4);
}

#[test]
fn an_unnamed_topic_id_holds_the_assignment_for_a_few_look_ups_then_the_rest_is_published() {
    let t0 = Instant::now();
    let mut m = machine();
    m.coordinator_found();
    m.poll_transmit(t0).expect("join");
    m.on_response(
        t0,
        ok(2, Some([(ORDERS, vec![0]), (FILLS, vec![1])].into())),
    );
    let mut now = t0;
    let mut lookups = 0;
    while m.take_assignment_change().is_none() {
        let ids = m.poll_metadata(now).unwrap_or_default();
        if !ids.is_empty() {
            lookups += 1;
            assert!(ids.contains(&FILLS), "{ids:?}");
            m.on_metadata(now, [(ORDERS, "orders")]);
        }
        now += 50 * MS;
        assert!(lookups <= 3, "published after at most three look-ups");
    }
    assert_eq!(lookups, 3);
    assert_eq!(m.assignment().partitions, tps(&[("orders", 0)]));
    // The name arrives later: the rest follows, at the same epoch.
    let at = m.poll_timeout().expect("a look-up is still due");
    let ids = m.poll_metadata(at.max(now)).expect("asked again");
    assert_eq!(ids, vec![FILLS]);
    m.on_metadata(at.max(now), [(FILLS, "fills")]);
    let a = m.take_assignment_change().expect("completed");
    assert_eq!(
        (a.epoch, a.partitions),
        (2, tps(&[("orders", 0), ("fills", 1)]))
    );
    assert_eq!(m.poll_metadata(now + Duration::from_secs(10)), None);
}

#[test]
fn a_fenced_member_drops_its_assignment_and_rejoins_at_epoch_0_with_the_same_member_id() {
    for code in [KafkaCode::UNKNOWN_MEMBER_ID, KafkaCode::FENCED_MEMBER_EPOCH] {
        let t0 = Instant::now();
        let mut m = joined(t0);
        let t1 = t0 + 600 * MS;
        m.poll_transmit(t1).expect("due");
        m.on_response(t1, err(code));
        assert_eq!(m.state(), ShareState::Joining, "{code}");
        assert_eq!(
            m.take_assignment_change(),
            Some(ShareAssignment {
                epoch: SHARE_JOIN_EPOCH,
                partitions: Default::default(),
                fenced: 1,
            }),
            "{code}: the assignment is gone at once"
        );
        let rejoin = m.poll_transmit(t1).expect("rejoin at once");
        assert_eq!(rejoin.member_id, "m-1", "{code}");
        assert_eq!(rejoin.member_epoch, SHARE_JOIN_EPOCH, "{code}");
        assert_eq!(rejoin.rack_id.as_deref(), Some("zone-a"), "{code}");
        assert_eq!(
            rejoin.subscribed_topic_names.map(|t| t.len()),
            Some(2),
            "{code}"
        );
        m.on_response(t1, ok(6, Some([(ORDERS, vec![0, 1])].into())));
        assert_eq!(m.assignment().epoch, 6, "{code}");
        assert_eq!(m.fatal(), None);
    }
}

#[test]
fn a_fence_stays_counted_in_the_assignment_after_the_rejoin_answer() {
    let t0 = Instant::now();
    let mut m = joined(t0);
    let before = m.assignment().clone();
    assert_eq!(before.fenced, 0);
    let t1 = t0 + 600 * MS;
    m.poll_transmit(t1).expect("due");
    m.on_response(t1, err(KafkaCode::FENCED_MEMBER_EPOCH));
    m.poll_transmit(t1).expect("rejoin at once");
    // The rejoin is answered with the same partitions before the fetch side looks: what it
    // reads must still say that the member was fenced (Kafka released its records).
    m.on_response(t1, ok(6, Some([(ORDERS, vec![0, 1])].into())));
    let after = m.take_assignment_change().expect("changed");
    assert_eq!((after.epoch, after.fenced), (6, 1));
    assert_ne!(after.fenced, before.fenced);
}

#[test]
fn a_moved_or_lost_coordinator_is_found_again_and_gets_the_full_heartbeat() {
    for code in [
        Some(KafkaCode::NOT_COORDINATOR),
        Some(KafkaCode::COORDINATOR_NOT_AVAILABLE),
        Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS),
        None, // the connection failed
    ] {
        let t0 = Instant::now();
        let mut m = joined(t0);
        let t1 = t0 + 600 * MS;
        m.poll_transmit(t1).expect("due");
        match code {
            Some(code) => m.on_response(t1, err(code)),
            None => m.on_transport_error(t1),
        }
        assert!(m.needs_coordinator(), "{code:?}");
        assert_eq!(
            m.poll_transmit(t1 + Duration::from_secs(9)),
            None,
            "{code:?}"
        );
        assert_eq!(m.take_assignment_change(), None, "{code:?}: kept meanwhile");
        assert_eq!(m.assignment().partitions.len(), 2, "{code:?}");
        m.coordinator_found();
        let hb = m.poll_transmit(t1 + 10 * MS).expect("at once");
        assert_eq!(hb.member_epoch, 3, "{code:?}: the epoch is kept");
        assert!(
            hb.rack_id.is_some() && hb.subscribed_topic_names.is_some(),
            "{code:?}"
        );
        m.on_response(t1 + 20 * MS, ok(3, None));
        let next = m.poll_transmit(t1 + 600 * MS).expect("due");
        assert_eq!(next.subscribed_topic_names, None, "{code:?}: short again");
    }
}

#[test]
fn a_new_subscription_goes_out_at_once_and_once() {
    let t0 = Instant::now();
    let mut m = joined(t0);
    m.set_topics(vec!["fills".into(), "orders".into()]);
    assert_eq!(
        m.poll_transmit(t0 + MS),
        None,
        "the same topics: nothing to send"
    );
    m.set_topics(vec!["payments".into()]);
    let hb = m.poll_transmit(t0 + MS).expect("at once");
    assert_eq!(
        hb.subscribed_topic_names,
        Some(vec!["payments".to_string()])
    );
    assert_eq!(hb.rack_id, None);
    // Lost: sent again, with everything.
    m.on_transport_error(t0 + 2 * MS);
    m.coordinator_found();
    let hb = m.poll_transmit(t0 + 3 * MS).expect("again");
    assert_eq!(
        hb.subscribed_topic_names,
        Some(vec!["payments".to_string()])
    );
    m.on_response(t0 + 4 * MS, ok(3, None));
    let hb = m.poll_transmit(t0 + 600 * MS).expect("due");
    assert_eq!(hb.subscribed_topic_names, None);
    assert_eq!(m.topics(), ["payments".to_string()]);
}

#[test]
fn fatal_answers_end_the_membership_with_the_code_and_an_empty_assignment() {
    for code in [
        KafkaCode::GROUP_AUTHORIZATION_FAILED,
        KafkaCode::TOPIC_AUTHORIZATION_FAILED,
        KafkaCode::GROUP_MAX_SIZE_REACHED,
        KafkaCode::INVALID_REQUEST,
        KafkaCode::UNSUPPORTED_VERSION,
        KafkaCode::INVALID_GROUP_ID,
    ] {
        let t0 = Instant::now();
        let mut m = joined(t0);
        m.poll_transmit(t0 + 600 * MS).expect("due");
        m.on_response(t0 + 600 * MS, err(code));
        assert_eq!(m.state(), ShareState::Fatal, "{code}");
        let f = m.fatal().expect("fatal").clone();
        assert_eq!((f.api, f.code), (GroupApi::ShareGroupHeartbeat, code));
        assert_eq!(
            m.take_assignment_change(),
            Some(ShareAssignment {
                epoch: SHARE_LEAVE_EPOCH,
                partitions: Default::default(),
                fenced: 0,
            })
        );
        assert_eq!(m.poll_transmit(t0 + Duration::from_secs(60)), None);
        assert_eq!(m.poll_timeout(), None);
        assert!(!m.needs_coordinator());
    }
}

#[test]
fn a_broker_without_share_groups_is_fatal_naming_share_version() {
    let mut m = machine();
    m.on_unsupported("ShareGroupHeartbeat: we speak v1-v1, the broker none");
    let f = m.fatal().expect("fatal");
    assert_eq!(f.code, KafkaCode::UNSUPPORTED_VERSION);
    assert!(f.to_string().contains("share.version"), "{f}");
    assert!(f.to_string().contains("the broker none"), "{f}");
}

#[test]
fn an_unlisted_retriable_code_is_retried_with_a_capped_doubling_backoff() {
    let t0 = Instant::now();
    let mut m = joined(t0);
    let mut now = t0 + 600 * MS;
    let mut waits = Vec::new();
    for _ in 0..4 {
        m.poll_transmit(now).expect("due");
        m.on_response(now, err(KafkaCode::REQUEST_TIMED_OUT));
        let at = m.poll_timeout().expect("retry");
        waits.push(at - now);
        now = at;
    }
    assert_eq!(waits, vec![100 * MS, 200 * MS, 400 * MS, 400 * MS]);
    let hb = m.poll_transmit(now).expect("retry due");
    assert!(
        hb.subscribed_topic_names.is_some(),
        "the full form after a failure"
    );
    m.on_response(now, ok(3, None));
    assert_eq!(
        m.poll_timeout(),
        Some(now + 500 * MS),
        "the broker's interval again"
    );
}

#[test]
fn leaving_gives_the_assignment_up_at_once_and_sends_epoch_minus_one_until_answered() {
    let t0 = Instant::now();
    let mut m = joined(t0);
    m.leave();
    assert_eq!(
        m.take_assignment_change()
            .map(|a| (a.epoch, a.partitions.len())),
        Some((SHARE_LEAVE_EPOCH, 0))
    );
    let hb = m.poll_transmit(t0 + MS).expect("at once");
    assert_eq!(hb.member_epoch, SHARE_LEAVE_EPOCH);
    assert_eq!((hb.rack_id, hb.subscribed_topic_names), (None, None));
    // The coordinator moved: the leave goes to the new one.
    m.on_response(t0 + 2 * MS, err(KafkaCode::NOT_COORDINATOR));
    assert_eq!(m.state(), ShareState::Leaving);
    assert!(m.needs_coordinator());
    m.coordinator_found();
    let hb = m.poll_transmit(t0 + 3 * MS).expect("again");
    assert_eq!(hb.member_epoch, SHARE_LEAVE_EPOCH);
    // Even UNKNOWN_MEMBER_ID ends a leave: the broker holds nothing of us.
    m.on_response(t0 + 4 * MS, err(KafkaCode::UNKNOWN_MEMBER_ID));
    assert_eq!(m.state(), ShareState::Left);
    assert_eq!(m.poll_transmit(t0 + Duration::from_secs(9)), None);
    assert_eq!(m.fatal(), None);
}

#[test]
fn a_leave_that_cannot_be_sent_is_given_up() {
    let mut m = machine();
    m.leave();
    assert_eq!(m.state(), ShareState::Leaving);
    assert!(m.needs_coordinator(), "never found a coordinator");
    m.give_up_leaving();
    assert_eq!(m.state(), ShareState::Left);
    assert!(!m.needs_coordinator());
}

#[test]
fn an_answered_heartbeat_renews_the_session_from_its_send_time_and_a_refused_one_does_not() {
    let t0 = Instant::now();
    assert_eq!(machine().session_renewal(), None, "nothing answered yet");
    let mut m = joined(t0);
    // Three 500 ms intervals from the join's send time (`consumer_group/liveness.rs`).
    assert_eq!(m.session_renewal(), Some((t0, 1500 * MS)));
    let sent = t0 + 500 * MS;
    m.poll_transmit(sent).expect("heartbeat due");
    m.on_response(sent + 40 * MS, ok(3, None));
    assert_eq!(
        m.session_renewal(),
        Some((sent, 1500 * MS)),
        "counted from the send, not the answer"
    );
    let fenced_at = sent + 540 * MS;
    m.poll_transmit(fenced_at).expect("heartbeat due");
    m.on_response(fenced_at, err(KafkaCode::FENCED_MEMBER_EPOCH));
    assert_eq!(
        m.session_renewal(),
        Some((sent, 1500 * MS)),
        "a fence renews nothing"
    );
}

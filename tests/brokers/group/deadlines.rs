//! The clocks of the membership: what `max.poll.interval.ms` measures, and `poll`'s own timeout.
//!
//! `max.poll.interval.ms` bounds the time the application spends between polls (its handler),
//! not the time the library spends inside `poll` joining, syncing and running the rebalance
//! callbacks. And `poll(timeout)` takes any duration, `Duration::MAX` included. Real Kafka 4.x
//! (the run's shared broker).

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rebalance_guard::group::ClassicMember;
use rebalance_guard::TopicPartition;
use support::ours::{direct_member, Recorder};
use support::{unique_name, Broker, BrokerKind};

struct Setup {
    broker: Box<dyn Broker>,
    topic: String,
    group: String,
}

fn setup(partitions: u32) -> Setup {
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("deadline");
    broker.create_topic(&topic, partitions);
    Setup {
        broker,
        topic,
        group: unique_name("deadline-group"),
    }
}

fn member(s: &Setup, max_poll_interval: Duration) -> (ClassicMember, Arc<AtomicUsize>) {
    direct_member(
        &s.broker.bootstrap(),
        &s.group,
        vec![s.topic.clone()],
        max_poll_interval,
    )
}

mod kafka {
    use super::*;

    /// A rebalance callback that takes longer than max.poll.interval.ms (1 s here, the callback
    /// 1.5 s, heartbeats every 100 ms) does not evict the member: the time is the library's. The
    /// timer used to run from poll entry and the phase turned Stable before the callbacks, so the
    /// first heartbeat tick inside the callback declared a poll timeout, left the group and fenced
    /// the assignment that had just arrived.
    #[test]
    fn time_inside_the_rebalance_callbacks_does_not_count_against_max_poll_interval() {
        let s = setup(2);
        let (mut m, fenced) = member(&s, Duration::from_millis(1000));
        let mut listener = Recorder {
            assign_delay: Duration::from_millis(1500),
            ..Recorder::default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while listener.assigned.is_empty() {
            assert!(
                Instant::now() < deadline,
                "no assignment: {:?}",
                listener.lost
            );
            m.poll(&mut listener, Duration::from_millis(500))
                .expect("poll");
        }
        // Back in the application: it polls well within max.poll.interval.ms for a while.
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            m.poll(&mut listener, Duration::from_millis(100))
                .expect("poll");
            thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(listener.lost, Vec::new(), "nothing may be lost");
        assert_eq!(fenced.load(Ordering::SeqCst), 0, "the lost hook fired");
        assert_eq!(listener.assigned.len(), 2, "{:?}", listener.assigned);
        m.close(&mut listener).expect("close");
    }
    /// `poll(Duration::MAX)` means "until the member is stable": it used to panic computing its
    /// deadline (`Instant + Duration::MAX` overflows).
    #[test]
    fn poll_with_an_unbounded_timeout_returns_once_stable() {
        let s = setup(1);
        let (mut m, _) = member(&s, Duration::from_secs(30));
        let mut listener = Recorder::default();
        m.poll(&mut listener, Duration::MAX).expect("poll");
        assert_eq!(
            listener.assigned,
            vec![TopicPartition::new(s.topic.as_str(), 0)]
        );
        m.close(&mut listener).expect("close");
    }
    /// The leader looks up every subscribed topic in one Metadata request and skips those that do
    /// not exist (reported, as Java does). It used to look each one up on its own with the client's
    /// full retries (about 4.5 s per missing topic), so a subscription naming three topics not yet
    /// created held the join for longer than the 6 s session timeout.
    #[test]
    fn topics_that_do_not_exist_do_not_hold_up_the_leader() {
        let s = setup(2);
        let topics = vec![
            s.topic.clone(),
            unique_name("missing"),
            unique_name("missing"),
            unique_name("missing"),
        ];
        let (mut m, fenced) = direct_member(
            &s.broker.bootstrap(),
            &s.group,
            topics,
            Duration::from_secs(30),
        );
        let mut listener = Recorder::default();
        let started = Instant::now();
        while listener.assigned.len() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(6),
                "the join took longer than the session timeout: {:?}",
                started.elapsed()
            );
            m.poll(&mut listener, Duration::from_millis(500))
                .expect("poll");
        }
        assert_eq!(fenced.load(Ordering::SeqCst), 0);
        m.close(&mut listener).expect("close");
    }
}

mod mock {
    use super::*;

    /// A cooperative member keeps its partitions while it rejoins. If it cannot renew its session
    /// for `session.timeout.ms` meanwhile (every JoinGroup refused here, on the mock), the
    /// coordinator has very likely evicted it and given the partitions away: it fences them as
    /// lost, as it would while stable. It used to check the session only when stable, so a member
    /// stuck rejoining went on processing partitions it no longer owned.
    #[test]
    fn a_session_that_cannot_be_renewed_while_rejoining_fences_the_kept_partitions() {
        use support::ours::{OurEvent, OurMember, OurMemberSpec};
        use support::{MockCluster, MockOptions};
        let topic = unique_name("rejoin");
        let mock = MockCluster::start(MockOptions {
            topics: vec![(topic.clone(), 2)],
            ..MockOptions::default()
        });
        let mut spec = OurMemberSpec::new(
            mock.bootstrap(),
            &unique_name("rejoin-group"),
            &topic,
            "cooperative-sticky",
        );
        spec.session_timeout_ms = 3000;
        spec.heartbeat_interval_ms = 300;
        let a = OurMember::start(spec);
        a.wait_for("joined", Duration::from_secs(30), |_, owned| {
            owned.len() == 2
        })
        .unwrap();
        // The group asks for a rejoin, and then every JoinGroup for a long while is answered with a
        // retriable error: the member stays in its rejoin, holding both partitions, unable to
        // renew.
        let refusals = vec!["COORDINATOR_LOAD_IN_PROGRESS"; 200].join(" ");
        mock.must(&format!("push_errors JoinGroup {refusals}"));
        mock.must("push_errors Heartbeat REBALANCE_IN_PROGRESS");
        a.wait_for(
            "the kept partitions fenced as lost for an expired session",
            Duration::from_secs(20),
            |events, _| {
                events
                    .iter()
                    .any(|e| matches!(e, OurEvent::Lost(p, reason) if p.len() == 2 && reason.contains("SessionExpired")))
            },
        )
        .unwrap();
        mock.must("clear_errors JoinGroup");
    }
}

//! A lease that expires by time: a member cut off from its coordinator stops treating its
//! partitions as its own once the coordinator could have expired its session, on the thread
//! that asks, even while its heartbeat thread is stuck and has not noticed anything.
//!
//! On real Kafka 4.x. A proxy between the member and the broker holds all of the member's
//! traffic (the broker, shared with other tests, is untouched): the member's heartbeat request
//! sits in the proxy, unanswered, as in a network partition or while the process is frozen
//! (SIGSTOP, a debugger, a long stall). A second member joins directly; Kafka waits for the cut
//! off member until its session expires and then gives the partition to the second one.

use crate::support;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use rebalance_guard::consumer::Consumer;
use support::consumer::{committed, config, consumer_protocol_config, produce_to_each_partition};
use support::proxy::{Proxy, Traffic};
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(30);

/// What the proxy saw of the member's traffic: whether an OffsetCommit request was read since
/// the test armed the watch (the observer runs on the proxy's pump thread, also while the proxy
/// holds the traffic).
#[derive(Default)]
struct Watch {
    state: Mutex<Watched>,
    changed: Condvar,
}

#[derive(Default)]
struct Watched {
    /// Set by the test; from then on an OffsetCommit request is recorded here.
    commit_armed: bool,
    commit_seen: bool,
}

impl Watch {
    fn on(&self, traffic: Traffic) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Traffic::Request(key) = traffic {
            if key == ApiKey::OffsetCommit as i16 && state.commit_armed {
                state.commit_seen = true;
            }
        }
        self.changed.notify_all();
    }

    /// Waits (boundedly) until an OffsetCommit was read after arming.
    fn wait_for_commit(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while !state.commit_seen {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// Waits (boundedly) until the group's committed offset of partition 0 is at least `next`.
fn wait_until_committed(bootstrap: &str, group: &str, topic: &str, next: i64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let committed = committed(bootstrap, group, topic, 1)
            .get(&0)
            .copied()
            .flatten();
        if committed.is_some_and(|c| c >= next) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "committed {committed:?}, expected at least {next}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

mod kafka {
    use super::*;

    /// The record being processed when the member was cut off reads stale by the time the other
    /// member owns its partition, and no further record is handed out. The lease used to read
    /// current until the heartbeat thread, blocked in its unanswered request for request.timeout.ms
    /// (30 s), found out: a frozen member applied the effect of a record another member already
    /// owned.
    #[test]
    fn a_lease_expires_once_the_coordinator_could_have_expired_the_session() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("lease");
        let group = unique_name("lease-group");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&broker.bootstrap(), &topic, 1, 10);
        let proxy = Proxy::start(&broker.bootstrap());
        let settings = [
            ("session.timeout.ms", "3000"),
            ("heartbeat.interval.ms", "300"),
            ("max.poll.records", "5"),
        ];
        let mut cut_off = Consumer::subscribe(config(proxy.addr(), &group, &settings), &[&topic])
            .expect("subscribe");
        // Joined and fetching (a record handed out and dropped unprocessed comes again).
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "no records through the proxy");
            let mut batch = cut_off.poll(Duration::from_millis(200)).expect("poll");
            if batch.next().is_some() {
                break;
            }
        }
        let mut batch = cut_off.poll(Duration::from_millis(200)).expect("poll");
        let delivery = batch.next().expect("the record comes again");
        assert!(batch.is_current(&delivery));

        // Cut off: from here the coordinator hears nothing from this member.
        proxy.hold();
        let mut other =
            Consumer::subscribe(config(&broker.bootstrap(), &group, &settings), &[&topic])
                .expect("subscribe");
        let deadline = Instant::now() + WAIT;
        while other.assignment().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the other member never got the partition"
            );
            drop(other.poll(Duration::from_millis(100)).expect("poll"));
        }
        // The coordinator gave the partition away: the cut-off member must not act on it.
        assert!(
            !batch.is_current(&delivery),
            "the lease still reads current although the partition is another member's"
        );
        assert!(
            batch.next().is_none(),
            "no further record may be handed out"
        );
        drop(batch);
        proxy.release();
        drop(other.close());
        drop(cut_off.close());
    }
    /// A paced commit that the network holds stops nothing: the batch goes on handing out records
    /// (with current leases) while the OffsetCommit sits unanswered, and the commit lands once the
    /// network lets it through. The paced commit used to be made on the poll thread, between two
    /// records, and waited for the coordinator: a commit held for a broker's failure detection
    /// (about 9 s on a three-broker cluster) stopped every partition of the member that long.
    ///
    /// KIP-848 through a proxy that holds all of the member's traffic: the OffsetCommit is seen in
    /// the proxy (so it was sent and is in flight) before the batch is asked for the next record.
    /// The hold lasts well inside the member's session bound, so its leases stay current.
    #[test]
    fn a_paced_commit_held_in_the_network_does_not_stop_the_batch() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("lease-commit");
        let group = unique_name("lease-commit-group");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&broker.bootstrap(), &topic, 1, 40);
        let proxy = Proxy::start(&broker.bootstrap());
        let watch = Arc::new(Watch::default());
        {
            let watch = watch.clone();
            proxy.observe(move |traffic| watch.on(traffic));
        }
        let settings = [("commit.interval.ms", "100"), ("max.poll.records", "40")];
        let mut consumer = Consumer::subscribe(
            consumer_protocol_config(proxy.addr(), &group, &settings),
            &[&topic],
        )
        .expect("subscribe");
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "no records through the proxy");
            let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
            if batch.next().is_some() {
                break;
            }
        }
        let mut batch = consumer.poll(Duration::from_millis(200)).expect("poll");
        // A first paced commit, let through, so that the commit thread is connected.
        let first = batch.next().expect("the record comes again");
        let first_offset = first.record.offset;
        batch.complete(first);
        std::thread::sleep(Duration::from_millis(150));
        let second = batch.next().expect("a second record");
        let second_offset = second.record.offset;
        wait_until_committed(&broker.bootstrap(), &group, &topic, first_offset + 1);
        batch.complete(second);

        // From here the coordinator hears nothing from this member; one interval later the pacer
        // sends the second record's progress, which the proxy holds.
        proxy.hold();
        watch.state.lock().unwrap().commit_armed = true;
        std::thread::sleep(Duration::from_millis(150));
        let started = Instant::now();
        let third = batch
            .next()
            .expect("a third record while the commit is sent");
        assert!(
            watch.wait_for_commit(Duration::from_secs(3)),
            "the paced commit never reached the proxy"
        );
        batch.complete(third);
        // The commit is in flight and held: the batch goes on at once.
        let fourth = batch
            .next()
            .expect("a fourth record while the commit is held");
        let took = started.elapsed();
        assert!(
            batch.is_current(&fourth),
            "the hold is well inside the session bound: the lease must still read current"
        );
        assert!(
            took < Duration::from_secs(4),
            "handing out two records around a held commit took {took:?}"
        );
        batch.complete(fourth);
        proxy.release();
        wait_until_committed(&broker.bootstrap(), &group, &topic, second_offset + 1);
        drop(batch);
        drop(consumer.close());
    }
}

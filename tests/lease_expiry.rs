//! A lease that expires by time: a member cut off from its coordinator stops treating its
//! partitions as its own once the coordinator could have expired its session, on the thread
//! that asks, even while its heartbeat thread is stuck and has not noticed anything.
//!
//! On real Kafka 4.x. A proxy between the member and the broker holds all of the member's
//! traffic (the broker, shared with other tests, is untouched): the member's heartbeat request
//! sits in the proxy, unanswered, as in a network partition or while the process is frozen
//! (SIGSTOP, a debugger, a long stall). A second member joins directly; Kafka waits for the cut
//! off member until its session expires and then gives the partition to the second one.

mod support;

use std::time::{Duration, Instant};

use rebalance_guard::consumer::Consumer;
use support::consumer::{config, produce_to_each_partition};
use support::proxy::Proxy;
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(30);

/// The record being processed when the member was cut off reads stale by the time the other
/// member owns its partition, and no further record is handed out. The lease used to read
/// current until the heartbeat thread, blocked in its unanswered request for request.timeout.ms
/// (30 s), found out: a frozen member applied the effect of a record another member already
/// owned.
#[test]
fn a_lease_expires_once_the_coordinator_could_have_expired_the_session_kafka() {
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
    let mut cut_off =
        Consumer::subscribe(config(proxy.addr(), &group, &settings), &[&topic]).expect("subscribe");
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
    let mut other = Consumer::subscribe(config(&broker.bootstrap(), &group, &settings), &[&topic])
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

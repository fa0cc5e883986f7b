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

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use rebalance_guard::consumer::Consumer;
use support::consumer::{config, consumer_protocol_config, produce_to_each_partition};
use support::proxy::{Proxy, Traffic};
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

/// What the proxy saw of the member's traffic, and a switch that withholds the answers to its
/// heartbeats (the observer runs on the proxy's pump thread right before it forwards an answer,
/// so blocking there keeps the answer from the member).
#[derive(Default)]
struct Watch {
    state: Mutex<Watched>,
    changed: Condvar,
}

#[derive(Default)]
struct Watched {
    /// When the proxy last read a ConsumerGroupHeartbeat request: the member sent it no later, so
    /// no renewal of its session bound starts later than this.
    last_heartbeat_sent: Option<Instant>,
    /// Set by the test; from then on an OffsetCommit request is recorded here.
    commit_armed: bool,
    commit_seen: bool,
    /// While set, heartbeat answers wait in the proxy.
    withhold_heartbeat_answers: bool,
}

impl Watch {
    fn on(&self, traffic: Traffic) {
        let mut state = self.state.lock().unwrap();
        match traffic {
            Traffic::Request(key) if key == ApiKey::ConsumerGroupHeartbeat as i16 => {
                state.last_heartbeat_sent = Some(Instant::now());
            }
            Traffic::Request(key) if key == ApiKey::OffsetCommit as i16 && state.commit_armed => {
                state.commit_seen = true;
            }
            Traffic::Response(key) if key == ApiKey::ConsumerGroupHeartbeat as i16 => {
                while state.withhold_heartbeat_answers {
                    state = self.changed.wait(state).unwrap();
                }
            }
            _ => {}
        }
        self.changed.notify_all();
    }

    fn set_withholding(&self, on: bool) {
        self.state.lock().unwrap().withhold_heartbeat_answers = on;
        self.changed.notify_all();
    }
}

/// The session bound the member is configured with (`session.bound.ms`), well inside the shared
/// broker's 6 s consumer-protocol session.
const BOUND: Duration = Duration::from_millis(1500);

/// A record handed out right after a paced commit that blocked is admitted against the clock
/// read when the commit returned, not the one read before it: a member whose session bound lapsed
/// while the commit waited hands nothing out. `Batch::next` used to read the clock, make the
/// paced commit (which may block up to request.timeout.ms), then admit with the reading from
/// before the commit, so it handed out a record whose lease was already not current (and a
/// handler that checked nothing applied it, a zombie effect once the broker expires the member).
///
/// KIP-848 through a proxy: the member's traffic is held while `next()` is about to make a paced
/// commit (`commit.interval.ms=100`), and released from another thread once the bound has lapsed
/// but long before the broker's 6 s session ends. Why it is deterministic:
/// - the commit is blocked in the proxy (the helper waits until it saw the OffsetCommit request);
/// - the bound has lapsed at the release: every renewal starts at a heartbeat's send time, which
///   is no later than the proxy read it, and the helper releases `BOUND` + 300 ms after the last
///   heartbeat request the proxy read (the heartbeat thread sends no other while its request is
///   held);
/// - nothing renews the bound between the release and the check: the held heartbeat's answer
///   (whose renewal, from its send time, would have lapsed anyway) and every later one are
///   withheld in the proxy until the test has checked, and a renewal needs an answered
///   heartbeat sent after the release;
/// - nothing else fences the partition meanwhile: the membership thread, blocked in its
///   unanswered heartbeat, cannot declare the assignment lost.
#[test]
fn a_record_after_a_blocked_paced_commit_is_admitted_against_the_clock_after_the_commit_kafka() {
    let _ = env_logger::builder().is_test(true).try_init();
    let broker = BrokerKind::Kafka.start();
    let topic = unique_name("lease-commit");
    let group = unique_name("lease-commit-group");
    broker.create_topic(&topic, 1);
    produce_to_each_partition(&broker.bootstrap(), &topic, 1, 20);
    let proxy = Proxy::start(&broker.bootstrap());
    let watch = Arc::new(Watch::default());
    {
        let watch = watch.clone();
        proxy.observe(move |traffic| watch.on(traffic));
    }
    let bound = BOUND.as_millis().to_string();
    let settings = [
        ("commit.interval.ms", "100"),
        ("session.bound.ms", bound.as_str()),
        ("max.poll.records", "20"),
    ];
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
    let first = batch.next().expect("the record comes again");
    let kept = batch.next().expect("a second record in the batch");
    // Progress for the paced commit to carry, so that it sends a request.
    batch.complete(first);

    proxy.hold();
    watch.state.lock().unwrap().commit_armed = true;
    // The last commit was made before this point, so one interval from here the pacer is due.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        batch.is_current(&kept),
        "the session bound lapsed before the paced commit started; the scenario needs it valid"
    );
    let held_at = Instant::now();
    let releaser = {
        let watch = watch.clone();
        let proxy = &proxy;
        move || {
            let deadline = Instant::now() + WAIT;
            let mut state = watch.state.lock().unwrap();
            loop {
                assert!(
                    Instant::now() < deadline,
                    "the paced commit never reached the proxy"
                );
                let lapsed = state
                    .last_heartbeat_sent
                    .map(|sent| sent + BOUND + Duration::from_millis(300))
                    .expect("the member sent heartbeats");
                let now = Instant::now();
                if state.commit_seen && now >= lapsed {
                    break;
                }
                let wait = lapsed
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(10));
                state = watch.changed.wait_timeout(state, wait).unwrap().0;
            }
            state.withhold_heartbeat_answers = true;
            drop(state);
            assert!(
                held_at.elapsed() < Duration::from_secs(4),
                "released {:?} after the hold: too close to the broker's 6 s session",
                held_at.elapsed()
            );
            proxy.release();
        }
    };
    let handed = std::thread::scope(|scope| {
        let releasing = scope.spawn(releaser);
        // Blocks in the paced commit until the release.
        let handed = batch.next();
        releasing.join().expect("releaser");
        handed
    });
    let stale = handed
        .as_ref()
        .filter(|delivery| !batch.is_current(delivery))
        .map(|delivery| delivery.record.offset);
    watch.set_withholding(false);
    assert_eq!(
        stale, None,
        "a record was handed out after the paced commit returned although its lease was no \
         longer current (the session bound lapsed while the commit was held)"
    );
    assert!(
        handed.is_none(),
        "with the bound lapsed and every heartbeat answer withheld, nothing may be handed out"
    );
    drop(batch);
    drop(consumer.close());
}

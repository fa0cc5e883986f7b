//! A share group on three real Kafka 4.4 brokers while brokers fail: our share workers (processes
//! of the `share_worker` example) consume a replicated topic while the leader of its partitions
//! is killed and comes back, while a broker is frozen (SIGSTOP), and while the share group's
//! coordinator is restarted.
//!
//! What must hold: no order is lost; no effect is applied after its lease ended; and a repeat
//! (a record applied twice) happens only where its lock could have been lost with a broker: the
//! second delivery's count says the broker redelivered it.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rebalance_guard::TopicPartition;
use support::cluster::KafkaCluster;
use support::share::{
    all_effects, applications, wait_all_applied, worker_dir, Effect, ShareSetup, WorkerProcess,
};
use support::unique_name;

const BOUND: Duration = Duration::from_secs(90);
const PARTITIONS: i32 = 3;

/// Checks the run: nothing lost, nothing after its lease, every repeat a redelivery. Returns
/// the number of repeats.
fn check(effects: &[Effect], ids: &BTreeSet<String>, what: &str) -> usize {
    let applied: BTreeSet<&str> = effects.iter().map(|e| e.order.as_str()).collect();
    let lost: Vec<_> = ids
        .iter()
        .filter(|id| !applied.contains(id.as_str()))
        .collect();
    assert!(lost.is_empty(), "{what}: lost {lost:?}");
    let late: Vec<_> = effects
        .iter()
        .filter(|e| e.applied_ns >= e.deadline_ns)
        .collect();
    assert!(
        late.is_empty(),
        "{what}: effects after their lease: {late:?}"
    );
    let mut repeats = 0;
    for (order, applied) in applications(effects) {
        if applied.len() > 1 {
            repeats += applied.len() - 1;
            let mut by_time = applied.clone();
            by_time.sort_by_key(|e| e.applied_ns);
            for later in &by_time[1..] {
                assert!(
                    later.delivery_count >= 2,
                    "{what}: {order} repeated: {applied:?}"
                );
            }
        }
    }
    repeats
}

/// Kills the leader of the topic's partitions (kill -9) while two share workers consume, then
/// restarts it; pauses another broker past the controller's failure detection; restarts the
/// share group's coordinator. Orders keep being applied through all three; none is lost.
#[test]
fn a_share_group_survives_broker_failures() {
    let _ = env_logger::builder().is_test(true).try_init();
    let cluster = KafkaCluster::start(3);
    let topic = unique_name("share-cluster");
    cluster.create_topic(&topic, PARTITIONS as u32);
    let setup = ShareSetup::on(
        cluster.bootstrap().to_string(),
        topic.clone(),
        "share-cluster",
        5_000,
        None,
    );
    let dir = worker_dir("share-cluster");
    let mut a = WorkerProcess::start(&setup, &dir, "a", 2, 5, &[]);
    let mut b = WorkerProcess::start(&setup, &dir, "b", 2, 5, &[]);
    let mut ids: BTreeSet<String> = setup.produce_orders(PARTITIONS, 150).into_iter().collect();
    wait_all_applied(&[&a, &b], &ids, BOUND, "before any fault");

    // 1. The leader of partition 0 killed while records flow, then restarted.
    let leader = cluster.leader_of(&TopicPartition::new(topic.as_str(), 0));
    let started = Instant::now();
    cluster.kill(leader);
    ids.extend(setup.produce_orders(PARTITIONS, 150));
    cluster.restart(leader);
    // 2. A broker that is neither that leader nor the coordinator frozen for longer than the
    // controller's failure detection, then resumed.
    let coordinator = cluster.coordinator_of(&setup.group);
    let frozen = (1..=3)
        .find(|n| *n != leader && *n != coordinator)
        .unwrap_or(leader);
    cluster.pause(frozen);
    std::thread::sleep(Duration::from_secs(10));
    cluster.resume(frozen);
    // 3. The share group's coordinator restarted (a controlled shutdown, then started again).
    let coordinator = cluster.coordinator_of(&setup.group);
    cluster.stop(coordinator);
    cluster.restart(coordinator);
    ids.extend(setup.produce_orders(PARTITIONS, 150));

    wait_all_applied(&[&a, &b], &ids, BOUND, "after the faults");
    assert!(a.stop(Duration::from_secs(30)), "{}", a.output());
    assert!(b.stop(Duration::from_secs(30)), "{}", b.output());
    let repeats = check(&all_effects(&[&a, &b]), &ids, "broker failures");
    eprintln!(
        "share group through a killed leader (node {leader}), a frozen broker (node {frozen}) and \
         a restarted coordinator: {} records, {repeats} repeat(s), {:.1} s",
        ids.len(),
        started.elapsed().as_secs_f64()
    );
}

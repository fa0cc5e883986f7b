//! The held-open rebalance test, extended to a crash in the decoupled mode: the handler applies a
//! record's effect and the member dies before the record counts as complete. The next owner
//! redoes exactly that record, and the effect store, keyed by an idempotency key, shows it as a
//! repeat, never a loss.
//!
//! On real Kafka 4.x. The death is a proxy between the member and the broker that holds all of
//! its traffic from that moment (as a SIGKILL would: nothing more of it is committed or
//! heartbeated), while the handler that applied the effect never returns; a second member joins
//! directly and gets the partition once the dead member's session expires.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use rebalance_guard::consumer::{Consumer, WorkContext};
use rebalance_guard::wire::Record;
use support::consumer::{committed, config, produce_to_each_partition, wait_until};
use support::proxy::Proxy;
use support::{unique_name, BrokerKind};

const WAIT: Duration = Duration::from_secs(60);
/// Records in the partition.
const COUNT: i64 = 20;
/// The record whose effect is applied right before the member dies.
const FATAL: i64 = 10;

/// The effect store: per idempotency key (topic/partition/offset), who applied it, in order.
type Effects = Arc<Mutex<BTreeMap<String, Vec<&'static str>>>>;

fn apply(effects: &Effects, record: &Record, member: &'static str) {
    let key = format!("{}/{}/{}", record.topic, record.partition, record.offset);
    effects.lock().unwrap().entry(key).or_default().push(member);
}

/// A gate the dying handler waits at; opened only when the test cleans up.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, bool)>, // (reached, open)
    changed: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }
    fn reached(&self) -> bool {
        self.state.lock().unwrap().0
    }
    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

mod kafka {
    use super::*;

    /// A applies 0..=10 and dies right after 10's effect (before 10 is complete); B redoes 10 only
    /// (A's paced commits had committed 0..9), and the store holds every effect, 10 twice.
    #[test]
    fn a_crash_after_the_effect_before_completion_costs_the_next_owner_that_record_only() {
        let _ = env_logger::builder().is_test(true).try_init();
        let broker = BrokerKind::Kafka.start();
        let topic = unique_name("crash");
        let group = unique_name("crash-group");
        broker.create_topic(&topic, 1);
        produce_to_each_partition(&broker.bootstrap(), &topic, 1, COUNT as usize);
        let proxy = Proxy::start(&broker.bootstrap());
        let settings = [
            ("session.timeout.ms", "3000"),
            ("heartbeat.interval.ms", "300"),
            ("revoke.drain.timeout.ms", "1000"),
            ("commit.interval.ms", "100"),
        ];
        let effects: Effects = Arc::default();
        let gate = Arc::new(Gate::default());
        let stop_a = Arc::new(AtomicBool::new(false));
        let a = {
            let (config, topic) = (config(proxy.addr(), &group, &settings), topic.clone());
            let (effects, gate, stop) = (effects.clone(), gate.clone(), stop_a.clone());
            thread::spawn(move || {
                let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
                let handler =
                    move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
                        if ctx.is_current() {
                            apply(&effects, record, "a");
                        }
                        if record.offset == FATAL {
                            // The effect is applied; the member dies before the record is complete.
                            gate.wait();
                        }
                        Ok(())
                    };
                // A stale member's last run may end in an error once it hears its fate.
                let _ = consumer.run_with_workers(&stop, 2, 16, handler);
                drop(consumer.close());
            })
        };
        wait_until("A applied the fatal record's effect", WAIT, || {
            gate.reached()
        });
        wait_until("A's paced commit covered 0..9", WAIT, || {
            committed(&broker.bootstrap(), &group, &topic, 1).get(&0) == Some(&Some(FATAL))
        });
        // Dead: nothing more of A reaches the broker, and its handler never returns.
        proxy.hold();

        let stop_b = Arc::new(AtomicBool::new(false));
        let b = {
            let (config, topic) = (
                config(&broker.bootstrap(), &group, &settings),
                topic.clone(),
            );
            let (effects, stop) = (effects.clone(), stop_b.clone());
            thread::spawn(move || {
                let mut consumer = Consumer::subscribe(config, &[&topic]).expect("subscribe");
                let handler =
                    move |record: &Record, ctx: &WorkContext<'_>| -> Result<(), std::io::Error> {
                        if ctx.is_current() {
                            apply(&effects, record, "b");
                        }
                        Ok(())
                    };
                consumer
                    .run_with_workers(&stop, 2, 16, handler)
                    .expect("B's run");
                consumer.close().expect("B's close");
            })
        };
        wait_until("every record applied", WAIT, || {
            effects.lock().unwrap().len() == COUNT as usize
        });
        // B has no more work; give a late repeat, if any were coming, the chance to show.
        wait_until("B committed the end of the partition", WAIT, || {
            committed(&broker.bootstrap(), &group, &topic, 1).get(&0) == Some(&Some(COUNT))
        });
        stop_b.store(true, Ordering::SeqCst);
        b.join().expect("B");
        gate.open();
        stop_a.store(true, Ordering::SeqCst);
        proxy.release();
        a.join().expect("A");

        let effects = effects.lock().unwrap().clone();
        let by_offset: BTreeMap<i64, Vec<&str>> = effects
            .iter()
            .map(|(key, who)| {
                (
                    key.rsplit('/').next().unwrap().parse().unwrap(),
                    who.clone(),
                )
            })
            .collect();
        assert_eq!(
            by_offset.keys().copied().collect::<Vec<_>>(),
            (0..COUNT).collect::<Vec<_>>(),
            "every effect applied at least once (no loss): {by_offset:?}"
        );
        let repeats: Vec<(i64, Vec<&str>)> = by_offset
            .iter()
            .filter(|(_, who)| who.len() > 1)
            .map(|(o, who)| (*o, who.clone()))
            .collect();
        assert_eq!(
            repeats,
            vec![(FATAL, vec!["a", "b"])],
            "the one repeat is the record whose effect A applied before it died, redone by B"
        );
        for (offset, who) in &by_offset {
            let expected: &[&str] = if *offset < FATAL {
                &["a"]
            } else if *offset == FATAL {
                &["a", "b"]
            } else {
                &["b"]
            };
            assert_eq!(who.as_slice(), expected, "offset {offset}");
        }
    }
}

//! Benchmarks of the guard's hot path and of a large revocation.
//!
//! A plain harness (no benchmark framework dependency): each case runs a number of samples and
//! prints the median, with the minimum and maximum for a sense of spread. Run with
//! `cargo bench --bench guard`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rebalance_guard::guard::{GuardConfig, RebalanceGuard};
use rebalance_guard::TopicPartition;

const SAMPLES: usize = 31;

fn report(name: &str, unit: &str, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    println!(
        "{name:<48} median {:>10.1} {unit}   (min {:.1}, max {:.1}, {} samples)",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
}

fn per_op(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops as f64
}

/// `process_message` alone on one partition with u64 keys, in steady state: the idempotency set
/// is full (every insert evicts) and pending work is retired between samples, outside the timing.
fn admit_only(per_batch_clock: bool) {
    const OPS: usize = 10_000;
    let tp = TopicPartition::new("orders", 0);
    let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(GuardConfig {
        idempotency_capacity: 4096,
        ..GuardConfig::default()
    })
    .unwrap();
    guard.assign(std::slice::from_ref(&tp));
    let mut offset = 0i64;
    let mut now = guard.now();
    let mut samples = Vec::with_capacity(SAMPLES);
    for sample in 0..=SAMPLES {
        let mut leases = Vec::with_capacity(OPS);
        let start = Instant::now();
        for i in 0..OPS {
            let admitted = if per_batch_clock {
                // One clock read per 500-record batch, as the poll loop does.
                if i % 500 == 0 {
                    now = guard.now();
                }
                guard.process_message_at(now, &tp, offset, Some(offset as u64), ())
            } else {
                guard.process_message(&tp, offset, Some(offset as u64), ())
            };
            if let Ok(lease) = admitted {
                leases.push(lease);
            }
            offset += 1;
        }
        let elapsed = start.elapsed();
        for lease in &leases {
            guard.complete(lease).unwrap();
        }
        if sample > 0 {
            samples.push(per_op(elapsed, OPS));
        }
    }
    let name = if per_batch_clock {
        "process_message_at (u64 key, clock per batch)"
    } else {
        "process_message (u64 key, clock per message)"
    };
    report(name, "ns/msg", samples);
}

/// An order id as a number or as text, so one guard type serves every keyed case.
#[derive(PartialEq, Eq, Hash)]
enum Key {
    Id(u64),
    Text(String),
}

/// Admit then complete: what the synchronous poll loop pays per record, in steady state (the
/// idempotency set full, so every insert evicts).
fn admit_and_complete(key_kind: &str) {
    const OPS: usize = 10_000;
    let tp = TopicPartition::new("orders", 0);
    let keys: Vec<String> = (0..OPS * (SAMPLES + 1))
        .map(|i| format!("order-{i:012}"))
        .collect();
    let guard: RebalanceGuard<Key, ()> = RebalanceGuard::new(GuardConfig {
        idempotency_capacity: 4096,
        ..GuardConfig::default()
    })
    .unwrap();
    guard.assign(std::slice::from_ref(&tp));
    let mut samples = Vec::with_capacity(SAMPLES);
    for (sample, chunk) in keys.chunks(OPS).enumerate() {
        let base = (sample * OPS) as i64;
        let start = Instant::now();
        let mut now = guard.now();
        for (i, key) in chunk.iter().enumerate() {
            let key = match key_kind {
                "no" => None,
                "u64" => Some(Key::Id(base as u64 + i as u64)),
                _ => Some(Key::Text(key.clone())),
            };
            // One clock read per 500-record batch, as the poll loop does.
            if i % 500 == 0 {
                now = guard.now();
            }
            if let Ok(lease) = guard.process_message_at(now, &tp, base + i as i64, key, ()) {
                black_box(guard.complete(&lease).is_ok());
            }
        }
        if sample > 0 {
            samples.push(per_op(start.elapsed(), OPS));
        }
    }
    report(
        &format!("process_message_at + complete ({key_kind} key)"),
        "ns/msg",
        samples,
    );
}

/// `threads` threads admitting and completing on their own partitions of one guard, keyed or
/// not, with the key set in `shards` parts: what sharing the guard costs. The guard has a lock
/// per partition, so without keys the wall time per record should fall with each thread the
/// machine has a core for; with keys the threads meet on the key set unless it has several
/// shards. Prints wall and per-thread ns per record.
fn admit_threads(threads: usize, keyed: bool, shards: usize) {
    const OPS: usize = 50_000;
    let partitions: Vec<_> = (0..threads as i32)
        .map(|p| TopicPartition::new("orders", p))
        .collect();
    // One guard for every sample, in steady state: sample 0 is a warm-up, not counted, and the
    // offsets (and keys) go on across samples, so the key set fills and then replaces a key
    // with every insertion, as in a consumer that runs for hours.
    let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(GuardConfig {
        idempotency_shards: shards,
        ..GuardConfig::default()
    })
    .unwrap();
    guard.assign(&partitions);
    let mut samples = Vec::with_capacity(SAMPLES);
    for sample in 0..=SAMPLES {
        let first = (sample * OPS) as i64;
        let start = Instant::now();
        std::thread::scope(|scope| {
            for tp in &partitions {
                let guard = &guard;
                scope.spawn(move || {
                    let mut now = guard.now();
                    for offset in first..first + OPS as i64 {
                        // One clock read per 500-record batch, as the poll loop does.
                        if offset % 500 == 0 {
                            now = guard.now();
                        }
                        let key = keyed.then_some(((tp.partition as u64) << 32) | offset as u64);
                        if let Ok(lease) = guard.process_message_at(now, tp, offset, key, ()) {
                            black_box(guard.complete(&lease).is_ok());
                        }
                    }
                });
            }
        });
        if sample > 0 {
            samples.push(per_op(start.elapsed(), OPS * threads));
        }
    }
    let per_thread: Vec<f64> = samples.iter().map(|wall| wall * threads as f64).collect();
    let key = match (keyed, shards) {
        (false, _) => "no key".to_string(),
        (true, 1) => "u64 key".to_string(),
        (true, n) => format!("u64 key, {n} key shards"),
    };
    report(
        &format!("admit + complete, {threads} thread(s), {key}"),
        "ns/msg (wall)",
        samples,
    );
    report(
        &format!("admit + complete, {threads} thread(s), {key}"),
        "ns/msg (per thread)",
        per_thread,
    );
}

/// Revoking 1,000 partitions, each with 10 buffered messages, no-op flush and commit: the
/// guard's own share of a large eager revocation.
fn revoke_thousand_partitions() {
    const PARTITIONS: i32 = 1000;
    let partitions: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new("orders", p))
        .collect();
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let guard: RebalanceGuard<u64, ()> = RebalanceGuard::new(GuardConfig::default()).unwrap();
        guard.assign(&partitions);
        for tp in &partitions {
            for offset in 0..10 {
                let key = ((tp.partition as u64) << 32) | offset as u64;
                guard.process_message(tp, offset, Some(key), ()).unwrap();
            }
        }
        let start = Instant::now();
        let report = guard.revoke(
            &partitions,
            &mut |batch| {
                black_box(batch);
                Ok(())
            },
            Some(&mut |offsets| {
                black_box(offsets);
                Ok(())
            }),
        );
        let elapsed = start.elapsed();
        assert_eq!(report.map(|r| r.committed.len()).ok(), Some(1000));
        samples.push(elapsed.as_secs_f64() * 1e6);
    }
    report("revoke 1,000 partitions x 10 pending", "us", samples);
}

fn main() {
    // `cargo test --benches` runs bench targets with --bench absent; keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("guard benchmarks: run with `cargo bench --bench guard`");
        return;
    }
    // An optional argument selects the cases whose name contains it (for profiling one case).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    let cases: [(&str, fn()); 15] = [
        ("admit_only", || admit_only(false)),
        ("admit_only_batch_clock", || admit_only(true)),
        ("admit_complete_no_key", || admit_and_complete("no")),
        ("admit_complete_u64_key", || admit_and_complete("u64")),
        ("admit_complete_string_key", || admit_and_complete("string")),
        ("threads_1_no_key", || admit_threads(1, false, 1)),
        ("threads_2_no_key", || admit_threads(2, false, 1)),
        ("threads_4_no_key", || admit_threads(4, false, 1)),
        ("threads_1_u64_key", || admit_threads(1, true, 1)),
        ("threads_2_u64_key", || admit_threads(2, true, 1)),
        ("threads_4_u64_key", || admit_threads(4, true, 1)),
        ("threads_1_u64_key_16_shards", || admit_threads(1, true, 16)),
        ("threads_2_u64_key_16_shards", || admit_threads(2, true, 16)),
        ("threads_4_u64_key_16_shards", || admit_threads(4, true, 16)),
        ("revoke_thousand_partitions", revoke_thousand_partitions),
    ];
    for (name, case) in cases {
        if name.contains(&filter) {
            case();
        }
    }
}

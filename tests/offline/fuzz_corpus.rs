//! The fuzz corpus as ordinary tests: every seed, every file of the minimised corpus
//! (`fuzz/corpus/<target>/`) and every input that once crashed a target
//! (`fuzz/artifacts/<target>/`) runs through the same check the fuzz target runs
//! (`rebalance_guard::fuzzing`), on the stable toolchain, so a fixed bug stays fixed in CI.
//!
//! With `RG_WRITE_FUZZ_SEEDS=1` the seeds are also written into `fuzz/corpus/<target>/`, where
//! `cargo fuzz` starts from them.

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use rebalance_guard::fuzzing::{Target, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of one folder, sorted (none when it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Runs `target` on every input and fails listing each input whose check panicked.
fn replay(target: &Target, named: Vec<(String, Vec<u8>)>) -> usize {
    let mut failures = Vec::new();
    let n = named.len();
    for (name, bytes) in named {
        if catch_unwind(AssertUnwindSafe(|| (target.check)(&bytes))).is_err() {
            failures.push(name);
        }
    }
    assert!(
        failures.is_empty(),
        "{}: {} of {n} inputs broke a property: {failures:?}",
        target.name,
        failures.len()
    );
    n
}

#[test]
fn every_seed_passes_its_target_check() {
    let write = std::env::var_os("RG_WRITE_FUZZ_SEEDS").is_some();
    for target in TARGETS {
        let seeds = (target.seeds)();
        assert!(!seeds.is_empty(), "{}: no seeds", target.name);
        if write {
            let dir = fuzz_dir().join("corpus").join(target.name);
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for (i, s) in seeds.iter().enumerate() {
                let path = dir.join(format!("seed-{i:03}"));
                fs::write(&path, s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
        let named = seeds
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("seed {i}"), s))
            .collect();
        replay(target, named);
    }
}

#[test]
fn committed_corpus_and_crash_inputs_pass_their_target_check() {
    let mut total = 0;
    for target in TARGETS {
        let mut named = Vec::new();
        for folder in ["corpus", "artifacts"] {
            for path in inputs(&fuzz_dir().join(folder).join(target.name)) {
                let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                named.push((path.display().to_string(), bytes));
            }
        }
        assert!(
            !named.is_empty(),
            "{}: no corpus under fuzz/corpus/{}",
            target.name,
            target.name
        );
        total += replay(target, named);
    }
    assert!(total > 0);
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    for target in TARGETS {
        let path = fuzz_dir()
            .join("fuzz_targets")
            .join(format!("{}.rs", target.name));
        let source =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            source.contains(&format!("fuzzing::{}::check", target.name))
                || source.contains("fuzzing::TARGETS"),
            "{} does not call the shared check",
            path.display()
        );
    }
}

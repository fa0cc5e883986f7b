//! The demo's and the benchmark's own checkers, checked without a broker: the share demo's
//! checker (`scripts/demo_check.py share-self-test`) must pass a clean synthetic run and fail
//! each broken one (a lost order, an unexplained repeat, an effect after its lease, an effect
//! after the broker released its delivery, ...), and the
//! share benchmark's table (`scripts/bench_share.py --self-test`) must compute its medians and
//! ratios. A checker that cannot fail would let the demo pass anything.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::repo_root;

/// The checkers need only Python's standard library, so that `scripts/test --quick` runs them on
/// a machine where `scripts/setup-test-env` never ran: the test environment's interpreter when it
/// is installed (the one the demo and the benchmark use), else `python3` from `PATH`.
fn python() -> PathBuf {
    let venv = repo_root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

fn run_python(args: &[&str]) {
    let output = Command::new(python())
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_share_demo_checker_fails_every_broken_run() {
    run_python(&["scripts/demo_check.py", "share-self-test"]);
}

#[test]
fn the_share_bench_table_computes_its_medians_and_ratios() {
    run_python(&["scripts/bench_share.py", "--self-test"]);
}

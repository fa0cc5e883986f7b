#!/usr/bin/env python3
"""Run the version matrix: a subset of the suite against each older Kafka line, in turn.

Called by ``scripts/test --versions [V1,V2...]`` (after ``scripts/setup-test-env --matrix``),
from the repository root, with cargo-nextest on PATH. For each version of KAFKA_MATRIX_VERSIONS
(scripts/versions.env), or of the versions given:

  1. start the broker with scripts/kafka_broker.py (a line that does not start is recorded with
     the launcher's error line, and the run goes on to the next line);
  2. run the tests scripts/version-matrix.list selects, minus the ones it excludes for this
     line (counted, their reasons printed), with RG_TEST_KAFKA_MATRIX_VERSION and
     RG_TEST_KAFKA_MATRIX_BOOTSTRAP set (tests/support/kafka.rs: every Kafka a test asks for is
     then this broker);
  3. stop the broker.

Then it prints one table: version, metadata mode, started (or the error), tests passed/run,
failed, excluded, and the wall time of the line (start, tests, stop). Each line's test output is
kept in target/tmp/version-matrix/. The exit status is 1 when a line did not start or a started
line failed a test (or ran none), else 0.

Only the standard library is used.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from kafka_broker import metadata_mode, version_tuple  # noqa: E402

LIST = os.path.join(ROOT, "scripts", "version-matrix.list")
LOGS = os.path.join(ROOT, "target", "tmp", "version-matrix")
START_BOUND_S = 150
NEXTEST = ["cargo", "nextest", "run", "--features", "tls", "--no-fail-fast"]


def say(msg):
    sys.stderr.write("version_matrix.py: %s\n" % msg)
    sys.stderr.flush()


def pinned(key):
    with open(os.path.join(ROOT, "scripts", "versions.env")) as f:
        for line in f:
            line = line.strip()
            if line.startswith(key + "="):
                return line.split("=", 1)[1]
    sys.exit("scripts/versions.env has no %s" % key)


def read_list():
    """(run filtersets, [(excluded on this version?, filterset, reason)]) from
    scripts/version-matrix.list."""
    runs, exclusions = [], []
    with open(LIST) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            word, _, rest = line.partition(" ")
            if word == "run" and rest.strip():
                runs.append(rest.strip())
            elif word in ("below", "from") and " -- " in rest:
                head, reason = rest.split(" -- ", 1)
                bound, _, filterset = head.strip().partition(" ")
                if not filterset.strip():
                    sys.exit("%s:%d: %s VERSION FILTERSET -- REASON" % (LIST, number, word))
                bound = version_tuple(bound)
                if word == "below":
                    applies = lambda v, b=bound: version_tuple(v) < b
                else:
                    applies = lambda v, b=bound: version_tuple(v) >= b
                exclusions.append((applies, filterset.strip(), reason.strip()))
            else:
                sys.exit("%s:%d: expected 'run FILTERSET' or 'below|from VERSION FILTERSET -- "
                         "REASON'" % (LIST, number))
    if not runs:
        sys.exit("%s selects no tests" % LIST)
    return runs, exclusions


def either(filtersets):
    return " | ".join("(%s)" % f for f in filtersets)


def count_tests(expression):
    """How many tests the filterset selects (builds the test binaries on first use)."""
    out = subprocess.run(
        ["cargo", "nextest", "list", "--features", "tls", "--message-format", "json",
         "-E", expression],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit("cargo nextest list failed:\n%s" % out.stderr[-4000:])
    listing = json.loads(out.stdout)
    return sum(1 for suite in listing["rust-suites"].values()
               for case in suite["testcases"].values()
               if case["filter-match"]["status"] == "matches")


def start_broker(version, log_dir):
    """Starts the launcher; returns (process, bootstrap or None, error line or None)."""
    launcher_log = os.path.join(log_dir, "kafka-%s.launcher.log" % version)
    err = open(launcher_log, "w")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "kafka_broker.py"), "--version", version,
         "--log", os.path.join(log_dir, "kafka-%s.log" % version), "--heap", "512m",
         "--stop-on-stdin-eof", "--stop-grace-s", "2", "--timeout-s", str(START_BOUND_S - 10)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    err.close()
    first = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_BOUND_S)
    line = first[0].strip() if first else ""
    if line:
        return proc, line, None
    stop_broker(proc)
    with open(launcher_log) as f:
        text = f.read()
    errors = [l for l in text.splitlines() if "error:" in l]
    why = errors[0] if errors else "no bootstrap within %d s" % START_BOUND_S
    # The launcher's error names the broker log; the broker's own first ERROR line says why.
    broker_errors = [l for l in text.splitlines() if " ERROR " in l or "Exception" in l]
    if broker_errors:
        why += " | " + broker_errors[0].strip()
    return None, None, why


def stop_broker(proc):
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


SUMMARY = re.compile(r"Summary \[.*?\]\s+(\d+) tests? run: (\d+) passed")


def run_tests(version, bootstrap, expression, log_dir):
    """Runs the selection; returns (run, passed, failed names)."""
    env = dict(os.environ, RG_TEST_KAFKA_MATRIX_VERSION=version,
               RG_TEST_KAFKA_MATRIX_BOOTSTRAP=bootstrap)
    # The run's usual shared brokers are not this line: never hand them over.
    env.pop("RG_TEST_KAFKA_4_BOOTSTRAP", None)
    env.pop("RG_TEST_KAFKA_3_BOOTSTRAP", None)
    out_path = os.path.join(log_dir, "tests-%s.txt" % version)
    with open(out_path, "w") as out:
        subprocess.run(NEXTEST + ["-E", expression], cwd=ROOT, env=env, stdout=out,
                       stderr=subprocess.STDOUT)
    with open(out_path) as f:
        text = f.read()
    summary = SUMMARY.findall(text)
    failed = sorted(set(re.findall(r"^\s+(?:FAIL|TIMEOUT|SIGSEGV|SIGABRT|SIGKILL) \[.*?\] "
                                   r"(?:\(\s*\d+/\d+\) )?(\S+ \S+)", text, re.M)))
    if not summary:
        return 0, 0, failed or ["(no nextest summary; see %s)" % out_path]
    run, passed = (int(x) for x in summary[-1])
    return run, passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("versions", nargs="?", help="comma-separated Kafka versions (default: the "
                    "pinned KAFKA_MATRIX_VERSIONS); each must be installed by setup-test-env")
    opts = ap.parse_args()
    versions = (opts.versions or pinned("KAFKA_MATRIX_VERSIONS")).split(",")
    runs, exclusions = read_list()
    os.makedirs(LOGS, exist_ok=True)
    selected = either(runs)
    say("building and listing the matrix's tests")
    total = count_tests(selected)
    rows = []
    for version in versions:
        excluded = [(f, r) for (applies, f, r) in exclusions if applies(version)]
        expression = selected
        skipped = 0
        if excluded:
            expression = "(%s) & not (%s)" % (selected, either(f for f, _ in excluded))
            skipped = count_tests("(%s) & (%s)" % (selected, either(f for f, _ in excluded)))
            for filterset, reason in excluded:
                say("Kafka %s: excluded %s: %s" % (version, filterset, reason))
        started_at = time.monotonic()
        say("Kafka %s: starting the broker" % version)
        proc, bootstrap, why = start_broker(version, LOGS)
        if proc is None:
            say("Kafka %s did not start: %s" % (version, why))
            rows.append(dict(version=version, started=False, why=why,
                             time=time.monotonic() - started_at, excluded=skipped))
            continue
        say("Kafka %s up on %s: running %d tests" % (version, bootstrap, total - skipped))
        try:
            run, passed, failed = run_tests(version, bootstrap, expression, LOGS)
        finally:
            stop_broker(proc)
        rows.append(dict(version=version, started=True, run=run, passed=passed, failed=failed,
                         excluded=skipped, time=time.monotonic() - started_at))
        say("Kafka %s: %d/%d passed" % (version, passed, run))

    print()
    print("| Kafka | metadata | started | passed/run | failed | excluded | time |")
    print("|---|---|---|---|---|---|---|")
    status = 0
    for row in rows:
        mode = metadata_mode(row["version"])
        if not row["started"]:
            status = 1
            print("| %s | %s | no: %s | - | - | %d | %.0f s |"
                  % (row["version"], mode, row["why"], row["excluded"], row["time"]))
            continue
        bad = len(row["failed"]) or row["run"] - row["passed"] or not row["run"]
        if bad:
            status = 1
        print("| %s | %s | yes | %d/%d | %d | %d | %.0f s |"
              % (row["version"], mode, row["passed"], row["run"], row["run"] - row["passed"],
                 row["excluded"], row["time"]))
    for row in rows:
        for name in row.get("failed", []):
            print("failed on Kafka %s: %s" % (row["version"], name))
    print("(%d tests selected by scripts/version-matrix.list; logs in %s)"
          % (total, os.path.relpath(LOGS, ROOT)))
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The table of scripts/bench-share (scripts/bench --share): medians and ratios per reader.

  bench_share.py RUNS_FILE RECORDS
  bench_share.py --self-test

RUNS_FILE has one line per run, ``round=R reader=NAME peak_rss_kb=K <the reader's result line>``,
the result line being ``reader=NAME records=N join_s=J first_to_last_s=T ack_round_trips=A ...``.
Prints one line per reader, in the order of their first run:

  bench share reader=R median_rec_s=... ratio_vs_java_commitsync=... ratio_vs_java_piggyback=...
        ratio_vs_java_piggyback_record_limit=... median_join_s=... median_ack_round_trips=...
        records_per_ack_round_trip=... peak_rss_mb=... runs=N

(a ratio above 1: faster than that reader; a reader is not compared with itself), then the
issue's goal, ours at least twice Java's piggybacked reader, in each share.acquire.mode (ours
against Java in the same mode) and ours' default against Java's default, each reached or not
(n/a when a reader of it did not run):

  bench share goal vs_java_piggyback>=2.0 record_limit=R(yes|no) batch_optimized=R(yes|no)
        ours_default=R(yes|no)

Exits 1 when a run read fewer than RECORDS records or a line cannot be read. Standard library
only.
"""

import re
import statistics
import sys

PEERS = [
    ("java_commitsync", "java-share-commitsync"),
    ("java_piggyback", "java-share-piggyback"),
    ("java_piggyback_record_limit", "java-share-piggyback-record-limit"),
]

# The goal's pairs (scripts/bench-share says which mode each reader runs with): ours against
# Java's piggybacked reader in the same share.acquire.mode, and ours' default (record_limit)
# against Java's (batch_optimized).
GOAL = 2.0
GOAL_PAIRS = [
    ("record_limit", "ours-share", "java-share-piggyback-record-limit"),
    ("batch_optimized", "ours-share-batch", "java-share-piggyback"),
    ("ours_default", "ours-share", "java-share-piggyback"),
]


def table(lines, records):
    """The output lines for the runs' lines; raises ValueError on a bad or short run."""
    runs = {}
    for line in lines:
        if not line.strip():
            continue
        head = re.search(r"round=\d+ reader=(\S+)", line)
        rss = re.search(r"peak_rss_kb=(\d+)", line)
        m = re.search(r"records=(\d+) join_s=([\d.]+) first_to_last_s=([\d.]+)", line)
        trips = re.search(r"ack_round_trips=(\d+)", line)
        if not (head and rss and m):
            raise ValueError("cannot read run line %r" % line.strip())
        reader = head.group(1)
        n, join, secs = int(m.group(1)), float(m.group(2)), float(m.group(3))
        if n < records:
            raise ValueError("%s read %d of %d records" % (reader, n, records))
        runs.setdefault(reader, []).append(
            (n / max(secs, 1e-9), join, int(trips.group(1)) if trips else None, int(rss.group(1)), n)
        )
    med = {r: statistics.median(x[0] for x in v) for r, v in runs.items()}
    out = []
    for reader, v in runs.items():
        fields = ["bench share reader=%s median_rec_s=%.0f" % (reader, med[reader])]
        for name, peer in PEERS:
            if peer != reader and peer in med:
                fields.append("ratio_vs_%s=%.2f" % (name, med[reader] / med[peer]))
        fields.append("median_join_s=%.3f" % statistics.median(x[1] for x in v))
        trips = [(x[2], x[4]) for x in v if x[2] is not None]
        if trips:
            mt = statistics.median(t for t, _ in trips)
            fields.append("median_ack_round_trips=%.0f" % mt)
            fields.append(
                "records_per_ack_round_trip=%.0f"
                % statistics.median(n / t for t, n in trips if t > 0)
                if any(t > 0 for t, _ in trips)
                else "records_per_ack_round_trip=n/a"
            )
        else:
            fields.append("median_ack_round_trips=n/a records_per_ack_round_trip=n/a")
        fields.append("peak_rss_mb=%.1f" % (statistics.median(x[3] for x in v) / 1024))
        fields.append("runs=%d" % len(v))
        out.append(" ".join(fields))
    goal = ["bench share goal vs_java_piggyback>=%.1f" % GOAL]
    for name, ours, java in GOAL_PAIRS:
        if ours in med and java in med:
            ratio = med[ours] / med[java]
            goal.append("%s=%.2f(%s)" % (name, ratio, "yes" if ratio >= GOAL else "no"))
        else:
            goal.append("%s=n/a" % name)
    out.append(" ".join(goal))
    return out


def self_test():
    lines = [
        "round=1 reader=ours-share peak_rss_kb=20480 reader=ours-share records=1000 join_s=1.000 "
        "first_to_last_s=0.100 ack_round_trips=10",
        "round=1 reader=java-share-commitsync peak_rss_kb=204800 reader=java-share-commitsync "
        "records=1000 join_s=6.000 first_to_last_s=0.400 polls=3 commits=2 ack_round_trips=2",
        "round=2 reader=ours-share peak_rss_kb=20480 reader=ours-share records=1000 join_s=1.000 "
        "first_to_last_s=0.300 ack_round_trips=30",
        "round=2 reader=java-share-commitsync peak_rss_kb=204800 reader=java-share-commitsync "
        "records=1000 join_s=6.000 first_to_last_s=0.400 ack_round_trips=2",
    ]
    out = table(lines, 1000)
    assert out[0].startswith("bench share reader=ours-share median_rec_s=6667 "), out
    assert "ratio_vs_java_commitsync=2.67" in out[0], out
    assert "ratio_vs_java_piggyback" not in out[0], out
    assert "median_ack_round_trips=20 records_per_ack_round_trip=67" in out[0], out
    assert "ratio_vs_java_commitsync" not in out[1], out
    assert out[1].endswith("peak_rss_mb=200.0 runs=2"), out
    assert out[2] == (
        "bench share goal vs_java_piggyback>=2.0 record_limit=n/a batch_optimized=n/a"
        " ours_default=n/a"
    ), out
    pairs = [
        "round=1 reader=%s peak_rss_kb=1024 reader=x records=1000 join_s=1.000 "
        "first_to_last_s=%s ack_round_trips=1" % (reader, secs)
        for reader, secs in (
            ("ours-share", "0.100"),
            ("ours-share-batch", "0.050"),
            ("java-share-piggyback", "0.090"),
            ("java-share-piggyback-record-limit", "0.300"),
        )
    ]
    goal = table(pairs, 1000)[-1]
    assert goal == (
        "bench share goal vs_java_piggyback>=2.0 record_limit=3.00(yes) batch_optimized=1.80(no)"
        " ours_default=0.90(no)"
    ), goal
    for bad, why in ((lines[:1], 1001), (["round=1 reader=x garbage"], 1)):
        try:
            table(bad, why)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)
    print("bench_share.py: self-test passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            out = table(f, int(sys.argv[2]))
    except ValueError as e:
        sys.exit("bench: %s" % e)
    for line in out:
        print(line)


if __name__ == "__main__":
    main()

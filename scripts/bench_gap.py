#!/usr/bin/env python3
"""The numbers and the plot of `scripts/bench --gap`, from what examples/rebalance_gap wrote.

    bench_gap.py --png OUT.png DIR [DIR...]
    bench_gap.py --self-test

Each DIR (named after its protocol) holds records.csv (t_ms,member,partition,offset: every record
a member received) and events.csv (event,t_ms,member: the fourth member joining, the first
leaving). For each event, over the window from it to the next event, the end, or 4 s after it,
whichever comes first (long enough for a rebalance to settle, short enough that an unrelated
stall later on is not counted as the rebalance's):

- a partition is *unmoved* when the member that last read it before the event is the one that
  last reads it in the window, *moved* otherwise;
- longest_unmoved_gap_ms: the longest time between two consecutive records of an unmoved
  partition in the window (counting from its last record before the event): how long a
  partition that did not change hands stood still;
- moved_resume_ms: the latest time, over the moved partitions, from the event to the first
  record read by the new owner;
- steady_gap_ms: the same longest gap over every partition in the 3 s before the first event,
  the floor the two others compare with (the fetch wait, the producer's ticks).

One line per protocol and event on stdout:
    bench gap protocol=P event=E unmoved=N longest_unmoved_gap_ms=... moved=M
        moved_resume_ms=... steady_gap_ms=...
and the plot (records/s per member per 100 ms, one panel per protocol, the events marked) in
OUT.png. Needs matplotlib (scripts/bench installs it, pinned, in a venv of its own).
"""

import argparse
import csv
import os
import sys
from collections import defaultdict

BUCKET_MS = 100.0
STEADY_MS = 3000.0
WINDOW_MS = 4000.0


def load(directory):
    records = []
    with open(os.path.join(directory, "records.csv")) as f:
        for row in csv.DictReader(f):
            records.append((float(row["t_ms"]), int(row["member"]), int(row["partition"])))
    events = []
    with open(os.path.join(directory, "events.csv")) as f:
        for row in csv.DictReader(f):
            events.append((row["event"], float(row["t_ms"]), int(row["member"])))
    records.sort()
    events.sort(key=lambda e: e[1])
    return records, events


def longest_gap(times):
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def analyse(records, events):
    """One dict per event (see the module doc), and the steady gap."""
    by_partition = defaultdict(list)  # partition -> [(t, member)] in time order
    for t, member, partition in records:
        by_partition[partition].append((t, member))
    end = records[-1][0] if records else 0.0
    first = events[0][1] if events else end
    steady = max(
        (longest_gap([t for t, _ in seq if first - STEADY_MS <= t < first])
         for seq in by_partition.values()),
        default=0.0,
    )
    results = []
    for i, (name, at, _member) in enumerate(events):
        until = min(events[i + 1][1] if i + 1 < len(events) else end, at + WINDOW_MS)
        unmoved_gaps, moved_resumes = [], []
        for seq in by_partition.values():
            before = [(t, m) for t, m in seq if t < at]
            window = [(t, m) for t, m in seq if at <= t < until]
            if not before or not window:
                # Read by nobody before the event, or by nobody after it: a gap as long as the
                # whole window, counted as moved and never resumed.
                if before:
                    moved_resumes.append(float("inf"))
                continue
            owner_before, owner_after = before[-1][1], window[-1][1]
            if owner_before == owner_after:
                unmoved_gaps.append(longest_gap([before[-1][0]] + [t for t, _ in window]))
            else:
                resumed = next(t for t, m in window if m == owner_after)
                moved_resumes.append(resumed - at)
        results.append({
            "event": name,
            "at": at,
            "unmoved": len(unmoved_gaps),
            "longest_unmoved_gap_ms": max(unmoved_gaps, default=0.0),
            "moved": len(moved_resumes),
            "moved_resume_ms": max(moved_resumes, default=0.0),
        })
    return results, steady


def rates(records):
    """member -> (bucket start times in s, records/s in that bucket)."""
    counts = defaultdict(lambda: defaultdict(int))
    end = records[-1][0] if records else 0.0
    for t, member, _ in records:
        counts[member][int(t // BUCKET_MS)] += 1
    buckets = range(int(end // BUCKET_MS) + 1)
    return {
        member: ([b * BUCKET_MS / 1000.0 for b in buckets],
                 [c.get(b, 0) * 1000.0 / BUCKET_MS for b in buckets])
        for member, c in sorted(counts.items())
    }


def self_test():
    """The counting rules on a hand-made run: partition 0 stays with member 0 and stands still
    for 300 ms after the event, partition 1 moves from member 1 to member 2 and resumes 500 ms
    after it, partition 2 is never read again (moved, never resumed)."""
    records = []
    for t in range(0, 3000, 10):
        records += [(float(t), 0, 0), (float(t), 1, 1), (float(t), 1, 2)]
    for t in range(3300, 5000, 10):
        records.append((float(t), 0, 0))
    for t in range(3500, 5000, 10):
        records.append((float(t), 2, 1))
    records.sort()
    results, steady = analyse(records, [("join", 3000.0, 2)])
    got = results[0]
    want = {"event": "join", "at": 3000.0, "unmoved": 1, "longest_unmoved_gap_ms": 310.0,
            "moved": 2, "moved_resume_ms": float("inf")}
    assert got == want, (got, want)
    assert steady == 10.0, steady
    results, _ = analyse([r for r in records if r[2] != 2], [("join", 3000.0, 2)])
    assert results[0]["moved_resume_ms"] == 500.0, results[0]
    print("bench_gap: self-test passed")


def fmt(ms):
    return "never" if ms == float("inf") else "%.0f" % ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--png")
    parser.add_argument("--self-test", action="store_true",
                        help="check the counting rules on a hand-made run, and exit")
    parser.add_argument("dirs", nargs="*")
    opts = parser.parse_args()
    if opts.self_test:
        self_test()
        return
    if not opts.png or not opts.dirs:
        parser.error("--png and at least one DIR are needed")
    panels = []
    for directory in opts.dirs:
        protocol = os.path.basename(os.path.normpath(directory))
        records, events = load(directory)
        if not records:
            sys.exit("bench_gap: %s: no records" % directory)
        results, steady = analyse(records, events)
        for r in results:
            print("bench gap protocol=%s event=%s unmoved=%d longest_unmoved_gap_ms=%s moved=%d "
                  "moved_resume_ms=%s steady_gap_ms=%.0f" % (
                      protocol, r["event"], r["unmoved"], fmt(r["longest_unmoved_gap_ms"]),
                      r["moved"], fmt(r["moved_resume_ms"]), steady))
        panels.append((protocol, records, events, results))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.2 * len(panels)), squeeze=False,
                             sharex=True)
    for ax, (protocol, records, events, results) in zip(axes[:, 0], panels):
        for member, (xs, ys) in rates(records).items():
            ax.step(xs, ys, where="post", label="member %d" % member, linewidth=1, alpha=0.8)
        for r in results:
            ax.axvline(r["at"] / 1000.0, color="black", linestyle="--", linewidth=0.8)
            ax.annotate("%s\nunmoved gap %s ms\nmoved resume %s ms" % (
                            r["event"], fmt(r["longest_unmoved_gap_ms"]),
                            fmt(r["moved_resume_ms"])),
                        xy=(r["at"] / 1000.0, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(4, -4), textcoords="offset points", va="top", fontsize=8)
        ax.set_title(protocol)
        ax.set_ylabel("records/s per 100 ms")
        ax.legend(loc="lower left", fontsize=8, ncol=4)
    axes[-1, 0].set_xlabel("seconds since start")
    fig.suptitle("Records/s per member: a fourth member joins, then the first one leaves")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(opts.png)), exist_ok=True)
    fig.savefig(opts.png, dpi=110)
    print("bench gap plot=%s" % opts.png)


if __name__ == "__main__":
    main()

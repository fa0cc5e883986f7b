#!/usr/bin/env python3
"""Broker faults on a scripts/kafka_cluster.py cluster, and what they cost a consumer.

Used by `scripts/demo --brokers 3` (one fault at a time, `inject`) and `scripts/bench --faults`
(the whole run, `bench`); scripts/demo_check.py imports `read_faults` and `measure`.

    faults.py inject --fifo F --answers FILE --bootstrap B --topic T --group G
                     --kind kill-leader|pause-leader|kill-coordinator --down-s S --name NAME
                     --events FILE [--avoid NODE]
    faults.py bench  --run-dir DIR --version V --clients-cp CP --reader BIN [options]
    faults.py --self-test

`inject` drives a cluster whose stdin is the FIFO F (held open by the caller) and whose stdout
goes to FILE (one answer line per command, scripts/kafka_cluster.py's protocol). It looks up the
group's coordinator (FindCoordinator) and the topic's leaders (Metadata), both straight over a
socket to a node that is up (the standard library only), picks the victim:

  kill-leader       kill -9 of a node that leads partitions of T and is not G's coordinator
                    (not NODE with --avoid, when another one qualifies), `start` after S s
  pause-leader      SIGSTOP of such a node, SIGCONT after S s
  kill-coordinator  kill -9 of G's coordinator (its partitions of T count as failed too),
                    `start` after S s

and polls the leaders every 100 ms on the other nodes: a failed partition is *elected* when the
metadata first names another leader for it (or, when Kafka elected none before the node was
back, when the node answered again). It appends one line to the events file:

  fault name=NAME kind=K node=V coordinator=C partitions=P,P replicated=P,P at_ms=T back_ms=T
        rejoined_ms=T elected=P@T,P@T new_coordinator=C

(replicated: the partitions of T led by another node with a replica on V, before the fault)

(wall-clock ms; back_ms when the node was started or resumed, rejoined_ms when the metadata
listed it again) and prints it on stdout.

`measure` (the numbers, for the demo and the bench), per fault and per reader, from the times at
which records were applied or received, per partition:

  longest_gap_unaffected_ms  over the partitions whose leader did not fail: the longest time
        between two consecutive records in the fault's window, counting from the last record
        before the fault and up to the window's end (a partition that stopped until the window
        ended counts in full). The window is the fault itself plus 8 s after the node rejoined,
        cut at the next fault.
  failed_resume_after_election_ms  over the failed leader's partitions: the time from a
        partition's election (above) to its first record after it; the largest of them
        ("never" when one had none within the window).
  repeats  records of the window (partition and offset) that the reader had received before.

The bench adds a reader "first-seen": each record at the earliest time any reader received it,
the floor the cluster and the producer allowed. A reader's gap above the floor is its own.

`bench` runs scripts/bench --faults: a three-node cluster (Kafka's default failure detection,
broker.session.timeout.ms 9 s), topic T (12 partitions, replication 2 over the ordered pairs of
the nodes, PAIRS below, topic-level min.insync.replicas 1), a paced producer (scripts/peer.py
produce --rate, acks=1: PRODUCER_ACKS says why), three readers at the same time, each in its own group
(examples/fault_reader, the product's run loop; the Java KafkaConsumer with commitSync after every
poll; the same with commitAsync after every poll: scripts/BenchConsumer.java --faults-out), with
session.timeout.ms 20 s (GROUP_SETTINGS says why), the group names chosen so that the three
groups share one coordinator, so that one fault is the same fault for each, and the three faults
(kill-leader 20 s, pause-leader 20 s, kill-coordinator 20 s: with the cluster's 9 s detection
Kafka elects new leaders 8-11 s into a fault, later after a controller change; a 12 s outage
ended right after the election, too soon to show how fast a reader moves to the new leaders
while the old one is still dead or hung). Per fault the partitions fall in
three classes: failed (led by the node), replicated (led elsewhere, a replica on the node: they
stand still for everyone until the controller fences the node and shrinks their ISR, since the
high watermark waits for every ISR member) and untouched (nothing on the node). It prints one
line per fault and reader

  bench faults fault=F reader=R gap_untouched_ms=... gap_replicated_ms=...
        replicated_over_floor_ms=... failed_resume_after_election_ms=...
        failed_resume_over_floor_ms=... repeats=...

(the gaps as longest_gap_unaffected_ms above, over each class; over_floor: the reader's gap on
the replicated class less the first-seen one), one line per reader against the goal (alive
leaders' partitions <= 1 s, the replicated class counted above the floor; the failed ones
resuming <= 2 s after their election)

  bench faults goal reader=R max_gap_untouched_ms=... max_gap_replicated_ms=...
        max_replicated_over_floor_ms=... alive_leaders<=1000ms=reached|not-reached
        max_failed_resume_after_election_ms=... resume<=2000ms=reached|not-reached
        max_failed_resume_over_floor_ms=...

and plots records/s per partition per 500 ms, one panel per reader, the faults marked, to
DIR/faults.png (matplotlib, only for the plot).
"""

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import defaultdict

WINDOW_AFTER_MS = 8000.0
POLL_S = 0.1


def now_ms():
    return int(time.time() * 1000)


def say(msg):
    sys.stderr.write("faults.py: %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# Probes: Metadata v4 and FindCoordinator v1, hand-encoded (non-flexible versions).
# ---------------------------------------------------------------------------------------------


def _call(addr, api_key, version, body, timeout=1.5):
    host, port = addr.rsplit(":", 1)
    correlation = 0x5A17
    client_id = b"faults-probe"
    frame = struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(frame)) + frame)

        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                if not chunk:
                    raise OSError("closed")
                data += chunk
            return data

        (size,) = struct.unpack(">i", exactly(4))
        if not 4 <= size <= 1 << 22:
            raise OSError("bad frame size %d" % size)
        payload = exactly(size)
    (got,) = struct.unpack(">i", payload[:4])
    if got != correlation:
        raise OSError("wrong correlation id")
    return Reader(payload[4:])


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s


def _string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def leaders(addr, topic):
    """(broker ids, {partition: leader}) from one node's Metadata v4 answer."""
    brokers, placed = placement(addr, topic)
    return brokers, {p: leader for p, (leader, _) in placed.items()}


def placement(addr, topic):
    """(broker ids, {partition: (leader, [replicas])}) from one node's Metadata v4 answer."""
    r = _call(addr, 3, 4, struct.pack(">i", 1) + _string(topic) + b"\x00")
    r.take(">i")  # throttle
    brokers = []
    for _ in range(r.take(">i")):
        brokers.append(r.take(">i"))
        r.string()
        r.take(">i")
        r.string()
    r.string()  # cluster id
    r.take(">i")  # controller
    out = {}
    for _ in range(r.take(">i")):
        r.take(">h")
        name = r.string()
        r.take(">b")
        for _ in range(r.take(">i")):
            _err, partition, leader = r.take(">hii")
            replicas = []
            for k in range(2):  # replicas, isr
                n = r.take(">i")
                if k == 0:
                    replicas = list(struct.unpack_from(">%di" % max(n, 0), r.data, r.at))
                r.at += 4 * max(n, 0)
            if name == topic:
                out[partition] = (leader, replicas)
    return brokers, out


def coordinator(addr, group):
    """The node id of the group's coordinator (FindCoordinator v1), or None on an error code."""
    r = _call(addr, 10, 1, _string(group) + b"\x00")
    r.take(">i")
    err = r.take(">h")
    r.string()
    node = r.take(">i")
    return node if err == 0 else None


def ask(addrs, skip, what, *args):
    """what(addr, *args) on the first node not in skip that answers; None when none does."""
    for node, addr in sorted(addrs.items()):
        if node in skip:
            continue
        try:
            return what(addr, *args)
        except (OSError, struct.error, UnicodeDecodeError):
            continue
    return None


def node_addrs(bootstrap):
    """kafka_cluster.py prints its nodes in id order 1..N."""
    return {i + 1: a for i, a in enumerate(bootstrap.split(","))}


# ---------------------------------------------------------------------------------------------
# The cluster's control channel.
# ---------------------------------------------------------------------------------------------


class FifoControl:
    """Commands into the FIFO the cluster reads, answers from the file its stdout goes to."""

    def __init__(self, fifo, answers):
        self.fifo, self.answers = fifo, answers

    def _lines(self):
        with open(self.answers) as f:
            return f.read().splitlines()

    def __call__(self, command, timeout_s=150):
        before = len(self._lines())
        with open(self.fifo, "w") as f:
            f.write(command + "\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = self._lines()
            if len(lines) > before:
                return lines[before]
            time.sleep(0.05)
        return "error no answer to %r within %d s" % (command, timeout_s)


class PipeControl:
    def __init__(self, proc):
        self.proc = proc

    def __call__(self, command, timeout_s=150):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return line.strip() if line else "error the cluster exited"


# ---------------------------------------------------------------------------------------------
# One fault.
# ---------------------------------------------------------------------------------------------


def inject(control, addrs, topic, group, kind, down_s, name, avoid=None):
    """Runs one fault (module doc) and returns its event line."""
    coord, lead, placed = None, None, {}
    for _ in range(100):
        coord = ask(addrs, (), coordinator, group)
        got = ask(addrs, (), placement, topic)
        placed = got[1] if got else {}
        lead = {p: leader for p, (leader, _) in placed.items()} if got else None
        if coord is not None and lead and all(v >= 0 for v in lead.values()):
            break
        time.sleep(0.1)
    if coord is None or not lead:
        raise SystemExit("faults.py: no coordinator or leaders for %s/%s" % (group, topic))
    if kind == "kill-coordinator":
        victim = coord
    else:
        candidates = sorted({v for v in lead.values() if v != coord})
        if not candidates:
            raise SystemExit("faults.py: every partition of %s is led by the coordinator" % topic)
        preferred = [v for v in candidates if v != avoid] or candidates
        # The node leading the most partitions, so that the fault has partitions to measure.
        victim = max(preferred, key=lambda v: sum(1 for l in lead.values() if l == v))
    failed = sorted(p for p, l in lead.items() if l == victim)
    # Led elsewhere, with a replica on the victim: they stand still until the controller fences
    # the node and shrinks their ISR (the high watermark waits for every ISR member).
    replicated = sorted(p for p, (l, reps) in placed.items() if l != victim and victim in reps)
    verb, back = ("pause", "resume") if kind == "pause-leader" else ("kill", "start")
    at = now_ms()
    answer = control("%s %d" % (verb, victim))
    if not answer.startswith("ok"):
        raise SystemExit("faults.py: %s %d: %s" % (verb, victim, answer))
    elected = {}
    skip = (victim,)
    deadline = time.monotonic() + down_s
    while time.monotonic() < deadline:
        got = ask(addrs, skip, leaders, topic)
        t = now_ms()
        if got:
            for p in failed:
                if p not in elected and got[1].get(p, -1) not in (-1, victim):
                    elected[p] = (t, "")
        time.sleep(POLL_S)
    back_ms = now_ms()
    answer = control("%s %d" % (back, victim))
    if not answer.startswith("ok"):
        raise SystemExit("faults.py: %s %d: %s" % (back, victim, answer))
    rejoined = None
    for _ in range(600):
        got = ask(addrs, (), leaders, topic)
        if got and victim in got[0]:
            rejoined = now_ms()
            break
        time.sleep(POLL_S)
    rejoined = rejoined or now_ms()
    for p in failed:
        elected.setdefault(p, (rejoined, "back"))
    new_coord = ask(addrs, (), coordinator, group)
    line = (
        "fault name=%s kind=%s node=%d coordinator=%d partitions=%s replicated=%s at_ms=%d "
        "back_ms=%d rejoined_ms=%d elected=%s new_coordinator=%s"
        % (name, kind, victim, coord, ",".join(map(str, failed)), ",".join(map(str, replicated)),
           at, back_ms, rejoined,
           ",".join("%d@%d%s" % (p, t, "back" if how else "") for p, (t, how) in sorted(elected.items())),
           new_coord)
    )
    return line


def read_faults(path):
    """The fault lines of an events file, as dicts (elected: {partition: (ms, by_return)})."""
    faults = []
    if not os.path.exists(path):
        return faults
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0] != "fault":
                continue
            d = dict(w.split("=", 1) for w in words[1:])
            for k in ("node", "coordinator", "at_ms", "back_ms", "rejoined_ms"):
                d[k] = int(d[k])
            d["partitions"] = [int(p) for p in d["partitions"].split(",") if p]
            d["replicated"] = [int(p) for p in d.get("replicated", "").split(",") if p]
            elected = {}
            for item in d["elected"].split(","):
                if item:
                    p, t = item.split("@")
                    by_return = t.endswith("back")
                    elected[int(p)] = (int(t[:-4] if by_return else t), by_return)
            d["elected"] = elected
            faults.append(d)
    faults.sort(key=lambda d: d["at_ms"])
    return faults


# ---------------------------------------------------------------------------------------------
# The numbers.
# ---------------------------------------------------------------------------------------------


def windows(faults, end_ms=None):
    """(fault, window end) per fault: rejoined + 8 s, cut at the next fault (and at end_ms)."""
    out = []
    for i, f in enumerate(faults):
        end = f["rejoined_ms"] + WINDOW_AFTER_MS
        if i + 1 < len(faults):
            end = min(end, faults[i + 1]["at_ms"])
        if end_ms is not None:
            end = min(end, end_ms)
        out.append((f, end))
    return out


def measure(fault, end, times, partitions, seen_before=None, only=None):
    """The three numbers of one fault for one reader (module doc). times: partition -> sorted
    ms of its records; seen_before: optional [(t, partition, offset)] for the repeats; only:
    optional partitions the gap is taken over (of those not led by the failed node; all of them
    when None; 0 when it names none)."""
    at = fault["at_ms"]
    gap = 0.0
    for p in range(partitions):
        if p in fault["partitions"] or (only is not None and p not in only):
            continue
        seq = times.get(p, [])
        before = [t for t in seq if t < at]
        points = [before[-1] if before else at] + [t for t in seq if at <= t < end] + [end]
        gap = max(gap, max(b - a for a, b in zip(points, points[1:])))
    resume = 0.0
    for p in fault["partitions"]:
        elected_at, _ = fault["elected"].get(p, (fault["rejoined_ms"], True))
        first = next((t for t in times.get(p, []) if elected_at <= t < end), None)
        resume = max(resume, float("inf") if first is None else first - elected_at)
    repeats = None
    if seen_before is not None:
        seen, repeats = set(), 0
        for t, p, o in seen_before:
            if t >= end:
                break
            if t >= at and (p, o) in seen:
                repeats += 1
            seen.add((p, o))
    return gap, resume, repeats


def fmt(ms):
    return "never" if ms == float("inf") else "%.0f" % ms


def self_test():
    fault = {"at_ms": 1000, "rejoined_ms": 3000, "partitions": [1],
             "elected": {1: (2000, False)}}
    # partition 0: records every 10 ms, standing still 1000..1500; partition 1 resumes at 2300.
    times = {0: [t for t in range(0, 4000, 10) if not 1000 <= t < 1500], 1: [500, 2300, 2400]}
    records = sorted([(t, 0, i) for i, t in enumerate(times[0])] + [(500, 1, 0), (2300, 1, 0)])
    gap, resume, repeats = measure(fault, 4000, times, 2, records)
    assert (gap, resume, repeats) == (510, 300, 1), (gap, resume, repeats)
    gap, resume, _ = measure(fault, 4000, {0: times[0]}, 2)
    assert resume == float("inf"), resume
    # a partition that stops for good counts up to the window's end
    gap, _, _ = measure(fault, 4000, {0: [t for t in times[0] if t < 900]}, 2)
    assert gap == 3110, gap
    # the gap over a chosen set of partitions: partition 0 only, or none
    gap, _, _ = measure(fault, 4000, times, 2, None, [0])
    assert gap == 510, gap
    gap, _, _ = measure(fault, 4000, times, 2, None, [])
    assert gap == 0, gap
    events = "/tmp/faults-self-test-%d.txt" % os.getpid()
    with open(events, "w") as f:
        f.write("fault name=a kind=kill-leader node=3 coordinator=1 partitions=1,2 replicated=4 "
                "at_ms=10 back_ms=20 rejoined_ms=30 elected=1@15,2@30back new_coordinator=1\n"
                "fault name=b kind=pause-leader node=2 coordinator=1 partitions=5 at_ms=40 "
                "back_ms=50 rejoined_ms=60 elected=5@45 new_coordinator=1\n")
    got = read_faults(events)
    os.remove(events)
    assert got[0]["replicated"] == [4] and got[1]["replicated"] == [], got
    assert got[0]["elected"] == {1: (15, False), 2: (30, True)}, got
    print("faults.py: self-test passed")


# ---------------------------------------------------------------------------------------------
# scripts/bench --faults
# ---------------------------------------------------------------------------------------------

# The fetch settings of every reader, ours and Java's (what examples/fault_reader prints as its
# effective values is checked against these).
FETCH = [("fetch.min.bytes", "1"), ("fetch.max.wait.ms", "100"),
         ("max.partition.fetch.bytes", "1048576"), ("fetch.max.bytes", "52428800")]
# session.timeout.ms 20 s, the same for every reader: above the cluster's failure detection. A
# node that dies is fenced by the controller only after broker.session.timeout.ms (9 s, Kafka's
# default, kept here); until then the __consumer_offsets partitions it replicates (replication 3,
# min.insync.replicas 2) accept no write, and Kafka 4.x's coordinator answers heartbeats behind
# those writes, so a session below ~10 s (fencing, election, the coordinator's reload, finding
# it) loses the assignment to the cluster's detection time, not to the reader. 20 s is twice
# that, for a loaded two-core machine; it is below Java's default (45 s).
GROUP_SETTINGS = [("partition.assignment.strategy", "cooperative-sticky"),
                  ("session.timeout.ms", "20000"), ("heartbeat.interval.ms", "500")]
# The cluster's failure detection (Kafka's defaults, not changed by the bench; printed beside the
# results).
CLUSTER_SETTINGS = [("broker.session.timeout.ms", "9000"), ("broker.heartbeat.interval.ms", "2000")]
# The bench topic's layout: replication 2, every ordered pair of the three nodes twice, so that
# each node leads 4 of 12 partitions, follows 4 and holds nothing of 4: whichever node fails,
# 4 partitions are untouched by it (neither leader nor replica there), 4 are led elsewhere but
# replicated on it, and 4 lose their leader. Topic-level min.insync.replicas 1: once the
# controller shrinks the ISR to the surviving replica, writes go on.
PAIRS = [(1, 2), (2, 3), (3, 1), (2, 1), (3, 2), (1, 3)]
# The producer's acks: 1, not all. With acks=all the leader answers a produce request only once
# every partition in it is replicated to its whole ISR, and Kafka reads no further request on a
# connection until it has answered the one before: one partition replicated on the failed node
# held every partition the producer sends to that leader, untouched ones included, until the
# node was fenced (a first bench run: every partition's floor stood still 8-11 s at the
# kill-leader and pause-leader faults). With acks=1 the leader answers once it appended; what a
# reader may read still waits for the ISR (the high watermark), so the replicated partitions'
# floor is the cluster's, and the untouched ones' is not held by the producer.
PRODUCER_ACKS = "1"
GOAL_ALIVE_GAP_MS = 1000.0
GOAL_RESUME_MS = 2000.0
JAVA_ASSIGNORS = {"cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}
PLAN = [("kill-leader", "kill-leader", 20.0), ("pause-leader", "pause-leader", 20.0),
        ("kill-coordinator", "kill-coordinator", 20.0)]


def load_records(path):
    """[(t_ms, partition, offset)] of a reader's output, in receive order."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[0].isdigit():
                out.append((int(parts[0]), int(parts[1]), int(parts[2])))
    out.sort()
    return out


def plot(png, readers, faults, partitions, t0, steady):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    bucket = 500.0
    end = max((r[-1][0] for _, r in readers if r), default=t0)
    n = int((end - t0) // bucket) + 1
    fig, axes = plt.subplots(len(readers), 1, figsize=(12, 2.9 * len(readers)), sharex=True,
                             squeeze=False)
    grids = []
    for _, records in readers:
        grid = np.zeros((partitions, n))
        for t, p, _ in records:
            grid[p, int((t - t0) // bucket)] += 1000.0 / bucket
        grids.append(grid)
    for ax, (name, _), grid in zip(axes[:, 0], readers, grids):
        im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest",
                       extent=(0, n * bucket / 1000.0, -0.5, partitions - 0.5),
                       cmap="magma", vmin=0, vmax=2 * steady)
        for f in faults:
            a, b = (f["at_ms"] - t0) / 1000.0, (f["back_ms"] - t0) / 1000.0
            ax.axvline(a, color="red", linewidth=1.2)
            ax.axvline(b, color="white", linewidth=1.0, linestyle="--")
            for p in f["partitions"]:
                ax.plot([a, b], [p - 0.42, p - 0.42], color="deepskyblue", linewidth=1.2)
            for p in f.get("replicated", []):
                ax.plot([a, b], [p - 0.42, p - 0.42], color="limegreen", linewidth=1.0,
                        linestyle=":")
            ax.annotate("%s node %d" % (f["name"], f["node"]), xy=(a, partitions - 0.5),
                        xytext=(3, -3), textcoords="offset points", va="top", fontsize=8,
                        color="white")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("partition")
        ax.set_yticks(range(partitions))
        ax.tick_params(axis="y", labelsize=7)
        fig.colorbar(im, ax=ax, label="records/s", pad=0.01, extend="max")
    axes[-1, 0].set_xlabel("seconds since the readers started (red: fault; white dashed: the node "
                           "is back; underlined until then, blue: its partitions, led there;\n"
                           "green dotted: replicated there, led elsewhere; not underlined: "
                           "untouched by it)")
    fig.suptitle("Records/s per partition under broker faults (500 ms buckets; black: nothing;\n"
                 "the scale stops at twice the produced rate, catch-up bursts saturate)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def bench(opts):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = opts.run_dir
    os.makedirs(run, exist_ok=True)
    procs = []

    def spawn(name, cmd, **kw):
        out = open(os.path.join(run, name + ".out"), "w")
        err = open(os.path.join(run, name + ".err"), "w")
        p = subprocess.Popen(cmd, stdout=kw.pop("stdout", out), stderr=err, cwd=root, **kw)
        procs.append((name, p))
        return p

    def stop_all():
        for name, p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for name, p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _bench(opts, root, run, spawn, stop_all)
    finally:
        stop_all()


def _bench(opts, root, run, spawn, stop_all):
    py = os.path.join(root, ".venv", "bin", "python")
    cluster = spawn("cluster", [py, "scripts/kafka_cluster.py", "--version", opts.version,
                                "--nodes", "3", "--dir", os.path.join(run, "cluster")]
                    + ["--set=%s=%s" % kv for kv in CLUSTER_SETTINGS],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    bootstrap = cluster.stdout.readline().strip()
    if not bootstrap:
        raise SystemExit("faults.py: the cluster did not start (see %s/cluster.err)" % run)
    control = PipeControl(cluster)
    addrs = node_addrs(bootstrap)
    say("three Kafka %s nodes at %s" % (opts.version, bootstrap))
    topic = "faults-%d" % os.getpid()
    assignment = ",".join("%d:%d" % PAIRS[p % len(PAIRS)] for p in range(opts.partitions))
    subprocess.run([py, "scripts/peer.py", "create-topic", "--bootstrap", bootstrap, "--topic",
                    topic, "--partitions", str(opts.partitions), "--replica-assignment",
                    assignment, "--config", "min.insync.replicas=1"],
                   cwd=root, check=True, stdout=subprocess.DEVNULL)
    for _ in range(300):
        got = ask(addrs, (), leaders, topic)
        if got and len(got[1]) == opts.partitions and all(v >= 0 for v in got[1].values()):
            break
        time.sleep(0.1)
    # Three groups with one coordinator: candidates until each reader has one on the first's.
    names = ["ours", "java-commitsync", "java-commitasync"]
    groups = {}
    target = None
    for k in range(200):
        for name in names:
            if name in groups:
                continue
            g = "faults-%d-%s-%d" % (os.getpid(), name, k)
            c = ask(addrs, (), coordinator, g)
            if c is None:
                continue
            if target is None:
                target = c
            if c == target:
                groups[name] = g
        if len(groups) == len(names):
            break
        time.sleep(0.05)
    if len(groups) != len(names):
        raise SystemExit("faults.py: found no three groups with one coordinator")
    say("groups %s, coordinator node %d" % (", ".join(groups[n] for n in names), target))
    # acks=1 (PRODUCER_ACKS says why): the producer's share of a stall is none.
    producer = spawn("producer", [py, "scripts/peer.py", "produce", "--bootstrap", bootstrap,
                                  "--topic", topic, "--count", str(int(opts.rate * 900)),
                                  "--rate", str(opts.rate), "--size", "100", "--timeout-s", "120",
                                  "--acks", PRODUCER_ACKS])
    stop_file = os.path.join(run, "stop")
    files = {n: os.path.join(run, "records-%s.txt" % n) for n in names}
    sets, java_sets = [], []
    for k, v in FETCH + GROUP_SETTINGS:
        sets += ["--set", "%s=%s" % (k, v)]
        # Java names its assignors by class.
        java_sets += ["--set", "%s=%s" % (k, JAVA_ASSIGNORS.get(v, v))]
    readers_p = {"ours": spawn("ours", [opts.reader, "--bootstrap", bootstrap, "--topic", topic,
                                        "--group", groups["ours"], "--out", files["ours"],
                                        "--stop-file", stop_file] + sets)}
    for name, mode in (("java-commitsync", "sync"), ("java-commitasync", "async")):
        readers_p[name] = spawn(
            name, ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", opts.clients_cp,
                   "BenchConsumer", "--bootstrap", bootstrap, "--topic", topic,
                   "--group", groups[name], "--faults-out", files[name], "--commit", mode,
                   "--stop-file", stop_file] + java_sets)
    t0 = now_ms()
    # The faults start once every reader is reading (each prints "first-record MS" on stdout at
    # its first record; a JVM that starts its reader on a loaded machine can take a while),
    # and warmup_s after the last of them.
    waiting = dict(readers_p)
    deadline = time.monotonic() + 180
    while waiting and time.monotonic() < deadline:
        for name in list(waiting):
            with open(os.path.join(run, name + ".out")) as f:
                if any(l.startswith("first-record ") for l in f):
                    del waiting[name]
            if name in waiting and waiting[name].poll() is not None:
                raise SystemExit("faults.py: %s exited with %d before reading (see %s/%s.err)"
                                 % (name, waiting[name].returncode, run, name))
        time.sleep(0.2)
    if waiting:
        raise SystemExit("faults.py: %s read nothing within 180 s (see %s)"
                         % (", ".join(sorted(waiting)), run))
    say("every reader is reading (%.1f s after the start)" % ((now_ms() - t0) / 1000.0))
    time.sleep(opts.warmup_s)
    for name, p in list(readers_p.items()) + [("producer", producer)]:
        if p.poll() is not None:
            raise SystemExit("faults.py: %s exited with %d before the faults (see %s/%s.err)"
                             % (name, p.returncode, run, name))
    events = os.path.join(run, "faults.txt")
    avoid = None
    for name, kind, down in PLAN:
        say("%s: %s for %.0f s" % (name, kind, down))
        line = inject(control, addrs, topic, groups["ours"], kind, down, name, avoid)
        say(line)
        with open(events, "a") as f:
            f.write(line + "\n")
        avoid = int(line.split(" node=")[1].split()[0])
        time.sleep(opts.quiet_s)
    # The readers stop on the stop file (and write their records); the producer by PID.
    with open(stop_file, "w"):
        pass
    end = now_ms()
    producer.terminate()
    deadline = time.monotonic() + 60
    for name, p in readers_p.items():
        try:
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise SystemExit("faults.py: reader %s did not stop within 60 s (see %s)" % (name, run))
        if rc != 0:
            raise SystemExit("faults.py: reader %s exited with %d (see %s/%s.err)" % (name, rc, run, name))
    with open(os.path.join(run, "ours.out")) as f:
        effective = f.read()
    faults = read_faults(events)
    readers = [(n, load_records(files[n])) for n in names]
    # The floor: when any reader first received each record, what the cluster and the producer
    # allowed (a partition whose follower died stands still until the controller fences the node
    # and shrinks the ISR; acks=all waits for it). A reader's gap above it is its own.
    first = {}
    for _, records in readers:
        for t, p, o in records:
            if (p, o) not in first or t < first[(p, o)]:
                first[(p, o)] = t
    floor = sorted((t, p, o) for (p, o), t in first.items())
    lines = []
    worst = defaultdict(lambda: {"untouched": 0.0, "replicated": 0.0, "over_floor": 0.0,
                                 "resume": 0.0, "resume_over_floor": 0.0})
    for f, wend in windows(faults, end):
        untouched = [p for p in range(opts.partitions)
                     if p not in f["partitions"] and p not in f["replicated"]]
        per = {}
        for name, records in readers + [("first-seen", floor)]:
            times = defaultdict(list)
            for t, p, _ in records:
                times[p].append(t)
            gap_u, resume, repeats = measure(f, wend, times, opts.partitions, records, untouched)
            gap_r, _, _ = measure(f, wend, times, opts.partitions, None, f["replicated"])
            per[name] = (gap_u, gap_r, resume, repeats)
        elected = [t - f["at_ms"] for t, by_return in f["elected"].values() if not by_return]
        for name, (gap_u, gap_r, resume, repeats) in per.items():
            over = max(0.0, gap_r - per["first-seen"][1])
            floor_resume = per["first-seen"][2]
            # A reader that never resumed where another did is "never" (inf - finite = inf);
            # where nobody resumed, the reader added nothing.
            resume_over = max(0.0, resume - floor_resume) if floor_resume != float("inf") else 0.0
            w = worst[name]
            w["resume_over_floor"] = max(w["resume_over_floor"], resume_over)
            w["untouched"] = max(w["untouched"], gap_u)
            w["replicated"] = max(w["replicated"], gap_r)
            w["over_floor"] = max(w["over_floor"], over)
            w["resume"] = max(w["resume"], resume)
            lines.append(
                "bench faults fault=%s reader=%s gap_untouched_ms=%s gap_replicated_ms=%s "
                "replicated_over_floor_ms=%s failed_resume_after_election_ms=%s "
                "failed_resume_over_floor_ms=%s repeats=%d "
                "node=%d untouched=%s replicated=%s failed=%s elected_after_ms=%s" % (
                    f["name"], name, fmt(gap_u), fmt(gap_r), fmt(over), fmt(resume),
                    fmt(resume_over), repeats,
                    f["node"], ",".join(map(str, untouched)) or "none",
                    ",".join(map(str, f["replicated"])) or "none",
                    ",".join(map(str, f["partitions"])),
                    "%d" % max(elected) if len(elected) == len(f["partitions"]) and elected
                    else "none(node back first)"))
    png = os.path.join(run, "faults.png")
    plot(png, readers, faults, opts.partitions, t0, opts.rate / opts.partitions)
    print("bench faults settings: readers (ours, java-commitsync, java-commitasync alike): %s %s; "
          "ours reports %s" % (" ".join("%s=%s" % kv for kv in FETCH),
                               " ".join("%s=%s" % kv for kv in GROUP_SETTINGS),
                               next((l.strip() for l in effective.splitlines()
                                     if l.startswith("settings ")), "no settings line")))
    print("bench faults cluster: 3 nodes, %s; __consumer_offsets replication 3, "
          "min.insync.replicas 2; topic %d partitions, replication 2, replicas %s, "
          "min.insync.replicas=1; producer %.0f records/s, acks=%s" % (
              " ".join("%s=%s" % kv for kv in CLUSTER_SETTINGS), opts.partitions, assignment,
              opts.rate, PRODUCER_ACKS))
    print("bench faults records: %s; plot=%s" % (
        ", ".join("%s=%d" % (n, len(r)) for n, r in readers), png))
    for line in lines:
        print(line)
    # Against the goal: partitions whose leader is alive <= 1 s at every fault (untouched ones
    # as measured; the replicated ones stand still for everyone until the controller fences the
    # node, so what counts there is the reader's gap above the first-seen floor), and the failed
    # leaders' partitions resuming <= 2 s after their election.
    for name, w in worst.items():
        alive = max(w["untouched"], w["over_floor"])
        print("bench faults goal reader=%s max_gap_untouched_ms=%s max_gap_replicated_ms=%s "
              "max_replicated_over_floor_ms=%s alive_leaders<=%.0fms=%s "
              "max_failed_resume_after_election_ms=%s resume<=%.0fms=%s "
              "max_failed_resume_over_floor_ms=%s" % (
                  name, fmt(w["untouched"]), fmt(w["replicated"]), fmt(w["over_floor"]),
                  GOAL_ALIVE_GAP_MS, "reached" if alive <= GOAL_ALIVE_GAP_MS else "not-reached",
                  fmt(w["resume"]), GOAL_RESUME_MS,
                  "reached" if w["resume"] <= GOAL_RESUME_MS else "not-reached",
                  fmt(w["resume_over_floor"])))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true")
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("inject")
    p.add_argument("--fifo", required=True)
    p.add_argument("--answers", required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--kind", required=True, choices=("kill-leader", "pause-leader", "kill-coordinator"))
    p.add_argument("--down-s", type=float, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--avoid", type=int)
    p = sub.add_parser("bench")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--clients-cp", required=True)
    p.add_argument("--reader", required=True, help="examples/fault_reader binary")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--rate", type=float, default=400.0)
    p.add_argument("--warmup-s", type=float, default=8.0, help="after every reader's first record")
    p.add_argument("--quiet-s", type=float, default=8.0)
    opts = ap.parse_args()
    if opts.self_test:
        self_test()
        return 0
    if opts.cmd == "inject":
        line = inject(FifoControl(opts.fifo, opts.answers), node_addrs(opts.bootstrap), opts.topic,
                      opts.group, opts.kind, opts.down_s, opts.name, opts.avoid)
        with open(opts.events, "a") as f:
            f.write(line + "\n")
        print(line)
        return 0
    if opts.cmd == "bench":
        return bench(opts)
    ap.error("a subcommand or --self-test is needed")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reads what scripts/demo's order workers left behind and judges it.

Run with the project's virtualenv (standard library only). Inputs:

  manifest      one line per produced order, ``order_id partition offset``
                (examples/produce_orders.rs --manifest)
  effect logs   one line per applied effect, ``effect_key order_id partition offset [at_ms]``
                (examples/order_worker.rs --effects), one file per worker process
  worker output the worker's stdout: ``assignment``, ``applied``, ``commit``, ``skipped`` lines
                (see the doc comment of examples/order_worker.rs)

Subcommands (``share`` and ``share-self-test``, for scripts/demo --share, are described in
scripts/demo_check_share.py; ``exactly-once`` and ``committed``, for scripts/demo
--exactly-once, in scripts/demo_check_eos.py):

  progress --manifest M EFFECTS...
      print how many distinct orders of the manifest were applied so far
  group --partitions N OUT...
      print ``settled GEN`` when the last assignment of every given (live) worker is in the same
      generation and together they own partitions 0..N-1 exactly once, else ``unsettled``
  check --manifest M --group G --topic T --broker B --worker SPEC... [--problem TEXT...]
        [--static-restart old=W,new=W,gen=G,until=MS] [--commit-interval-ms MS]
      B is ``kafka-<version>``, ``mock`` or ``tansu``. SPEC is
      ``name=W,effects=FILE,out=FILE[,killed=MS]`` (MS: wall-clock milliseconds right after the
      worker was killed with SIGKILL and reaped). Prints the findings and, as the very last line,
      ``orders=N applied=A duplicates=D lost=L redone=R skipped_by_metadata=S rebalances=K
      broker=B protocol=P`` (with --brokers N --faults FILE, scripts/demo --brokers 3, followed by
      ``brokers=N broker_faults=F longest_gap_unaffected_ms=G``: see below); exits 0 only when lost=0,
      every duplicate is explained (below), nothing else is wrong and no --problem was reported.
      --static-restart names the static member's two processes, the generation the group was in
      when the old one stopped, and when the demo began to stop the fleet; on Kafka the restart
      must keep that generation (KIP-345): the new process gets the old one's partitions in
      generation G, and no worker sees a later generation before ``until``.

Definitions used by ``check``:

  applied     distinct order ids with at least one effect line
  duplicates  effect lines beyond the first one per order id
  lost        orders of the manifest without any effect line
  redone      per order, the number of workers that applied it beyond the first one, summed:
              each is a repeat by another worker, the partition's next owner, after a rebalance
              or the SIGKILL (a repeat inside one worker, which the guard's idempotency key
              refuses, would count in duplicates only)
  skipped_by_metadata
              records the workers skipped because the committed completed-offsets map (commit
              metadata) said an earlier owner had already finished them: the last ``skipped``
              line of each worker (the guard's skipped_completed, summed over its partitions),
              summed over the workers
  rebalances  distinct group generations in which some worker received an assignment (the
              first join included); a cooperative rebalance that moves partitions takes two
              generations, and a static member's return takes none

  With --brokers N --faults FILE (the fault lines of scripts/faults.py inject), the effect lines'
  times (their fifth field) are merged per partition and, per fault, the findings give the
  longest gap in applied effects on the partitions whose leader did not fail, from the fault to
  8 s after the node rejoined (scripts/faults.py ``measure``), and how long the failed leader's
  partitions took to resume after Kafka elected new leaders for them; G in the verdict is the
  longest of those gaps over the faults. They are measurements: they never fail the check.

  With --commit-interval-ms, the findings also compare the repeats the SIGKILL caused with the
  work the killed worker did in one commit.interval.ms: its effects in the 2 s before it was
  killed, scaled to the interval (what finished after its last paced commit), plus the records
  it had started and not finished (at most one per worker thread).

  With --faults only, a duplicate is also explained by a lost assignment: the order was applied
  twice, first by a worker that, inside a fault's window and after applying it, printed
  ``assignment gen=-1`` without being stopped (its assignment was fenced as lost, without a
  commit: no poll within max.poll.interval.ms or a lapsed session while a broker hung), at an
  offset it had not committed by then, and again by another worker after that (effect times).

  A duplicate is explained by the SIGKILL when the order was applied exactly twice: once by the
  killed worker K, at an offset K never committed past (at or after K's last committed position
  on that partition, or K never committed it), and once by another worker in a batch that started
  after K was killed (wall clock, from the worker's ``applied`` lines).

  On the mock only, a duplicate is also explained by a failed handoff: the first worker applied
  the order after its last commit on the partition, then reported (``handoff-failed``) that the
  revocation's commit of that partition was refused, and the next owner redid it in a later
  generation. librdkafka's mock refuses every commit while its group re-forms; Kafka accepts a
  commit of the current generation then, so on Kafka (and tansu) a handoff-failed line is itself
  a problem that fails the demo. Anything else is unexplained and fails the demo.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_check_eos  # noqa: E402  (the exactly-once mode: scripts/demo --exactly-once)
import demo_check_share  # noqa: E402  (the share mode: scripts/demo --share)
import faults as fault_tools  # noqa: E402  (the fault windows and their gaps, one definition)

OPERATION = "apply-order"
KV = re.compile(r"(\w+)=(\S*)")


def fail(msg):
    sys.stderr.write("demo_check.py: %s\n" % msg)
    sys.exit(2)


def read_manifest(path):
    orders = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 3:
                fail("%s:%d: malformed manifest line %r" % (path, n, line))
            order, partition, offset = parts[0], int(parts[1]), int(parts[2])
            if order in orders:
                fail("%s:%d: order id %s produced twice" % (path, n, order))
            orders[order] = (partition, offset)
    return orders


def read_effects(path):
    """[(line_no, fields)] of an effect log; a missing file is an empty log."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            out.append((n, line.rstrip("\n")))
    return out


def read_events(path):
    """[(kind, {key: value})] of a worker's stdout."""
    events = []
    if not os.path.exists(path):
        return events
    with open(path) as f:
        for line in f:
            words = line.split(None, 1)
            if not words:
                continue
            fields = dict(KV.findall(words[1])) if len(words) > 1 else {}
            fields["_line"] = line.rstrip("\n")
            events.append((words[0], fields))
    return events


def cmd_progress(opts):
    # While orders are produced live (scripts/demo --brokers 3) the manifest is written only
    # when the producer is done: until then every order id in the effect logs counts.
    orders = read_manifest(opts.manifest) if os.path.exists(opts.manifest) else None
    seen = set()
    for path in opts.effects:
        for _, line in read_effects(path):
            parts = line.split()
            # 4 or 5 fields: the order workers; 8: the share workers (scripts/demo --share).
            if len(parts) in (4, 5, 8) and (orders is None or parts[1] in orders):
                seen.add(parts[1])
    print(len(seen))


def cmd_group(opts):
    gens = set()
    owned = []
    for path in opts.out:
        last = None
        for kind, fields in read_events(path):
            if kind == "assignment":
                last = fields
        if last is None:
            print("unsettled")
            return
        gens.add(int(last["gen"]))
        owned += [int(p) for p in last["owned"].split(",") if p]
    # Classic: one generation for the whole group. Consumer protocol (KIP-848): each member has
    # its own epoch; the group is settled when the partitions are owned exactly once, and the
    # highest epoch stands for the group's (it grows with every reassignment).
    one_generation = len(gens) == 1 or opts.protocol == "consumer"
    if gens and one_generation and sorted(owned) == list(range(opts.partitions)):
        print("settled %d" % max(gens))
    else:
        print("unsettled")


def parse_worker(spec):
    w = {"killed": None}
    for item in spec.split(","):
        if item.startswith("killed="):
            w["killed"] = int(item[len("killed="):])
            continue
        key, _, value = item.partition("=")
        if key not in ("name", "effects", "out") or not value:
            raise argparse.ArgumentTypeError("bad worker spec %r" % spec)
        w[key] = value
    if not all(k in w for k in ("name", "effects", "out")):
        raise argparse.ArgumentTypeError("worker spec %r needs name, effects and out" % spec)
    return w


def ranges(sorted_items):
    """Group (offset, order) pairs into runs of consecutive offsets."""
    runs = []
    for offset, order in sorted_items:
        if runs and runs[-1][1] + 1 == offset:
            runs[-1][1] = offset
            runs[-1][3] = order
            runs[-1][4] += 1
        else:
            runs.append([offset, offset, order, order, 1])
    return runs


def parse_static_restart(spec):
    s = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if key not in ("old", "new", "gen", "until") or not value:
            raise argparse.ArgumentTypeError("bad --static-restart %r" % spec)
        s[key] = value
    if len(s) != 4:
        raise argparse.ArgumentTypeError("--static-restart %r needs old, new, gen and until" % spec)
    s["gen"], s["until"] = int(s["gen"]), int(s["until"])
    return s


def judge_static_restart(opts, assignments, problems, stopped_assignments=None):
    """One line on what the static member's restart did to the group; on Kafka, a restart that
    changed the generation or the static member's partitions is a problem (KIP-345)."""
    r = opts.static_restart
    stopped_assignments = stopped_assignments or {}
    old, new, gen, until = r["old"], r["new"], r["gen"], r["until"]
    # What the old process owned as a member: its last assignment before its `stop` line (the
    # line its close prints afterwards may show a partition set the close is part-way through).
    old_owned = [o for g, o, _ in stopped_assignments.get(old, assignments.get(old, [])) if g >= 0]
    old_owned = old_owned[-1] if old_owned else None
    new_first = next(((g, o) for g, o, _ in assignments.get(new, []) if g >= 0), None)
    later = sorted(
        {
            (name, g)
            for name, items in assignments.items()
            for g, _, at in items
            if g > gen and at is not None and at < until
        }
    )
    if opts.protocol == "consumer":
        # KIP-848: the returning static member takes over the old one's member epoch and
        # assignment; `gen` is the highest epoch in the group before the restart.
        old_gen = [g for g, _, _ in assignments.get(old, []) if g >= 0]
        kept = (
            new_first is not None
            and bool(old_gen)
            and new_first[0] == old_gen[-1]
            and new_first[1] == old_owned
        )
    else:
        kept = new_first is not None and new_first[0] == gen and new_first[1] == old_owned
    if kept and not later:
        return (
            "static member restart (%s -> %s, same group.instance.id): %s got %s's partitions "
            "%s back in generation %d, and no worker saw a new generation until the fleet was "
            "stopped: no rebalance (KIP-345)" % (old, new, new, old, old_owned, gen)
        )
    what = "static member restart (%s -> %s): %s's first assignment %s (generation %d: %s had %s)" % (
        old,
        new,
        new,
        "gen=%d owned=%s" % new_first if new_first else "never came",
        gen,
        old,
        old_owned,
    )
    if later:
        what += "; new generation(s) seen before the fleet was stopped: %s" % ", ".join(
            "%s gen=%d" % x for x in later
        )
    if opts.broker.startswith("kafka"):
        problems.append(
            "%s: on Kafka a static member that returns within session.timeout.ms gets its "
            "partitions back without a rebalance" % what
        )
        return what
    if opts.broker == "mock":
        return what + " - librdkafka's mock has no static membership: the restarted member joins as a new one"
    return what


def cmd_check(opts):
    orders = read_manifest(opts.manifest)
    problems = list(opts.problem or [])
    # The failed-handoff explanation is the mock's deviation from Kafka, accepted only there.
    mock = opts.broker == "mock"
    killed = [w for w in opts.worker if w["killed"] is not None]
    killed_ms = {w["name"]: w["killed"] for w in killed}
    # applications[order] = [(worker, partition, offset)]
    applications = defaultdict(list)
    effect_times = defaultdict(list)  # partition -> wall-clock ms of every effect applied
    applied_at = {}  # (order, worker) -> wall-clock ms of its (first) effect line
    lines = 0
    for w in opts.worker:
        for n, line in read_effects(w["effects"]):
            lines += 1
            parts = line.split()
            where = "%s:%d" % (w["effects"], n)
            if len(parts) not in (4, 5):
                problems.append("%s: malformed effect line %r" % (where, line))
                continue
            key, order, partition, offset = parts[0], parts[1], int(parts[2]), int(parts[3])
            if len(parts) == 5:
                effect_times[partition].append(int(parts[4]))
            want_key = "%s/%s/%d/%d/%s" % (opts.group, opts.topic, partition, offset, OPERATION)
            if key != want_key:
                problems.append("%s: effect key %s, expected %s" % (where, key, want_key))
            if orders.get(order) != (partition, offset):
                problems.append(
                    "%s: order %s at partition %d offset %d, but it was produced at %s"
                    % (where, order, partition, offset, orders.get(order))
                )
            applications[order].append((w["name"], partition, offset))
            if len(parts) == 5:
                applied_at[(order, w["name"])] = int(parts[4])

    # Per worker: generations, last committed position per partition, applied ranges.
    generations = set()
    info = {}
    notes = []
    refused = defaultdict(int)
    reasons = defaultdict(set)
    # (worker, partition) -> generations whose revocation commit of that partition failed
    handoff_failed = defaultdict(set)
    stale = defaultdict(int)
    skipped = {}  # worker -> last skipped_completed total it printed
    assignments = {}  # worker -> [(gen, owned, at_ms)]
    losses = {}  # worker -> [(at_ms, {partition: committed next} at that moment)]
    before_stop = {}  # worker -> its assignments up to its `stop` line
    for w in opts.worker:
        last_gen = -1
        losses[w["name"]] = []
        committed = {}
        applied = defaultdict(list)  # partition -> [(from, to, gen)]
        assignments[w["name"]] = []
        for kind, f in read_events(w["out"]):
            if kind == "assignment":
                gen = int(f["gen"])
                if gen < 0 and last_gen >= 0 and "at_ms" in f:
                    # Out of the group without being stopped: the assignment was lost (fenced
                    # without a commit); what it finished since its last commit is redone.
                    losses[w["name"]].append((int(f["at_ms"]), dict(committed)))
                assignments[w["name"]].append(
                    (gen, f.get("owned", ""), int(f["at_ms"]) if "at_ms" in f else None)
                )
                if gen >= 0 and f.get("owned"):
                    generations.add(gen)
                last_gen = max(last_gen, gen)
            elif kind == "commit":
                committed[int(f["partition"])] = int(f["next"])
                last_gen = max(last_gen, int(f["gen"]))
            elif kind == "applied":
                applied[int(f["partition"])].append(
                    (int(f["from"]), int(f["to"]), int(f["gen"]), int(f["start_ms"]))
                )
            elif kind == "stop":
                before_stop[w["name"]] = list(assignments[w["name"]])
            elif kind == "closed" and "final-commit-refused" in f["_line"]:
                notes.append("%s's final commit on close was refused: %s" % (w["name"], f["_line"]))
            elif kind == "commit-refused":
                refused[w["name"]] += 1
                reasons[w["name"]].update(re.findall(r"failed with (\w+) \(\d+\)", f["_line"]))
            elif kind == "handoff-failed":
                handoff_failed[(w["name"], int(f["partition"]))].add(int(f["gen"]))
                if not mock:
                    problems.append(
                        "worker %s: a revocation's commit was refused on %s, which accepts the "
                        "current generation's commits (a bug to find): %s"
                        % (w["name"], opts.broker, f["_line"])
                    )
            elif kind == "stale":
                stale[w["name"]] += 1
            elif kind == "skipped":
                skipped[w["name"]] = int(f["completed"])
            elif kind == "failed":
                problems.append("worker %s failed: %s" % (w["name"], f["_line"]))
        info[w["name"]] = {"last_gen": last_gen, "committed": committed, "applied": applied}

    def batch_of(name, partition, offset):
        """(generation, start_ms) of the batch in which the worker applied that offset."""
        for lo, hi, gen, start_ms in info[name]["applied"][partition]:
            if lo <= offset <= hi:
                return gen, start_ms
        return None, None

    killed_names = {w["name"] for w in killed}
    explained, unexplained, handoff_explained, loss_explained = [], [], [], []

    fault_windows = fault_tools.windows(fault_tools.read_faults(opts.faults)) if opts.faults else []

    def lost_in_between(order, apps):
        """With broker faults only: (first, loss_ms, last_commit, second) when the order was
        applied twice, the first worker's assignment was lost after it applied it, at an offset
        it had not committed by then, and the second applied it after that loss."""
        if not fault_windows or len(apps) != 2:
            return None
        (n1, p, o), (n2, _, _) = apps
        t1, t2 = applied_at.get((order, n1)), applied_at.get((order, n2))
        if t1 is None or t2 is None or n1 == n2:
            return None
        if t2 < t1:
            n1, n2, t1, t2 = n2, n1, t2, t1
        for at, committed in losses.get(n1, []):
            if at >= t1:
                if not any(f["at_ms"] <= at < end for f, end in fault_windows):
                    return None
                last = committed.get(p)
                if t2 > at and (last is None or o >= last):
                    return (n1, at, last, n2)
                return None
        return None

    for order, apps in sorted(applications.items()):
        if len(apps) < 2:
            continue
        partition, offset = apps[0][1], apps[0][2]
        by_killed = [a for a in apps if a[0] in killed_names]
        others = [a for a in apps if a[0] not in killed_names]
        why = None
        handoff = None
        if len(apps) == 2 and mock:
            # A reported failed handoff explains a repeat whoever was killed later: the first worker
            # applied the order after its last successful commit on the partition, then reported
            # that the revocation's commit of that partition was refused, and the second worker
            # redid it in a later generation.
            (n1, _, _), (n2, _, _) = apps
            g1, _ = batch_of(n1, partition, offset)
            g2, _ = batch_of(n2, partition, offset)
            if g1 is not None and g2 is not None and g2 < g1:
                n1, n2, g1, g2 = n2, n1, g2, g1
            last_commit = info[n1]["committed"].get(partition)
            if (
                g1 is not None
                and g2 is not None
                and g2 > g1
                and handoff_failed.get((n1, partition))
                and (last_commit is None or offset >= last_commit)
            ):
                handoff = (partition, offset, order, n1, last_commit, n2, g2)
        lost = lost_in_between(order, apps) if handoff is None else None
        if handoff is not None:
            handoff_explained.append(handoff)
        elif lost is not None and not (set(a[0] for a in apps) & killed_names):
            loss_explained.append((partition, offset, order) + lost)
        elif len(apps) != 2 or len(by_killed) != 1 or len(others) != 1:
            why = "applied %d times by %s" % (len(apps), ", ".join(a[0] for a in apps))
        else:
            k, o = by_killed[0][0], others[0][0]
            last_commit = info[k]["committed"].get(partition)
            later_gen, started = batch_of(o, partition, offset)
            killed_at = killed_ms[k]
            if last_commit is not None and offset < last_commit:
                why = "%s had committed partition %d up to next=%d already" % (
                    k,
                    partition,
                    last_commit,
                )
            elif started is None or started <= killed_at:
                why = "%s applied it in a batch that started at %s, not after %s was killed at %d" % (
                    o,
                    started,
                    k,
                    killed_at,
                )
            else:
                explained.append((partition, offset, order, k, last_commit, o, later_gen))
        if why is not None:
            unexplained.append("%s (partition %d offset %d): %s" % (order, partition, offset, why))

    applied = sum(1 for order in orders if applications.get(order))
    unknown = sorted(set(applications) - set(orders))
    for order in unknown:
        problems.append("effect for order %s that was never produced" % order)
    lost_orders = sorted(order for order in orders if not applications.get(order))
    duplicates = lines - len(applications)
    redone = sum(len({a[0] for a in apps}) - 1 for apps in applications.values())
    skipped_by_metadata = sum(skipped.values())

    for name, count in sorted(refused.items()):
        notes.append(
            "%s had %d commit(s) refused (%s): reported, not retried"
            % (name, count, ", ".join(sorted(reasons[name])) or "?")
        )
    for name, count in sorted(stale.items()):
        notes.append(
            "%s skipped %d effect(s) whose partition was taken away while the order was processed"
            % (name, count)
        )
    static_line = None
    if opts.static_restart:
        static_line = judge_static_restart(opts, assignments, problems, before_stop)
    for note in notes:
        print("demo: note: %s" % note)
    if static_line:
        print("demo: %s" % static_line)
    if explained:
        print(
            "demo: %d duplicate(s), each explained by the SIGKILL: applied by the killed worker "
            "after its last commit on the partition, then again by the partition's next owner:"
            % len(explained)
        )
        by_partition = defaultdict(list)
        for partition, offset, order, k, last_commit, o, gen in explained:
            by_partition[(partition, k, last_commit, o, gen)].append((offset, order))
        for (partition, k, last_commit, o, gen), items in sorted(by_partition.items()):
            for lo, hi, first, last, count in ranges(sorted(items)):
                span = "offset %d" % lo if lo == hi else "offsets %d-%d" % (lo, hi)
                ids = first if first == last else "%s..%s" % (first, last)
                print(
                    "  partition %d %s (%d order(s) %s): %s, last commit next=%s; redone by %s "
                    "in generation %d" % (partition, span, count, ids, k, last_commit, o, gen)
                )
        if opts.duplicates_file:
            with open(opts.duplicates_file, "w") as f:
                for partition, offset, order, k, last_commit, o, gen in sorted(explained):
                    f.write(
                        "%s partition=%d offset=%d first=%s last_commit_next=%s second=%s gen=%d\n"
                        % (order, partition, offset, k, last_commit, o, gen)
                    )
            print("demo: every duplicate, one per line: %s" % opts.duplicates_file)
    if loss_explained:
        print(
            "demo: %d duplicate(s), each explained by a lost assignment during a broker fault: "
            "applied by a worker after its last commit on the partition, then that worker's "
            "assignment was fenced as lost without a commit (no poll within max.poll.interval.ms "
            "or a lapsed session: 'assignment lost' in its log), and the partition's next owner "
            "redid it:" % len(loss_explained)
        )
        by_partition = defaultdict(list)
        for partition, offset, order, n1, at, last, n2 in loss_explained:
            by_partition[(partition, n1, at, last, n2)].append((offset, order))
        for (partition, n1, at, last, n2), items in sorted(by_partition.items()):
            for lo, hi, first, last_id, count in ranges(sorted(items)):
                span = "offset %d" % lo if lo == hi else "offsets %d-%d" % (lo, hi)
                ids = first if first == last_id else "%s..%s" % (first, last_id)
                print(
                    "  partition %d %s (%d order(s) %s): %s, last commit next=%s, lost its "
                    "assignment at %d; redone by %s" % (partition, span, count, ids, n1, last, at, n2)
                )
    if handoff_explained:
        print(
            "demo: %d duplicate(s), each explained by a revocation whose commit the broker refused "
            "(reported by the worker as handoff-failed; librdkafka's mock refuses every commit "
            "while its group re-forms, where Kafka accepts the current generation's commits):"
            % len(handoff_explained)
        )
        by_partition = defaultdict(list)
        for partition, offset, order, n1, last_commit, n2, gen in handoff_explained:
            by_partition[(partition, n1, last_commit, n2, gen)].append((offset, order))
        for (partition, n1, last_commit, n2, gen), items in sorted(by_partition.items()):
            for lo, hi, first, last, count in ranges(sorted(items)):
                span = "offset %d" % lo if lo == hi else "offsets %d-%d" % (lo, hi)
                ids = first if first == last else "%s..%s" % (first, last)
                print(
                    "  partition %d %s (%d order(s) %s): %s, last commit next=%s, handoff refused; "
                    "redone by %s in generation %d" % (partition, span, count, ids, n1, last_commit, n2, gen)
                )
    if opts.commit_interval_ms is not None:
        for k in sorted(killed_names):
            at = killed_ms[k]
            recent = sum(
                hi - lo + 1
                for items in info[k]["applied"].values()
                for lo, hi, _, start_ms in items
                if at - 2000 <= start_ms <= at
            )
            worth = recent * opts.commit_interval_ms / 2000.0
            by_kill = sum(1 for e in explained if e[3] == k)
            print(
                "demo: the SIGKILL of %s caused %d repeat(s); the crash redo bound is "
                "commit.interval.ms + one commit round trip (the paced commits run off the poll "
                "thread: what finished since the last commit that reached the coordinator is "
                "redone); in its last 2 s it applied %d effect(s), so commit.interval.ms=%d is "
                "about %.0f effect(s) of its work (plus the round trip's, and the records it had "
                "started)" % (k, by_kill, recent, opts.commit_interval_ms, worth)
            )
    for line in unexplained:
        print("demo: UNEXPLAINED duplicate %s" % line)
    for order in lost_orders[:20]:
        p, o = orders[order]
        print("demo: LOST %s (partition %d offset %d)" % (order, p, o))
    if len(lost_orders) > 20:
        print("demo: ... and %d more lost" % (len(lost_orders) - 20))
    for p in problems[:20]:
        print("demo: PROBLEM %s" % p)
    if len(problems) > 20:
        print("demo: ... and %d more problems" % (len(problems) - 20))

    extra = ""
    if opts.brokers is not None:
        # Measured, never judged: the verdict stays on safety (lost=0, every repeat explained).
        faults = fault_tools.read_faults(opts.faults) if opts.faults else []
        times = {p: sorted(ts) for p, ts in effect_times.items()}
        partitions = 1 + max([p for p, _ in orders.values()] or [0])
        longest = None
        first_seen = {}  # generation -> when a worker first saw it
        for items in assignments.values():
            for g, _, at in items:
                if g >= 0 and at is not None:
                    first_seen[g] = min(first_seen.get(g, at), at)
        for f, end in fault_tools.windows(faults):
            rebalanced = sorted(g for g, at in first_seen.items() if f["at_ms"] <= at < end)
            gap, resume, _ = fault_tools.measure(f, end, times, partitions)
            elected = [t - f["at_ms"] for t, back in f["elected"].values() if not back]
            print(
                "demo: broker fault %s: node %d (leader of partitions %s; coordinator node %d): "
                "longest gap in applied effects on the other %d partitions %s ms (from the fault "
                "to 8 s after the node rejoined, %.1f s); its partitions got new leaders %s and "
                "resumed %s ms after their election%s; %s"
                % (
                    f["name"], f["node"], ",".join(map(str, f["partitions"])), f["coordinator"],
                    partitions - len(f["partitions"]), fault_tools.fmt(gap),
                    (end - f["at_ms"]) / 1000.0,
                    "%d ms after the fault" % max(elected)
                    if elected and len(elected) == len(f["partitions"])
                    else "only when the node was back (%d of %d elected before)"
                    % (len(elected), len(f["partitions"])),
                    fault_tools.fmt(resume),
                    "" if elected else " (or the node's return)",
                    "the group moved to generation(s) %s meanwhile" % ",".join(map(str, rebalanced))
                    if rebalanced else "no rebalance meanwhile",
                )
            )
            longest = gap if longest is None else max(longest, gap)
        if len(faults) != 2:
            problems.append("%d broker fault(s) recorded in %s, expected 2" % (len(faults), opts.faults))
            print("demo: PROBLEM %s" % problems[-1])
        extra = " brokers=%d broker_faults=%d longest_gap_unaffected_ms=%s" % (
            opts.brokers, len(faults), "n/a" if longest is None else fault_tools.fmt(longest))
    ok = not lost_orders and not unexplained and not problems
    print(
        "orders=%d applied=%d duplicates=%d lost=%d redone=%d skipped_by_metadata=%d rebalances=%d "
        "broker=%s protocol=%s%s"
        % (
            len(orders),
            applied,
            duplicates,
            len(lost_orders),
            redone,
            skipped_by_metadata,
            len(generations),
            opts.broker,
            opts.protocol,
            extra,
        )
    )
    sys.stdout.flush()
    sys.exit(0 if ok else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("progress")
    p.add_argument("--manifest", required=True)
    p.add_argument("effects", nargs="*")
    p.set_defaults(func=cmd_progress)

    p = sub.add_parser("group")
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    p.add_argument("out", nargs="+")
    p.set_defaults(func=cmd_group)

    p = sub.add_parser("check")
    p.add_argument("--manifest", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--worker", type=parse_worker, action="append", required=True)
    p.add_argument("--problem", action="append")
    p.add_argument("--duplicates-file")
    p.add_argument("--broker", required=True, help="kafka-<version>, mock or tansu")
    p.add_argument("--static-restart", type=parse_static_restart)
    p.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    p.add_argument("--commit-interval-ms", type=int)
    p.add_argument("--brokers", type=int, help="cluster size, printed in the verdict (with --faults)")
    p.add_argument("--faults", help="scripts/faults.py events file: measure the gaps of each fault")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("committed", help="orders whose fill a worker committed (commit lines)")
    p.add_argument("--manifest", required=True)
    p.add_argument("out", nargs="*")
    p.set_defaults(
        func=lambda o: print(
            demo_check_eos.committed_orders(read_manifest(o.manifest), o.out, read_events)
        )
    )

    p = sub.add_parser(
        "exactly-once", help="judge scripts/demo --exactly-once (scripts/demo_check_eos.py)"
    )
    demo_check_eos.add_arguments(p, parse_static_restart)
    p.set_defaults(
        func=lambda o: demo_check_eos.cmd_check(o, read_manifest, read_events, judge_static_restart)
    )

    p = sub.add_parser("share", help="judge scripts/demo --share (scripts/demo_check_share.py)")
    demo_check_share.add_arguments(p)
    p.set_defaults(func=demo_check_share.cmd_share)

    p = sub.add_parser("share-self-test", help="the share check on synthetic runs, no broker")
    p.set_defaults(func=lambda _: demo_check_share.self_test())

    opts = parser.parse_args()
    opts.func(opts)


if __name__ == "__main__":
    main()

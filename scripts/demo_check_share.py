#!/usr/bin/env python3
"""The share-group half of scripts/demo_check.py: judges what scripts/demo --share's share workers
(examples/share_worker.rs) left behind. demo_check.py runs it as ``demo_check.py share ...`` and
``demo_check.py share-self-test``; it can be run directly the same way. Standard library only.

Inputs:

  manifest      one line per produced order, ``order_id partition offset``
  effect logs   one line per applied effect, one file per worker process:
                ``effect_key order_id partition offset at_ms delivery_count
                lease_deadline_mono_ns applied_mono_ns``
                (at_ms: wall-clock ms; delivery_count: the broker's count for the delivery the
                effect came from; the two last in CLOCK_MONOTONIC ns: the record's acquisition
                lock deadline as the worker knew it, and the moment right before the effect,
                after the worker's lease check)
  worker output the worker's stdout, ``WORD name=N key=value ...`` lines; read here:
                ``lease_expired name=N partition=P offset=O``      skipped: the lock had run out
                ``released name=N partition=P offset=O ...``        handed back (RELEASE)
                ``ack_failed name=N partition=P offset=O kind=accept|release|reject``
                                                                  an acknowledgement the broker
                                                                  refused (or never answered)

  share --manifest M --broker B --worker SPEC... [--problem TEXT...] [--lock-ms L]
        [--broker-pause FROM_NS-TO_NS...] [--duplicates-file F]
      SPEC is ``name=W,effects=FILE,out=FILE[,killed=FROM_NS-TO_NS][,frozen=FROM_NS-TO_NS]``:
      killed, CLOCK_MONOTONIC ns right before the worker was sent SIGKILL and right after it was
      reaped; frozen, right before its SIGSTOP and right after its SIGCONT. --broker-pause,
      CLOCK_MONOTONIC ns when the broker (or all traffic to it) was paused and when it resumed.
      Prints the findings and, as the very last line,
        orders=N applied=A duplicates=D lost=L redelivered_after_kill=K
        redelivered_after_expiry=E lease_skipped=S ack_failed=F released=R max_delivery_count=C
        expired_effects=X after_release=Z workers=W mode=share broker=B
      and exits 0 only when lost=0, expired_effects=0, after_release=0, every repeat is
      explained, every effect names the partition and offset the manifest gives its order, and no
      --problem was given.

Definitions:

  applied       distinct order ids with at least one effect line
  duplicates    effect lines beyond the first one per order id
  lost          orders of the manifest without an effect line
  expired_effects
                effect lines whose applied_mono_ns is at or after their lease_deadline_mono_ns:
                work done on a record whose lock had run out, which another member may hold
                already. Must be zero: the worker's lease check comes right before the effect.
  after_release effect lines of a delivery d that the broker had certainly released when the
                effect was applied: a higher delivery of the same record exists (an effect line,
                or a worker's ``lease_expired ... delivery=D`` line, of its partition and offset)
                and the effect came after a release moment the check knows of:
                  kill    after its worker W was killed and reaped (W cannot hold d after that)
                  freeze  after the end of a freeze of W that d was held through
                  pause   after the end of a broker pause that d was held through
                "Held through" an event from FROM to TO: TO - FROM exceeds the lock (--lock-ms;
                without it only kills count), and d's lock was counted from before FROM: its
                lease deadline minus half the lock (the most a lease ends before its lock) is
                before FROM. Every lock held at FROM then ran out by TO, and the higher delivery
                shows the broker did hand d on. An effect after that raced the next holder,
                whatever the worker's own lease said; an ack_failed line does not explain it.
                Must be zero.
  repeat        an order's applications in applied_mono_ns order; every one after the first is a
                repeat of the one before it, and must come from a later delivery (a higher
                delivery_count: two applications in one delivery mean two holders of one lock)
                and be explained by what happened to the earlier one's worker W:
                  kill    W was killed (SIGKILL) and the earlier application came before W was
                          gone, the repeat after the kill was sent: W applied it and its ACCEPT
                          never reached the broker, so the lock ran out (or W's session ended)
                          and the record went to the next consumer
                  expiry  W reported ``ack_failed`` for that partition and offset (its ACCEPT
                          came too late: the lock had run out after the effect), or W was frozen
                          (SIGSTOP) while the earlier application's lock still ran (deadline after
                          the freeze began, the application before it ended) and the repeat came
                          after the freeze began
                Anything else is unexplained and fails the check.
  redelivered_after_kill / redelivered_after_expiry
                repeats explained each way (a repeat both ways counts as kill)
  lease_skipped, ack_failed, released
                the workers' ``lease_expired``, ``ack_failed`` and ``released`` lines
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict

KV = re.compile(r"(\w+)=(\S*)")


class Bad(Exception):
    """A malformed input: the check cannot judge it."""


def read_manifest(path):
    orders = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 3:
                raise Bad("%s:%d: malformed manifest line %r" % (path, n, line))
            if parts[0] in orders:
                raise Bad("%s:%d: order id %s produced twice" % (path, n, parts[0]))
            orders[parts[0]] = (int(parts[1]), int(parts[2]))
    return orders


def read_effects(path, worker):
    """[application dict] of one effect log; a missing file is an empty log."""
    apps = []
    if not os.path.exists(path):
        return apps
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 8:
                raise Bad("%s:%d: malformed share effect line %r (want 8 fields)" % (path, n, line))
            try:
                apps.append(
                    {
                        "worker": worker,
                        "key": parts[0],
                        "order": parts[1],
                        "partition": int(parts[2]),
                        "offset": int(parts[3]),
                        "at_ms": int(parts[4]),
                        "delivery": int(parts[5]),
                        "deadline": int(parts[6]),
                        "applied": int(parts[7]),
                        "where": "%s:%d" % (os.path.basename(path), n),
                    }
                )
            except ValueError:
                raise Bad("%s:%d: non-numeric field in %r" % (path, n, line)) from None
    return apps


def read_events(path):
    """[(word, {key: value})] of a worker's stdout."""
    events = []
    if not os.path.exists(path):
        return events
    with open(path) as f:
        for line in f:
            words = line.split(None, 1)
            if words:
                events.append((words[0], dict(KV.findall(words[1])) if len(words) > 1 else {}))
    return events


def parse_worker(spec):
    w = {"killed": None, "frozen": None}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if key == "killed" and value:
            lo, _, hi = value.partition("-")
            w["killed"] = (int(lo), int(hi or lo))
        elif key == "frozen" and "-" in value:
            lo, hi = value.split("-", 1)
            w["frozen"] = (int(lo), int(hi))
        elif key in ("name", "effects", "out") and value:
            w[key] = value
        else:
            raise argparse.ArgumentTypeError("bad share worker spec %r" % spec)
    if not all(k in w for k in ("name", "effects", "out")):
        raise argparse.ArgumentTypeError("worker spec %r needs name, effects and out" % spec)
    return w


def parse_span(value):
    """FROM_NS-TO_NS as a (from, to) pair."""
    lo, sep, hi = value.partition("-")
    try:
        span = (int(lo), int(hi))
    except ValueError:
        raise argparse.ArgumentTypeError("bad span %r (want FROM_NS-TO_NS)" % value) from None
    if not sep or span[1] < span[0]:
        raise argparse.ArgumentTypeError("bad span %r (want FROM_NS-TO_NS)" % value)
    return span


# How long after its ShareFetch was sent the broker may still acquire records for it (the fetch's
# wait, share fetch.max.wait.ms, 500 ms by default, and the trip): a lock counted from a send
# before an event may start this much later.
FETCH_ALLOWANCE_NS = 1_000_000_000


def released_before(app, worker, pauses, lock_ns):
    """The release moment the check knows of for app's delivery, if the effect came after it:
    (moment, "kill"|"freeze"|"pause"), or None. Called only for a delivery that a higher delivery
    of the same record shows the broker released.

    A lease ends at most half the lock before the lock (the guard's margin is at most half), so
    its lock was counted from a send no later than deadline - lock/2. Kill: the worker cannot
    hold anything once reaped. Freeze: a frozen worker sends nothing, so a lease counted from a
    send before the freeze's end was counted from before its start, and every such lock ended
    within the freeze when the freeze outlasts the lock and the fetch's wait. Pause: the worker
    keeps sending, so only a send before the pause (by the fetch's wait) counts as held through
    it."""
    killed = worker["killed"]
    if killed is not None and app["applied"] > killed[1]:
        return killed[1], "kill"
    if not lock_ns:
        return None
    sent_by = app["deadline"] - lock_ns // 2
    spans = []
    if worker["frozen"] is not None:
        start, end = worker["frozen"]
        spans.append((start, end, sent_by < end, "freeze"))
    for start, end in pauses:
        spans.append((start, end, sent_by < start - FETCH_ALLOWANCE_NS, "pause"))
    for start, end, counted_before, what in spans:
        outlasted = end - start > lock_ns + FETCH_ALLOWANCE_NS
        if outlasted and counted_before and app["applied"] > end:
            return end, what
    return None


def explain(prev, cur, worker, ack_failed):
    """Why cur repeats prev ("kill" or "expiry"), or None."""
    if cur["delivery"] <= prev["delivery"]:
        return None
    killed = worker["killed"]
    if killed is not None and prev["applied"] <= killed[1] and cur["applied"] >= killed[0]:
        return "kill"
    if (prev["partition"], prev["offset"]) in ack_failed:
        return "expiry"
    frozen = worker["frozen"]
    if frozen is not None:
        stop, cont = frozen
        if prev["applied"] <= cont and prev["deadline"] >= stop and cur["applied"] >= stop:
            return "expiry"
    return None


def judge(opts):
    """(ok, lines): the findings, the verdict line last."""
    orders = read_manifest(opts.manifest)
    workers = {w["name"]: w for w in opts.worker}
    if len(workers) != len(opts.worker):
        raise Bad("a worker name is given twice")
    problems = list(opts.problem or [])
    apps = defaultdict(list)
    lines = 0
    counts = defaultdict(int)
    ack_failed = defaultdict(set)  # worker -> {(partition, offset)} of refused ACCEPTs
    # (partition, offset) -> the highest delivery count any worker saw of it
    top_delivery = defaultdict(int)
    for name, w in workers.items():
        for a in read_effects(w["effects"], name):
            apps[a["order"]].append(a)
            lines += 1
            where = (a["partition"], a["offset"])
            top_delivery[where] = max(top_delivery[where], a["delivery"])
        for word, fields in read_events(w["out"]):
            if word == "lease_expired":
                counts["lease_skipped"] += 1
                try:
                    where = (int(fields["partition"]), int(fields["offset"]))
                    delivery = int(fields.get("delivery", "0"))
                except (KeyError, ValueError):
                    problems.append("%s: unreadable lease_expired line %r" % (name, fields))
                    continue
                top_delivery[where] = max(top_delivery[where], delivery)
            elif word == "released":
                counts["released"] += 1
            elif word == "ack_failed":
                counts["ack_failed"] += 1
                if fields.get("kind", "accept") == "accept":
                    try:
                        ack_failed[name].add((int(fields["partition"]), int(fields["offset"])))
                    except (KeyError, ValueError):
                        problems.append("%s: unreadable ack_failed line %r" % (name, fields))
    out = []
    expired = []
    after_release = []  # (app, moment, what)
    lock_ns = (opts.lock_ms or 0) * 1_000_000
    unexplained = []
    explained = {"kill": [], "expiry": []}
    max_delivery = 0
    for order, items in sorted(apps.items()):
        items.sort(key=lambda a: a["applied"])
        want = orders.get(order)
        if want is None:
            problems.append("effect for order %s that was never produced (%s)" % (order, items[0]["where"]))
        for a in items:
            max_delivery = max(max_delivery, a["delivery"])
            if want is not None and (a["partition"], a["offset"]) != want:
                problems.append(
                    "%s: order %s at partition %d offset %d, produced at partition %d offset %d"
                    % (a["where"], order, a["partition"], a["offset"], want[0], want[1])
                )
            if a["applied"] >= a["deadline"]:
                expired.append(a)
            if top_delivery[(a["partition"], a["offset"])] > a["delivery"]:
                known = released_before(a, workers[a["worker"]], opts.broker_pause or [], lock_ns)
                if known is not None:
                    after_release.append((a,) + known)
        for prev, cur in zip(items, items[1:]):
            why = explain(prev, cur, workers[prev["worker"]], ack_failed[prev["worker"]])
            if why is None:
                unexplained.append((order, prev, cur))
            else:
                explained[why].append((order, prev, cur))
    lost = sorted(o for o in orders if o not in apps)
    applied = sum(1 for o in orders if o in apps)

    for why, text in (
        ("kill", "its worker was killed (SIGKILL) after applying it, before its ACCEPT reached "
                 "the broker; the lock ran out and the next consumer redid it"),
        ("expiry", "its worker's lock ran out after the effect (frozen by SIGSTOP, or its ACCEPT "
                   "refused: ack_failed); the next consumer redid it"),
    ):
        items = explained[why]
        if not items:
            continue
        out.append("demo: %d repeat(s) explained, %s:" % (len(items), text))
        by = defaultdict(list)
        for order, prev, cur in items:
            by[(prev["worker"], cur["worker"], prev["partition"])].append((prev["offset"], order, cur["delivery"]))
        for (first, second, partition), offs in sorted(by.items()):
            offs.sort()
            out.append(
                "  partition %d: %d order(s) at offsets %d..%d applied by %s, again by %s (delivery %s)"
                % (partition, len(offs), offs[0][0], offs[-1][0], first, second,
                   ",".join(sorted({str(d) for _, _, d in offs})))
            )
    if opts.duplicates_file:
        with open(opts.duplicates_file, "w") as f:
            for why in ("kill", "expiry"):
                for order, prev, cur in explained[why]:
                    f.write(
                        "%s partition=%d offset=%d first=%s delivery=%d second=%s delivery=%d why=%s\n"
                        % (order, prev["partition"], prev["offset"], prev["worker"], prev["delivery"],
                           cur["worker"], cur["delivery"], why)
                    )
            for order, prev, cur in unexplained:
                f.write(
                    "%s partition=%d offset=%d first=%s delivery=%d second=%s delivery=%d why=UNEXPLAINED\n"
                    % (order, prev["partition"], prev["offset"], prev["worker"], prev["delivery"],
                       cur["worker"], cur["delivery"])
                )
        out.append("demo: every repeat, one per line: %s" % opts.duplicates_file)
    if opts.lock_ms:
        out.append(
            "demo: share.record.lock.duration.ms=%d; %d record(s) skipped by a lease check (lock run "
            "out before the effect), %d acknowledgement(s) refused, %d record(s) released"
            % (opts.lock_ms, counts["lease_skipped"], counts["ack_failed"], counts["released"])
        )
    for a in expired[:20]:
        out.append(
            "demo: EXPIRED effect %s (partition %d offset %d) by %s: applied %.3f ms after its lock "
            "deadline (%s)"
            % (a["order"], a["partition"], a["offset"], a["worker"],
               (a["applied"] - a["deadline"]) / 1e6, a["where"])
        )
    what_ended = {"kill": "its worker was killed", "freeze": "its worker's freeze ended",
                  "pause": "the broker's pause ended"}
    for a, moment, what in after_release[:20]:
        out.append(
            "demo: AFTER RELEASE effect %s (partition %d offset %d) by %s in delivery %d, applied "
            "%.3f ms after %s (the lock had run out by then, and delivery %d exists) (%s)"
            % (a["order"], a["partition"], a["offset"], a["worker"], a["delivery"],
               (a["applied"] - moment) / 1e6, what_ended[what],
               top_delivery[(a["partition"], a["offset"])], a["where"])
        )
    if len(after_release) > 20:
        out.append("demo: ... and %d more effects after a release" % (len(after_release) - 20))
    for order, prev, cur in unexplained[:20]:
        out.append(
            "demo: UNEXPLAINED repeat %s (partition %d offset %d): applied by %s in delivery %d, "
            "again by %s in delivery %d %.1f ms later"
            % (order, prev["partition"], prev["offset"], prev["worker"], prev["delivery"],
               cur["worker"], cur["delivery"], (cur["applied"] - prev["applied"]) / 1e6)
        )
    if len(unexplained) > 20:
        out.append("demo: ... and %d more unexplained" % (len(unexplained) - 20))
    for order in lost[:20]:
        out.append("demo: LOST %s (partition %d offset %d)" % ((order,) + orders[order]))
    if len(lost) > 20:
        out.append("demo: ... and %d more lost" % (len(lost) - 20))
    for p in problems[:20]:
        out.append("demo: PROBLEM %s" % p)
    if len(problems) > 20:
        out.append("demo: ... and %d more problems" % (len(problems) - 20))
    ok = not lost and not expired and not after_release and not unexplained and not problems
    out.append(
        "orders=%d applied=%d duplicates=%d lost=%d redelivered_after_kill=%d "
        "redelivered_after_expiry=%d lease_skipped=%d ack_failed=%d released=%d "
        "max_delivery_count=%d expired_effects=%d after_release=%d workers=%d mode=share broker=%s"
        % (len(orders), applied, lines - len(apps), len(lost), len(explained["kill"]),
           len(explained["expiry"]), counts["lease_skipped"], counts["ack_failed"],
           counts["released"], max_delivery, len(expired), len(after_release), len(workers),
           opts.broker)
    )
    return ok, out


def add_arguments(p):
    p.add_argument("--manifest", required=True)
    p.add_argument("--broker", required=True, help="kafka-<version>")
    p.add_argument("--worker", type=parse_worker, action="append", required=True)
    p.add_argument("--problem", action="append")
    p.add_argument("--lock-ms", type=int, help="the group's share.record.lock.duration.ms")
    p.add_argument("--broker-pause", type=parse_span, action="append",
                   help="FROM_NS-TO_NS (CLOCK_MONOTONIC) of a pause of the broker or its traffic")
    p.add_argument("--duplicates-file")


def cmd_share(opts):
    try:
        ok, out = judge(opts)
    except Bad as e:
        sys.stderr.write("demo_check.py: %s\n" % e)
        sys.exit(2)
    for line in out:
        print(line)
    sys.stdout.flush()
    sys.exit(0 if ok else 1)


# -------------------------------------------------------------------------------------------------
# Self-test: synthetic runs, no broker.
# -------------------------------------------------------------------------------------------------

S = 1_000_000_000  # ns per second
LOCK = 5 * S


def _effect(order, p, o, applied, delivery=1, deadline=None):
    deadline = applied + LOCK // 2 if deadline is None else deadline
    return "key-%s-%d %s %d %d %d %d %d %d\n" % (
        order, delivery, order, p, o, 1_700_000_000_000 + applied // 1_000_000, delivery, deadline, applied)


def _scenario(tmp, mutate=None):
    """A run of three workers over 2 partitions x 6 orders: w1 killed, w2 frozen (one ack_failed),
    w3 redoes what they left. mutate(files) may change it; returns the judge's (ok, lines)."""
    orders = [("o%d" % i, i % 2, i // 2) for i in range(12)]
    files = {
        "manifest": ["%s %d %d\n" % x for x in orders],
        "w1.effects": [], "w2.effects": [], "w3.effects": [],
        "w1.out": ["start name=w1 pid=1\n"],
        "w2.out": ["start name=w2 pid=2\n"],
        "w3.out": ["start name=w3 pid=3\n"],
    }
    t = 100 * S
    # o0..o3: w1 applies, is killed at t+10 s before its ACCEPTs land; w3 redoes them at t+16 s.
    for i in range(4):
        order, p, o = orders[i]
        files["w1.effects"].append(_effect(order, p, o, t + i * S))
        files["w3.effects"].append(_effect(order, p, o, t + 16 * S + i, delivery=2))
    # o4, o5: w2 applies right before its freeze (t+20 s .. t+28 s); w3 redoes them at t+26 s.
    for i in (4, 5):
        order, p, o = orders[i]
        files["w2.effects"].append(_effect(order, p, o, t + 19 * S + i))
        files["w3.effects"].append(_effect(order, p, o, t + 26 * S + i, delivery=2))
    # o6: w2 applies after the freeze, its ACCEPT is refused; w3 redoes it.
    order, p, o = orders[6]
    files["w2.effects"].append(_effect(order, p, o, t + 40 * S))
    files["w2.out"].append("ack_failed name=w2 partition=%d offset=%d kind=accept\n" % (p, o))
    files["w3.effects"].append(_effect(order, p, o, t + 46 * S, delivery=2))
    # o7: w2 skipped it (lease check), w3 applies it once; o8..o11 applied once by w3.
    order, p, o = orders[7]
    files["w2.out"].append("lease_expired name=w2 partition=%d offset=%d\n" % (p, o))
    for i in range(7, 12):
        order, p, o = orders[i]
        files["w3.effects"].append(_effect(order, p, o, t + 50 * S + i, delivery=2 if i == 7 else 1))
    specs = {"w1": ",killed=%d-%d" % (t + 10 * S, t + 10 * S + S // 10), "w2": ",frozen=%d-%d" % (t + 20 * S, t + 28 * S), "w3": "",
             "pauses": []}
    if mutate:
        mutate(files, specs)
    for name, content in files.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.writelines(content)
    opts = argparse.Namespace(
        manifest=os.path.join(tmp, "manifest"),
        broker="kafka-test",
        worker=[
            parse_worker("name=%s,effects=%s,out=%s%s"
                         % (n, os.path.join(tmp, n + ".effects"), os.path.join(tmp, n + ".out"), specs[n]))
            for n in ("w1", "w2", "w3")
        ],
        problem=None,
        lock_ms=5000,
        broker_pause=specs["pauses"],
        duplicates_file=None,
    )
    return judge(opts)


def _after_the_freeze(deadline):
    """w2 applies o4 (delivery 1) half a second after its freeze ended (t+28 s) under a lease
    ending at deadline, its ACCEPT is refused (ack_failed), and w3 applies delivery 2 at t+34 s."""
    def mutate(files, specs):
        files["w2.effects"][0] = _effect("o4", 0, 2, 128 * S + S // 2, deadline=deadline)
        files["w2.out"].append("ack_failed name=w2 partition=0 offset=2 kind=accept\n")
        files["w3.effects"][4] = _effect("o4", 0, 2, 134 * S, delivery=2)
    return mutate


def self_test():
    tmp = tempfile.mkdtemp(prefix="demo-check-share-")
    try:
        ok, out = _scenario(tmp)
        verdict = out[-1]
        assert ok, out
        assert verdict.startswith("orders=12 applied=12 duplicates=7 lost=0 redelivered_after_kill=4 "
                                  "redelivered_after_expiry=3 lease_skipped=1 ack_failed=1 "), verdict
        assert verdict.endswith("expired_effects=0 after_release=0 workers=3 mode=share broker=kafka-test"), verdict

        def drop(files, name, index):
            files[name] = [line for i, line in enumerate(files[name]) if i != index]

        cases = {
            # o11 never applied.
            "lost": (lambda f, s: drop(f, "w3.effects", len(f["w3.effects"]) - 1), "lost=1 "),
            # o6's refused ACCEPT not reported: nothing explains w3's repeat.
            "unexplained repeat": (lambda f, s: drop(f, "w2.out", 1), "UNEXPLAINED repeat o6 "),
            # The kill came after w3's repeat of o0..o3: the repeats are not the kill's.
            "repeat before the kill": (lambda f, s: s.update(w1=",killed=%d-%d" % (117 * S, 118 * S)),
                                       "UNEXPLAINED repeat o0 "),
            # The same delivery applied twice (two holders of one lock), whatever happened.
            "same delivery": (lambda f, s: f["w3.effects"].__setitem__(
                0, _effect("o0", 0, 0, 116 * S, delivery=1)), "UNEXPLAINED repeat o0 "),
            # w2 frozen long after its lock on o4/o5 had run out: the freeze explains nothing.
            "freeze after the lock": (lambda f, s: s.update(w2=",frozen=%d-%d" % (124 * S, 130 * S)),
                                      "UNEXPLAINED repeat o4 "),
            # o8 applied 1 ns after its lock deadline.
            "effect after the deadline": (lambda f, s: f["w3.effects"].__setitem__(
                8, _effect("o8", 0, 4, 150 * S + 8, deadline=150 * S + 7)), "expired_effects=1 "),
            # An effect at another offset than the manifest's.
            "wrong offset": (lambda f, s: f["w3.effects"].__setitem__(
                9, _effect("o9", 1, 9, 150 * S + 9)), "PROBLEM w3.effects:10: order o9 at partition 1 offset 9"),
            # w2 applies o4 after its freeze under a lease counted from before it (its deadline,
            # t+29 s, minus half the lock is before the freeze's end): the broker had released
            # delivery 1 (delivery 2 exists), whatever the lease said; the refused ACCEPT that
            # follows does not excuse it.
            "effect after the freeze released its delivery": (
                _after_the_freeze(129 * S), "AFTER RELEASE effect o4 (partition 0 offset 2) by w2 in delivery 1"),
        }
        passing = {
            # The same effect right after the freeze, under a lease counted from a fetch sent
            # after it (deadline t+33 s): that delivery was not released when it was applied,
            # and its refused ACCEPT explains the repeat.
            "effect after the freeze under a new lease": (_after_the_freeze(133 * S), " after_release=0 "),
            # A broker pause longer than the lock, with effects before it and after it under
            # leases counted from after it.
            "broker pause": (lambda f, s: s.update(pauses=[(140 * S, 148 * S)]), " after_release=0 "),
        }
        for what, (mutate, expect) in passing.items():
            ok, out = _scenario(tmp, mutate)
            assert ok, "%s: the check failed:\n%s" % (what, "\n".join(out))
            assert expect in out[-1], "%s: no %r in %s" % (what, expect, out[-1])
        for what, (mutate, expect) in cases.items():
            ok, out = _scenario(tmp, mutate)
            assert not ok, "%s: the check passed:\n%s" % (what, "\n".join(out))
            assert any(expect in line for line in out), "%s: no %r in:\n%s" % (what, expect, "\n".join(out))
            # Each broken run is broken in one way only.
            if what != "lost":
                assert " lost=0 " in out[-1], "%s: %s" % (what, out[-1])
            if what != "effect after the deadline":
                assert "expired_effects=0 " in out[-1], "%s: %s" % (what, out[-1])
            if not what.startswith("effect after the freeze"):
                assert " after_release=0 " in out[-1], "%s: %s" % (what, out[-1])
            else:
                assert " after_release=1 " in out[-1] and not any("UNEXPLAINED" in line for line in out), \
                    "%s: %s" % (what, "\n".join(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("demo_check.py share-self-test: passed (%d clean runs, and %d broken ones caught)"
          % (1 + len(passing), len(cases)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("share")
    add_arguments(p)
    p.set_defaults(func=cmd_share)
    p = sub.add_parser("share-self-test")
    p.set_defaults(func=lambda _: self_test())
    opts = parser.parse_args()
    opts.func(opts)


if __name__ == "__main__":
    main()

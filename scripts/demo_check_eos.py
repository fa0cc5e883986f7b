"""The exactly-once mode of scripts/demo_check.py (``scripts/demo --exactly-once``).

Inputs:

  manifest      one line per produced order, ``order_id partition offset``
  committed     the fills as a read_committed reader sees them, one line per record,
                ``partition offset key value`` (examples/fills_reader.rs)
  uncommitted   the same under read_uncommitted: every fill record in the log, aborted ones too
  worker SPEC   ``name=W,effects=FILE,out=FILE[,killed=MS][,frozen=MS-MS]``: a worker's attempt
                log (one line per handler call, ``effect_key order_id partition offset at_ms``)
                and stdout (``assignment``, ``commit``, ``transactions``, ``closed``, ``failed``
                lines; examples/order_worker.rs --fills)

A fill's value is ``fill:order_id=<id>;...;by=<worker>``. Definitions:

  fills       fill records a read_committed reader sees
  duplicates  visible fills beyond the first per order
  lost        orders of the manifest without a visible fill
  aborted     fill records in the log that read_uncommitted sees and read_committed does not:
              the fills of aborted transactions (the SIGKILLed worker's open transaction, the
              frozen worker's, and any abort at a rebalance)
  attempts    handler calls over all workers (attempt logs); attempts beyond one per order were
              redone after an abort or a move
  transactions, txn_aborted
              the workers' own counters (``transactions`` lines: commits and aborts their
              consumers counted; the close's commit comes on top, and a killed worker has none)

The last line is the verdict,
  orders=N fills=F duplicates=D lost=L aborted=K attempts=A transactions=T txn_aborted=X
  rebalances=R broker=B protocol=P
and the exit status is 0 only when duplicates=0, lost=0, every visible fill is of a produced
order, read_committed saw nothing read_uncommitted did not, and no problem was reported (a worker
that exited on its own, a static restart that rebalanced on Kafka). A frozen worker (frozen=) that
stopped with a ``failed`` line saying it was fenced is noted, not a problem: the broker aborted its
transaction at the timeout while it was frozen, and stopping then is safe.
"""

import os
import re
import sys
from collections import Counter, defaultdict

FILL = re.compile(r"^fill:order_id=([^;]+);.*;by=([^;]+)$")


def read_fills(path, problems):
    """{(partition, offset): (order, by, key)} of a fills_reader output file."""
    fills = {}
    if not os.path.exists(path):
        problems.append("no reader output %s" % path)
        return fills
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 4:
                problems.append("%s:%d: malformed line %r" % (path, n, line))
                continue
            m = FILL.match(parts[3])
            if m is None:
                problems.append("%s:%d: not a fill: %r" % (path, n, parts[3]))
                continue
            fills[(int(parts[0]), int(parts[1]))] = (m.group(1), m.group(2), parts[2])
    return fills


def committed_orders(manifest, outs, read_events):
    """How many orders of the manifest lie below the highest position any worker committed on
    their partition (commit lines): the orders whose fill is committed."""
    top = {}
    for path in outs:
        for kind, f in read_events(path):
            if kind == "commit":
                p, nxt = int(f["partition"]), int(f["next"])
                top[p] = max(top.get(p, -1), nxt)
    return sum(1 for p, o in manifest.values() if o < top.get(p, -1))


def parse_worker(spec):
    import argparse

    w = {"killed": None, "frozen": None}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if key == "killed" and value:
            w["killed"] = int(value)
        elif key == "frozen" and "-" in value:
            a, _, b = value.partition("-")
            w["frozen"] = (int(a), int(b))
        elif key in ("name", "effects", "out") and value:
            w[key] = value
        else:
            raise argparse.ArgumentTypeError("bad worker spec %r" % spec)
    if not all(k in w for k in ("name", "effects", "out")):
        raise argparse.ArgumentTypeError("worker spec %r needs name, effects and out" % spec)
    return w


def add_arguments(p, parse_static_restart):
    p.add_argument("--manifest", required=True)
    p.add_argument("--committed", required=True, help="fills_reader --committed output")
    p.add_argument("--uncommitted", required=True, help="fills_reader --uncommitted output")
    p.add_argument("--worker", type=parse_worker, action="append", required=True)
    p.add_argument("--problem", action="append")
    p.add_argument("--broker", required=True)
    p.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    p.add_argument("--static-restart", type=parse_static_restart)
    p.add_argument("--duplicates-file")


def cmd_check(opts, read_manifest, read_events, judge_static_restart):
    orders = read_manifest(opts.manifest)
    problems = list(opts.problem or [])
    visible = read_fills(opts.committed, problems)
    logged = read_fills(opts.uncommitted, problems)

    # What is visible, per order.
    copies = defaultdict(list)  # order -> [(partition, offset, by)]
    for (p, o), (order, by, _key) in sorted(visible.items()):
        copies[order].append((p, o, by))
    unknown = sorted(set(copies) - set(orders))
    if unknown:
        problems.append(
            "%d visible fill(s) of orders never produced, e.g. %s" % (len(unknown), unknown[:5])
        )
    only_committed = sorted(set(visible) - set(logged))
    if only_committed:
        problems.append(
            "%d record(s) seen by read_committed and not by read_uncommitted, e.g. %s"
            % (len(only_committed), only_committed[:5])
        )
    aborted = {k: v for k, v in logged.items() if k not in visible}
    aborted_by = Counter(by for _, by, _ in aborted.values())
    visible_by = Counter(by for _, by, _ in visible.values())
    lost = sorted(o for o in orders if o not in copies)
    dup_orders = sorted(o for o, c in copies.items() if len(c) > 1)
    duplicates = sum(len(copies[o]) - 1 for o in dup_orders)

    # The workers: attempts, transactions, assignments, failures.
    attempts = defaultdict(list)  # order -> [(worker, at_ms)]
    generations = set()
    assignments = {}
    before_stop = {}
    committed_txn = aborted_txn = 0
    per_worker = []
    for w in opts.worker:
        name = w["name"]
        n_attempts = 0
        if os.path.exists(w["effects"]):
            with open(w["effects"]) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 5:
                        attempts[parts[1]].append((name, int(parts[4])))
                        n_attempts += 1
        assignments[name] = []
        txn = None
        closed = failed = False
        for kind, f in read_events(w["out"]):
            if kind == "assignment":
                gen = int(f["gen"])
                assignments[name].append((gen, f.get("owned", ""), int(f["at_ms"])))
                if gen >= 0 and f.get("owned"):
                    generations.add(gen)
            elif kind == "stop":
                before_stop[name] = list(assignments[name])
            elif kind == "transactions":
                txn = (int(f["committed"]), int(f["aborted"]))
            elif kind == "closed":
                closed = True
            elif kind == "failed":
                failed = True
                if w["frozen"] and "fenced" in f["_line"]:
                    # Its transaction was aborted at its timeout while it was frozen; a producer
                    # that stops on that is safe (it made nothing visible after the freeze).
                    print("demo: note: %s stopped after its freeze: %s" % (name, f["_line"]))
                else:
                    problems.append("worker %s failed: %s" % (name, f["_line"]))
        if txn:
            committed_txn += txn[0]
            aborted_txn += txn[1]
        how = "killed" if w["killed"] else ("closed" if closed else ("failed" if failed else "?"))
        per_worker.append(
            "  %-4s %-7s attempts=%-5d visible_fills=%-5d aborted_fills=%-5d transactions=%s%s"
            % (
                name,
                how,
                n_attempts,
                visible_by.get(name, 0),
                aborted_by.get(name, 0),
                "committed=%d,aborted=%d" % txn if txn else "- (no final line)",
                (
                    " frozen %.1f s" % ((w["frozen"][1] - w["frozen"][0]) / 1000.0)
                    if w["frozen"]
                    else ""
                ),
            )
        )
    n_attempts = sum(len(a) for a in attempts.values())

    print("demo: per worker (attempts: handler calls; visible/aborted: its fills in the log):")
    for line in per_worker:
        print(line)
    print(
        "demo: %d fill record(s) in the log, %d visible (read_committed), %d aborted; "
        "%d attempt(s) for %d order(s): %d redone after an abort or a move"
        % (len(logged), len(visible), len(aborted), n_attempts, len(orders), n_attempts - len(attempts))
    )
    if opts.static_restart:
        print("demo: " + judge_static_restart(opts, assignments, problems, before_stop))

    detail = []
    for order in dup_orders:
        detail.append(
            "%s produced at %s: visible %s; attempts %s"
            % (
                order,
                "partition %d offset %d" % orders[order] if order in orders else "never",
                ", ".join("fills-%d@%d by %s" % c for c in copies[order]),
                ", ".join("%s@%d" % a for a in attempts.get(order, [])),
            )
        )
    for order in lost:
        detail.append(
            "%s produced at partition %d offset %d: no visible fill; attempts %s; aborted fills %s"
            % (
                order,
                orders[order][0],
                orders[order][1],
                ", ".join("%s@%d" % a for a in attempts.get(order, [])) or "none",
                ", ".join(
                    "fills-%d@%d by %s" % (p, o, by)
                    for (p, o), (oid, by, _) in sorted(aborted.items())
                    if oid == order
                )
                or "none",
            )
        )
    if detail:
        print("demo: %d duplicate(s) and %d lost order(s): THE LIBRARY BROKE EXACTLY-ONCE" % (duplicates, len(lost)))
        for line in detail[:20]:
            print("  " + line)
        if opts.duplicates_file:
            with open(opts.duplicates_file, "w") as f:
                f.write("\n".join(detail) + "\n")
            print("demo: every one, one per line: %s" % opts.duplicates_file)
    for problem in problems:
        print("demo: problem: %s" % problem)

    ok = duplicates == 0 and not lost and not problems
    print(
        "orders=%d fills=%d duplicates=%d lost=%d aborted=%d attempts=%d transactions=%d "
        "txn_aborted=%d rebalances=%d broker=%s protocol=%s"
        % (
            len(orders),
            len(visible),
            duplicates,
            len(lost),
            len(aborted),
            n_attempts,
            committed_txn,
            aborted_txn,
            len(generations),
            opts.broker,
            opts.protocol,
        )
    )
    sys.stdout.flush()
    sys.exit(0 if ok else 1)

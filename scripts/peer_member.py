#!/usr/bin/env python3
"""One long-running consumer-group member driven by a real peer client.

The interoperability tests run these next to our own member, so that every
rebalance is decided and observed by independent implementations of the group
protocol. Run with the project's virtualenv (``.venv/bin/python``, created by
scripts/setup-test-env):

  peer_member.py --client confluent|kafka-python --bootstrap B --group G
                 --topic T [--topic T2 ...]
                 --strategy range|roundrobin|cooperative-sticky
                 [--instance-id ID] [--session-timeout-ms N]
                 [--heartbeat-interval-ms N] [--max-poll-interval-ms N]
                 [--name NAME] [--consume] [--debug]

Clients and strategies:
  confluent     confluent-kafka's Consumer (librdkafka);
                ``partition.assignment.strategy`` = the --strategy value.
  kafka-python  kafka-python's KafkaConsumer; range -> RangePartitionAssignor,
                roundrobin -> RoundRobinPartitionAssignor. kafka-python 2.3.3 has
                no cooperative rebalance protocol at all (its only sticky
                assignor, "sticky", is eager), so --strategy cooperative-sticky
                is refused: kafka-python takes part in eager groups only.

Stdout carries one JSON object per line, flushed after each:
  {"name":N,"event":"ready","t":T}          subscribed, polling starts
  {"name":N,"event":"assigned","partitions":[[topic,p],...],"owned":[...],"t":T}
  {"name":N,"event":"revoked", "partitions":[...],"owned":[...],"t":T}
  {"name":N,"event":"lost",    "partitions":[...],"owned":[...],"t":T}
  {"name":N,"event":"error","error":TEXT,"fatal":BOOL,"t":T}
  {"name":N,"event":"record","topic":..,"partition":..,"offset":..,"t":T}  (--consume only)
  {"name":N,"event":"closed","partitions":[...],"owned":[],"t":T}
``partitions`` is what the event is about (for cooperative assignment only the
increment, exactly as the client reported it); ``owned`` is the member's whole
ownership after the event, tracked here. Both are sorted. ``t`` is
time.monotonic() (CLOCK_MONOTONIC on Linux, comparable across processes).
``closed`` lists in ``partitions`` whatever was still owned when the client was
closed: confluent reports its revocation on close as a ``revoked`` event first
(so this is normally empty), kafka-python calls no listener on close.
kafka-python has no "lost" callback: a lost assignment shows up as a
``revoked`` of everything at its next rejoin.

kafka-python 2.3.3 does support static membership: --instance-id becomes
``group_instance_id`` (JoinGroup v5+; no LeaveGroup on close), since both test
brokers make it detect a broker version of at least 2.3. --debug sends the
client's group-protocol debug log to stderr (librdkafka ``debug=cgrp,protocol``;
kafka-python's DEBUG logging with timestamps).

Broker quirks that decide how tests must use these members are listed in the
docs of tests/brokers/group/peers.rs.

Stdin takes line commands: ``close`` or ``quit`` close the member gracefully
(LeaveGroup, unless it is a static member with --instance-id), and so do EOF
and SIGTERM. The process exits 0 after printing ``closed``.
"""

import argparse
import json
import signal
import sys
import threading
import time

STRATEGIES = ("range", "roundrobin", "cooperative-sticky")


class Events:
    """Prints event lines; remembers the member's ownership."""

    def __init__(self, name):
        self.name = name
        self.owned = set()
        self.lock = threading.Lock()
        self.broken = False

    def emit(self, event, **fields):
        obj = {"name": self.name, "event": event}
        obj.update(fields)
        obj["t"] = time.monotonic()
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self.lock:
            if self.broken:
                return
            try:
                sys.stdout.write(line)
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                # Our reader is gone: nobody listens, close quietly.
                self.broken = True
                stop.set()

    def change(self, event, partitions, add):
        parts = {(t, p) for t, p in partitions}
        if add:
            self.owned |= parts
        else:
            self.owned -= parts
        self.emit(event, partitions=sorted_pairs(parts), owned=sorted_pairs(self.owned))


def sorted_pairs(pairs):
    return [[t, p] for t, p in sorted(pairs)]


stop = threading.Event()


def watch_stdin():
    """close/quit/EOF on stdin stop the member."""
    try:
        for line in sys.stdin:
            if line.strip() in ("close", "quit"):
                break
    except Exception:  # a closed or broken stdin is EOF too
        pass
    stop.set()


# ---------------------------------------------------------------------------
# confluent-kafka
# ---------------------------------------------------------------------------


def run_confluent(opts, ev):
    from confluent_kafka import Consumer

    cooperative = opts.strategy == "cooperative-sticky"
    conf = {
        "bootstrap.servers": opts.bootstrap,
        "group.id": opts.group,
        "client.id": opts.name,
        "partition.assignment.strategy": opts.strategy,
        "session.timeout.ms": opts.session_timeout_ms,
        "heartbeat.interval.ms": opts.heartbeat_interval_ms,
        "max.poll.interval.ms": opts.max_poll_interval_ms,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "topic.metadata.refresh.interval.ms": 2000,
        "error_cb": lambda err: ev.emit("error", error=str(err), fatal=bool(err.fatal())),
    }
    if opts.instance_id:
        conf["group.instance.id"] = opts.instance_id
    if opts.debug:
        conf["debug"] = "cgrp,protocol"

    def pairs(partitions):
        return [(tp.topic, tp.partition) for tp in partitions]

    # Each callback applies the change itself, so the client's state and ours
    # cannot drift: cooperative callbacks carry only the increment, eager ones
    # the whole new assignment (assign) or everything (revoke/lost).
    def on_assign(consumer, partitions):
        if cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
            ev.owned = set()
        ev.change("assigned", pairs(partitions), add=True)

    def unassign(consumer, partitions):
        if cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    # Revocations are reported before the unassign: once unassigned, librdkafka
    # may rejoin at once from its own thread, and Kafka completes a rebalance
    # within a millisecond or two, so a report after the unassign could carry a
    # later t than the next owner's assignment (a false double ownership).
    def on_revoke(consumer, partitions):
        ev.change("revoked", pairs(partitions), add=False)
        unassign(consumer, partitions)

    def on_lost(consumer, partitions):
        ev.change("lost", pairs(partitions), add=False)
        unassign(consumer, partitions)

    consumer = Consumer(conf)
    try:
        consumer.subscribe(opts.topic, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        ev.emit("ready")
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error() is not None:
                ev.emit("error", error=str(msg.error()), fatal=bool(msg.error().fatal()))
                if msg.error().fatal():
                    break
                continue
            if opts.consume:
                ev.emit("record", topic=msg.topic(), partition=msg.partition(), offset=msg.offset())
    finally:
        # close() runs the revoke callback (LeaveGroup unless static).
        consumer.close()


# ---------------------------------------------------------------------------
# kafka-python
# ---------------------------------------------------------------------------


def run_kafka_python(opts, ev):
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[opts.strategy]

    class Listener(ConsumerRebalanceListener):
        # kafka-python is eager only: revoked = everything, assigned = the whole new set.
        def on_partitions_revoked(self, revoked):
            ev.change("revoked", [(tp.topic, tp.partition) for tp in revoked], add=False)

        def on_partitions_assigned(self, assigned):
            ev.owned = set()
            ev.change("assigned", [(tp.topic, tp.partition) for tp in assigned], add=True)

    if opts.debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(created).6f %(threadName)s %(name)s %(message)s")
    kwargs = {}
    if opts.instance_id:
        kwargs["group_instance_id"] = opts.instance_id
    consumer = KafkaConsumer(
        bootstrap_servers=opts.bootstrap.split(","),
        group_id=opts.group,
        client_id=opts.name,
        partition_assignment_strategy=[assignor],
        session_timeout_ms=opts.session_timeout_ms,
        heartbeat_interval_ms=opts.heartbeat_interval_ms,
        max_poll_interval_ms=opts.max_poll_interval_ms,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        metadata_max_age_ms=5000,
        **kwargs
    )
    try:
        consumer.subscribe(topics=opts.topic, listener=Listener())
        ev.emit("ready")
        while not stop.is_set():
            started = time.monotonic()
            try:
                batches = consumer.poll(timeout_ms=50)
            except Exception as e:  # e.g. FencedInstanceIdError
                fatal = type(e).__name__ in ("FencedInstanceIdError", "KafkaConfigurationError")
                ev.emit("error", error="%s: %s" % (type(e).__name__, e), fatal=fatal)
                if fatal:
                    break
                time.sleep(0.05)
                continue
            if not batches and time.monotonic() - started < 0.01:
                # While a JoinGroup is in flight, poll() returns at once:
                # do not spin a core that the brokers and other members need.
                stop.wait(0.01)
            if opts.consume:
                for tp, records in batches.items():
                    for r in records:
                        ev.emit("record", topic=tp.topic, partition=tp.partition, offset=r.offset)
    finally:
        # Sends LeaveGroup unless static; calls no rebalance listener.
        consumer.close(autocommit=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", required=True, choices=["confluent", "kafka-python"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True, action="append", help="repeatable")
    parser.add_argument("--strategy", required=True, choices=STRATEGIES)
    parser.add_argument("--instance-id", help="group.instance.id (static membership)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--name", default="peer-member")
    parser.add_argument("--consume", action="store_true", help="print a record event per record")
    parser.add_argument("--debug", action="store_true", help="client debug logs (group protocol) on stderr")
    opts = parser.parse_args()
    if opts.client == "kafka-python" and opts.strategy == "cooperative-sticky":
        parser.error("kafka-python 2.3.3 has no cooperative rebalance protocol")

    ev = Events(opts.name)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, daemon=True).start()
    run = run_confluent if opts.client == "confluent" else run_kafka_python
    try:
        run(opts, ev)
    finally:
        last = ev.owned
        ev.owned = set()
        ev.emit("closed", partitions=sorted_pairs(last), owned=[])


if __name__ == "__main__":
    main()

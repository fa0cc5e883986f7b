#!/usr/bin/env python3
"""Peer-client helpers for the integration tests, built on confluent-kafka.

Run with the project's virtualenv (``.venv/bin/python scripts/peer.py ...``,
created by scripts/setup-test-env). Every subcommand exits non-zero with a
message on stderr when it fails.

  produce       write deterministic records, flush, print ``produced N``
  produce-orders
                orders for examples/order_worker.rs (the values of examples/produce_orders.rs),
                paced at --rate with the idempotent producer (acks=all), until --count or
                SIGTERM; then writes the manifest ``order_id partition offset`` per order
  consume       read records from the beginning (assign, no group, no commit)
                and print one JSON object per line
  create-topic  create a topic through the Admin API and wait until it shows
                up in metadata (optionally with an explicit replica assignment and
                topic settings)
  delete-topic  delete a topic through the Admin API and wait until it is gone
                from metadata
  group-type    describe a consumer group through the Admin API and print
                ``type <classic|consumer> state <state> members <n>``: which
                protocol the broker runs the group under (Kafka converts a group
                between the two when members of the other protocol join or leave)
  kafka-python-metadata
                bootstrap kafka-python against the cluster and print
                ``partitions <topic> <n>``: a check that this second peer
                client can talk to the broker

Records written by ``produce`` for index i (0-based, counting from --start):
  key     ``<key-prefix>-<i>`` (UTF-8)
  value   the ASCII text ``v-<i>;`` repeated and cut to exactly --size bytes
  headers with --headers: ``h1`` = ASCII decimal i, ``h2`` = empty value
"""

import argparse
import json
import os
import sys
import time


def record_value(i, size):
    """The value ``produce`` writes for record i: ``v-<i>;`` repeated, cut to size bytes."""
    unit = ("v-%d;" % i).encode()
    return (unit * (size // len(unit) + 1))[:size]


def fail(msg):
    sys.stderr.write("peer.py: %s\n" % msg)
    sys.exit(1)


def cmd_produce(opts):
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": opts.bootstrap,
        "client.id": "peer-produce",
        "acks": opts.acks,
        "compression.type": opts.compression,
        # Java's partitioner, so that a key lands where every other client puts it.
        "partitioner": "murmur2_random",
        "message.timeout.ms": int(opts.timeout_s * 1000),
    }
    if opts.batch:
        # Hold records back so that each partition gets few, large record batches.
        conf.update(
            {
                "linger.ms": 1000,
                "batch.num.messages": 100000,
                "batch.size": 16 * 1024 * 1024,
                "message.max.bytes": 32 * 1024 * 1024,
            }
        )
    producer = Producer(conf)
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append("%s [%s]: %s" % (msg.topic(), msg.partition(), err))

    started = time.monotonic()
    for n in range(opts.count):
        i = opts.start + n
        if opts.rate:
            # Paced: record n is due n/rate seconds after the start (live production for tests
            # that fail brokers while records keep arriving).
            due = started + n / opts.rate
            while True:
                producer.poll(0)
                ahead = due - time.monotonic()
                if ahead <= 0:
                    break
                time.sleep(min(ahead, 0.05))
        kwargs = {
            "key": ("%s-%d" % (opts.key_prefix, i)).encode(),
            "value": record_value(i, opts.size),
            "on_delivery": on_delivery,
        }
        if opts.partition is not None:
            kwargs["partition"] = opts.partition
        if opts.headers:
            kwargs["headers"] = [("h1", str(i).encode()), ("h2", b"")]
        while True:
            try:
                producer.produce(opts.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain
        if opts.flush_every and (n + 1) % opts.flush_every == 0:
            if producer.flush(opts.timeout_s) != 0:
                fail("flush timed out")
        else:
            producer.poll(0)
    remaining = producer.flush(opts.timeout_s)
    if errors:
        fail("%d delivery error(s), first: %s" % (len(errors), errors[0]))
    if remaining:
        fail("%d record(s) still undelivered after %.0f s" % (remaining, opts.timeout_s))
    print("produced %d" % opts.count)


def cmd_produce_orders(opts):
    """Orders for examples/order_worker.rs, produced live: paced at --rate, acks=all with the
    idempotent producer (a retry after a broker fault never writes an order twice), until --count
    orders or SIGTERM/SIGINT, whichever comes first; then flushes and writes the manifest."""
    import signal

    from confluent_kafka import Producer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    producer = Producer(
        {
            "bootstrap.servers": opts.bootstrap,
            "client.id": "peer-produce-orders",
            "enable.idempotence": True,
            "acks": "all",
            # Brokers fail during the run: keep retrying (well past a restart) rather than fail.
            "message.timeout.ms": int(opts.timeout_s * 1000),
            "linger.ms": 5,
        }
    )
    delivered = {}  # order index -> (partition, offset)
    errors = []

    def on_delivery(i, err, msg):
        if err is not None:
            errors.append("order %d: %s" % (i, err))
        else:
            delivered[i] = (msg.partition(), msg.offset())

    started = time.monotonic()
    n = 0
    while n < opts.count and not stop:
        due = started + n / opts.rate
        while not stop:
            producer.poll(0)
            ahead = due - time.monotonic()
            if ahead <= 0:
                break
            time.sleep(min(ahead, 0.02))
        if stop:
            break
        side = "buy" if n % 2 == 0 else "sell"
        value = "order_id=ord-%06d;account=acct-%03d;side=%s;qty=%d" % (n, n % 97, side, 1 + n % 50)
        while True:
            try:
                producer.produce(
                    opts.topic,
                    key=("acct-%03d" % (n % 97)).encode(),
                    value=value.encode(),
                    partition=n % opts.partitions,
                    on_delivery=lambda err, msg, i=n: on_delivery(i, err, msg),
                )
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    remaining = producer.flush(opts.timeout_s)
    if errors:
        fail("%d delivery error(s), first: %s" % (len(errors), errors[0]))
    if remaining or len(delivered) != n:
        fail("%d of %d order(s) undelivered after %.0f s" % (n - len(delivered), n, opts.timeout_s))
    with open(opts.manifest + ".tmp", "w") as f:
        for i in range(n):
            f.write("ord-%06d %d %d\n" % ((i,) + delivered[i]))
    os.replace(opts.manifest + ".tmp", opts.manifest)
    print("produced %d orders in %.1f s" % (n, time.monotonic() - started))


def topic_partitions(client, topic, timeout_s):
    """Partition ids of topic, waiting up to timeout_s for metadata to show it."""
    deadline = time.monotonic() + timeout_s
    last = "no metadata"
    while True:
        try:
            md = client.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                return sorted(t.partitions)
            last = "topic error %s" % (t.error if t is not None else "missing")
        except Exception as e:  # KafkaException on timeouts and transport errors
            last = str(e)
        if time.monotonic() >= deadline:
            fail("no metadata for topic %s within %.0f s: %s" % (topic, timeout_s, last))
        time.sleep(0.2)


def cmd_consume(opts):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": opts.bootstrap,
            "client.id": "peer-consume",
            # Required by the client; never used to join or commit.
            "group.id": "peer-consume-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        if opts.partition is not None:
            partitions = [opts.partition]
        else:
            partitions = topic_partitions(consumer, opts.topic, opts.timeout_s)
        consumer.assign([TopicPartition(opts.topic, p, OFFSET_BEGINNING) for p in partitions])
        records = []
        deadline = time.monotonic() + opts.timeout_s
        while len(records) < opts.count:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for msg in consumer.consume(num_messages=opts.count - len(records), timeout=min(left, 0.5)):
                if msg.error() is not None:
                    if msg.error().fatal():
                        fail("consume error: %s" % msg.error())
                    sys.stderr.write("peer.py: consume warning: %s\n" % msg.error())
                    continue
                records.append(msg)
    finally:
        consumer.close()
    records.sort(key=lambda m: (m.partition(), m.offset()))
    for m in records:
        key = m.key()
        value = m.value()
        print(
            json.dumps(
                {
                    "partition": m.partition(),
                    "offset": m.offset(),
                    "key": None if key is None else key.decode("utf-8", "backslashreplace"),
                    "value": None if value is None else value.hex(),
                    "headers": [
                        [k, None if v is None else bytes(v).hex()] for k, v in (m.headers() or [])
                    ],
                    "timestamp": m.timestamp()[1],
                }
            )
        )
    sys.stdout.flush()
    if len(records) < opts.count:
        fail("timed out after %.0f s with %d of %d records" % (opts.timeout_s, len(records), opts.count))


def cmd_create_topic(opts):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": opts.bootstrap, "client.id": "peer-admin"})
    config = dict(item.split("=", 1) for item in opts.config)
    if opts.replica_assignment:
        # Explicit placement: one replica list per partition, the first replica leads.
        assignment = [[int(n) for n in part.split(":")] for part in opts.replica_assignment.split(",")]
        if len(assignment) != opts.partitions:
            fail("--replica-assignment lists %d partitions, --partitions %d" % (len(assignment), opts.partitions))
        topic = NewTopic(opts.topic, num_partitions=opts.partitions, replica_assignment=assignment, config=config)
    else:
        topic = NewTopic(opts.topic, num_partitions=opts.partitions, replication_factor=opts.replication_factor,
                         config=config)
    futures = admin.create_topics([topic], operation_timeout=opts.timeout_s, request_timeout=opts.timeout_s)
    try:
        futures[opts.topic].result(timeout=opts.timeout_s)
    except Exception as e:
        err = e.args[0] if e.args else None
        exists = getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS
        if not (exists and opts.exist_ok):
            fail("create topic %s: %r" % (opts.topic, e))
    partitions = topic_partitions(admin, opts.topic, opts.timeout_s)
    if not opts.exist_ok and len(partitions) != opts.partitions:
        fail("topic %s has %d partitions, wanted %d" % (opts.topic, len(partitions), opts.partitions))
    print("created %s %d" % (opts.topic, len(partitions)))


def cmd_delete_topic(opts):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": opts.bootstrap, "client.id": "peer-admin"})
    futures = admin.delete_topics([opts.topic], operation_timeout=opts.timeout_s, request_timeout=opts.timeout_s)
    try:
        futures[opts.topic].result(timeout=opts.timeout_s)
    except Exception as e:
        fail("delete topic %s: %r" % (opts.topic, e))
    deadline = time.monotonic() + opts.timeout_s
    while opts.topic in admin.list_topics(timeout=opts.timeout_s).topics:
        if time.monotonic() >= deadline:
            fail("topic %s still in metadata after %.0f s" % (opts.topic, opts.timeout_s))
        time.sleep(0.1)
    print("deleted %s" % opts.topic)


def cmd_group_type(opts):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": opts.bootstrap, "client.id": "peer-admin"})
    futures = admin.describe_consumer_groups([opts.group], request_timeout=opts.timeout_s)
    try:
        group = futures[opts.group].result(timeout=opts.timeout_s)
    except Exception as e:
        fail("describe group %s: %r" % (opts.group, e))
    kind = getattr(group.type, "name", str(group.type)).lower()
    state = getattr(group.state, "name", str(group.state)).lower()
    print("type %s state %s members %d" % (kind, state, len(group.members)))
def cmd_create_partitions(opts):
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": opts.bootstrap, "client.id": "peer-admin"})
    futures = admin.create_partitions([NewPartitions(opts.topic, opts.total)],
                                      operation_timeout=opts.timeout_s, request_timeout=opts.timeout_s)
    try:
        futures[opts.topic].result(timeout=opts.timeout_s)
    except Exception as e:
        fail("create partitions of %s: %r" % (opts.topic, e))
    deadline = time.monotonic() + opts.timeout_s
    while len(topic_partitions(admin, opts.topic, opts.timeout_s)) != opts.total:
        if time.monotonic() >= deadline:
            fail("topic %s does not have %d partitions after %.0f s" % (opts.topic, opts.total, opts.timeout_s))
        time.sleep(0.1)
    print("grown %s %d" % (opts.topic, opts.total))


def cmd_kafka_python_metadata(opts):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=opts.bootstrap.split(","),
        client_id="peer-kafka-python",
        request_timeout_ms=int(opts.timeout_s * 1000) + 1000,
        api_version_auto_timeout_ms=int(opts.timeout_s * 1000),
    )
    try:
        deadline = time.monotonic() + opts.timeout_s
        while True:
            partitions = consumer.partitions_for_topic(opts.topic)
            if partitions:
                break
            if time.monotonic() >= deadline:
                fail("kafka-python sees no partitions for %s" % opts.topic)
            time.sleep(0.2)
    finally:
        consumer.close()
    print("partitions %s %d" % (opts.topic, len(partitions)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--bootstrap", required=True, help="bootstrap list host:port[,host:port]")
        p.add_argument("--topic", required=True)
        p.add_argument("--timeout-s", type=float, default=30.0, help="overall deadline in seconds")

    p = sub.add_parser("produce", help="produce deterministic records")
    common(p)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--start", type=int, default=0, help="index of the first record")
    p.add_argument("--size", type=int, default=32, help="value size in bytes")
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--headers", action="store_true", help="add headers h1=<i> and h2=(empty)")
    p.add_argument("--key-prefix", default="k")
    p.add_argument("--batch", action="store_true", help="linger so records share few large batches")
    p.add_argument("--rate", type=float, default=0.0, help="records per second (default: as fast as possible)")
    p.add_argument("--acks", default="all", choices=("all", "1"), help="the producer's acks (default all)")
    p.add_argument(
        "--flush-every",
        type=int,
        default=0,
        metavar="N",
        help="flush after every N records (N=1: one record per batch)",
    )
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("produce-orders", help="produce orders live (paced, idempotent) with a manifest")
    common(p)
    p.add_argument("--partitions", type=int, required=True, help="order i goes to partition i %% N")
    p.add_argument("--rate", type=float, required=True, help="orders per second")
    p.add_argument("--count", type=int, required=True, help="at most this many (SIGTERM stops sooner)")
    p.add_argument("--manifest", required=True, help="written at the end: order_id partition offset")
    p.set_defaults(func=cmd_produce_orders)

    p = sub.add_parser("consume", help="print records from the beginning as JSON lines")
    common(p)
    p.add_argument("--count", type=int, required=True, help="stop after this many records")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("create-topic", help="create a topic with the Admin API")
    common(p)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--replica-assignment", help="node ids per partition, 'L:F,L:F,...' (leader first)")
    p.add_argument("--config", action="append", default=[], help="topic setting NAME=VALUE")
    p.add_argument("--exist-ok", action="store_true", help="an existing topic is not an error")
    p.set_defaults(func=cmd_create_topic)

    p = sub.add_parser("delete-topic", help="delete a topic with the Admin API")
    common(p)
    p.set_defaults(func=cmd_delete_topic)

    p = sub.add_parser("group-type", help="the protocol a consumer group runs under")
    p.add_argument("--bootstrap", required=True, help="bootstrap list host:port[,host:port]")
    p.add_argument("--group", required=True)
    p.add_argument("--timeout-s", type=float, default=30.0, help="overall deadline in seconds")
    p.set_defaults(func=cmd_group_type)
    p = sub.add_parser("create-partitions", help="grow a topic to a total partition count (CreatePartitions)")
    common(p)
    p.add_argument("--total", type=int, required=True, help="the partition count after")
    p.set_defaults(func=cmd_create_partitions)

    p = sub.add_parser("kafka-python-metadata", help="check that kafka-python can bootstrap")
    common(p)
    p.set_defaults(func=cmd_kafka_python_metadata)

    opts = parser.parse_args()
    opts.func(opts)


if __name__ == "__main__":
    main()

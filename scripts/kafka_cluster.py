#!/usr/bin/env python3
"""Run a cluster of N Apache Kafka KRaft nodes on loopback, with fault controls on stdin.

The sibling of scripts/kafka_broker.py, for tests that fail brokers: it takes that script's
settings (fast first joins, short group session minimums, few threads, a small heap, C1 only),
and changes what a cluster needs:

  * every node is broker and controller (``process.roles=broker,controller``), node ids 1..N,
    with a static quorum (``controller.quorum.voters=1@127.0.0.1:C1,...``); each storage is
    formatted with one cluster id and no ``--standalone`` (that is for a dynamic quorum);
  * ``__consumer_offsets`` (and the transaction and share-state topics) with replication N
    (at most 3) and ``min.insync.replicas`` 2, and the same as the default for new topics, so a
    test topic created without a replication factor is replicated like a production one;
  * the single broker's share-group settings (``group.share.*``: 6 s session, 500 ms
    heartbeat, 6 s record locks, one share-state partition; see kafka_broker.py) on every node,
    so a share member that dies (or whose node does) is replaced within seconds here too.

Once every node answers ApiVersions and the cluster's metadata lists all N brokers (registered
and unfenced: a topic with replication 3 can be created), it prints the bootstrap list, every
client listener, ``127.0.0.1:P1,127.0.0.1:P2,...``, as the first line of stdout. Then it reads
commands on stdin, one a line, and answers each with one line on stdout, ``ok [VALUE]`` or
``error MESSAGE``:

  kill ID     SIGKILL the node (kill -9: no controlled shutdown, nothing flushed)
  stop ID     SIGTERM and wait until it has exited (a controlled shutdown; SIGKILL after
              --stop-timeout-s, answered as an error)
  pause ID    SIGSTOP (its sockets stay open, nothing is answered)
  resume ID   SIGCONT
  start ID    start a stopped or killed node again with its data; answered once it answers
              ApiVersions and lists itself in its metadata (it rejoined the cluster)
  addr ID     its client address, 127.0.0.1:PORT
  pid ID      its JVM's process id (0 when it is not running)
  start-all   start every stopped or killed node at once, answered once all of them are ready
              (a node started alone after all were down cannot rejoin: the quorum needs two)

With ``--racks`` every node is in a rack of its own, ``broker.rack=rack-ID``, and the leaders
choose where a consumer reads with ``replica.selector.class=org.apache.kafka.common.replica.
RackAwareReplicaSelector``: a consumer that sends ``client.rack=rack-ID`` is pointed at node ID's
replica of a partition (fetching from followers, KIP-392).

Every port is chosen at start and kept, so a restarted node comes back at the same address.
It stops on EOF on stdin (the test closed the pipe, or died), SIGTERM or SIGINT: then it kills
every node it started, by PID (SIGKILL: the data is thrown away, nothing needs flushing, and a
node whose quorum is already gone can wait long in a controlled shutdown), removes the data
directories and exits. Every JVM is started with PR_SET_PDEATHSIG, so even a SIGKILL of this
script ends them. Node logs are DIR/node-ID.log; a temporary run directory (no --dir) is
removed whole.

Usage:
  kafka_cluster.py --version 4.4.0 [--nodes 3] [--dir DIR] [--set key=value ...] [--racks]
                   [--heap 256m] [--timeout-s 120] [--stop-timeout-s 60]
Only the standard library is used; run it with any Python 3.8+.
"""

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafka_broker as kb  # noqa: E402  (the single broker's settings and helpers)


# The leader's choice of a consumer's read replica by rack (KIP-392), shipped with the broker.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def say(msg):
    sys.stderr.write("kafka_cluster.py: %s\n" % msg)
    sys.stderr.flush()


def fail(msg):
    say("error: " + msg)
    sys.exit(1)


def metadata_broker_ids(port, timeout=2.0):
    """The node ids a Metadata v4 request (no topics) to 127.0.0.1:port lists, or None when it
    does not answer. Kafka lists only registered, unfenced brokers: the ones a new topic's
    replicas can be placed on."""
    correlation = 0x5EEE
    client_id = b"kafka-cluster-probe"
    body = struct.pack(">hhih", 3, 4, correlation, len(client_id)) + client_id
    body += struct.pack(">ib", 0, 0)  # no topics, no automatic topic creation
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)

            def exactly(n):
                data = b""
                while len(data) < n:
                    chunk = s.recv(n - len(data))
                    if not chunk:
                        raise OSError("closed")
                    data += chunk
                return data

            (size,) = struct.unpack(">i", exactly(4))
            if not 12 <= size <= 1 << 20:
                return None
            payload = exactly(size)
    except OSError:
        return None
    got, _throttle, count = struct.unpack(">iii", payload[:12])
    if got != correlation or not 0 <= count <= 1000:
        return None
    ids, at = [], 12
    try:
        for _ in range(count):
            node_id, host_len = struct.unpack(">ih", payload[at:at + 6])
            at += 6 + host_len + 4  # host, port
            (rack_len,) = struct.unpack(">h", payload[at:at + 2])
            at += 2 + max(rack_len, 0)
            ids.append(node_id)
    except struct.error:
        return None
    return ids


class Node:
    """One KRaft node: its ports, config, data and log, and its JVM while it runs."""

    def __init__(self, node_id, run_dir):
        self.id = node_id
        self.data_dir = os.path.join(run_dir, "data-%d" % node_id)
        self.config = os.path.join(run_dir, "node-%d.properties" % node_id)
        self.log = os.path.join(run_dir, "node-%d.log" % node_id)
        self.port = None
        self.controller_port = None
        self.jvm = None

    def addr(self):
        return "127.0.0.1:%d" % self.port

    def running(self):
        return self.jvm is not None and self.jvm.poll() is None


class Cluster:
    def __init__(self, opts, run_dir):
        self.opts = opts
        self.run_dir = run_dir
        self.classpath = kb.read_classpath(opts.version)
        self.java = shutil.which("java")
        if not self.java:
            fail("java not found on PATH (Kafka needs Java 17 or newer)")
        self.flags = kb.jvm_options(opts.heap, False, kb.write_log_config(run_dir, opts.version))
        self.nodes = {i: Node(i, run_dir) for i in range(1, opts.nodes + 1)}

    def properties(self, node, voters):
        # The single broker's settings, from the same function, then what a cluster changes.
        base = argparse.Namespace(version=self.opts.version, set=[], tls_dir=None, sasl_user=[])
        props = kb.server_properties(base, node.data_dir, node.port, node.controller_port)
        del props["controller.quorum.bootstrap.servers"]
        replication = str(min(3, self.opts.nodes))
        min_isr = str(min(2, self.opts.nodes))
        props.update({
            "node.id": str(node.id),
            "controller.quorum.voters": voters,
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
        })
        if "share.coordinator.state.topic.replication.factor" in props:
            props["share.coordinator.state.topic.replication.factor"] = replication
            props["share.coordinator.state.topic.min.isr"] = min_isr
        if self.opts.racks:
            props["broker.rack"] = "rack-%d" % node.id
            props["replica.selector.class"] = RACK_AWARE_SELECTOR
        for item in self.opts.set:
            key, sep, value = item.partition("=")
            if not sep:
                fail("--set %r: expected key=value" % item)
            props[key.strip()] = value.strip()
        return props

    def configure(self):
        """New ports for every node, their configs written, their storages formatted."""
        taken = set()
        for node in self.nodes.values():
            for attr in ("port", "controller_port"):
                p = kb.free_port()
                while p in taken:
                    p = kb.free_port()
                taken.add(p)
                setattr(node, attr, p)
        voters = ",".join("%d@127.0.0.1:%d" % (n.id, n.controller_port) for n in self.nodes.values())
        cluster_id = str(uuid.uuid4())
        formats = []
        for node in self.nodes.values():
            shutil.rmtree(node.data_dir, ignore_errors=True)
            props = self.properties(node, voters)
            with open(node.config, "w") as f:
                for key in sorted(props):
                    f.write("%s=%s\n" % (key, props[key]))
            with open(node.log, "ab") as log:
                formats.append((node, subprocess.Popen(
                    [self.java] + self.flags + ["-cp", self.classpath, "kafka.tools.StorageTool",
                                                "format", "-t", cluster_id, "-c", node.config],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=kb.die_with_parent)))
        for node, proc in formats:
            if proc.wait() != 0:
                fail("formatting node %d failed (exit %d); log %s:\n%s"
                     % (node.id, proc.returncode, node.log, kb.tail(node.log)))

    def launch(self, node):
        with open(node.log, "ab") as log:
            node.jvm = subprocess.Popen(
                [self.java] + self.flags + ["-cp", self.classpath, "kafka.Kafka", node.config],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=kb.die_with_parent)

    def wait_ready(self, nodes, deadline):
        """Waits until every one of nodes answers ApiVersions and lists every running node in
        its metadata. Returns None, or why not."""
        while True:
            for node in nodes:
                if not node.running():
                    return "node %d exited with %s" % (node.id, node.jvm.returncode)
            running = sorted(n.id for n in self.nodes.values() if n.running())
            if all(kb.api_versions_probe(n.port)
                   and sorted(metadata_broker_ids(n.port) or []) == running for n in nodes):
                return None
            if time.monotonic() > deadline:
                return "not ready within %.0f s" % self.opts.timeout_s
            time.sleep(0.1)

    def start(self):
        started = time.monotonic()
        for attempt in range(3):
            self.configure()
            for node in self.nodes.values():
                self.launch(node)
            why = self.wait_ready(list(self.nodes.values()), started + self.opts.timeout_s)
            if why is None:
                say("%d Kafka %s nodes up in %.1f s (pids %s)" % (
                    len(self.nodes), self.opts.version, time.monotonic() - started,
                    " ".join(str(n.jvm.pid) for n in self.nodes.values())))
                return
            logs = "".join("--- node %d (%s) ---\n%s\n" % (n.id, n.log, kb.tail(n.log, 3000))
                           for n in self.nodes.values())
            self.kill_all()
            # A port is free when picked but may be taken before the JVM binds it.
            if "Address already in use" not in logs or attempt == 2:
                fail("cluster start failed: %s\n%s" % (why, logs))
            say("a port was taken, retrying")

    def kill_all(self):
        for node in self.nodes.values():
            if node.jvm is not None and node.jvm.poll() is None:
                node.jvm.kill()
        for node in self.nodes.values():
            if node.jvm is not None:
                node.jvm.wait()

    def command(self, line):
        words = line.split()
        if words == ["start-all"]:
            down = [n for n in self.nodes.values() if not n.running()]
            for node in down:
                self.launch(node)
            why = self.wait_ready(down, time.monotonic() + self.opts.timeout_s)
            if why is not None:
                return "error %s; logs in %s" % (why, self.run_dir)
            return "ok " + ",".join(str(n.id) for n in down)
        if len(words) != 2 or not words[1].isdigit() or int(words[1]) not in self.nodes:
            return "error expected COMMAND ID with ID in 1..%d, got %r" % (len(self.nodes), line)
        verb, node = words[0], self.nodes[int(words[1])]
        if verb == "addr":
            return "ok " + node.addr()
        if verb == "pid":
            return "ok %d" % (node.jvm.pid if node.running() else 0)
        if verb == "start":
            if node.running():
                return "error node %d is running" % node.id
            self.launch(node)
            why = self.wait_ready([node], time.monotonic() + self.opts.timeout_s)
            if why is not None:
                return "error node %d: %s; log %s" % (node.id, why, node.log)
            return "ok " + node.addr()
        if not node.running():
            return "error node %d is not running" % node.id
        if verb == "kill":
            node.jvm.kill()
            node.jvm.wait()
            return "ok"
        if verb == "stop":
            node.jvm.send_signal(signal.SIGTERM)
            node.jvm.send_signal(signal.SIGCONT)  # a paused node could not act on SIGTERM
            try:
                node.jvm.wait(timeout=self.opts.stop_timeout_s)
            except subprocess.TimeoutExpired:
                node.jvm.kill()
                node.jvm.wait()
                return "error node %d did not stop within %.0f s: killed" % (
                    node.id, self.opts.stop_timeout_s)
            return "ok"
        if verb == "pause":
            node.jvm.send_signal(signal.SIGSTOP)
            return "ok"
        if verb == "resume":
            node.jvm.send_signal(signal.SIGCONT)
            return "ok"
        return "error unknown command %r" % verb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--version", required=True, help="a Kafka version installed by setup-test-env")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--dir", help="run directory (default: a fresh temporary one)")
    ap.add_argument("--set", action="append", default=[], help="extra setting key=value, every node")
    ap.add_argument("--racks", action="store_true",
                    help="node ID in broker.rack=rack-ID, leaders choose read replicas by rack")
    ap.add_argument("--heap", default="256m", help="JVM -Xmx of each node (default 256m)")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="start-up bound (default 120)")
    ap.add_argument("--stop-timeout-s", type=float, default=60.0)
    opts = ap.parse_args()
    if not 1 <= opts.nodes <= 9:
        fail("--nodes must be 1..9")
    own_dir = opts.dir is None
    run_dir = os.path.abspath(opts.dir or tempfile.mkdtemp(prefix="kafka-cluster-"))
    os.makedirs(run_dir, exist_ok=True)

    def on_signal(signum, _frame):
        raise SystemExit("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = Cluster(opts, run_dir)
    reason = "stdin closed"
    try:
        cluster.start()
        sys.stdout.write(",".join(n.addr() for n in cluster.nodes.values()) + "\n")
        sys.stdout.flush()
        for line in sys.stdin:
            if line.strip():
                answer = cluster.command(line.strip())
                say("%s: %s" % (line.strip(), answer))
                sys.stdout.write(answer + "\n")
                sys.stdout.flush()
    except SystemExit as e:
        reason = str(e.code)
        if e.code == 1:
            raise
    finally:
        cluster.kill_all()
        for node in cluster.nodes.values():
            shutil.rmtree(node.data_dir, ignore_errors=True)
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    say("cluster stopped (%s)" % reason)


if __name__ == "__main__":
    main()

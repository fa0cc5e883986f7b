#!/usr/bin/env python3
"""Run one Apache Kafka broker (KRaft, broker and controller in one JVM) on loopback.

Kafka 2.8 (the oldest line of the version matrix) runs in ZooKeeper mode instead: the script
first starts a ZooKeeper server in a JVM of its own, from the ZooKeeper jar on that broker's
classpath, and stops it after the broker (see "Settings per version" below).

The jars come from Maven Central through scripts/setup-test-env, which writes the classpath of
each pinned version to .cache/kafka/<version>/classpath. This script:

  1. picks two free loopback ports (the client listener and the controller), unless given;
  2. writes server.properties with settings that make group tests fast and honest (below);
  3. formats the storage (``kafka.tools.StorageTool format --standalone``);
  4. starts ``kafka.Kafka`` with a small heap, its log in the run directory;
  5. waits until the client listener answers an ApiVersions request, then prints the bootstrap
     address (``127.0.0.1:PORT``) as the first line of stdout (and writes it to
     --bootstrap-file if given), and a summary line on stderr with the cold start time;
  6. runs until it is told to stop: SIGTERM or SIGINT, EOF on stdin (with --stop-on-stdin-eof:
     the process that started it closed the pipe, or died), or the death of --watch-pid.
     Then it stops the broker by its PID (SIGTERM, SIGKILL after a grace period), removes the
     data directory and exits 0. A log named with --log stays unless --remove-log is given; a
     temporary run directory (no --dir) is removed whole.

With --sasl-user NAME=PASSWORD (repeatable) the broker also gets a SASL_PLAINTEXT listener on a
third free port, which enables PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for those users: PLAIN
through the listener's JAAS line (user_NAME="PASSWORD"), SCRAM through credentials created at
format time (``--add-scram``, 4096 iterations, both hashes). Its address is printed as the second
line of stdout, ``SASL_PLAINTEXT=127.0.0.1:PORT`` (and written to --sasl-bootstrap-file if
given), once it too answers ApiVersions. The PLAINTEXT listener stays the first line and the
inter-broker listener; nothing else changes. No authorizer is configured, so an authenticated user
may do anything.

With --tls-dir DIR (needs --sasl-user) the broker gets four TLS listeners more, each on a free
port, with PEM keystores (``ssl.keystore.type=PEM``, Kafka 2.7+) made from files the caller
generated in DIR (nothing is generated or committed here): ``SSL`` (server certificate
DIR/broker.pem, key and chain in one PEM file, for 127.0.0.1 and localhost; no client
authentication), ``MTLS`` (the same, ``ssl.client.auth=required``, clients trusted through
DIR/ca.pem), ``SASL_SSL`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER for the
--sasl-user users; OAUTHBEARER through Kafka's default unsecured validator, which accepts an
unsigned JWT with a ``sub`` claim) and ``WRONGHOST`` (SSL with DIR/other-host.pem, a certificate
for another host name). OAUTHBEARER is enabled on the SASL_PLAINTEXT listener too. Their
addresses are written to --tls-bootstrap-file as ``NAME=127.0.0.1:PORT`` lines once each answers
(a TLS listener answers a TCP connect; the PLAINTEXT and SASL_PLAINTEXT probes show the broker
is up).

If the broker does not answer within --timeout-s, or exits early, the script prints the tail of
the broker log on stderr and exits 1. The broker never outlives this script: it is started with
PR_SET_PDEATHSIG, so even a SIGKILL of this script ends it.

Settings per version (what differs between the lines the tests use):
  4.x, 3.9     KRaft; the controller found through controller.quorum.bootstrap.servers and the
               storage formatted with ``--standalone`` (KIP-853, 3.9+)
  3.0 to 3.8   KRaft with the static quorum of that time: controller.quorum.voters=1@HOST:PORT,
               the storage formatted without --standalone (3.0's KRaft was early access, but
               single-node groups, offsets and records work)
  2.8          ZooKeeper mode: broker.id and zookeeper.connect, no process.roles, no storage
               format; the ZooKeeper server (3.5.9, a dependency of Kafka 2.8) on a free port
  < 4          log4j 1 (reload4j) configuration; 4.x log4j2
  < 3.5        no --sasl-user (SCRAM credentials at format time came with 3.5)
The cluster id is a random base64url UUID, the form every version's StorageTool accepts.

Broker settings, and why:
  group.initial.rebalance.delay.ms=0     the first join of a group is not held back 3 s
  offsets.topic.num.partitions=1         one coordinator, created fast
  every replication factor and ISR = 1   a single node
  auto.create.topics.enable=false        a test that uses a topic it did not create fails
  group.min.session.timeout.ms=1000      classic members may use short sessions
  group.consumer.* (KIP-848)             short sessions and heartbeats for consumer-protocol groups
  group.share.* (KIP-932, 4.x only)      share groups that move on within seconds (a freshly
                                         formatted 4.4 node has share.version=2: share groups
                                         on, no feature setting needed):
      group.share.session.timeout.ms=6000 (floor .min.=1000)   a killed member's partitions
          go to the others 6 s after its last heartbeat (Kafka: 45 s, floor 45 s); a test
          shortens it for its own group with the group config share.session.timeout.ms
      group.share.heartbeat.interval.ms=500 (floor 100)        (Kafka: 5 s, floor 5 s); the
          broker also computes a new target assignment at a member's heartbeat, so this
          bounds how fast a leave or a join reaches the others
      group.share.record.lock.duration.ms=6000 (floor 1000)    records a killed member had
          acquired come back within the same 6 s (Kafka: 30 s, floor 15 s); lock-expiry
          tests set share.record.lock.duration.ms on their group, down to 1 s
      group.share.assignment.interval.ms=100                   (Kafka: 1 s)
      group.share.initialize.retry.interval.ms=1000            a share partition whose state
          could not be initialised is retried after 1 s (Kafka: 30 s)
      share.coordinator.state.topic.num.partitions=1           one share-state partition,
          created fast (Kafka: 50)
  a heap of --heap (256m by default)     two cores, several JVMs at once

Usage:
  kafka_broker.py --version 4.4.0 [--dir DIR] [--port P] [--log FILE]
                  [--set key=value ...] [--heap 256m] [--timeout-s 90]
                  [--bootstrap-file FILE] [--stop-on-stdin-eof] [--watch-pid PID]
                  [--full-jit] [--remove-log]
                  [--sasl-user NAME=PASSWORD ...] [--sasl-bootstrap-file FILE]
                  [--tls-dir DIR] [--tls-bootstrap-file FILE]
Only the standard library is used; run it with any Python 3.8+.
"""

import argparse
import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import base64

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Broker log configuration: everything at INFO to one file (stdout of the JVM), which is what a
# failing group test needs to be read afterwards (the coordinator logs every rebalance).
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.controller.name = org.apache.kafka.controller
logger.controller.level = warn
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
logger.zk.name = kafka.server.metadata
logger.zk.level = warn
"""
LOG4J1_PROPERTIES = """\
log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.controller=WARN
log4j.logger.org.apache.kafka.raft=WARN
log4j.logger.kafka.server.metadata=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.zookeeper=WARN
"""

# ZooKeeper for a 2.8 broker: loopback only, no admin HTTP server, a short tick.
ZOOKEEPER_PROPERTIES = """\
dataDir=%(data_dir)s
clientPort=%(port)d
clientPortAddress=127.0.0.1
maxClientCnxns=0
tickTime=500
admin.enableServer=false
"""


def say(msg):
    sys.stderr.write("kafka_broker.py: %s\n" % msg)
    sys.stderr.flush()


def fail(msg):
    say("error: " + msg)
    sys.exit(1)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_probe(port, timeout=2.0):
    """True when 127.0.0.1:port answers an ApiVersions v0 request without error."""
    correlation = 0x5EED
    client_id = b"kafka-broker-probe"
    body = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            header = b""
            while len(header) < 4:
                chunk = s.recv(4 - len(header))
                if not chunk:
                    return False
                header += chunk
            (size,) = struct.unpack(">i", header)
            if not 6 <= size <= 1 << 20:
                return False
            payload = b""
            while len(payload) < 6:
                chunk = s.recv(size - len(payload))
                if not chunk:
                    return False
                payload += chunk
            got_correlation, error_code = struct.unpack(">ih", payload[:6])
            return got_correlation == correlation and error_code == 0
    except OSError:
        return False


def tcp_probe(port, timeout=2.0):
    """True when 127.0.0.1:port accepts a TCP connection (a TLS listener, which needs a
    handshake before it would answer ApiVersions)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def read_classpath(version):
    path = os.path.join(ROOT, ".cache", "kafka", version, "classpath")
    try:
        with open(path) as f:
            classpath = f.read().strip()
    except OSError:
        fail("%s is missing: run scripts/setup-test-env (Kafka %s is not installed)" % (path, version))
    if not classpath:
        fail("%s is empty: rerun scripts/setup-test-env" % path)
    return classpath


def tail(path, max_bytes=6000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


def die_with_parent():
    """preexec_fn for the JVM: it gets SIGKILL when this script dies, however it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # not Linux: the stop paths below still apply
        pass
    # Own process group, so a Ctrl-C in a terminal reaches only this script, which stops the
    # broker in order.
    os.setpgid(0, 0)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TLS_LISTENERS = ("SSL", "MTLS", "SASL_SSL", "WRONGHOST")
OAUTHBEARER_JAAS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                    'unsecuredLoginStringClaim_sub="broker";')


def sasl_users(opts):
    """The --sasl-user entries as (name, password) pairs; names and passwords are kept simple
    (letters, digits, '-', '_', '.') so that neither JAAS nor --add-scram needs quoting rules."""
    users = []
    for item in opts.sasl_user:
        name, sep, password = item.partition("=")
        ok = lambda t: t and all(c.isalnum() or c in "-_." for c in t)
        if not sep or not ok(name) or not ok(password):
            fail("--sasl-user %r: expected NAME=PASSWORD of letters, digits, '-', '_', '.'" % name)
        users.append((name, password))
    return users


def sasl_listener_props(props, listener, opts):
    """PLAIN users, SCRAM and OAUTHBEARER on one SASL listener."""
    prefix = "listener.name.%s." % listener.lower()
    plain_users = " ".join('user_%s="%s"' % u for u in sasl_users(opts))
    props[prefix + "plain.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required %s;" % plain_users)
    for mechanism in SASL_MECHANISMS[1:]:
        props[prefix + mechanism.lower() + ".sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    if opts.tls_dir:
        props[prefix + "oauthbearer.sasl.jaas.config"] = OAUTHBEARER_JAAS


def tls_listener_props(props, listener, tls_dir):
    prefix = "listener.name.%s." % listener.lower()
    keystore = "other-host.pem" if listener == "WRONGHOST" else "broker.pem"
    props[prefix + "ssl.keystore.type"] = "PEM"
    props[prefix + "ssl.keystore.location"] = os.path.join(tls_dir, keystore)
    props[prefix + "ssl.truststore.type"] = "PEM"
    props[prefix + "ssl.truststore.location"] = os.path.join(tls_dir, "ca.pem")
    props[prefix + "ssl.client.auth"] = "required" if listener == "MTLS" else "none"


def version_tuple(version):
    """(major, minor) of a version string such as 3.0.2."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def metadata_mode(version):
    """How this version keeps its metadata: 'zookeeper' (2.x), 'kraft-voters' (3.0 to 3.8, a
    static controller quorum) or 'kraft-standalone' (3.9+, KIP-853's dynamic quorum)."""
    v = version_tuple(version)
    if v < (3, 0):
        return "zookeeper"
    if v < (3, 9):
        return "kraft-voters"
    return "kraft-standalone"


def random_cluster_id():
    """A random UUID in Kafka's own text form (base64url, no padding, 22 characters): 3.0's
    StorageTool refuses any other form. Never one that starts with '-' (one in 64 does): the
    StorageTool's argument parser reads it as an option and refuses the format."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cluster_id.startswith("-"):
            return cluster_id


def metadata_props(version, port, controller_port, zookeeper_port):
    """The settings that say how the broker finds its metadata (see metadata_mode)."""
    mode = metadata_mode(version)
    if mode == "zookeeper":
        return {
            "broker.id": "1",
            "zookeeper.connect": "127.0.0.1:%d" % zookeeper_port,
            "zookeeper.connection.timeout.ms": "30000",
            "listeners": "PLAINTEXT://127.0.0.1:%d" % port,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
        }
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": "PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d" % (port, controller_port),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    }
    if mode == "kraft-voters":
        props["controller.quorum.voters"] = "1@127.0.0.1:%d" % controller_port
    else:
        props["controller.quorum.bootstrap.servers"] = "127.0.0.1:%d" % controller_port
    return props


# Share groups (KIP-932, Kafka 4.x; a freshly formatted 4.4 node has share.version=2, so they
# need no feature setting): short sessions, heartbeats and record locks, so that a killed
# member's partitions and the records it had acquired move on within seconds (the module doc
# says why each value). Kafka's defaults: a 45 s session (and 45 s minimum), a 5 s heartbeat
# (and minimum), a 30 s record lock (15 s minimum), 50 share-state partitions, and 30 s between
# retries of a share partition's initialisation.
SHARE_GROUP_SETTINGS = {
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "6000",
    "group.share.initialize.retry.interval.ms": "1000",
    "group.share.assignment.interval.ms": "100",
    "share.coordinator.state.topic.num.partitions": "1",
}


def server_properties(opts, data_dir, port, controller_port, sasl_port=None, tls_ports=None,
                      zookeeper_port=None):
    major = int(opts.version.split(".")[0])
    props = metadata_props(opts.version, port, controller_port, zookeeper_port)
    props.update({
        "advertised.listeners": "PLAINTEXT://127.0.0.1:%d" % port,
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": data_dir,
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        # A frozen producer's transaction is aborted within a second of its timeout instead of
        # ten (Kafka's default check interval): the exactly-once fault tests wait for it.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # Classic groups: allow short sessions (the default floor is 6 s).
        "group.min.session.timeout.ms": "1000",
        # Consumer-protocol groups (KIP-848): short sessions and heartbeats for tests.
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "500",
        # Two cores: fewer threads than the defaults (8 I/O, 3 network).
        "num.io.threads": "2",
        "num.network.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        # No deletion by time: tests write records with explicit timestamps years in the past
        # (2021), and the default seven days' retention deleted a partition whose records all
        # carried one at the next check (every 5 minutes), between a test's write and its read
        # (OFFSET_OUT_OF_RANGE, records missing).
        "log.retention.ms": "-1",
    })
    if sasl_port is not None:
        props["listeners"] += ",SASL_PLAINTEXT://127.0.0.1:%d" % sasl_port
        props["advertised.listeners"] += ",SASL_PLAINTEXT://127.0.0.1:%d" % sasl_port
        props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        mechanisms = SASL_MECHANISMS + (("OAUTHBEARER",) if opts.tls_dir else ())
        props["sasl.enabled.mechanisms"] = ",".join(mechanisms)
        sasl_listener_props(props, "SASL_PLAINTEXT", opts)
    for listener, tls_port in (tls_ports or {}).items():
        props["listeners"] += ",%s://127.0.0.1:%d" % (listener, tls_port)
        props["advertised.listeners"] += ",%s://127.0.0.1:%d" % (listener, tls_port)
        protocol = "SASL_SSL" if listener == "SASL_SSL" else "SSL"
        props["listener.security.protocol.map"] += ",%s:%s" % (listener, protocol)
        tls_listener_props(props, listener, opts.tls_dir)
        if protocol == "SASL_SSL":
            sasl_listener_props(props, listener, opts)
    if major >= 4:
        props["share.coordinator.state.topic.replication.factor"] = "1"
        props["share.coordinator.state.topic.min.isr"] = "1"
        props.update(SHARE_GROUP_SETTINGS)
    for item in opts.set:
        if "=" not in item:
            fail("--set %r: expected key=value" % item)
        key, value = item.split("=", 1)
        props[key.strip()] = value.strip()
    return props


def write_log_config(run_dir, version):
    """Writes the log configuration for this Kafka version into run_dir; returns the JVM flag
    that names it (Kafka 4 logs through log4j2, 3.x through log4j 1)."""
    if int(version.split(".")[0]) >= 4:
        log_config = os.path.join(run_dir, "log4j2.properties")
        with open(log_config, "w") as f:
            f.write(LOG4J2_PROPERTIES)
        return "-Dlog4j2.configurationFile=" + log_config
    log_config = os.path.join(run_dir, "log4j.properties")
    with open(log_config, "w") as f:
        f.write(LOG4J1_PROPERTIES)
    return "-Dlog4j.configuration=file:" + log_config


def jvm_options(heap, full_jit, log_flag):
    """The JVM flags of a test broker (and of its StorageTool run): a small heap, the serial
    collector, C1 only unless full_jit."""
    flags = ["-Xmx" + heap, "-Xms64m", "-XX:+UseSerialGC"]
    if not full_jit:
        # C1 only: a test broker is never hot, and it starts a little faster (measured on two
        # cores: 2.3-2.6 s to the first ApiVersions answer, 2.8-2.9 s with the full JIT).
        flags.append("-XX:TieredStopAtLevel=1")
    return flags + ["-Djava.awt.headless=true", log_flag]


class Stopper:
    """Collects the reasons to stop; the main thread waits on it."""

    def __init__(self):
        self.event = threading.Event()
        self.reason = None

    def stop(self, reason):
        if self.reason is None:
            self.reason = reason
        self.event.set()


def watch_stdin(stopper):
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    stopper.stop("stdin closed")


def watch_pid(stopper, pid):
    while not stopper.event.is_set():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            stopper.stop("watched process %d exited" % pid)
            return
        except PermissionError:
            pass
        time.sleep(0.5)


def stop_broker(jvm, grace_s):
    if jvm.poll() is not None:
        return
    try:
        jvm.send_signal(signal.SIGTERM)
        jvm.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()


def start_zookeeper(java, jvm_flags, classpath, run_dir, log_path, deadline):
    """Starts the ZooKeeper server a 2.8 broker needs (a JVM of its own, dying with this
    script) and waits until it accepts connections; returns (process, port)."""
    data_dir = os.path.join(run_dir, "zookeeper")
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    port = free_port()
    config = os.path.join(run_dir, "zookeeper.properties")
    with open(config, "w") as f:
        f.write(ZOOKEEPER_PROPERTIES % {"data_dir": data_dir, "port": port})
    with open(log_path, "ab") as log:
        zk = subprocess.Popen(
            [java] + jvm_flags + ["-cp", classpath,
                                  "org.apache.zookeeper.server.quorum.QuorumPeerMain", config],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
    while not tcp_probe(port, timeout=0.5):
        if zk.poll() is not None:
            fail("ZooKeeper exited with %s during start-up; log %s:\n%s"
                 % (zk.returncode, log_path, tail(log_path)))
        if time.monotonic() > deadline:
            stop_broker(zk, 1.0)
            fail("ZooKeeper did not accept connections on 127.0.0.1:%d; log %s:\n%s"
                 % (port, log_path, tail(log_path)))
        time.sleep(0.05)
    return zk, port


def format_storage(java, jvm_flags, classpath, config, scram, log_path, version):
    """Formats the KRaft storage (nothing to do in ZooKeeper mode)."""
    mode = metadata_mode(version)
    if mode == "zookeeper":
        return
    standalone = ["--standalone"] if mode == "kraft-standalone" else []
    with open(log_path, "ab") as log:
        fmt = subprocess.run(
            [java] + jvm_flags + ["-cp", classpath, "kafka.tools.StorageTool", "format"]
            + standalone + ["-t", random_cluster_id(), "-c", config] + scram,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    if fmt.returncode != 0:
        fail("formatting the storage failed (exit %d); log %s:\n%s"
             % (fmt.returncode, log_path, tail(log_path)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--version", required=True, help="a Kafka version installed by setup-test-env")
    ap.add_argument("--dir", help="run directory (default: a fresh temporary one)")
    ap.add_argument("--port", type=int, default=0, help="client listener port (default: free)")
    ap.add_argument("--log", help="broker log file (default: DIR/broker.log)")
    ap.add_argument("--set", action="append", default=[], help="extra broker setting key=value")
    ap.add_argument("--heap", default="256m", help="JVM -Xmx (default 256m)")
    ap.add_argument("--timeout-s", type=float, default=90.0, help="start-up bound (default 90)")
    ap.add_argument("--bootstrap-file", help="also write the bootstrap address here when ready")
    ap.add_argument("--stop-on-stdin-eof", action="store_true")
    ap.add_argument("--watch-pid", type=int, help="stop when this process exits")
    ap.add_argument("--stop-grace-s", type=float, default=5.0)
    ap.add_argument("--full-jit", action="store_true",
                    help="keep the JVM's optimising compiler (for benchmarks; slower start)")
    ap.add_argument("--remove-log", action="store_true", help="remove the log on a clean stop")
    ap.add_argument("--sasl-user", action="append", default=[], metavar="NAME=PASSWORD",
                    help="add a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512) with this user")
    ap.add_argument("--sasl-bootstrap-file", help="also write the SASL listener's address here")
    ap.add_argument("--tls-dir", help="add SSL, MTLS, SASL_SSL and WRONGHOST listeners with the "
                    "PEM files of this directory (ca.pem, broker.pem, other-host.pem)")
    ap.add_argument("--tls-bootstrap-file", help="write the TLS listeners' NAME=ADDRESS lines here")
    opts = ap.parse_args()
    sasl = bool(opts.sasl_user)
    if opts.tls_dir:
        if not sasl:
            fail("--tls-dir needs --sasl-user (the SASL_SSL listener's users)")
        opts.tls_dir = os.path.abspath(opts.tls_dir)
        for name in ("ca.pem", "broker.pem", "other-host.pem"):
            if not os.path.isfile(os.path.join(opts.tls_dir, name)):
                fail("--tls-dir %s lacks %s" % (opts.tls_dir, name))
    sasl_users(opts)  # refuse a malformed entry before anything starts
    if sasl and version_tuple(opts.version) < (3, 5):
        fail("--sasl-user needs Kafka 3.5 or newer (SCRAM credentials at format time)")

    classpath = read_classpath(opts.version)
    java = shutil.which("java")
    if not java:
        fail("java not found on PATH (Kafka needs Java 17 or newer)")

    own_dir = opts.dir is None
    run_dir = opts.dir or tempfile.mkdtemp(prefix="kafka-%s-" % opts.version)
    os.makedirs(run_dir, exist_ok=True)
    data_dir = os.path.join(run_dir, "data")
    shutil.rmtree(data_dir, ignore_errors=True)
    log_path = os.path.abspath(opts.log or os.path.join(run_dir, "broker.log"))
    os.makedirs(os.path.dirname(log_path), exist_ok=True)

    log_flag = write_log_config(run_dir, opts.version)

    stopper = Stopper()
    signal.signal(signal.SIGTERM, lambda *_: stopper.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stopper.stop("SIGINT"))

    started = time.monotonic()
    jvm = None
    port = None
    zookeeper, zookeeper_port = None, None
    if metadata_mode(opts.version) == "zookeeper":
        zookeeper, zookeeper_port = start_zookeeper(
            java, jvm_options(opts.heap, False, log_flag), classpath, run_dir, log_path,
            started + opts.timeout_s)
    # A port is free when picked but may be taken before the JVM binds it: try again then.
    for attempt in range(3):
        port = opts.port or free_port()
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
        sasl_port = None
        if sasl:
            sasl_port = free_port()
            while sasl_port in (port, controller_port):
                sasl_port = free_port()
        tls_ports = {}
        if opts.tls_dir:
            taken = {port, controller_port, sasl_port}
            for listener in TLS_LISTENERS:
                p = free_port()
                while p in taken:
                    p = free_port()
                taken.add(p)
                tls_ports[listener] = p
        props = server_properties(opts, data_dir, port, controller_port, sasl_port, tls_ports,
                                  zookeeper_port)
        config = os.path.join(run_dir, "server.properties")
        with open(config, "w") as f:
            for key in sorted(props):
                f.write("%s=%s\n" % (key, props[key]))
        shutil.rmtree(data_dir, ignore_errors=True)
        jvm_flags = jvm_options(opts.heap, opts.full_jit, log_flag)
        scram = []
        for name, password in (sasl_users(opts) if sasl else []):
            for mechanism in SASL_MECHANISMS[1:]:
                scram += ["--add-scram", "%s=[name=%s,password=%s]" % (mechanism, name, password)]
        format_storage(java, jvm_flags, classpath, config, scram, log_path, opts.version)
        log = open(log_path, "ab")
        jvm = subprocess.Popen(
            [java] + jvm_flags + ["-cp", classpath, "kafka.Kafka", config],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        log.close()
        deadline = started + opts.timeout_s
        while True:
            if jvm.poll() is not None:
                break
            if (api_versions_probe(port) and (sasl_port is None or api_versions_probe(sasl_port))
                    and all(tcp_probe(p) for p in tls_ports.values())):
                break
            if time.monotonic() > deadline or stopper.event.is_set():
                stop_broker(jvm, 1.0)
                fail("Kafka %s did not answer ApiVersions on 127.0.0.1:%d within %.0f s; log %s:\n%s"
                     % (opts.version, port, opts.timeout_s, log_path, tail(log_path)))
            time.sleep(0.05)
        if jvm.poll() is None:
            break
        text = tail(log_path)
        if opts.port or "Address already in use" not in text or attempt == 2:
            fail("Kafka %s exited with %s during start-up; log %s:\n%s"
                 % (opts.version, jvm.returncode, log_path, text))
        say("port taken, retrying")

    bootstrap = "127.0.0.1:%d" % port
    elapsed = time.monotonic() - started
    if opts.bootstrap_file:
        tmp = opts.bootstrap_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(bootstrap + "\n")
        os.replace(tmp, opts.bootstrap_file)
    sys.stdout.write(bootstrap + "\n")
    if sasl:
        sasl_bootstrap = "127.0.0.1:%d" % sasl_port
        if opts.sasl_bootstrap_file:
            tmp = opts.sasl_bootstrap_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(sasl_bootstrap + "\n")
            os.replace(tmp, opts.sasl_bootstrap_file)
        sys.stdout.write("SASL_PLAINTEXT=%s\n" % sasl_bootstrap)
    if opts.tls_dir:
        lines = "".join("%s=127.0.0.1:%d\n" % (n, p) for n, p in tls_ports.items())
        if opts.tls_bootstrap_file:
            tmp = opts.tls_bootstrap_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(lines)
            os.replace(tmp, opts.tls_bootstrap_file)
        sys.stdout.write(lines)
    sys.stdout.flush()
    say("Kafka %s up on %s in %.1f s (pid %d, log %s)" % (opts.version, bootstrap, elapsed, jvm.pid, log_path))

    if opts.stop_on_stdin_eof:
        threading.Thread(target=watch_stdin, args=(stopper,), daemon=True).start()
    if opts.watch_pid:
        threading.Thread(target=watch_pid, args=(stopper, opts.watch_pid), daemon=True).start()
    while not stopper.event.wait(0.5):
        if jvm.poll() is not None:
            stopper.stop("broker exited with %s" % jvm.returncode)
    crashed = jvm.poll() is not None
    stop_broker(jvm, opts.stop_grace_s)
    if zookeeper is not None:
        stop_broker(zookeeper, opts.stop_grace_s)
        shutil.rmtree(os.path.join(run_dir, "zookeeper"), ignore_errors=True)
    shutil.rmtree(data_dir, ignore_errors=True)
    if crashed:
        fail("Kafka %s stopped by itself (%s); log %s:\n%s" % (opts.version, stopper.reason, log_path, tail(log_path)))
    if opts.remove_log:
        try:
            os.remove(log_path)
        except OSError:
            pass
    if own_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    say("Kafka %s on %s stopped (%s)" % (opts.version, bootstrap, stopper.reason))


if __name__ == "__main__":
    main()

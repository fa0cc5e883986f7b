#!/usr/bin/env python3
"""Run librdkafka's mock Kafka cluster as a loopback server for tests.

The mock cluster ships inside librdkafka, which the confluent-kafka wheel
bundles. This script loads that shared library with ctypes (it does not import
confluent_kafka itself), creates a throwaway producer handle that owns the
cluster, and then:

  * prints the bootstrap list (e.g. ``127.0.0.1:40123``) as the first line of
    stdout, then
  * reads one command per line on stdin and answers every command with exactly
    one line, ``ok`` or ``err <message>``.

On stdin EOF (e.g. the test process died) or ``quit`` it destroys the cluster
and exits 0. Run it with the project's virtualenv: ``.venv/bin/python``.

With ``--serve`` it is the run's shared mock instead (scripts/test starts one for every test
of a run, tests/support/shared.rs hands it out): it reads nothing on stdin, writes the control
address (``127.0.0.1:PORT``) to ``--control-file`` and then the bootstrap list to
``--bootstrap-file`` (each file whole or not at all), and answers commands sent to that control
address over TCP, one line in and one line out as above, any number per connection. Only the
commands whose effect stays inside the topic or group they name are taken there (marked
``*`` below); the rest change the cluster for every test at once (errors pushed for
an API key answer whichever client sends the next request of that key, a broker down or slow is
down or slow for all) and are refused with ``err``: a test that needs them starts a mock of its
own. It runs until SIGTERM or SIGINT, or until ``--watch-pid`` exits.

Command grammar (fields separated by whitespace; APIKEY is a number or a name
such as ``JoinGroup``; ERR is a number or a librdkafka error name such as
``NOT_COORDINATOR``, ``REBALANCE_IN_PROGRESS`` or ``_TRANSPORT``; BROKER is a
broker id, 1..N, or -1 for all brokers where noted); ``*`` marks the commands a ``--serve``
mock takes:

* ping                                        no-op, answers ok
* create_topic NAME PARTITIONS [RF]           rd_kafka_mock_topic_create (RF default 1)
* delete_topic NAME                           rd_kafka_mock_topic_delete
* topic_error NAME ERR                        rd_kafka_mock_topic_set_error (Metadata)
  push_errors APIKEY ERR [ERR...]             next requests of APIKEY fail in order
  clear_errors APIKEY                         rd_kafka_mock_clear_request_errors
  broker_push_errors BROKER APIKEY ERR[:RTT_MS] [ERR[:RTT_MS]...]
                                              per-broker errors with response delay
  broker_down BROKER                          disconnect, refuse connections (-1: all)
  broker_up BROKER                            accept connections again (-1: all)
  rtt BROKER MS                               add MS of round-trip delay (-1: all)
* coordinator group|transaction KEY BROKER    pin the coordinator of a group / txn id
* leader TOPIC PARTITION BROKER               set partition leader (-1: leaderless)
  api_version APIKEY MIN MAX                  advertised version range (-1 -1: disable)
  initial_rebalance_delay MS                  group.initial.rebalance.delay.ms
  group_consumer_session_timeout MS           KIP-848 group.consumer.session.timeout.ms
  group_consumer_heartbeat_interval MS        KIP-848 group.consumer.heartbeat.interval.ms
  quit                                        answers ok, destroys the cluster, exits 0
"""

import argparse
import ctypes
import glob
import importlib.util
import os
import signal
import socketserver
import sys
import sysconfig
import threading

from kafka_broker import Stopper, watch_pid

# Kafka protocol API keys, so tests and humans can write names.
API_KEYS = {
    "Produce": 0,
    "Fetch": 1,
    "ListOffsets": 2,
    "Metadata": 3,
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "JoinGroup": 11,
    "Heartbeat": 12,
    "LeaveGroup": 13,
    "SyncGroup": 14,
    "DescribeGroups": 15,
    "ListGroups": 16,
    "SaslHandshake": 17,
    "ApiVersions": 18,
    "CreateTopics": 19,
    "DeleteTopics": 20,
    "DeleteRecords": 21,
    "InitProducerId": 22,
    "OffsetForLeaderEpoch": 23,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "TxnOffsetCommit": 28,
    "DescribeConfigs": 32,
    "SaslAuthenticate": 36,
    "OffsetDelete": 47,
    "DescribeCluster": 60,
    "ConsumerGroupHeartbeat": 68,
    "ConsumerGroupDescribe": 69,
}


# Kafka's current names for codes that librdkafka still spells the old way.
ERR_ALIASES = {
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "UNKNOWN_TOPIC_OR_PARTITION": "UNKNOWN_TOPIC_OR_PART",
    "NOT_COORDINATOR_FOR_GROUP": "NOT_COORDINATOR",
    "INVALID_TOPIC_EXCEPTION": "TOPIC_EXCEPTION",
}


# The commands a --serve mock takes: each acts on the topic or group it names and on nothing
# else, so tests that use their own (unique) names cannot see each other's. (With one broker,
# the coordinator and leader commands can only name broker 1: harmless, and kept for tests
# that want the call itself.)
SHARED_COMMANDS = frozenset(
    ["ping", "create_topic", "delete_topic", "topic_error", "coordinator", "leader"]
)


class CommandError(Exception):
    """A command that could not be carried out; its text goes after ``err``."""


def find_librdkafka():
    """Locate the librdkafka shared library bundled with the confluent-kafka wheel.

    ``RDKAFKA_LIB`` overrides the search. Otherwise look next to the installed
    confluent_kafka package: auditwheel puts vendored libraries in
    ``confluent_kafka.libs/`` (Linux), delocate in ``confluent_kafka/.dylibs/``
    (macOS); older layouts used ``confluent_kafka/.libs/``.
    """
    override = os.environ.get("RDKAFKA_LIB")
    if override:
        return override
    roots = []
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is not None and spec.submodule_search_locations:
        pkg_dir = list(spec.submodule_search_locations)[0]
        roots.append(os.path.dirname(pkg_dir))
    for key in ("platlib", "purelib"):
        path = sysconfig.get_paths().get(key)
        if path and path not in roots:
            roots.append(path)
    patterns = [
        "confluent_kafka.libs/librdkafka*.so*",
        "confluent_kafka/.libs/librdkafka*.so*",
        "confluent_kafka/.dylibs/librdkafka*.dylib",
        "confluent_kafka*/**/librdkafka*.so*",
    ]
    for root in roots:
        for pattern in patterns:
            hits = sorted(glob.glob(os.path.join(root, pattern), recursive=True))
            if hits:
                return hits[0]
    raise SystemExit(
        "mock_cluster.py: cannot find librdkafka inside the confluent-kafka wheel "
        "(searched %s); run scripts/setup-test-env, or set RDKAFKA_LIB" % roots
    )


class Mock:
    """Thin ctypes binding of the rd_kafka_mock_* API (signatures from rdkafka_mock.h)."""

    def __init__(self, lib_path):
        self.lib = lib = ctypes.CDLL(lib_path)
        vp, c_int, i16, i32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int16, ctypes.c_int32
        cstr, size_t = ctypes.c_char_p, ctypes.c_size_t
        self._declare("rd_kafka_conf_new", vp, [])
        self._declare("rd_kafka_conf_set", c_int, [vp, cstr, cstr, cstr, size_t])
        self._declare("rd_kafka_new", vp, [c_int, vp, cstr, size_t])
        self._declare("rd_kafka_destroy", None, [vp])
        self._declare("rd_kafka_err2str", cstr, [c_int])
        self._declare("rd_kafka_err2name", cstr, [c_int])
        self._declare("rd_kafka_version_str", cstr, [])
        self._declare("rd_kafka_mock_cluster_new", vp, [vp, c_int])
        self._declare("rd_kafka_mock_cluster_destroy", None, [vp])
        self._declare("rd_kafka_mock_cluster_bootstraps", cstr, [vp])
        self._declare("rd_kafka_mock_topic_create", c_int, [vp, cstr, c_int, c_int])
        self._declare("rd_kafka_mock_topic_delete", c_int, [vp, cstr], optional=True)
        self._declare("rd_kafka_mock_topic_set_error", None, [vp, cstr, c_int])
        self._declare("rd_kafka_mock_clear_request_errors", None, [vp, i16])
        self._declare(
            "rd_kafka_mock_push_request_errors_array",
            None,
            [vp, i16, size_t, ctypes.POINTER(c_int)],
            optional=True,
        )
        # Variadic: only the fixed arguments get argtypes; the rest are passed
        # as explicit c_int values (rd_kafka_resp_err_t and int are both int).
        self._declare("rd_kafka_mock_push_request_errors", None, None)
        self._declare("rd_kafka_mock_broker_push_request_error_rtts", c_int, None)
        self._declare("rd_kafka_mock_broker_set_down", c_int, [vp, i32])
        self._declare("rd_kafka_mock_broker_set_up", c_int, [vp, i32])
        self._declare("rd_kafka_mock_broker_set_rtt", c_int, [vp, i32, c_int])
        self._declare("rd_kafka_mock_coordinator_set", c_int, [vp, cstr, cstr, i32])
        self._declare("rd_kafka_mock_partition_set_leader", c_int, [vp, cstr, i32, i32])
        self._declare("rd_kafka_mock_set_apiversion", c_int, [vp, i16, i16, i16])
        self._declare(
            "rd_kafka_mock_group_initial_rebalance_delay_ms", None, [vp, i32], optional=True
        )
        self._declare(
            "rd_kafka_mock_set_group_consumer_session_timeout_ms",
            None,
            [vp, c_int],
            optional=True,
        )
        self._declare(
            "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms",
            None,
            [vp, c_int],
            optional=True,
        )
        self._err_names = self._load_err_names()
        self.rk = None
        self.cluster = None

    def _declare(self, name, restype, argtypes, optional=False):
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            if optional:
                setattr(self, name, None)
                return
            raise SystemExit("mock_cluster.py: librdkafka does not export %s" % name)
        fn.restype = restype
        if argtypes is not None:
            fn.argtypes = argtypes
        setattr(self, name, fn)

    def _load_err_names(self):
        """Map librdkafka error names (``NOT_COORDINATOR``, ``_TRANSPORT``) to codes."""

        class ErrDesc(ctypes.Structure):
            _fields_ = [
                ("code", ctypes.c_int),
                ("name", ctypes.c_char_p),
                ("desc", ctypes.c_char_p),
            ]

        fn = self.lib.rd_kafka_get_err_descs
        fn.restype = None
        fn.argtypes = [ctypes.POINTER(ctypes.POINTER(ErrDesc)), ctypes.POINTER(ctypes.c_size_t)]
        descs = ctypes.POINTER(ErrDesc)()
        cnt = ctypes.c_size_t()
        fn(ctypes.byref(descs), ctypes.byref(cnt))
        names = {}
        for i in range(cnt.value):
            d = descs[i]
            if d.name:
                names[d.name.decode()] = d.code
        return names

    def start(self, brokers):
        errstr = ctypes.create_string_buffer(512)
        conf = self.rd_kafka_conf_new()
        # The owning handle never produces; keep it quiet (no bootstrap.servers
        # is expected) but let warnings and errors through to stderr.
        for key, value in (("log_level", "4"), ("client.id", "mock-cluster-owner")):
            if self.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, 512) != 0:
                raise SystemExit("mock_cluster.py: conf %s: %s" % (key, errstr.value.decode()))
        rk = self.rd_kafka_new(0, conf, errstr, 512)  # 0 = RD_KAFKA_PRODUCER; rk owns conf
        if not rk:
            raise SystemExit("mock_cluster.py: rd_kafka_new failed: %s" % errstr.value.decode())
        self.rk = rk
        cluster = self.rd_kafka_mock_cluster_new(rk, brokers)
        if not cluster:
            raise SystemExit("mock_cluster.py: rd_kafka_mock_cluster_new failed")
        self.cluster = cluster
        return self.rd_kafka_mock_cluster_bootstraps(cluster).decode()

    def stop(self):
        if self.cluster:
            self.rd_kafka_mock_cluster_destroy(self.cluster)
            self.cluster = None
        if self.rk:
            self.rd_kafka_destroy(self.rk)
            self.rk = None

    # ---- argument parsing helpers ----

    def err_code(self, text):
        try:
            return int(text)
        except ValueError:
            pass
        name = text.upper()
        if name.startswith("RD_KAFKA_RESP_ERR_"):
            name = name[len("RD_KAFKA_RESP_ERR_") :]
        name = ERR_ALIASES.get(name, name)
        if name in self._err_names:
            return self._err_names[name]
        raise CommandError("unknown error code %r" % text)

    def check(self, what, code):
        if code != 0:
            raise CommandError(
                "%s: %s (%s)"
                % (
                    what,
                    self.rd_kafka_err2name(code).decode(),
                    self.rd_kafka_err2str(code).decode(),
                )
            )

    def need(self, fn_name):
        fn = getattr(self, fn_name)
        if fn is None:
            raise CommandError("this librdkafka build does not export %s" % fn_name)
        return fn


def api_key(text):
    if text in API_KEYS:
        return API_KEYS[text]
    try:
        return int(text)
    except ValueError:
        raise CommandError("unknown api key %r" % text) from None


def integer(text):
    try:
        return int(text)
    except ValueError:
        raise CommandError("not an integer: %r" % text) from None


def arity(args, low, high=None):
    high = low if high is None else high
    if not low <= len(args) <= high:
        want = str(low) if low == high else "%d..%s" % (low, "" if high > 99 else high)
        raise CommandError("expected %s argument(s), got %d" % (want, len(args)))


def run_command(mock, line):
    """Carry out one command line. Returns True when the process should exit."""
    words = line.split()
    if not words:
        raise CommandError("empty command")
    cmd, args = words[0], words[1:]
    c = mock.cluster
    if cmd == "ping":
        arity(args, 0)
    elif cmd == "quit":
        arity(args, 0)
        return True
    elif cmd == "create_topic":
        arity(args, 2, 3)
        rf = integer(args[2]) if len(args) == 3 else 1
        code = mock.rd_kafka_mock_topic_create(c, args[0].encode(), integer(args[1]), rf)
        mock.check("create_topic", code)
    elif cmd == "delete_topic":
        arity(args, 1)
        mock.check("delete_topic", mock.need("rd_kafka_mock_topic_delete")(c, args[0].encode()))
    elif cmd == "topic_error":
        arity(args, 2)
        mock.rd_kafka_mock_topic_set_error(c, args[0].encode(), mock.err_code(args[1]))
    elif cmd == "push_errors":
        arity(args, 2, 1000)
        key = api_key(args[0])
        errs = [mock.err_code(a) for a in args[1:]]
        if mock.rd_kafka_mock_push_request_errors_array is not None:
            arr = (ctypes.c_int * len(errs))(*errs)
            mock.rd_kafka_mock_push_request_errors_array(c, key, len(errs), arr)
        else:
            mock.rd_kafka_mock_push_request_errors(
                ctypes.c_void_p(c),
                ctypes.c_int16(key),
                ctypes.c_size_t(len(errs)),
                *[ctypes.c_int(e) for e in errs],
            )
    elif cmd == "clear_errors":
        arity(args, 1)
        mock.rd_kafka_mock_clear_request_errors(c, api_key(args[0]))
    elif cmd == "broker_push_errors":
        arity(args, 3, 1000)
        broker, key = integer(args[0]), api_key(args[1])
        varargs = []
        for item in args[2:]:
            err, _, rtt = item.partition(":")
            varargs += [ctypes.c_int(mock.err_code(err)), ctypes.c_int(integer(rtt or "0"))]
        code = mock.rd_kafka_mock_broker_push_request_error_rtts(
            ctypes.c_void_p(c),
            ctypes.c_int32(broker),
            ctypes.c_int16(key),
            ctypes.c_size_t(len(args) - 2),
            *varargs,
        )
        mock.check("broker_push_errors", code)
    elif cmd == "broker_down":
        arity(args, 1)
        mock.check("broker_down", mock.rd_kafka_mock_broker_set_down(c, integer(args[0])))
    elif cmd == "broker_up":
        arity(args, 1)
        mock.check("broker_up", mock.rd_kafka_mock_broker_set_up(c, integer(args[0])))
    elif cmd == "rtt":
        arity(args, 2)
        code = mock.rd_kafka_mock_broker_set_rtt(c, integer(args[0]), integer(args[1]))
        mock.check("rtt", code)
    elif cmd == "coordinator":
        arity(args, 3)
        if args[0] not in ("group", "transaction"):
            raise CommandError("coordinator type must be group or transaction")
        code = mock.rd_kafka_mock_coordinator_set(
            c, args[0].encode(), args[1].encode(), integer(args[2])
        )
        mock.check("coordinator", code)
    elif cmd == "leader":
        arity(args, 3)
        code = mock.rd_kafka_mock_partition_set_leader(
            c, args[0].encode(), integer(args[1]), integer(args[2])
        )
        mock.check("leader", code)
    elif cmd == "api_version":
        arity(args, 3)
        code = mock.rd_kafka_mock_set_apiversion(
            c, api_key(args[0]), integer(args[1]), integer(args[2])
        )
        mock.check("api_version", code)
    elif cmd == "initial_rebalance_delay":
        arity(args, 1)
        mock.need("rd_kafka_mock_group_initial_rebalance_delay_ms")(c, integer(args[0]))
    elif cmd == "group_consumer_session_timeout":
        arity(args, 1)
        mock.need("rd_kafka_mock_set_group_consumer_session_timeout_ms")(c, integer(args[0]))
    elif cmd == "group_consumer_heartbeat_interval":
        arity(args, 1)
        mock.need("rd_kafka_mock_set_group_consumer_heartbeat_interval_ms")(c, integer(args[0]))
    else:
        raise CommandError("unknown command %r" % cmd)
    return False


def write_whole(path, text):
    """Write the file so that a reader sees all of it or none (a rename over the old one)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def serve(mock, bootstraps, opts):
    """The --serve mode (see the module docstring): commands over TCP, shared ones only."""
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for raw in self.rfile:
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                cmd = line.split()[0]
                if cmd not in SHARED_COMMANDS:
                    answer = "err %s is not taken by the shared mock (unknown, or it changes the " \
                        "cluster for every test): start a mock of your own for it" % cmd
                else:
                    try:
                        with lock:
                            run_command(mock, line)
                        answer = "ok"
                    except CommandError as e:
                        answer = "err %s" % str(e).replace("\n", " ")
                self.wfile.write((answer + "\n").encode())
                self.wfile.flush()

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    stopper = Stopper()
    signal.signal(signal.SIGTERM, lambda *_: stopper.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stopper.stop("SIGINT"))
    with Server(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        control = "127.0.0.1:%d" % server.server_address[1]
        if opts.control_file:
            write_whole(opts.control_file, control + "\n")
        if opts.bootstrap_file:
            write_whole(opts.bootstrap_file, bootstraps + "\n")
        sys.stdout.write(bootstraps + "\n" + control + "\n")
        sys.stdout.flush()
        if opts.watch_pid:
            threading.Thread(target=watch_pid, args=(stopper, opts.watch_pid), daemon=True).start()
        stopper.event.wait()
        server.shutdown()
    sys.stderr.write("mock_cluster.py: shared mock on %s stopped (%s)\n" % (bootstraps, stopper.reason))


def topic_spec(text):
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise argparse.ArgumentTypeError("expected NAME:PARTITIONS[:RF], got %r" % text)
    try:
        return parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else 1
    except ValueError:
        raise argparse.ArgumentTypeError("expected NAME:PARTITIONS[:RF], got %r" % text) from None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=1, help="number of brokers (ids 1..N)")
    parser.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        default=0,
        help="group.initial.rebalance.delay.ms (librdkafka's mock default is 3000)",
    )
    parser.add_argument(
        "--topic",
        type=topic_spec,
        action="append",
        default=[],
        metavar="NAME:PARTITIONS[:RF]",
        help="create this topic before printing the bootstrap list (repeatable)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="the run's shared mock: commands over TCP (shared ones only), none on stdin",
    )
    parser.add_argument("--bootstrap-file", help="--serve: write the bootstrap list here")
    parser.add_argument("--control-file", help="--serve: write the control address here")
    parser.add_argument("--watch-pid", type=int, help="--serve: stop when this process exits")
    opts = parser.parse_args()
    if opts.brokers < 1:
        parser.error("--brokers must be at least 1")

    mock = Mock(find_librdkafka())
    bootstraps = mock.start(opts.brokers)
    try:
        if mock.rd_kafka_mock_group_initial_rebalance_delay_ms is not None:
            mock.rd_kafka_mock_group_initial_rebalance_delay_ms(
                mock.cluster, opts.initial_rebalance_delay_ms
            )
        elif opts.initial_rebalance_delay_ms != 0:
            sys.exit("mock_cluster.py: this librdkafka cannot set the initial rebalance delay")
        for name, partitions, rf in opts.topic:
            code = mock.rd_kafka_mock_topic_create(mock.cluster, name.encode(), partitions, rf)
            if code != 0:
                sys.exit(
                    "mock_cluster.py: create topic %s: %s"
                    % (name, mock.rd_kafka_err2str(code).decode())
                )

        if opts.serve:
            serve(mock, bootstraps, opts)
            return
        out = sys.stdout
        out.write(bootstraps + "\n")
        out.flush()
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                done = run_command(mock, line)
                out.write("ok\n")
            except CommandError as e:
                done = False
                out.write("err %s\n" % str(e).replace("\n", " "))
            out.flush()
            if done:
                break
    except BrokenPipeError:
        pass  # our reader went away: just clean up
    finally:
        mock.stop()


if __name__ == "__main__":
    main()

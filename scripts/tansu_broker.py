#!/usr/bin/env python3
"""Start the tansu broker (.cache/bin/tansu, memory storage) on a free loopback port and keep it
running until told to stop.

The one place where the tests' tansu command line is written: tests/support/mod.rs
(``Tansu::start``, a test's own broker or the process's shared one) and scripts/test (the run's
shared broker) both start tansu through this script. It:

  1. picks a free loopback port and starts tansu there (another port, up to three times, if tansu
     exits at once: the port can be taken between the pick and tansu's bind);
  2. waits until the port answers an ApiVersions request, then prints the bootstrap address
     (``127.0.0.1:PORT``) as the first line of stdout (and writes it to --bootstrap-file, whole
     or not at all), and tansu's PID and start-up time on stderr;
  3. runs until it is told to stop: SIGTERM or SIGINT, EOF on stdin (with --stop-on-stdin-eof:
     the process that started it closed the pipe, or died), the death of --watch-pid, or tansu's
     own exit (status 1 then); then it stops tansu (SIGTERM, SIGKILL after a second) by its PID.

tansu's stdout and stderr go to --log (default: discarded). Run it with the project's
virtualenv after scripts/setup-test-env, which installs the pinned tansu binary.

    tansu_broker.py [--log FILE] [--bootstrap-file FILE] [--stop-on-stdin-eof]
                    [--watch-pid PID] [--timeout-s 20]
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from kafka_broker import ROOT, Stopper, api_versions_probe, die_with_parent, free_port
from kafka_broker import stop_broker, tail, watch_pid, watch_stdin


def say(msg):
    sys.stderr.write("tansu_broker.py: %s\n" % msg)
    sys.stderr.flush()


def fail(msg):
    say("error: " + msg)
    sys.exit(1)


def start_tansu(binary, port, log):
    url = "tcp://127.0.0.1:%d" % port
    env = dict(os.environ)
    # tansu reads these from the environment too; none may leak in.
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "SCHEMA_REGISTRY"):
        env.pop(name, None)
    return subprocess.Popen(
        [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        preexec_fn=die_with_parent)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", help="tansu's stdout and stderr (default: discarded)")
    ap.add_argument("--bootstrap-file", help="also write the bootstrap address here when ready")
    ap.add_argument("--stop-on-stdin-eof", action="store_true")
    ap.add_argument("--watch-pid", type=int, help="stop when this process exits")
    ap.add_argument("--timeout-s", type=float, default=20.0, help="bound on the start-up")
    opts = ap.parse_args()

    binary = os.path.join(ROOT, ".cache", "bin", "tansu")
    if not os.access(binary, os.X_OK):
        fail("%s is missing: run scripts/setup-test-env" % binary)
    stopper = Stopper()
    signal.signal(signal.SIGTERM, lambda *_: stopper.stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stopper.stop("SIGINT"))
    log_path = opts.log or os.devnull
    started = time.monotonic()
    deadline = started + opts.timeout_s
    tansu, port = None, None
    for attempt in range(3):
        port = free_port()
        with open(log_path, "ab") as log:
            tansu = start_tansu(binary, port, log)
        while tansu.poll() is None and not api_versions_probe(port):
            if time.monotonic() > deadline or stopper.event.is_set():
                stop_broker(tansu, 1)
                fail("tansu did not answer ApiVersions on port %d within %.0f s; log %s:\n%s"
                     % (port, opts.timeout_s, log_path, tail(log_path)))
            time.sleep(0.02)
        if tansu.poll() is None:
            break
        if attempt == 2:
            fail("tansu exited with %s three times; log %s:\n%s"
                 % (tansu.returncode, log_path, tail(log_path)))
        say("tansu exited with %s on port %d, retrying" % (tansu.returncode, port))

    bootstrap = "127.0.0.1:%d" % port
    if opts.bootstrap_file:
        tmp = opts.bootstrap_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(bootstrap + "\n")
        os.replace(tmp, opts.bootstrap_file)
    sys.stdout.write(bootstrap + "\n")
    sys.stdout.flush()
    say("tansu up on %s in %.2f s (pid %d)" % (bootstrap, time.monotonic() - started, tansu.pid))

    if opts.stop_on_stdin_eof:
        threading.Thread(target=watch_stdin, args=(stopper,), daemon=True).start()
    if opts.watch_pid:
        threading.Thread(target=watch_pid, args=(stopper, opts.watch_pid), daemon=True).start()
    while not stopper.event.wait(0.5):
        if tansu.poll() is not None:
            stopper.stop("tansu exited with %s" % tansu.returncode)
    crashed = tansu.poll() is not None
    stop_broker(tansu, 1)
    if crashed:
        fail("tansu stopped by itself (%s); log %s:\n%s" % (stopper.reason, log_path, tail(log_path)))
    say("tansu on %s stopped (%s)" % (bootstrap, stopper.reason))


if __name__ == "__main__":
    main()

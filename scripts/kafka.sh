# Sourced by scripts/test, scripts/demo and scripts/bench: start Apache Kafka with
# scripts/kafka_broker.py in the background and wait for it, the same way in each.
#
#   kafka_start VERSION BOOTSTRAP_FILE LAUNCHER_LOG [kafka_broker.py options...]
#       starts the launcher in the background (stopped with this shell: --watch-pid) and sets
#       KAFKA_LAUNCHER_PID; the caller stops it by that PID (SIGTERM) when done.
#   kafka_wait BOOTSTRAP_FILE PID LAUNCHER_LOG TIMEOUT_S [NAME]
#       waits until the broker answers, then prints its bootstrap address; fails (status 1, the
#       launcher's log on stderr) if the launcher exits first or TIMEOUT_S pass. Any launcher
#       that writes its bootstrap file once its broker answers will do (scripts/test waits for
#       the shared mock and tansu with it); NAME names the broker in messages (default Kafka).
# Expects to run from the repository root, with the virtualenv of scripts/setup-test-env.

kafka_start() {
    local version="$1" bootstrap_file="$2" launcher_log="$3"
    shift 3
    rm -f "$bootstrap_file"
    .venv/bin/python scripts/kafka_broker.py --version "$version" \
        --bootstrap-file "$bootstrap_file" --watch-pid $$ "$@" \
        </dev/null >/dev/null 2>>"$launcher_log" &
    KAFKA_LAUNCHER_PID=$!
}

kafka_wait() {
    local bootstrap_file="$1" pid="$2" launcher_log="$3" timeout_s="$4" name="${5:-Kafka}"
    local deadline=$((SECONDS + timeout_s))
    while [[ ! -s "$bootstrap_file" ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name did not start:" >&2
            tail -n 30 "$launcher_log" >&2 || true
            return 1
        fi
        if ((SECONDS > deadline)); then
            echo "$name did not answer within $timeout_s s:" >&2
            tail -n 30 "$launcher_log" >&2 || true
            return 1
        fi
        sleep 0.2
    done
    head -n 1 "$bootstrap_file"
}

#!/usr/bin/env bash
# A PostgreSQL server of the run's own, for the database tests and `scripts/demo --database`:
#
#   scripts/postgres.sh start DIR [--watch-pid PID]
#       installs Debian's postgresql-15 (apt-get) when no /usr/lib/postgresql/*/bin/postgres is
#       there, creates a cluster in a fresh directory, starts it on 127.0.0.1 and a free port,
#       and prints its URL (postgresql://postgres@127.0.0.1:PORT/postgres), also written to
#       DIR/url. DIR holds what the run keeps: url, the server's PID (pid), its log (postgres.log,
#       copied there at stop) and where the cluster is (data). With --watch-pid, the server is
#       stopped once PID is gone too (a script killed before its own cleanup ran).
#   scripts/postgres.sh stop DIR
#       stops that server by its PID (pg_ctl stop -m fast) and removes its cluster directory.
#
# Test settings, not production ones:
#   * the cluster lives under /tmp (mktemp), not in DIR: the server runs as the `postgres` user
#     (initdb and postgres refuse to run as root, and CI runs as root), which must own the cluster
#     and reach it, and a checkout under /root is closed to other users;
#   * it listens on 127.0.0.1 only (its unix socket in the cluster directory), with `trust`
#     authentication on loopback: no password, nothing reachable from elsewhere;
#   * fsync=off, synchronous_commit=off, full_page_writes=off: what the tests check is our
#     process being killed after its transaction committed, never PostgreSQL's own crash, so
#     its durability on disk is not under test and the writes may stay in memory.
set -euo pipefail

usage() {
    echo "usage: scripts/postgres.sh start DIR [--watch-pid PID] | stop DIR" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
COMMAND="$1"
DIR="$2"
shift 2
WATCH=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --watch-pid)
        [[ $# -ge 2 ]] || usage
        WATCH="$2"
        shift 2
        ;;
    *) usage ;;
    esac
done

say() { echo "scripts/postgres.sh: $*" >&2; }

# The newest installed server's bin directory, or nothing.
bindir() {
    local found
    found="$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$found" ]] && dirname "$found"
}

# Runs a server program as the `postgres` user when we are root (initdb and postgres refuse
# root), as ourselves otherwise.
as_server() {
    if [[ "$(id -u)" -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

install_server() {
    say "no PostgreSQL server found: installing Debian's postgresql-15"
    export DEBIAN_FRONTEND=noninteractive
    # The package would create and start a cluster of its own (/var/lib/postgresql/15/main, port
    # 5432): this script runs its own clusters, so none is created.
    mkdir -p /etc/postgresql-common
    if ! grep -qs '^ *create_main_cluster' /etc/postgresql-common/createcluster.conf; then
        echo "create_main_cluster = false" >>/etc/postgresql-common/createcluster.conf
    fi
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql-15 postgresql-client-15 >&2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local bin cluster port pid attempt started=0
    bin="$(bindir || true)"
    if [[ -z "$bin" ]]; then
        install_server
        bin="$(bindir || true)"
        [[ -n "$bin" ]] || { say "postgresql-15 installed no server under /usr/lib/postgresql"; exit 1; }
    fi
    mkdir -p "$DIR"
    DIR="$(cd "$DIR" && pwd)"
    cluster="$(mktemp -d /tmp/rg-postgres.XXXXXX)"
    echo "$cluster" >"$DIR/data"
    chmod 755 "$cluster"
    [[ "$(id -u)" -eq 0 ]] && chown postgres: "$cluster"
    # --no-sync: the cluster is thrown away after the run (see the header on durability).
    as_server "$bin/initdb" -D "$cluster/data" -U postgres -A trust -E UTF8 --no-sync \
        >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
    for attempt in 1 2 3 4 5; do
        port="$(free_port)"
        # pg_ctl -w: returns once the server takes connections (or failed to start).
        if as_server "$bin/pg_ctl" start -w -t 60 -D "$cluster/data" -l "$cluster/postgres.log" \
            -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$cluster \
                -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
                -c max_connections=300 -c shared_buffers=64MB" >"$DIR/pg_ctl.log" 2>&1; then
            started=1
            break
        fi
        # Most likely the port was taken between free_port and the bind: another one.
        say "start on port $port failed (attempt $attempt): $(tail -n 3 "$cluster/postgres.log" 2>/dev/null | tr '\n' ' ')"
    done
    if [[ "$started" -ne 1 ]]; then
        cp "$cluster/postgres.log" "$DIR/postgres.log" 2>/dev/null || true
        say "PostgreSQL did not start (log: $DIR/postgres.log)"
        exit 1
    fi
    pid="$(head -n 1 "$cluster/data/postmaster.pid")"
    echo "$pid" >"$DIR/pid"
    echo "$bin" >"$DIR/bin"
    ln -sf "$cluster/postgres.log" "$DIR/postgres.log"
    local url="postgresql://postgres@127.0.0.1:$port/postgres"
    echo "$url" >"$DIR/url"
    if [[ -n "$WATCH" ]]; then
        # Stops the server once the watched process is gone (unless stop did it first).
        (
            while kill -0 "$WATCH" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do
                sleep 1
            done
            if kill -0 "$pid" 2>/dev/null; then
                bash "${BASH_SOURCE[0]}" stop "$DIR" || true
            fi
        ) </dev/null >/dev/null 2>&1 &
        disown
    fi
    say "$("$bin/postgres" --version | sed "s/^postgres (PostgreSQL) /PostgreSQL /") (pid $pid) at $url"
    echo "$url"
}

stop() {
    local bin cluster pid
    [[ -f "$DIR/data" ]] || { say "no server of $DIR to stop"; return 0; }
    cluster="$(cat "$DIR/data")"
    bin="$(cat "$DIR/bin" 2>/dev/null || bindir || true)"
    pid="$(cat "$DIR/pid" 2>/dev/null || true)"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        as_server "$bin/pg_ctl" stop -w -t 30 -m fast -D "$cluster/data" >>"$DIR/pg_ctl.log" 2>&1 \
            || kill -KILL "$pid" 2>/dev/null || true
    fi
    # The log stays with the run; the cluster goes.
    if [[ -f "$cluster/postgres.log" ]]; then
        rm -f "$DIR/postgres.log"
        cp "$cluster/postgres.log" "$DIR/postgres.log"
    fi
    case "$cluster" in
    /tmp/rg-postgres.*) rm -rf "$cluster" ;;
    esac
    rm -f "$DIR/data"
}

case "$COMMAND" in
start) start ;;
stop) stop ;;
*) usage ;;
esac

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Throwaway PostgreSQL 15 cluster for tests and benchmarks. Source this file, then:
#
#   source scripts/lib/pg.sh
#   trap cn_pg_stop EXIT          # the CALLER sets the traps (EXIT, and INT/TERM if it wants
#   trap 'cn_pg_stop; exit 130' INT   # a prompt stop); this file never installs any trap
#   trap 'cn_pg_stop; exit 143' TERM
#   cn_pg_start                   # sets CN_PG_DIR, CN_PG_PORT, CN_PG_URL
#   cn_pg_createdb cairn_test     # creates a database
#   cn_pg_url cairn_test          # prints its URL
#   cn_pg_restart                 # fast stop and start again, same port and data (fault tests)
#   cn_pg_stop                    # immediate stop and rm -rf of the directory; safe to repeat
#
# The cluster listens on a unix socket only (listen_addresses=''), in a fresh `mktemp -d`
# directory that also holds the data directory and the server log, with fsync and
# synchronous_commit off (unless CN_PG_DURABLE=1: benchmarks measure durable writes). As root, initdb/pg_ctl run as the `postgres` OS user through
# `runuser -u postgres --` (initdb refuses root); otherwise they run as the current user. Either
# way the database superuser is `postgres`, with trust authentication.
#
# Env (read by cn_pg_start):
#   CN_PG_BIN     PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#   CN_PG_TMPDIR  where the cluster directory is made (default /tmp: the socket path must stay
#                 short, and as root the postgres user must be able to reach it)
#   CN_PG_PORT    if set, used as the port instead of picking a free one in 20000-40000
#   CN_PG_EXTRA_OPTS  more server options, appended to the others (e.g. `-c
#                 shared_preload_libraries=pg_stat_statements`)
# Set by cn_pg_start (plain shell variables, not exported: export what children need):
#   CN_PG_DIR (socket directory, = PGHOST), CN_PG_PORT, CN_PG_URL (database `postgres`),
#   CN_PG_PID (postmaster pid).
# cn_pg_stop only ever stops the cluster that cn_pg_start started in this same shell, so a child
# script that inherited CN_PG_* cannot stop its parent's cluster by accident.
# Functions return non-zero on failure (they do not exit) and print the reason on stderr.

CN_PG_BIN=${CN_PG_BIN:-/usr/lib/postgresql/15/bin}

# Runs a command as the cluster owner: the postgres OS user when we are root, else ourselves.
_cn_pg_as_owner()
{
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Prints a port in 20000-40000 that nothing listens on (TCP, v4 and v6 loopback). The server
# only uses it to name its socket file, but a free one keeps clients and logs unambiguous.
_cn_pg_free_port()
{
    local port i
    for ((i = 0; i < 100; i++)); do
        port=$((20000 + RANDOM % 20001))
        if python3 - "$port" 2>/dev/null <<'PY'; then
import socket, sys
port = int(sys.argv[1])
for fam, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM)
    except OSError:
        continue
    try:
        s.bind((addr, port))
    except OSError as e:
        if e.errno != 99:  # EADDRNOTAVAIL: no such family configured, not "in use"
            sys.exit(1)
    finally:
        s.close()
PY
            echo "$port"
            return 0
        fi
    done
    echo "cn_pg: no free port found in 20000-40000" >&2
    return 1
}

_cn_pg_log_tail()
{
    if [[ -n "${_CN_PG_OWNED:-}" && -f "$_CN_PG_OWNED/server.log" ]]; then
        echo "cn_pg: --- server log (tail) ---" >&2
        tail -n 30 "$_CN_PG_OWNED/server.log" >&2
    fi
}

# Starts the cluster; sets CN_PG_DIR, CN_PG_PORT, CN_PG_URL, CN_PG_PID. On failure cleans up and
# returns 1.
cn_pg_start()
{
    local port dir
    if [[ -n "${_CN_PG_OWNED:-}" ]]; then
        echo "cn_pg: a cluster is already running in $_CN_PG_OWNED" >&2
        return 1
    fi
    if [[ ! -x "$CN_PG_BIN/initdb" ]]; then
        echo "cn_pg: $CN_PG_BIN/initdb not found (install postgresql-15: scripts/setup-deps)" >&2
        return 1
    fi
    port=${CN_PG_PORT:-}
    if [[ -z "$port" ]]; then
        port=$(_cn_pg_free_port) || return 1
    fi
    dir=$(mktemp -d "${CN_PG_TMPDIR:-/tmp}/cairn-pg.XXXXXX") || return 1
    _CN_PG_OWNED=$dir
    CN_PG_DIR=$dir
    CN_PG_PORT=$port
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres: "$dir" || { cn_pg_stop; return 1; }
    fi
    if ! _cn_pg_as_owner "$CN_PG_BIN/initdb" -D "$dir/data" -U postgres -A trust --no-sync \
        -E UTF8 --locale=C >"$dir/initdb.log" 2>&1; then
        echo "cn_pg: initdb failed:" >&2
        cat "$dir/initdb.log" >&2
        cn_pg_stop
        return 1
    fi
    # -o goes through a shell in pg_ctl, hence the inner single quotes.
    local opts="-k '$dir' -p $port -c listen_addresses=''"
    if [[ "${CN_PG_DURABLE:-0}" != 1 ]]; then
        opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    opts+=${CN_PG_EXTRA_OPTS:+ $CN_PG_EXTRA_OPTS}
    _CN_PG_OPTS=$opts
    if ! _cn_pg_as_owner "$CN_PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "$opts" start >/dev/null 2>&1; then
        echo "cn_pg: pg_ctl start failed (port $port, dir $dir)" >&2
        _cn_pg_log_tail
        cn_pg_stop
        return 1
    fi
    # shellcheck disable=SC2034  # set for the caller
    CN_PG_PID=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    # shellcheck disable=SC2034  # set for the caller
    CN_PG_URL=$(cn_pg_url postgres)
}

# Stops the cluster (fast: clients are disconnected) and starts it again with the same data,
# port and settings: what a database restart looks like to its clients.
cn_pg_restart()
{
    local dir=${_CN_PG_OWNED:-}
    if [[ -z "$dir" ]]; then
        echo "cn_pg: no cluster running (call cn_pg_start first)" >&2
        return 1
    fi
    _cn_pg_as_owner "$CN_PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
        { echo "cn_pg: pg_ctl stop failed" >&2; _cn_pg_log_tail; return 1; }
    _cn_pg_as_owner "$CN_PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "$_CN_PG_OPTS" start >/dev/null 2>&1 ||
        { echo "cn_pg: pg_ctl start failed" >&2; _cn_pg_log_tail; return 1; }
    CN_PG_PID=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
}

# Prints the URL of database NAME on the running cluster.
cn_pg_url()
{
    printf 'postgresql://postgres@/%s?host=%s&port=%s\n' "${1:?database name}" \
        "${CN_PG_DIR:?no cluster}" "${CN_PG_PORT:?no cluster}"
}

# Creates database NAME (as user postgres) on the running cluster.
cn_pg_createdb()
{
    local name=${1:?usage: cn_pg_createdb NAME}
    if [[ -z "${CN_PG_DIR:-}" ]]; then
        echo "cn_pg: no cluster running (call cn_pg_start first)" >&2
        return 1
    fi
    "$CN_PG_BIN/createdb" -h "$CN_PG_DIR" -p "$CN_PG_PORT" -U postgres "$name"
}

# Stops the cluster (immediate mode) and removes its directory. Does nothing when no cluster was
# started or it was already stopped, so it can run from both an INT/TERM trap and the EXIT trap.
cn_pg_stop()
{
    local dir=${_CN_PG_OWNED:-} pid=${CN_PG_PID:-} i
    if [[ -z "$dir" ]]; then
        return 0
    fi
    if [[ -f "$dir/data/postmaster.pid" ]]; then
        if ! _cn_pg_as_owner "$CN_PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop \
            >/dev/null 2>&1; then
            # Last resort, only for the postmaster this cluster recorded.
            pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
            if [[ "$pid" =~ ^[0-9]+$ ]]; then
                echo "cn_pg: pg_ctl stop failed; killing postmaster $pid" >&2
                kill -KILL "$pid" 2>/dev/null || true
                sleep 1
            fi
        fi
    fi
    # The postmaster was orphaned when pg_ctl exited, so init reaps it: wait (up to 2 s) until it
    # is gone, so that a `pgrep -u postgres` right after this sees no zombie of ours.
    if [[ "$pid" =~ ^[0-9]+$ ]]; then
        for ((i = 0; i < 20; i++)); do
            [[ -e "/proc/$pid" ]] || break
            sleep 0.1
        done
    fi
    rm -rf -- "$dir"
    unset _CN_PG_OWNED CN_PG_DIR CN_PG_PORT CN_PG_URL CN_PG_PID
    return 0
}

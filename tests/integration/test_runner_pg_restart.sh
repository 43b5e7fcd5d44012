#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): PostgreSQL restarts under a running cairn-runner. The test starts a
# throwaway cluster of its own (scripts/lib/pg.sh: as the postgres user when root, in a temp
# dir, on a free port, always stopped), a runner and a worker, enqueues 40 instances of 20
# sequential actions, restarts the database while they run, and checks that the runner
# reconnects and every instance completes with every action result recorded once. It also
# checks that a poison instance (its registered source no longer compiles) fails alone.
# Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output.
set -uo pipefail

runner_bin=${1:?usage: test_runner_pg_restart.sh CAIRN_RUNNER CAIRN_WORKER CAIRNCTL ROOT}
worker_bin=${2:?}
ctl=${3:?}
root=${4:?}
# shellcheck source=scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"

n=0
failures=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
check() { if [[ "$2" == "$3" ]]; then ok "$1"; else fail "$1: got '$2', want '$3'"; fi; }
q() { "$CN_PG_BIN/psql" -X -q -A -t -d "$CAIRN_DATABASE_URL" -c "$1" </dev/null 2>/dev/null; }
# Waits up to $2 seconds for the query $1 to print $3.
wait_for() {
    local i
    for ((i = 0; i < $2 * 20; i++)); do
        [[ "$(q "$1")" == "$3" ]] && return 0
        sleep 0.05
    done
    return 1
}

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317  # invoked from the traps below
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [[ $failures -ne 0 ]]; then
        echo "# --- runner log (tail) ---"
        tail -n 20 "$tmp/runner.log" 2>/dev/null | sed 's/^/# /'
    fi
    cn_pg_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! cn_pg_start >"$tmp/pg.log" 2>&1 || ! cn_pg_createdb restart_test >>"$tmp/pg.log" 2>&1; then
    echo "not ok 1 - cannot start a PostgreSQL cluster"
    cat "$tmp/pg.log"
    exit 1
fi
export CAIRN_DATABASE_URL
CAIRN_DATABASE_URL=$(cn_pg_url restart_test)
if "$ctl" migrate >/dev/null; then ok "migrate"; else fail "migrate"; fi
if "$ctl" register "$root/tests/integration/workflows/steps.cairn" >/dev/null; then ok "register"; else fail "register"; fi

sock="ipc://$tmp/r.sock"
"$runner_bin" --worker-listen "$sock" --poll-interval-ms 100 --lock-ttl-ms 5000 \
    --lock-heartbeat-ms 500 >"$tmp/runner.log" 2>&1 &
pids+=($!)
runner_pid=$!
"$worker_bin" --url "$sock" --slots 8 >"$tmp/worker.log" 2>&1 &
pids+=($!)

q "SELECT count(cairn.enqueue('steps', '{\"n\": 20}'::jsonb)) FROM generate_series(1, 40)" >/dev/null
progress="SELECT count(*) >= 100 FROM cairn.runner_actions_done"
wait_for "$progress" 60 t && ok "progress before the restart" || fail "no progress before the restart"
if cn_pg_restart >"$tmp/restart.log" 2>&1; then ok "PostgreSQL restarted"; else fail "restart: $(cat "$tmp/restart.log")"; fi
done_q="SELECT count(*) FROM cairn.runner_instances WHERE status = 'completed'"
wait_for "$done_q" 90 40 && ok "every instance completed after the restart" ||
    fail "completed: $(q "$done_q") of 40"
check "every sum is right" "$(q "SELECT count(*) FROM cairn.runner_instances WHERE result = '190'::jsonb")" 40
check "every action result recorded once" "$(q "SELECT count(*) || '/' || count(DISTINCT (execution_id, attempt)) FROM cairn.runner_actions_done")" "800/800"
if kill -0 "$runner_pid" 2>/dev/null; then ok "the runner is still up"; else fail "the runner died"; fi
if grep -q "failed" "$tmp/runner.log"; then ok "the runner saw the outage and retried"; else fail "no retry logged"; fi

# A poison instance: its version's source no longer compiles (edited behind cairnctl's back).
# It fails alone with a clear error; the next instance still runs.
q "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash, source)
   VALUES ('poison', 'v1', 'x', 'fn main(input: []):\n    return @\n')" >/dev/null
bad=$(q "SELECT cairn.enqueue('poison', '{}')")
good=$("$ctl" run steps --input '{"n": 2}' --wait --timeout 30 2>/dev/null)
check "an instance after the poison one runs" "$good" 1
wait_for "SELECT status FROM cairn.runner_instances WHERE instance_id = '$bad'" 30 failed &&
    ok "the poison instance failed" || fail "poison: $(q "SELECT status FROM cairn.runner_instances WHERE instance_id = '$bad'")"
check "with a WorkflowError" "$(q "SELECT error->>'type' FROM cairn.runner_instances WHERE instance_id = '$bad'")" WorkflowError

kill -TERM "$runner_pid"
wait "$runner_pid"
check "SIGTERM: exit 0" "$?" 0

echo "1..$n"
if [[ $failures -ne 0 ]]; then
    exit 1
fi

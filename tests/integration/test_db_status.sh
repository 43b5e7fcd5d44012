#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): the database checks every status transition of an instance
# (sql/0008_status_transitions.sql), whoever writes it: each of the 30 changes between the six
# statuses is tried by hand-written SQL on an instance in the starting status, and exactly the
# allowed ones go through; the others are refused with check_violation (23514) naming both
# statuses, and leave the status as it was. Works in a fresh database of its own on the server
# of CAIRN_TEST_DATABASE_URL, dropped at the end. Argument: SOURCE_ROOT. TAP output; without
# CAIRN_TEST_DATABASE_URL it reports a skip.
set -uo pipefail

root=${1:?usage: test_db_status.sh SOURCE_ROOT}
# shellcheck source=tests/support/tap_db.sh
source "$root/tests/support/tap_db.sh"

fresh_db "$root" status

# The allowed changes, as docs/operations.md draws them.
pairs=(queued\>running running\>queued queued\>cancelled queued\>timed_out running\>completed
    running\>failed running\>cancelled running\>timed_out
    failed\>queued cancelled\>queued timed_out\>queued)
allowed=" ${pairs[*]} "
statuses="queued running completed failed cancelled timed_out"
for from in $statuses; do
    for to in $statuses; do
        [[ $from == "$to" ]] && continue
        id=$(q "$url" "SELECT cairn.enqueue('w', '{}')")
        # Into the starting status by an allowed path: queued, then running, then a finish.
        if [[ $from == completed || $from == failed ]]; then
            q "$url" "UPDATE cairn.runner_instances SET status = 'running' WHERE instance_id = '$id'" \
                >/dev/null || fail "cannot bring an instance to running"
        fi
        if [[ $from != queued ]]; then
            q "$url" "UPDATE cairn.runner_instances SET status = '$from' WHERE instance_id = '$id'" \
                >/dev/null || fail "cannot bring an instance to $from"
        fi
        got=$(q "$url" "SELECT try(\$s\$UPDATE cairn.runner_instances SET status = '$to'
                                      WHERE instance_id = '$id'\$s\$)")
        now=$(q "$url" "SELECT status FROM cairn.runner_instances WHERE instance_id = '$id'")
        if [[ $allowed == *" $from>$to "* ]]; then
            check "$from -> $to is allowed" "$got $now" "no error $to"
        else
            check "$from -> $to is refused" "$got $now" \
                "23514 instance $id: status $from -> $to is not allowed $from"
        fi
    done
done
check "a change that leaves the status alone is not checked" \
    "$(q "$url" "SELECT try(\$s\$UPDATE cairn.runner_instances SET priority = 5
                                 WHERE status = 'completed'\$s\$)")" "no error"

echo "1..$n"
if [[ $failures -ne 0 ]]; then
    echo "test_db_status: $failures check(s) failed"
    exit 1
fi

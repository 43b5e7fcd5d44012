#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): checks that the migrations in sql/ were applied to the test database and
# that re-applying them is a no-op, and 0021's upgrade of a database holding results (in a
# database of its own, dropped at the end). Argument: the source root. Needs CAIRN_TEST_DATABASE_URL
# (scripts/test starts a throwaway cluster, migrates it and exports it); without it the test
# exits 77, which meson reports as SKIP.
#
# Env: CAIRN_TEST_DATABASE_URL (database URL), PSQL (psql binary, default: psql on PATH, else
#      /usr/lib/postgresql/15/bin/psql).
set -euo pipefail

root=${1:?usage: test_db_migrations.sh SOURCE_ROOT}
url=${CAIRN_TEST_DATABASE_URL:-}
if [[ -z "$url" ]]; then
    echo "SKIP: CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)"
    exit 77
fi
# shellcheck source=tests/support/psql.sh
source "$root/tests/support/psql.sh"

failures=0
# A statement's result in the database at $1 (q: the test database).
q_at()
{
    "$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2" </dev/null
}
q() { q_at "$url" "$1"; }
check()
{
    local what=$1 got=$2 want=$3
    if [[ "$got" == "$want" ]]; then
        echo "ok - $what"
    else
        echo "not ok - $what: got '$got', want '$want'"
        failures=$((failures + 1))
    fi
}

check "schema cairn exists" \
    "$(q "SELECT count(*) FROM pg_namespace WHERE nspname = 'cairn'")" 1
check "cairn.schema_migrations exists" \
    "$(q "SELECT to_regclass('cairn.schema_migrations') IS NOT NULL")" t
check "0001 recorded" \
    "$(q "SELECT count(*) FROM cairn.schema_migrations WHERE version = '0001'")" 1

# Every file in sql/ is recorded, and nothing else is.
shopt -s nullglob
want_versions=""
for f in "$root"/sql/[0-9][0-9][0-9][0-9]_*.sql; do
    base=${f##*/}
    want_versions+="${base:0:4} "
done
got_versions=$(q "SELECT string_agg(version, ' ' ORDER BY version) || ' ' FROM cairn.schema_migrations")
check "recorded versions match sql/" "$got_versions" "$want_versions"

before=$(q "SELECT count(*) || '/' || max(applied_at) FROM cairn.schema_migrations")
if out=$("$root/scripts/migrate-sql" "$url" 2>&1); then
    check "re-running migrate-sql applies nothing" "$out" ""
else
    echo "$out"
    check "re-running migrate-sql succeeds" "failed" "ok"
fi
after=$(q "SELECT count(*) || '/' || max(applied_at) FROM cairn.schema_migrations")
check "schema_migrations unchanged by re-run" "$after" "$before"

# ---- 0021 on a database that has results: the key replaces the id, duplicates resolved ----
# A fresh database migrated to 0020, a result recorded twice for one attempt (no runner's insert
# allows it, but nothing stopped it before 0021) beside two others, then the rest migrated: the
# last recorded copy (the one hydration read) stays, with the others.
upgrade_db=migr_upgrade_$$_$RANDOM
upgrade_url=$(printf '%s\n' "$url" | sed -E "s#^(postgresql://[^/]*/)[^?]*#\1$upgrade_db#")
upgrade_sql=$(mktemp -d)
cleanup_upgrade() {
    q "DROP DATABASE IF EXISTS $upgrade_db" >/dev/null 2>&1 || true
    rm -rf "$upgrade_sql"
}
trap cleanup_upgrade EXIT
uq() { q_at "$upgrade_url" "$1"; }
q "CREATE DATABASE $upgrade_db" >/dev/null
for f in "$root"/sql/[0-9][0-9][0-9][0-9]_*.sql; do
    base=${f##*/}
    [[ ${base:0:4} < 0021 ]] && cp "$f" "$upgrade_sql/"
done
CAIRN_SQL_DIR=$upgrade_sql "$root/scripts/migrate-sql" "$upgrade_url" >/dev/null
i1=00000000-0000-4000-8000-000000000001
e1=00000000-0000-4000-8000-0000000000e1
e2=00000000-0000-4000-8000-0000000000e2
uq "INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result)
    VALUES ('$i1', '$e1', 1, 'ok', '\x01'), ('$i1', '$e1', 1, 'ok', '\x02'),
           ('$i1', '$e1', 2, 'ok', '\x03'), ('$i1', '$e2', 1, 'error', '\x04')"
out=$("$root/scripts/migrate-sql" "$upgrade_url" 2>&1) ||
    check "0021 applies to a database with results" "failed: $out" ok
case $out in
*"0021: 1 results recorded twice"*) check "0021 reports the duplicate it removed" yes yes ;;
*) check "0021 reports the duplicate it removed" "$out" "a WARNING naming 1 result" ;;
esac
check "0021 keeps one row per attempt, the last recorded of the duplicate" \
    "$(uq "SELECT string_agg(encode(result, 'hex'), ' ' ORDER BY id)
             FROM cairn.runner_actions_done")" \
    "02 03 04"
check "the results' primary key is (instance, execution, attempt)" \
    "$(uq "SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_constraint c
              CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(att, n)
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.att
            WHERE c.conrelid = 'cairn.runner_actions_done'::regclass AND c.contype = 'p'")" \
    "instance_id,execution_id,attempt"
check "no other index on the results" \
    "$(uq "SELECT count(*) FROM pg_index WHERE indrelid = 'cairn.runner_actions_done'::regclass")" 1
if uq "INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result)
       VALUES ('$i1', '$e1', 1, 'ok', '\x05')" 2>/dev/null; then
    check "a result recorded again is refused by the key" inserted refused
else
    check "a result recorded again is refused by the key" refused refused
fi

if [[ $failures -ne 0 ]]; then
    echo "test_db_migrations: $failures check(s) failed"
    exit 1
fi

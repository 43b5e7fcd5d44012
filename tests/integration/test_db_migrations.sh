#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): checks that the migrations in sql/ were applied to the test database and
# that re-applying them is a no-op. Argument: the source root. Needs CAIRN_TEST_DATABASE_URL
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
psql_bin=${PSQL:-}
if [[ -z "$psql_bin" ]]; then
    if command -v psql >/dev/null 2>&1; then
        psql_bin=psql
    else
        psql_bin=/usr/lib/postgresql/15/bin/psql
    fi
fi

failures=0
q()
{
    "$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 -d "$url" -c "$1" </dev/null
}
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

if [[ $failures -ne 0 ]]; then
    echo "test_db_migrations: $failures check(s) failed"
    exit 1
fi

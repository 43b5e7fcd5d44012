#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): upgrading a database equals migrating an empty one. A database at 0021
# (tests/fixtures/cairn-0021.pgdump: what migrating an empty database gave before
# the SQL API moved to sql/api/) is upgraded with scripts/migrate-sql and with cairnctl migrate;
# empty databases are migrated with both; the four schemas (pg_dump --schema-only, its session
# keys and version lines left out) must be the same, else the difference is printed. Then: a
# migrate with nothing new leaves the API alone; a changed API file is applied again, and a
# failing one keeps nothing; every function, trigger, view and policy of the schema is defined
# in sql/api/ alone, once. Arguments: CAIRNCTL SOURCE_ROOT. TAP output; without
# CAIRN_TEST_DATABASE_URL it reports a skip.
set -uo pipefail

ctl=${1:?usage: test_schema_upgrade.sh CAIRNCTL SOURCE_ROOT}
root=${2:?usage: test_schema_upgrade.sh CAIRNCTL SOURCE_ROOT}
# shellcheck source=tests/support/tap_db.sh
source "$root/tests/support/tap_db.sh"
# What the checks expect of this tree: its newest migration and how many API files it has.
latest=$(basename "$(ls "$root"/sql/[0-9][0-9][0-9][0-9]_*.sql | sort | tail -1)" | cut -c1-4)
napi=$(ls "$root"/sql/api/*.sql | wc -l)
pg_dump_bin=$(dirname "$(command -v "$psql_bin")")/pg_dump
[[ -x $pg_dump_bin ]] || pg_dump_bin=/usr/lib/postgresql/15/bin/pg_dump

tag=schema_$$_$RANDOM
dbs=()
tmp=$(mktemp -d)
cleanup() {
    for d in "${dbs[@]}"; do q "$base_url" "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1; done
    rm -rf "$tmp"
}
trap cleanup EXIT
newdb() { dbs+=("${tag}_$1"); q "$base_url" "CREATE DATABASE ${tag}_$1" >/dev/null; db_url "${tag}_$1"; }
schema() {
    "$pg_dump_bin" --schema-only -d "$1" | grep -v -e '^\\restrict' -e '^\\unrestrict' \
        -e '^-- Dumped from' -e '^-- Dumped by'
}

# The roles are the cluster's: an empty database migrated first makes them for the fixture.
fresh_sql=$(newdb fresh_sql)
"$root/scripts/migrate-sql" "$fresh_sql" >"$tmp/fresh_sql.out" 2>&1
check "migrate-sql migrates an empty database" "$?" 0
fresh_ctl=$(newdb fresh_ctl)
"$ctl" migrate --database-url "$fresh_ctl" >"$tmp/fresh_ctl.out" 2>&1
check "cairnctl migrate migrates an empty database" "$?" 0
for tool in sql ctl; do
    u=$(newdb "up_$tool")
    q "$u" "\\i $root/tests/fixtures/cairn-0021.pgdump" >/dev/null 2>"$tmp/restore.err"
    check "the 0021 database restored ($tool)" "$(q "$u" "SELECT max(version) FROM cairn.schema_migrations")" 0021
    if [[ $tool == sql ]]; then
        out=$("$root/scripts/migrate-sql" "$u" 2>&1)
    else
        out=$("$ctl" migrate --database-url "$u" 2>&1)
    fi
    contains "upgrading from 0021 applies the SQL API ($tool)" "$out" "applied the SQL API"
    eval "up_$tool=\$u"
done

schema "$fresh_sql" >"$tmp/fresh_sql.schema"
n_lines=$(wc -l <"$tmp/fresh_sql.schema")
if [[ $n_lines -gt 1000 ]]; then ok "the schema dump has $n_lines lines"; else fail "the schema dump has $n_lines lines"; fi
for other in fresh_ctl up_sql up_ctl; do
    schema "${!other}" >"$tmp/$other.schema"
    if diff -u "$tmp/fresh_sql.schema" "$tmp/$other.schema" >"$tmp/$other.diff"; then
        ok "the schema of $other is the schema of an empty database migrated"
    else
        fail "the schema of $other differs from an empty database migrated:"
        head -n 60 "$tmp/$other.diff" | sed 's/^/#   /'
    fi
done

# Nothing new: no migration, the API left alone (its record keeps its time).
before=$(q "$up_sql" "SELECT max(applied_at) FROM cairn.schema_api")
out=$("$root/scripts/migrate-sql" "$up_sql" 2>&1)
check "migrate-sql with nothing new prints nothing" "$out" ""
out=$("$ctl" migrate --database-url "$up_sql" 2>&1)
check "cairnctl migrate with nothing new applies nothing" "$out" "schema at version $latest (0 migrations applied now)"
check "the API was not applied again" "$(q "$up_sql" "SELECT max(applied_at) FROM cairn.schema_api")" "$before"

# A changed API file is applied again, on its own (no migration pending).
cp -r "$root/sql" "$tmp/sql"
sed -i 's/^    SELECT coalesce(cairn.acting_tenant(), .default.)$/    SELECT coalesce(cairn.acting_tenant(), '\''default'\'') -- changed/' \
    "$tmp/sql/api/10_tenants.sql"
out=$(CAIRN_SQL_DIR=$tmp/sql "$root/scripts/migrate-sql" "$up_sql" 2>&1)
check "a changed API file: the API is applied again" "$out" "migrate-sql: applied the SQL API ($napi files of sql/api)"
contains "the changed definition is in the database" \
    "$(q "$up_sql" "SELECT prosrc FROM pg_proc WHERE oid = 'cairn.current_tenant'::regproc")" "-- changed"
check "its checksum recorded" \
    "$(q "$up_sql" "SELECT sha256 FROM cairn.schema_api WHERE file = '10_tenants.sql'")" \
    "$(sha256sum "$tmp/sql/api/10_tenants.sql" | cut -d' ' -f1)"
out=$("$ctl" migrate --database-url "$up_sql" 2>&1)
contains "cairnctl migrate puts back the definitions it was built with" "$out" "applied the SQL API ($napi files"

# A failing API file keeps nothing: not its own statements, not the migrations before it.
echo "SELECT no_such_function();" >>"$tmp/sql/api/90_api_owner.sql"
cat >"$tmp/sql/0099_test_marker.sql" <<'SQL'
CREATE TABLE cairn.test_marker (x int);
SQL
out=$(CAIRN_SQL_DIR=$tmp/sql "$root/scripts/migrate-sql" "$up_sql" 2>&1)
check "a failing API file: migrate-sql fails" "$?" 1
contains "it names the error" "$out" "no_such_function"
check "the migration applied before it was rolled back too" \
    "$(q "$up_sql" "SELECT to_regclass('cairn.test_marker') IS NULL AND NOT EXISTS
                      (SELECT 1 FROM cairn.schema_migrations WHERE version = '0099')")" t

# One definition each, in sql/api/ alone.
shopt -s nullglob
migrations=("$root"/sql/[0-9][0-9][0-9][0-9]_*.sql)
api=("$root"/sql/api/*.sql)
bad=$(grep -l -i -E '^\s*CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|TRIGGER|VIEW|POLICY)\b' "${migrations[@]}")
check "no migration defines a function, trigger, view or policy" "$bad" ""
for name in $(q "$fresh_sql" "SELECT proname FROM pg_proc WHERE pronamespace = 'cairn'::regnamespace
                               ORDER BY 1"); do
    k=$(cat "${api[@]}" | grep -c -i -E "^CREATE OR REPLACE FUNCTION cairn\\.$name\\(")
    [[ $k == 1 ]] || fail "cairn.$name is defined $k times in sql/api/"
done
ok "each of the schema's $(q "$fresh_sql" "SELECT count(*) FROM pg_proc
                               WHERE pronamespace = 'cairn'::regnamespace") functions is defined once in sql/api/"
for v in $(q "$fresh_sql" "SELECT viewname FROM pg_views WHERE schemaname = 'cairn'"); do
    k=$(cat "${api[@]}" | grep -c -E "^CREATE OR REPLACE VIEW cairn\\.$v\\b")
    check "view cairn.$v is defined once in sql/api/" "$k" 1
done
for t in $(q "$fresh_sql" "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"); do
    k=$(cat "${api[@]}" | grep -c -E "^CREATE OR REPLACE TRIGGER $t\\b")
    check "trigger $t is defined once in sql/api/" "$k" 1
done

echo "1..$n"
if [[ $failures -ne 0 ]]; then
    echo "test_schema_upgrade: $failures check(s) failed"
    exit 1
fi

# SPDX-License-Identifier: MIT
# Shared by the shell tests of suite db (source it): skips the test (TAP) when
# CAIRN_TEST_DATABASE_URL is not set, finds psql, and defines the TAP helpers (ok, fail, check,
# contains; the counters n and failures), db_url NAME (the test server's URL with database NAME)
# and q URL SQL (one psql command, unaligned, tuples only, stopping on the first error).
# shellcheck shell=bash
base_url=${CAIRN_TEST_DATABASE_URL:-}
if [[ -z "$base_url" ]]; then
    echo "1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)"
    exit 0
fi
# shellcheck source=tests/support/psql.sh
source "$(dirname "${BASH_SOURCE[0]}")/psql.sh"

failures=0
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; failures=$((failures + 1)); }
check() { if [[ "$2" == "$3" ]]; then ok "$1"; else fail "$1: got '$2', want '$3'"; fi; }
contains() { if [[ "$2" == *"$3"* ]]; then ok "$1"; else fail "$1: '$3' not in: $2"; fi; }

# URL of database $1 on the same server: replace the path of the test URL.
db_url() { printf '%s\n' "$base_url" | sed -E "s#^(postgresql://[^/]*/)[^?]*#\1$1#"; }
q() { "$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2" </dev/null; }

# fresh_db ROOT PREFIX: a database of its own (PREFIX_PID_RANDOM, dropped on exit), migrated
# with ROOT's scripts/migrate-sql, with a version 'w'/'v1' registered and the SQL function
# try(stmt), which runs one statement and returns 'SQLSTATE message' or 'no error'. Sets $db
# and $url; exits with a TAP failure if any of it fails.
fresh_db() {
    db=$2_$$_$RANDOM
    trap 'q "$base_url" "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1' EXIT
    q "$base_url" "CREATE DATABASE $db" || { echo "not ok - cannot create a database"; exit 1; }
    url=$(db_url "$db")
    "$1/scripts/migrate-sql" "$url" >/dev/null || { echo "not ok - cannot migrate"; exit 1; }
    q "$url" "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash, source)
              VALUES ('w', 'v1', 'h', 'fn main(input: [], output: []): return None')" >/dev/null
    q "$url" "CREATE FUNCTION try(stmt text) RETURNS text LANGUAGE plpgsql AS \$\$
              BEGIN EXECUTE stmt; RETURN 'no error';
              EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ' ' || SQLERRM; END \$\$" >/dev/null
}

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): cairnctl's database commands against the real PostgreSQL that scripts/test
# starts: migrate (also three at once), register, run (and the enqueue limits it checks; --inputs,
# many at once), status, result, list, and their errors and exit codes (TAP output). Each run works
# in fresh databases of its own (created on the server of CAIRN_TEST_DATABASE_URL and dropped at the
# end), so it never disturbs other tests. Arguments: CAIRNCTL SOURCE_ROOT. Without
# CAIRN_TEST_DATABASE_URL it reports a TAP skip.
set -uo pipefail

ctl=${1:?usage: test_cairnctl_db.sh CAIRNCTL SOURCE_ROOT}
root=${2:?usage: test_cairnctl_db.sh CAIRNCTL SOURCE_ROOT}
# shellcheck source=tests/support/tap_db.sh
source "$root/tests/support/tap_db.sh"

suffix=$$_$RANDOM
db1=ctl_a_$suffix
db2=ctl_b_$suffix
cleanup() {
    q "$base_url" "DROP DATABASE IF EXISTS $db1" >/dev/null 2>&1
    q "$base_url" "DROP DATABASE IF EXISTS $db2" >/dev/null 2>&1
    q "$base_url" "DROP DATABASE IF EXISTS ${db2}_sql" >/dev/null 2>&1
    rm -f "$tmp"/* 2>/dev/null
    rmdir "$tmp" 2>/dev/null
}
tmp=$(mktemp -d)
trap cleanup EXIT
q "$base_url" "CREATE DATABASE $db1" || { echo "not ok - cannot create a database"; exit 1; }
q "$base_url" "CREATE DATABASE $db2" || { echo "not ok - cannot create a database"; exit 1; }
url=$(db_url "$db1")
export CAIRN_DATABASE_URL=$url

# ctl_says WHAT RC SAYS TEXT ARGS...: cairnctl ARGS exits RC ("WHAT: exit RC") and prints
# TEXT ("WHAT: SAYS"); leaves its output in $out and its status in $rc.
ctl_says() {
    local what=$1 want=$2 says=$3 text=$4
    shift 4
    out=$("$ctl" "$@" 2>&1); rc=$?
    check "$what: exit $want" "$rc" "$want"
    contains "$what: $says" "$out" "$text"
}

# ---- migrate ------------------------------------------------------------------------------
nfiles=$(find "$root/sql" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)
for i in 1 2 3; do "$ctl" migrate >"$tmp/m$i" 2>&1 & done
wait
applied=$(cat "$tmp"/m1 "$tmp"/m2 "$tmp"/m3 | grep -c '^applied [0-9]')
check "three concurrent migrates apply each file exactly once" "$applied" "$nfiles"
check "and the SQL API once" "$(cat "$tmp"/m1 "$tmp"/m2 "$tmp"/m3 | grep -c '^applied the SQL API')" 1
contains "migrate reports the schema version" "$(cat "$tmp/m1")" "schema at version"
check "every file recorded" "$(q "$url" "SELECT count(*) FROM cairn.schema_migrations")" "$nfiles"
out=$("$ctl" migrate 2>&1); rc=$?
check "migrate again: exit 0" "$rc" 0
contains "migrate again applies nothing" "$out" "(0 migrations applied now)"
out=$("$ctl" migrate --json --database-url "$(db_url "$db2")")
check "migrate --json on a fresh database lists what it applied" \
    "$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["applied"]), d["version"] != "")')" \
    "$nfiles True"
# Same contract as scripts/migrate-sql: a database it migrated needs nothing from cairnctl.
q "$base_url" "CREATE DATABASE ${db2}_sql" >/dev/null
"$root/scripts/migrate-sql" "$(db_url "${db2}_sql")" >/dev/null 2>&1
out=$("$ctl" migrate --database-url "$(db_url "${db2}_sql")" 2>&1)
contains "cairnctl migrate after migrate-sql applies nothing" "$out" "(0 migrations applied now)"

# ---- register -----------------------------------------------------------------------------
for f in "$root"/examples/*.cairn; do
    out=$("$ctl" register "$f" 2>&1); rc=$?
    check "register $(basename "$f"): exit 0" "$rc" 0
done
out=$("$ctl" register "$root/examples/hello.cairn" 2>&1); rc=$?
check "register unchanged source: exit 0" "$rc" 0
contains "register unchanged source is a no-op" "$out" "already registered, unchanged"
check "one version per example" "$(q "$url" "SELECT count(*) FROM cairn.workflow_versions WHERE workflow_name = 'hello'")" 1
out=$("$ctl" register "$root/examples/hello.cairn" --version v1 --json 2>&1)
contains "register --version --json" "$out" '"version": "v1"'
# A newer compiler may encode the same source differently (another hash): still unchanged.
q "$url" "UPDATE cairn.workflow_versions SET ir_hash = repeat('0', 64) WHERE workflow_name = 'hello' AND workflow_version = 'v1'" >/dev/null
ctl_says "same source, hash from an older compiler" 0 "unchanged" "already registered, unchanged" register "$root/examples/hello.cairn" --version v1
ctl_says "same name and version, other source" 1 "says so" "already registered with different source" register "$root/examples/welcome.cairn" --name hello --version v1
broken=$(find "$root/tests/cli/broken" -name '*.cairn' | sort | head -n 1)
out=$("$ctl" register "$broken" --name broken 2>&1); rc=$?
check "register a file that does not compile: exit 1" "$rc" 1
if [[ "$out" =~ :[0-9]+:[0-9]+: ]]; then ok "compile errors carry line:col"; else fail "no line:col in: $out"; fi
check "nothing stored for it" "$(q "$url" "SELECT count(*) FROM cairn.workflow_versions WHERE workflow_name = 'broken'")" 0
out=$("$ctl" register "$root/examples/hello.cairn" --name '9bad' 2>&1); rc=$?
check "invalid workflow name: exit 1" "$rc" 1

# ---- run ----------------------------------------------------------------------------------
id=$("$ctl" run hello --input '{"name": "Ada"}' 2>&1); rc=$?
check "run: exit 0" "$rc" 0
if [[ "$id" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]]; then ok "run prints the instance id"; else fail "run printed: $id"; fi
check "the newest version runs" "$(q "$url" "SELECT v.workflow_version FROM cairn.runner_instances r JOIN cairn.workflow_versions v ON v.id = r.workflow_version_id WHERE r.instance_id = '$id'")" v1
check "instance queued with its input" "$(q "$url" "SELECT status || ' ' || (input->>'name') FROM cairn.runner_instances WHERE instance_id = '$id'")" "queued Ada"
check "and in the claim queue" "$(q "$url" "SELECT count(*) FROM cairn.queued_instances WHERE instance_id = '$id'")" 1
k1=$("$ctl" run hello --idempotency-key order-7 2>&1)
k2=$("$ctl" run hello --idempotency-key order-7 --input '{}' 2>&1)
check "the same idempotency key and input give the same instance" "$k2" "$k1"
ctl_says "the same key with another input" 1 "is refused, naming the first instance" \
    "idempotency key \"order-7\" of workflow \"hello\" was used with another input (instance $k1)" \
    run hello --idempotency-key order-7 --input '{"other": 1}'
k3=$("$ctl" run hello --idempotency-key order-7 --input '{"other": 1}' --any-input 2>&1)
check "--any-input: the first instance anyway" "$k3" "$k1"
check "and one instance only" "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE idempotency_key = 'order-7'")" 1
# ---- typed inputs: checked by cairn.enqueue, whoever enqueues -------------------------------
out=$("$ctl" register "$root/tests/fixtures/typed.cairn" 2>&1); rc=$?
check "register a workflow with typed inputs" "$rc" 0
schema=$("$ctl" schema typed 2>&1)
# shellcheck disable=SC2016  # "$schema" is the document's key, read by Python
check "schema prints its inputs as JSON Schema 2020-12" "$(printf '%s' "$schema" | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["properties"]
print(d["$schema"], d["title"], d["required"], d["additionalProperties"], p["qty"], p["note"]["anyOf"],
      p["tags"]["items"], p["prices"]["additionalProperties"])')" \
    "https://json-schema.org/draft/2020-12/schema typed ['order'] False {'default': 1, 'type': 'integer'} [{'type': 'string'}, {'type': 'null'}] {'type': 'string'} {'type': 'number'}"
check "schema of an untyped workflow: any value for each input, other keys allowed" \
    "$("$ctl" schema hello | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["properties"], d["required"], d["additionalProperties"])')" \
    "{'name': {}} ['name'] True"
ctl_says "schema of an unknown workflow" 1 "names it" 'unknown workflow "nope_flow"' schema nope_flow
ctl_says "a mistyped input" 1 "is refused with its path" \
    "cairn.enqueue: input.tags[1]: expected str, got int" \
    run typed --input '{"order": {"id": 1}, "tags": ["a", 2]}'
ctl_says "a missing input" 1 "is refused" \
    'input.order: missing (workflow "typed" requires it: dict)' run typed --input '{"qty": 2}'
ctl_says "an unknown input" 1 "is refused" 'input.qtty: workflow "typed" has no such input' \
    run typed --input '{"order": {}, "qtty": 2}'
ctl_says "a float for an int" 1 "is refused" "input.qty: expected int, got float" \
    run typed --input '{"order": {}, "qty": 2.5}'
ctl_says "a nested mismatch" 1 "is refused with its path" \
    "input.prices.apple: expected float, got str" \
    run typed --input '{"order": {}, "prices": {"pear": 1, "apple": "x"}}'
check "nothing refused was stored" "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'typed'")" 0
check "the refusal's SQLSTATE is 22Z01" \
    "$(q "$url" "DO \$\$ BEGIN PERFORM cairn.enqueue('typed', '{\"order\": 1}'); EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$\$" 2>&1 | grep -o '22Z01')" 22Z01
out=$("$ctl" run typed --input '{"order": {"id": 1}, "qty": 3, "note": null, "tags": ["a"], "prices": {"pear": 1, "fig": 2.5}}' 2>&1); rc=$?
check "an input that fits is enqueued" "$rc" 0
# a child call to it, checked at register: inputs with a default may be left out, constants
# are checked against their types
printf 'fn main(input: [o]):\n    r = run typed(order=o)\n    return r\n' >"$tmp/typed_parent.cairn"
out=$("$ctl" register "$tmp/typed_parent.cairn" 2>&1); rc=$?
check "a child call that leaves out the inputs with defaults registers" "$rc $out" "0 typed_parent version $(printf '%s' "$out" | awk '{print $3}') registered (4 nodes)"
printf 'fn main(input: [o]):\n    r = run typed(order=o, tags=[1])\n    return r\n' >"$tmp/typed_bad.cairn"
ctl_says "a child call with a constant of the wrong type" 1 "is refused at its line" \
    "typed_bad.cairn:2:9: error: typed: input.tags[0]: expected str, got int" register "$tmp/typed_bad.cairn"
printf 'fn main(input: [o]):\n    r = run typed(qty=2)\n    return r\n' >"$tmp/typed_missing.cairn"
ctl_says "a child call without a required input" 1 "is refused" "typed needs input 'order'" \
    register "$tmp/typed_missing.cairn"
ctl_says "invalid input JSON" 1 "says where" "line 1, column" run hello --input '{"name": }'
ctl_says "input that is not an object" 1 "says so" "must be a JSON object" run hello --input '[1, 2]'
ctl_says "unknown workflow" 1 "names it" 'unknown workflow "no_such_flow"' run no_such_flow
out=$("$ctl" run hello --version nope 2>&1); rc=$?
check "unknown version: exit 1" "$rc" 1
ctl_says "bad --at" 1 "names the value and the forms" "--at 'yesterday-ish' is not a time: give an ISO 8601 time with its offset (2026-12-01T09:00:00Z" run hello --at 'yesterday-ish'
check "bad --at: not PostgreSQL's message" "$(printf '%s' "$out" | grep -c 'invalid input syntax')" 0
ctl_says "out-of-range --at" 1 "says so" "is not a time" run hello --at '2026-13-45T99:00:00Z'
ctl_says "bad --workflow-timeout" 1 "names the value and the forms" "--workflow-timeout 'soonish' is not a duration: give a number with a unit (90s" run hello --workflow-timeout 'soonish'
before=$(q "$url" "SELECT count(*) FROM cairn.runner_instances")
"$ctl" run hello --at 'not-a-time' >/dev/null 2>&1
check "bad --at: nothing enqueued" "$(q "$url" "SELECT count(*) FROM cairn.runner_instances")" "$before"
zoned=$("$ctl" run hello --at '2999-06-01 09:00 Europe/Paris' 2>&1)
check "--at in a named zone is stored" "$(q "$url" "SELECT to_char(scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM cairn.queued_instances WHERE instance_id = '$zoned'")" "2999-06-01 07:00"
later=$("$ctl" run hello --at '2999-01-01T00:00:00Z' --priority 5 2>&1)
check "--at and --priority are stored" "$(q "$url" "SELECT extract(year FROM scheduled_at)::int || ' ' || priority FROM cairn.queued_instances WHERE instance_id = '$later'")" "2999 5"
out=$("$ctl" run hello --priority x 2>&1); rc=$?
check "bad --priority: exit 2" "$rc" 2

# ---- run: the limits of cairn.enqueue (cairn.limits()), checked before sending -------------
check "cairn.limits() holds cairnctl's figures" \
    "$(q "$url" "SELECT input_bytes || ' ' || value_depth || ' ' || idempotency_key_bytes FROM cairn.limits()")" \
    "262144 32 255"
# An object nested $1 levels deep: {"a": [[...]]} with the innermost list at level $1.
nested() { python3 -c "import sys; d = int(sys.argv[1]); print('{\"a\": ' + '[' * (d - 1) + ']' * (d - 1) + '}')" "$1"; }
ctl_says "input one level too deep" 1 "says so" "--input is nested deeper than 32 levels" run hello --input "$(nested 33)"
deep=$("$ctl" run hello --input "$(nested 32)" 2>&1); rc=$?
check "input at the depth limit: exit 0" "$rc" 0
check "input at the depth limit: read back as sent" \
    "$("$ctl" status "$deep" --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["input"]))')" \
    "$(nested 32)"
ctl_says "1e400" 1 "says so" "--input holds a number out of range" run hello --input '{"a": 1e400}'
ctl_says "an integer beyond int64" 1 "says so" "--input holds a number out of range" run hello --input '{"a": [-9223372036854775809]}'
ctl_says "a float jsonb would keep as an integer beyond int64" 1 "says so" \
    "--input holds 1e+20, which PostgreSQL stores as an integer, outside the 64-bit range" run hello --input '{"a": 1e20}'
# {"s": "..."} is 9 bytes around the string; argv cannot hold 256 KiB, hence --input-file.
python3 -c 'import sys; sys.stdout.write("{\"s\": \"" + "x" * 262135 + "\"}")' >"$tmp/at_limit.json"
python3 -c 'import sys; sys.stdout.write("{\"s\": \"" + "x" * 262136 + "\"}")' >"$tmp/over_limit.json"
ctl_says "input one byte over the size limit" 1 "says so" \
    "--input is 262145 bytes of JSON, over the limit of 262144 bytes" run hello --input-file "$tmp/over_limit.json"
big=$("$ctl" run hello --input-file - <"$tmp/at_limit.json" 2>&1); rc=$?
check "input at the size limit (from stdin): exit 0" "$rc" 0
check "input at the size limit: stored whole" \
    "$(q "$url" "SELECT octet_length(input::text) FROM cairn.runner_instances WHERE instance_id = '$big'")" 262144
out=$("$ctl" run hello --input '{}' --input-file "$tmp/at_limit.json" 2>&1); rc=$?
check "--input and --input-file: exit 2" "$rc" 2
# 1e-05 is 5 bytes here and 0.00001, 7 bytes, in jsonb: only the database sees this one over.
python3 -c 'import sys; sys.stdout.write("{\"a\": [" + ", ".join(["1e-05"] * 37000) + "]}")' >"$tmp/grows.json"
out=$("$ctl" run hello --input-file "$tmp/grows.json" 2>&1); rc=$?
check "input over the limit only once in jsonb: exit 1 (the database's 54000)" "$rc" 1
contains "input over the limit only once in jsonb: the database's message" "$out" \
    "cairn.enqueue: input is 333007 bytes of JSON, over the limit of 262144 bytes"
ctl_says "empty idempotency key" 1 "says so" "--idempotency-key is empty" run hello --idempotency-key ''

# ---- run --inputs: many instances from JSON Lines, all or none -------------------------------
printf '{"name": "a", "k": "ka"}\n\n{"name": "b", "k": 7}\n{"name": "c", "k": "kc"}\n' >"$tmp/many.jsonl"
before=$(q "$url" "SELECT count(*) FROM cairn.runner_instances")
ids=$("$ctl" run hello --inputs "$tmp/many.jsonl" --idempotency-key-field k); rc=$?
check "--inputs: exit 0" "$rc" 0
check "--inputs: one id per line that is not blank, in the lines' order" \
    "$(for i in $ids; do q "$url" "SELECT input->>'name' || ':' || idempotency_key FROM cairn.runner_instances WHERE instance_id = '$i'"; done | tr '\n' ' ')" \
    "a:ka b:7 c:kc "
again=$("$ctl" run hello --inputs - --idempotency-key-field k --json <"$tmp/many.jsonl"); rc=$?
check "--inputs again with the same keys (from stdin, --json): the same instances" \
    "$again" "{\"ids\": [$(for i in $ids; do printf '"%s", ' "$i"; done | sed 's/, $//')]}"
printf '{"name": "d"}\n{"name": "e"}\n{"name": [1, 2}\n' >"$tmp/bad.jsonl"
ctl_says "--inputs with a line that is not JSON" 1 "names FILE:LINE" "$tmp/bad.jsonl:3 is not valid JSON" \
    run hello --inputs "$tmp/bad.jsonl"
printf '{"name": "d"}\n{"name": 1e20}\n' >"$tmp/bad.jsonl"
ctl_says "--inputs with a number jsonb cannot keep" 1 "names FILE:LINE" \
    "$tmp/bad.jsonl:2 holds 1e+20, which PostgreSQL stores as an integer" run hello --inputs "$tmp/bad.jsonl"
printf '{"name": "d", "k": "kd"}\n{"name": "e"}\n' >"$tmp/bad.jsonl"
ctl_says "--inputs with a line without its key field" 1 "names FILE:LINE and the field" \
    "$tmp/bad.jsonl:2: no field \"k\"" run hello --inputs "$tmp/bad.jsonl" --idempotency-key-field k
printf '{"name": "d", "k": "kd"}\n{"name": "other", "k": "ka"}\n' >"$tmp/bad.jsonl"
ctl_says "--inputs reusing a key with another input (the database's refusal)" 1 "names the line" \
    "$tmp/bad.jsonl:2: nothing was enqueued" run hello --inputs "$tmp/bad.jsonl" --idempotency-key-field k
contains "--inputs reusing a key: the database's reason" "$out" \
    "cairn.enqueue_many: item 2 of 2: idempotency key \"ka\" of workflow \"hello\" was used with another input"
check "--inputs refused: nothing of them was stored" \
    "$(q "$url" "SELECT count(*) - $before FROM cairn.runner_instances")" 3
ctl_says "--inputs of a file with no input" 1 "says so" "holds no input" run hello --inputs /dev/null
ctl_says "--inputs with --input" 2 "says which go together" "not with --input" \
    run hello --inputs "$tmp/many.jsonl" --input '{}'
ctl_says "--idempotency-key-field without --inputs" 2 "says so" "goes with --inputs" \
    run hello --idempotency-key-field k
python3 -c 'import sys; [sys.stdout.write("{\"name\": \"n%d\"}\n" % i) for i in range(12000)]' >"$tmp/big.jsonl"
count=$("$ctl" run hello --inputs "$tmp/big.jsonl" | wc -l); rc=$?
check "--inputs of 12 000 lines (three calls of one transaction): 12 000 ids" "$rc $count" "0 12000"
check "and 12 000 instances, each its own line's" \
    "$(q "$url" "SELECT count(DISTINCT input->>'name') FROM cairn.runner_instances WHERE input->>'name' LIKE 'n%'")" 12000
ctl_says "256-byte idempotency key" 1 "says so" "--idempotency-key is 256 bytes, over the limit of 255 bytes" run hello --idempotency-key "$(printf 'k%.0s' {1..256})"
out=$("$ctl" run hello --idempotency-key "$(printf 'k%.0s' {1..3000})" 2>&1); rc=$?
check "3000-byte idempotency key: exit 1" "$rc" 1
check "3000-byte idempotency key: no index error" "$(printf '%s' "$out" | grep -ci 'btree\|index row')" 0
out=$("$ctl" run hello --idempotency-key "$(printf 'k%.0s' {1..255})" 2>&1); rc=$?
check "255-byte idempotency key: exit 0" "$rc" 0
for at in infinity -infinity ' Infinity'; do
    ctl_says "--at '$at'" 1 "says so" "--at must be a finite time" run hello --at "$at"
done

# ---- status, result, list -----------------------------------------------------------------
out=$("$ctl" status "$id" 2>&1); rc=$?
check "status: exit 0" "$rc" 0
contains "status shows the state" "$out" "status     queued"
st=$("$ctl" status "$id" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], d["input"]["name"], d["workflow"])')
check "status --json" "$st" "queued Ada hello"
out=$("$ctl" result "$id" 2>&1); rc=$?
check "result of an unfinished instance: exit 5" "$rc" 5
q "$url" "UPDATE cairn.runner_instances SET status = 'running' WHERE instance_id = '$id'; UPDATE cairn.runner_instances SET status = 'completed', result = '{\"greeting\": \"hi Ada\"}' WHERE instance_id = '$id'" >/dev/null
out=$("$ctl" result "$id" 2>&1); rc=$?
check "result of a completed instance: exit 0" "$rc" 0
check "result prints the value" "$out" '{"greeting": "hi Ada"}'
q "$url" "UPDATE cairn.runner_instances SET status = 'running' WHERE instance_id = '$k1'; UPDATE cairn.runner_instances SET status = 'failed', error = '{\"type\": \"KeyError\", \"message\": \"x\"}' WHERE instance_id = '$k1'" >/dev/null
ctl_says "result of a failed instance" 4 "the error" "KeyError" result "$k1"
out=$("$ctl" run hello --wait --timeout 1 2>/dev/null); rc=$?
check "run --wait times out: exit 5" "$rc" 5
# run --wait returns when the instance finishes (here: finished by hand, as a runner would).
"$ctl" run hello --input '{"name": "Bo"}' --wait --timeout 20 >"$tmp/wout" 2>"$tmp/werr" &
wpid=$!
wid=
for _ in $(seq 1 200); do
    wid=$(head -n 1 "$tmp/werr" 2>/dev/null)
    [[ -n "$wid" ]] && break
    sleep 0.05
done
q "$url" "UPDATE cairn.runner_instances SET status = 'running' WHERE instance_id = '$wid'; UPDATE cairn.runner_instances SET status = 'completed', result = '[1, 2]' WHERE instance_id = '$wid'" >/dev/null
wait "$wpid"; rc=$?
check "run --wait: exit 0 once finished" "$rc" 0
check "run --wait prints the result" "$(cat "$tmp/wout")" "[1, 2]"
out=$("$ctl" list --status completed 2>&1)
contains "list --status" "$out" "$wid"
n_json=$("$ctl" list --workflow hello --limit 3 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
check "list --limit --json" "$n_json" 3
out=$("$ctl" list --status bogus 2>&1); rc=$?
check "list --status bogus: exit 2" "$rc" 2
out=$("$ctl" status not-a-uuid 2>&1); rc=$?
check "status of a non-UUID: exit 2" "$rc" 2
out=$("$ctl" status 00000000-0000-0000-0000-000000000000 2>&1); rc=$?
check "status of an unknown instance: exit 1" "$rc" 1

# ---- the database itself ------------------------------------------------------------------
out=$(CAIRN_DATABASE_URL='' "$ctl" list 2>&1); rc=$?
check "no database configured: exit 2" "$rc" 2
contains "no database configured: says how" "$out" "CAIRN_DATABASE_URL"
out=$("$ctl" list --database-url 'postgresql://postgres@/nope?host=/nonexistent&port=1' 2>&1); rc=$?
check "unreachable database: exit 3" "$rc" 3
ctl_says "database without the schema" 3 "suggests migrate" "cairnctl migrate" list --database-url "$(db_url postgres)"

echo "1..$n"
if [[ $failures -ne 0 ]]; then
    echo "test_cairnctl_db: $failures check(s) failed"
    exit 1
fi

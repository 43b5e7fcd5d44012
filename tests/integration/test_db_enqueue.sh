#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Meson test (suite db): cairn.enqueue called from SQL refuses what the engine cannot run, each
# with its SQLSTATE and message (input not an object, over the size limit, nested too deep,
# numbers outside int64 or float64, an empty or too long idempotency key, an infinite time),
# and still takes an input exactly at the size limit and one exactly at the depth limit;
# idempotency keys: a key's instance again (the same input only, unless first_if_input_differs;
# another input refused with 22023), per workflow, under eight concurrent enqueues, and
# instances without a key left out of the key's index; cairn.enqueue_many: ids in order, the
# same refusals naming the item, all or nothing, keys per item; a NOTIFY only while a claimer waits
# (TAP output). Works in a fresh database
# of its own on the server of CAIRN_TEST_DATABASE_URL, dropped at the end. Argument:
# SOURCE_ROOT. Without CAIRN_TEST_DATABASE_URL it reports a skip.
set -uo pipefail

root=${1:?usage: test_db_enqueue.sh SOURCE_ROOT}
# shellcheck source=tests/support/tap_db.sh
source "$root/tests/support/tap_db.sh"

fresh_db "$root" enq
try() { q "$url" "SELECT try(\$s\$$1\$s\$)"; }
# refused NAME ARGS WANT: cairn.enqueue('w', ARGS) fails with WANT, its SQLSTATE and message.
refused() { check "$1" "$(try "SELECT cairn.enqueue('w', $2)")" "$3"; }
# An object nested $1 levels deep: {"a": [[...]]} with the innermost list at level $1.
nested() { python3 -c "import sys; d = int(sys.argv[1]); print('{\"a\": ' + '[' * (d - 1) + ']' * (d - 1) + '}')" "$1"; }

check "cairn.limits()" "$(q "$url" "SELECT input_bytes || ' ' || value_depth || ' ' || idempotency_key_bytes FROM cairn.limits()")" \
    "262144 32 255"

# ---- refused ------------------------------------------------------------------------------
refused "input that is not an object" "'[1, 2]'" \
    "22023 cairn.enqueue: input must be a JSON object, got array"
refused "NULL input" "NULL" \
    "22023 cairn.enqueue: input must be a JSON object, got NULL"
# {"s": "..."} is 9 bytes around the string.
refused "input one byte over the size limit" \
    "jsonb_build_object('s', repeat('x', 262136))" \
    "54000 cairn.enqueue: input is 262145 bytes of JSON, over the limit of 262144 bytes"
refused "a 20 MB input" "jsonb_build_object('s', repeat('x', 20000000))" \
    "54000 cairn.enqueue: input is 20000009 bytes of JSON, over the limit of 262144 bytes"
refused "input one level too deep (lists)" "'$(nested 33)'" \
    "54000 cairn.enqueue: input is nested deeper than 32 levels"
deep_obj=$(python3 -c "print('{\"a\": ' * 32 + '1' + '}' * 32)")
refused "input one level too deep (objects, a scalar at the bottom)" "'$deep_obj'" \
    "54000 cairn.enqueue: input is nested deeper than 32 levels"
refused "1e400" "'{\"a\": 1e400}'" \
    "22003 cairn.enqueue: input holds the integer 10000000000000000000... (401 digits), outside the 64-bit range"
refused "an integer just above int64" "'{\"a\": [9223372036854775808]}'" \
    "22003 cairn.enqueue: input holds the integer 9223372036854775808, outside the 64-bit range"
refused "an integer just below int64" "'{\"a\": {\"b\": -9223372036854775809}}'" \
    "22003 cairn.enqueue: input holds the integer -9223372036854775809, outside the 64-bit range"
refused "1e19, which jsonb keeps as an integer" "'{\"a\": 1e19}'" \
    "22003 cairn.enqueue: input holds the integer 10000000000000000000, outside the 64-bit range"
# 2^1024 - 2^970: the smallest magnitude strtod rounds to infinity.
huge=$(python3 -c 'print(2**1024 - 2**970)')
refused "a float that overflows float64" "'{\"a\": -$huge.0}'" \
    "22003 cairn.enqueue: input holds the number -1797693134862315807... (312 characters), beyond the largest float"
refused "the largest float in exponent form, which jsonb keeps as an integer" \
    "'{\"a\": 1.7976931348623157e308}'" \
    "22003 cairn.enqueue: input holds the integer 17976931348623157000... (309 digits), outside the 64-bit range"
refused "an empty idempotency key" "'{}', ''" \
    "22023 cairn.enqueue: the idempotency key is empty"
refused "a 256-byte idempotency key" "'{}', repeat('k', 256)" \
    "54000 cairn.enqueue: the idempotency key is 256 bytes, over the limit of 255 bytes"
refused "a 3000-byte idempotency key (no B-tree error)" "'{}', repeat('k', 3000)" \
    "54000 cairn.enqueue: the idempotency key is 3000 bytes, over the limit of 255 bytes"
refused "the key limit counts bytes" "'{}', repeat('é', 128)" \
    "54000 cairn.enqueue: the idempotency key is 256 bytes, over the limit of 255 bytes"
refused "scheduled at infinity" "'{}', NULL, 0, 'infinity'" \
    "22023 cairn.enqueue: scheduled_at must be a finite time, got infinity"
refused "scheduled at -infinity" "'{}', NULL, 0, '-infinity'" \
    "22023 cairn.enqueue: scheduled_at must be a finite time, got -infinity"
q "$url" "SELECT cairn.enqueue('w', '{}', 'used')" >/dev/null
refused "a bad input is refused even with a key already used" "'[]', 'used'" \
    "22023 cairn.enqueue: input must be a JSON object, got array"
check "nothing refused was stored" "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE idempotency_key IS DISTINCT FROM 'used'")" 0
hint=$("$psql_bin" -X -q -d "$url" -c "SELECT cairn.enqueue('w', '{}', '')" 2>&1 </dev/null)
contains "the empty key's hint" "$hint" "HINT:  Use NULL for no key."

# ---- accepted -----------------------------------------------------------------------------
id=$(q "$url" "SELECT cairn.enqueue('w', jsonb_build_object('s', repeat('x', 262135)))")
check "input exactly at the size limit: stored whole" \
    "$(q "$url" "SELECT octet_length(input::text) FROM cairn.runner_instances WHERE instance_id = '$id'")" 262144
check "and queued" "$(q "$url" "SELECT count(*) FROM cairn.queued_instances WHERE instance_id = '$id'")" 1
id=$(q "$url" "SELECT cairn.enqueue('w', '$(nested 32)')")
check "input exactly at the depth limit: stored as sent" \
    "$(q "$url" "SELECT input = '$(nested 32)'::jsonb FROM cairn.runner_instances WHERE instance_id = '$id'")" t
deep_obj=$(python3 -c "print('{\"a\": ' * 31 + '1' + '}' * 31)")
check "objects 32 levels deep with a scalar at the bottom" \
    "$(try "SELECT cairn.enqueue('w', '$deep_obj')")" "no error"
refused "int64's bounds, a float with a fraction beyond int64, an underflow" \
    "'{\"a\": [-9223372036854775808, 9223372036854775807, 10000000000000000000.5, 1e-400]}'" \
    "no error"
check "the largest finite float, written with a fraction" \
    "$(try "SELECT cairn.enqueue('w', '{\"a\": $(python3 -c 'print(2**1024 - 2**970 - 1)').9}')")" "no error"
check "an idempotency key of 255 bytes" "$(try "SELECT cairn.enqueue('w', '{}', repeat('k', 255))")" "no error"
check "a finite time" "$(try "SELECT cairn.enqueue('w', '{}', NULL, 0, '2999-01-01T00:00:00Z')")" "no error"

# ---- idempotency keys (0020: the unique index holds the keyed instances only) ---------------
used=$(q "$url" "SELECT instance_id FROM cairn.runner_instances WHERE idempotency_key = 'used'")
check "a key used before with the same input: its instance again" "$(q "$url" "SELECT cairn.enqueue('w', '{}', 'used')")" "$used"
q "$url" "SELECT cairn.enqueue('w', '{\"a\": 1, \"b\": [2]}', 'json-eq')" >/dev/null
check "the same input is JSON equality: key order and spacing do not count" \
    "$(q "$url" "SELECT cairn.enqueue('w', '{ \"b\" : [2],\"a\":1}', 'json-eq') = instance_id FROM cairn.runner_instances WHERE idempotency_key = 'json-eq'")" t
refused "the key with another input" "'{\"other\": 1}', 'used'" \
    "22023 cairn.enqueue: idempotency key \"used\" of workflow \"w\" was used with another input (instance $used)"
hint=$("$psql_bin" -X -q -d "$url" -c "SELECT cairn.enqueue('w', '{\"other\": 1}', 'used')" 2>&1 </dev/null)
contains "its hint says how to get the first instance anyway" "$hint" "first_if_input_differs => true returns the first instance anyway"
check "first_if_input_differs: the first instance anyway" \
    "$(q "$url" "SELECT cairn.enqueue('w', '{\"other\": 1}', 'used', first_if_input_differs => true)")" "$used"
check "and no second instance" "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE idempotency_key = 'used'")" 1
check "its input is the first one's" "$(q "$url" "SELECT input FROM cairn.runner_instances WHERE instance_id = '$used'")" "{}"
check "no key: a new instance each time" \
    "$(q "$url" "SELECT cairn.enqueue('w', '{}') <> cairn.enqueue('w', '{}')")" t
q "$url" "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash, source) VALUES ('w2', 'v1', 'h2', 'workflow w2')" >/dev/null
check "the same key in another workflow: another instance" \
    "$(q "$url" "SELECT cairn.enqueue('w2', '{}', 'used') <> '$used'")" t
# Eight sessions enqueue one fresh key at once: one instance, and every caller gets its id
# (xargs gives each psql /dev/null for input; -I__N__: "{}" and "@" are in the arguments).
raced=$(seq 8 | xargs -P 8 -I__N__ "$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 -d "$url" \
    -c "SELECT cairn.enqueue('w', '{}', 'raced')")
check "a key enqueued by eight sessions at once: one instance" \
    "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE idempotency_key = 'raced'")" 1
check "and all eight got its id" "$(printf '%s\n' "$raced" | wc -l) $(printf '%s\n' "$raced" | sort -u)" \
    "8 $(q "$url" "SELECT instance_id FROM cairn.runner_instances WHERE idempotency_key = 'raced'")"
check "the key's index leaves out the instances without one" \
    "$(q "$url" "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'cairn.runner_instances_idempotency'::regclass")" \
    "(idempotency_key IS NOT NULL)"

# ---- enqueue_many: the same checks per item, all or nothing, ids in order --------------------
many() { try "SELECT cairn.enqueue_many('w', $1)"; }
before=$(q "$url" "SELECT count(*) FROM cairn.runner_instances")
ids=$(q "$url" "SELECT cairn.enqueue_many('w', '[{\"i\": 1}, {\"i\": 2}, {\"i\": 3}]')")
check "a batch: one id per input, in order, each instance its own input" \
    "$(q "$url" "SELECT string_agg((ri.input->>'i'), ',' ORDER BY u.o) FROM unnest('$ids'::uuid[])
        WITH ORDINALITY AS u(id, o) JOIN cairn.runner_instances ri ON ri.instance_id = u.id")" "1,2,3"
check "and each queued" "$(q "$url" "SELECT count(*) FROM cairn.queued_instances q JOIN cairn.runner_instances ri USING (instance_id) WHERE ri.input ? 'i'")" 3
check "a bad item is refused by its number, with cairn.enqueue's SQLSTATE" \
    "$(many "'[{}, {}, [1]]'")" "22023 cairn.enqueue_many: item 3 of 3: input must be a JSON object, got array"
check "an item over the size limit" \
    "$(many "jsonb_build_array('{}'::jsonb, jsonb_build_object('s', repeat('x', 262136)))")" \
    "54000 cairn.enqueue_many: item 2 of 2: input is 262145 bytes of JSON, over the limit of 262144 bytes"
check "an item's number out of range" "$(many "'[{\"a\": 1e19}]'")" \
    "22003 cairn.enqueue_many: item 1 of 1: input holds the integer 10000000000000000000, outside the 64-bit range"
check "an item's empty key" "$(many "'[{}, {}]', ARRAY['k', '']")" \
    "22023 cairn.enqueue_many: item 2 of 2: the idempotency key is empty"
check "keys that do not match the inputs" "$(many "'[{}, {}]', ARRAY['k']")" \
    "22023 cairn.enqueue_many: 1 idempotency keys for 2 inputs"
check "inputs that are not an array" "$(many "'{}'")" \
    "22023 cairn.enqueue_many: inputs must be a JSON array of input objects, got object"
check "a call-wide argument: scheduled at infinity" "$(many "'[{}]', NULL, 0, 'infinity'")" \
    "22023 cairn.enqueue_many: scheduled_at must be a finite time, got infinity"
check "an unknown workflow" "$(try "SELECT cairn.enqueue_many('nope', '[{}]')")" \
    "42704 cairn.enqueue_many: unknown workflow \"nope\" (register it first)"
contains "a key reused in the batch with another input is refused, naming the item" \
    "$(many "'[{\"c\": 1}, {\"c\": 2}]', ARRAY['two', 'two']")" \
    "22023 cairn.enqueue_many: item 2 of 2: idempotency key \"two\" of workflow \"w\" was used with another input"
check "a refused batch stored nothing (all or nothing)" \
    "$(q "$url" "SELECT count(*) - $before FROM cairn.runner_instances")" 3
check "an empty batch: no ids" "$(q "$url" "SELECT cairn.enqueue_many('w', '[]')")" "{}"
check "keys: one used before gives its instance; one twice in the batch, the first item's" \
    "$(q "$url" "SELECT (ids[1] = '$used')::text || ' ' || (ids[2] = ids[4])::text || ' ' || (ids[3] <> ids[2])::text
        FROM cairn.enqueue_many('w', '[{}, {\"b\": 1}, {\"b\": 1}, {\"b\": 1}]', ARRAY['used', 'dup', NULL, 'dup']) AS ids")" \
    "true true true"
q "$url" "INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash, source, input_schema)
    VALUES ('typed', 'v1', 'h3', 'workflow typed', '{\"type\": \"object\", \"required\": [\"n\"],
    \"properties\": {\"n\": {\"type\": \"integer\"}}, \"additionalProperties\": false}')" >/dev/null
check "typed inputs: an item of the wrong type, with 22Z01 and its path" \
    "$(try "SELECT cairn.enqueue_many('typed', '[{\"n\": 1}, {\"n\": \"two\"}]')")" \
    "22Z01 cairn.enqueue_many: item 2 of 2: input.n: expected int, got str"
check "and made two instances, not four" \
    "$(q "$url" "SELECT count(*) FROM cairn.runner_instances WHERE input = '{\"b\": 1}'")" 2

# ---- the wake-up: NOTIFY cairn_enqueue only while a claimer says it waits (0033) ------------
# psql prints the notifications a session gets, its own included, after the statement.
notified() { "$psql_bin" -X -q -A -t -d "$url" -c "LISTEN cairn_enqueue" -c "$1" 2>&1 </dev/null | grep -c 'notification "cairn_enqueue"'; }
check "no claimer waits: an enqueue notifies nobody" "$(notified "SELECT cairn.enqueue('w', '{}')")" 0
q "$url" "INSERT INTO cairn.claim_waits VALUES (gen_random_uuid(), clock_timestamp() + interval '1 minute')" >/dev/null
check "a claimer waits: an enqueue wakes it" "$(notified "SELECT cairn.enqueue('w', '{}')")" 1
check "and a batch, once" "$(notified "SELECT cairn.enqueue_many('w', '[{}, {}, {}]')")" 1
q "$url" "UPDATE cairn.claim_waits SET until = clock_timestamp() - interval '1 second'" >/dev/null
check "its wait over: no notification" "$(notified "SELECT cairn.enqueue('w', '{}')")" 0

echo "1..$n"
if [[ $failures -ne 0 ]]; then
    echo "test_db_enqueue: $failures check(s) failed"
    exit 1
fi

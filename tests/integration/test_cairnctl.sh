#!/usr/bin/env bash
# cairnctl as a user runs it: `check` accepts every example and rejects every file in
# tests/cli/broken/ with exactly the errors its `# expect: LINE:COL: message` lines list;
# `dag` prints the golden text for each example, DOT that graphviz renders, a summary, and
# msgpack; usage errors and unreadable files exit 2.
# Usage: test_cairnctl.sh CAIRNCTL SOURCE_ROOT
set -u
ctl=$1
root=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# 1. Every example compiles.
for f in "$root"/examples/*.cairn; do
    if ! "$ctl" check "$f" >"$tmp/out" 2>"$tmp/err"; then
        fail "check rejected $f: $(cat "$tmp/err")"
    elif ! grep -q ": ok (" "$tmp/out"; then
        fail "check printed no ok line for $f"
    fi
done
"$ctl" check --quiet "$root"/examples/*.cairn >"$tmp/out" 2>&1 || fail "check of all examples failed"
[ -s "$tmp/out" ] && fail "--quiet printed output"

# 2. Every broken file is rejected with exactly the expected errors.
for f in "$root"/tests/cli/broken/*.cairn; do
    "$ctl" check "$f" >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 1 ] || fail "$f: exit status $status, want 1"
    want=$(grep -c '^# expect: ' "$f")
    got=$(grep -c ': error: ' "$tmp/err")
    [ "$want" -eq "$got" ] || fail "$f: $got errors, want $want:"$'\n'"$(cat "$tmp/err")"
    while IFS= read -r line; do
        spec=${line#\# expect: }
        pos=${spec%%: *}
        msg=${spec#*: }
        grep -qF -- "$f:$pos: error: $msg" "$tmp/err" ||
            fail "$f: missing '$pos: error: $msg' in:"$'\n'"$(cat "$tmp/err")"
    done < <(grep '^# expect: ' "$f")
    # The offending line is echoed with a caret under the column.
    grep -q '^ *\^$' "$tmp/err" || fail "$f: no caret line"
done

# 3. dag output: golden text, DOT, summary, msgpack.
for f in "$root"/examples/*.cairn; do
    name=$(basename "$f" .cairn)
    "$ctl" dag "$f" >"$tmp/$name.dag" || fail "dag $f failed"
    diff -u "$root/tests/golden/$name.dag" "$tmp/$name.dag" >"$tmp/diff" ||
        fail "dag text of $name differs from tests/golden/$name.dag:"$'\n'"$(cat "$tmp/diff")"
    "$ctl" dag "$f" --format dot >"$tmp/$name.dot" || fail "dag --format dot $f failed"
    grep -q '^digraph ' "$tmp/$name.dot" || fail "$name.dot is not a digraph"
    if command -v dot >/dev/null 2>&1; then
        dot -Tsvg "$tmp/$name.dot" >"$tmp/$name.svg" 2>"$tmp/doterr" ||
            fail "graphviz rejected $name.dot: $(cat "$tmp/doterr")"
    fi
    "$ctl" dag "$f" --format summary | grep -q ' nodes, ' || fail "summary of $name"
    "$ctl" dag "$f" --format=msgpack >"$tmp/$name.mp" || fail "msgpack of $name"
    [ -s "$tmp/$name.mp" ] || fail "empty msgpack for $name"
done
grep -q 'style=dashed' "$tmp/orders.dot" || fail "no dashed exception edge in orders.dot"
grep -q 'label="back"' "$tmp/welcome.dot" || fail "no back edge in welcome.dot"

# 4. Exit codes and usage.
"$ctl" check "$tmp/does-not-exist.cairn" 2>"$tmp/err"
[ $? -eq 2 ] || fail "missing file: want exit 2"
grep -q "cannot open" "$tmp/err" || fail "missing file: no 'cannot open' message"
"$ctl" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no command: want exit 2"
"$ctl" frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command: want exit 2"
"$ctl" dag "$root/examples/hello.cairn" --format png >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad format: want exit 2"
"$ctl" --help | grep -q "check" || fail "--help does not list check"
# --tenant and CAIRN_TENANT: every database command takes them; a malformed name is a usage
# error before any connection (no database here), and migrate refuses a tenant.
"$ctl" --help | grep -q "tenant create" || fail "--help does not list tenant"
for cmd in "list" "status 00000000-0000-0000-0000-000000000000" "schedule list" "limit list" \
    "retention list" "backfill list" "tenant list" "cancel --workflow w --yes"; do
    # shellcheck disable=SC2086
    "$ctl" $cmd --help | grep -q -- "--tenant T" || fail "$cmd --help does not list --tenant"
    # shellcheck disable=SC2086
    CAIRN_DATABASE_URL=postgresql:///nowhere "$ctl" $cmd --tenant Bad-Name >/dev/null 2>"$tmp/err"
    status=$?
    [ $status -eq 2 ] && grep -q '"Bad-Name" is not a tenant name' "$tmp/err" ||
        fail "$cmd --tenant Bad-Name: exit $status, $(cat "$tmp/err")"
done
CAIRN_TENANT=9x CAIRN_DATABASE_URL=postgresql:///nowhere "$ctl" list >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q CAIRN_TENANT "$tmp/err" || fail "CAIRN_TENANT=9x: $(cat "$tmp/err")"
"$ctl" migrate --tenant acme >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "schema owner" "$tmp/err" || fail "migrate --tenant: $(cat "$tmp/err")"
"$ctl" tenant create Acme >/dev/null 2>&1
[ $? -eq 2 ] || fail "tenant create Acme: want exit 2"
"$ctl" tenant quota acme 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "tenant quota acme 0: want exit 2"
"$ctl" tenant frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "tenant frobnicate: want exit 2"
# 4a. One table per command group, one dispatcher: help, --help and -h list the commands on
#     stdout (exit 0); an unknown one, or none, is a usage error with the list on stderr; `help
#     CMD...` is `CMD... --help`. A command's synopsis is written once: `cairnctl help` shows
#     for each command the line its --help starts with, and the README's cairnctl reference
#     names every option a command's --help lists.
for group in "" schedule limit backfill retention tenant; do
    # shellcheck disable=SC2086
    for h in help --help -h; do
        "$ctl" $group $h >"$tmp/out" 2>"$tmp/err"
        [ $? -eq 0 ] && grep -q "^Usage: cairnctl ${group:+$group }COMMAND" "$tmp/out" && [ ! -s "$tmp/err" ] ||
            fail "cairnctl $group $h: want the listing on stdout, exit 0"
    done
    # shellcheck disable=SC2086
    "$ctl" $group frobnicate >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] && grep -q "^cairnctl${group:+ $group}: unknown command 'frobnicate'" "$tmp/err" &&
        grep -q "^Usage: " "$tmp/err" && [ ! -s "$tmp/out" ] ||
        fail "cairnctl $group frobnicate: want the error and the listing on stderr, exit 2"
done
"$ctl" schedule >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "^Usage: cairnctl schedule COMMAND" "$tmp/err" || fail "schedule alone: want exit 2"
cmp -s <("$ctl" help schedule add) <("$ctl" schedule add --help) || fail "help schedule add is not schedule add --help"
cmp -s <("$ctl" help run) <("$ctl" run --help) || fail "help run is not run --help"
cmp -s <("$ctl" schedule help next) <("$ctl" schedule next --help) || fail "schedule help next is not next --help"
"$ctl" schedule list --help | grep -q "^NAME " && fail "schedule list --help printed the table's header"
python3 - "$ctl" "$root/README.md" >"$tmp/out" 2>&1 <<'PY' || fail "help and README: $(cat "$tmp/out")"
import re, subprocess, sys
ctl, readme = sys.argv[1], sys.argv[2]
def run(*args):
    return subprocess.run([ctl, *args], capture_output=True, text=True).stdout
text = open(readme).read()
ref = text[text.index("## cairnctl reference"):]
ref = ref[:ref.index("\n## ", 5)]
cells = [l.split(" | ")[0] for l in ref.splitlines() if l.startswith("| `cairnctl ")]
bad = []
for line in run("help").splitlines():
    m = re.match(r"^  ([a-z-]+)(?: ([a-z-]+))?", line)
    if not m or m.group(1) == "help":
        continue
    words = [m.group(1)]
    if run(m.group(1), "--help").startswith("Usage: cairnctl %s COMMAND" % m.group(1)):
        words.append(m.group(2))
    name = " ".join(words)
    page = run(*words, "--help")
    if page.splitlines()[0] != "Usage: cairnctl " + line.strip():
        bad.append(f"{name}: `help` shows `{line.strip()}`, --help `{page.splitlines()[0]}`")
    listed = set(re.findall(r"^  (?:-\w, )?--([a-z-]+)", page, re.M)) - {"help"}
    doc, rows = set(), 0
    for c in cells:
        head = re.match(r"\| `cairnctl ([a-z-]+)", c).group(1)
        if head == words[0] and (len(words) == 1 or re.search(r"\b%s\b" % words[1], c)):
            doc |= set(re.findall(r"--([a-z-]+)", c))
            rows += 1
    if rows == 0:
        bad.append(f"{name}: not in README's cairnctl reference")
    elif listed - doc - {"database-url", "tenant"}:
        bad.append(f"{name}: README does not name {sorted(listed - doc - {'database-url', 'tenant'})}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
"$ctl" check "$root/examples/hello.cairn" "$root/tests/cli/broken/tabs.cairn" >/dev/null 2>&1
[ $? -eq 1 ] || fail "mixed good and bad files: want exit 1"
printf 'fn main():\n    return 1\n' | "$ctl" check - >/dev/null || fail "check - (stdin) failed"

# 4b. The compiler's limits: a source over --max-source-bytes (default 1 MiB) is refused before
#     it is parsed, naming its size and the limit; so is a graph over --max-graph-nodes (default
#     262144) after inlining, at the call that makes it; both settings also come from the
#     environment, and a source within them passes.
python3 - "$tmp" <<'PY'
import sys
tmp = sys.argv[1]
with open(f"{tmp}/long.cairn", "w") as f:
    f.write("fn main(input: [a]):\n")
    for i in range(60000):  # about 1.2 MB
        f.write(f"    x{i % 100} = a + {i}\n")
    f.write("    return a\n")
with open(f"{tmp}/bomb.cairn", "w") as f:  # 2**16 copies of h0 if inlined: about 600 000 nodes
    f.write("fn h0(input: [a]):\n    x = a + 1\n    y = x * 2\n    return y\n")
    for i in range(1, 17):
        f.write(f"fn h{i}(input: [a]):\n    p = h{i-1}(a)\n    q = h{i-1}(p)\n    return q\n")
    f.write("fn main(input: [a]):\n    r = h16(a)\n    return r\n")
PY
size=$(stat -c %s "$tmp/long.cairn")
"$ctl" check "$tmp/long.cairn" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "source over 1 MiB: want exit 1"
grep -qF "$tmp/long.cairn: error: the source is $size bytes, over the limit of 1048576 bytes (--max-source-bytes, CAIRN_MAX_SOURCE_BYTES)" "$tmp/err" ||
    fail "source over 1 MiB: $(head -c 300 "$tmp/err")"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "source over 1 MiB: more than one line of error (the source quoted?)"
"$ctl" check --max-source-bytes 2000000 "$tmp/long.cairn" >/dev/null 2>"$tmp/err" ||
    fail "--max-source-bytes 2000000: $(head -c 300 "$tmp/err")"
CAIRN_MAX_SOURCE_BYTES=2000000 "$ctl" check "$tmp/long.cairn" >/dev/null 2>"$tmp/err" ||
    fail "CAIRN_MAX_SOURCE_BYTES=2000000: $(head -c 300 "$tmp/err")"
"$ctl" check --max-source-bytes 20 "$root/examples/hello.cairn" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "over the limit of 20 bytes" "$tmp/err" || fail "--max-source-bytes 20: $(cat "$tmp/err")"
"$ctl" check --max-source-bytes 16777217 "$root/examples/hello.cairn" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--max-source-bytes over the 16 MiB ceiling: want exit 2"
"$ctl" check "$tmp/bomb.cairn" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "graph over 262144 nodes: want exit 1"
grep -qE "bomb.cairn:[0-9]+:9: error: workflow is too large: inlining the helpers makes at least .* graph nodes \(limit 262144\)" "$tmp/err" ||
    fail "graph over 262144 nodes: $(cat "$tmp/err")"
CAIRN_MAX_GRAPH_NODES=1048576 "$ctl" check "$tmp/bomb.cairn" >"$tmp/out" 2>"$tmp/err" ||
    fail "CAIRN_MAX_GRAPH_NODES=1048576: $(cat "$tmp/err")"
grep -q "ok (524288 nodes" "$tmp/out" || fail "the bomb's graph: $(cat "$tmp/out")"
"$ctl" check --max-graph-nodes 3 "$root/examples/hello.cairn" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "graph nodes (limit 3)" "$tmp/err" || fail "--max-graph-nodes 3: $(cat "$tmp/err")"
"$ctl" register --help | grep -q -- "--max-source-bytes N" || fail "register --help does not list --max-source-bytes"
"$ctl" help 2>&1 | grep -q -- "--max-graph-nodes" || fail "help does not show --max-graph-nodes"

# 5. cairnctl exec: every example case of tests/fixtures/example_cases.json runs in process (the
#    engine on the in-memory backend, std.* actions built in) and returns its expected result;
#    a failing instance exits 4 with its error, a loop that never waits too (the inline budget,
#    at its default); bad input exits 1.
python3 - "$ctl" "$root/tests/fixtures/example_cases.json" "$root" >"$tmp/exec.out" 2>&1 <<'PY'
import json, subprocess, sys
ctl, cases_file, root = sys.argv[1:4]
bad = 0
for c in json.load(open(cases_file)):
    r = subprocess.run([ctl, "exec", f"{root}/examples/{c['workflow']}.cairn", "--input",
                        c["input"], "--timeout", "60"], capture_output=True, text=True)
    try:
        got = json.loads(r.stdout)
    except ValueError:
        got = None
    if r.returncode != 0 or got != json.loads(c["want"]):
        bad += 1
        print(f"exec {c['workflow']} {c['input']}: exit {r.returncode}, got {r.stdout!r}, "
              f"want {c['want']}, stderr {r.stderr[-200:]!r}")
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] || fail "cairnctl exec of the example cases: $(cat "$tmp/exec.out")"
"$ctl" exec "$root/examples/hello.cairn" --input '{}' >/dev/null 2>"$tmp/err"
[ $? -eq 4 ] || fail "exec of a failing instance: want exit 4"
grep -q "TypeError" "$tmp/err" || fail "exec of a failing instance: no TypeError in $(cat "$tmp/err")"
out=$("$ctl" exec "$root/tests/fixtures/typed.cairn" --input '{"order": {"id": 7}, "qty": 2}' 2>&1)
[ $? -eq 0 ] && [ "$out" = '{"id": 7, "qty": 2, "note": null, "tags": [], "prices": {}}' ] ||
    fail "exec of typed inputs: the defaults of those not given: $out"
out=$("$ctl" exec "$root/tests/fixtures/typed.cairn" --input '{"order": {"id": 7}, "tags": [1]}' 2>&1)
[ $? -eq 4 ] && [[ "$out" == *'"message": "input.tags[0]: expected str, got int"'* ]] ||
    fail "exec of a mistyped input: the instance fails with the path: $out"
printf 'fn main():\n    return [workflow_name(), len(instance_id()), len(uuid()), now() > 1700000000]\n' \
    >"$tmp/own.cairn"
out=$("$ctl" exec "$tmp/own.cairn" 2>&1)
[ $? -eq 0 ] && [ "$out" = '["main", 36, 36, true]' ] ||
    fail "exec of the instance's own builtins (workflow_name, instance_id, uuid, now): $out"
start=$(date +%s)
out=$("$ctl" exec "$root/tests/fixtures/wait_timeouts.cairn" --timeout 60 2>&1)
[ $? -eq 0 ] && [ "$out" = '["nobody", null, 7, "no signal nudge came within 100ms"]' ] ||
    fail "exec of waits that time out (default, several names, WaitTimeout caught): $out"
"$ctl" exec "$root/tests/integration/workflows/spin.cairn" --timeout 60 >/dev/null 2>"$tmp/err"
status=$?
[ $status -eq 4 ] || fail "exec of an inline infinite loop: exit $status, want 4: $(cat "$tmp/err")"
grep -qF '"type": "StepLimitExceeded", "message": "more than 5000000 inline steps without waiting for an action, a sleep or a timer (line 5)"' "$tmp/err" ||
    fail "exec of an inline infinite loop: no StepLimitExceeded at line 5 in $(cat "$tmp/err")"
[ $(($(date +%s) - start)) -lt 30 ] || fail "exec of an inline infinite loop took $(($(date +%s) - start)) s"
# the workflow's [timeout: D] holds in process too: a 60 s action, a 2 s deadline
start=$(date +%s)
"$ctl" exec "$root/tests/integration/workflows/bounded.cairn" --input '{"ms": 60000}' --timeout 60 \
    >/dev/null 2>"$tmp/err"
status=$?
[ $status -eq 4 ] || fail "exec past the workflow's [timeout]: exit $status, want 4: $(cat "$tmp/err")"
grep -q "timed out: {\"type\": \"WorkflowTimeout\"" "$tmp/err" ||
    fail "exec past the workflow's [timeout]: no WorkflowTimeout in $(cat "$tmp/err")"
[ $(($(date +%s) - start)) -lt 20 ] || fail "exec past a 2 s [timeout] took $(($(date +%s) - start)) s"
# --input-file, as run has it
printf '{"ms": 5}' >"$tmp/in.json"
out=$("$ctl" exec "$root/tests/integration/workflows/hold.cairn" --input-file "$tmp/in.json" 2>&1)
[ $? -eq 0 ] && [ "$out" = "null" ] || fail "exec --input-file: $out"
"$ctl" exec "$root/tests/integration/workflows/hold.cairn" --input-file "$tmp/in.json" \
    --input '{}' >/dev/null 2>&1
[ $? -eq 2 ] || fail "exec with --input and --input-file: want exit 2"
"$ctl" exec "$root/examples/hello.cairn" --input '[1' >/dev/null 2>&1
[ $? -eq 1 ] || fail "exec with bad input JSON: want exit 1"
"$ctl" exec "$root/tests/cli/broken/tabs.cairn" >/dev/null 2>&1
[ $? -eq 1 ] || fail "exec of a file that does not compile: want exit 1"
out=$("$ctl" exec "$root/tests/integration/workflows/spread.cairn" --input '{"n": 200}' --json)
[ "$out" = '{"status": "completed", "result": 200, "actions": 200}' ] ||
    fail "exec --json of a 200-branch spread: $out"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "cairnctl: all checks passed"

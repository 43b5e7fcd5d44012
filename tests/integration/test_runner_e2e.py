#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): cairn-runner end to end, with real processes and the real PostgreSQL
that scripts/test starts. In a fresh database of its own (dropped at the end):

- every example case of tests/fixtures/example_cases.json runs through cairn-runner and two
  cairn-worker processes and returns its expected result;
- two runners share the database: 1000 instances, each completes exactly once, none lost;
- kill -9 of a runner mid-run: the other runner finishes all its instances once the leases
  expire, and no action with a recorded result runs again;
- kill -9 of a worker mid-action: its attempts go to the other worker, everything completes;
- SIGTERM: a runner stops gracefully (exit 0) and hands its instances back;
- a long sleep is handed back (evicted) and the instance is claimed again when due;
- a lease taken away (by SQL, as another runner would) makes the old owner evict the instance
  and write nothing more; it completes once the lease is reclaimed;
- a loop that never waits (spin.cairn) on a runner with one shard fails alone with
  StepLimitExceeded while the ordinary instances on that shard complete, and the runner still
  stops promptly on SIGTERM.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip. Waits poll with deadlines; nothing relies on a
fixed sleep being long enough.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

RUNNER, WORKER, CTL, ROOT = sys.argv[1:5]
BASE = os.environ.get("CAIRN_TEST_DATABASE_URL", "")
PSQL = os.environ.get("PSQL") or shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"

n_checks = 0
failures = 0
procs = []


def check(what, ok, detail=""):
    global n_checks, failures
    n_checks += 1
    if ok:
        print(f"ok {n_checks} - {what}", flush=True)
    else:
        failures += 1
        print(f"not ok {n_checks} - {what}" + (f": {detail}" if detail else ""), flush=True)


def db_url(name):
    return re.sub(r"^(postgresql://[^/]*/)[^?]*", lambda m: m.group(1) + name, BASE)


def q(url, sql):
    out = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url,
                          "-c", sql], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"psql: {out.stderr.strip()} ({sql[:80]})")
    return out.stdout.strip()


def wait_until(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class Proc:
    def __init__(self, name, argv, env, log_dir):
        self.name = name
        self.log = os.path.join(log_dir, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        procs.append(self)

    def kill9(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def term(self, timeout=30):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None

    def text(self):
        self.f.flush()
        with open(self.log) as f:
            return f.read()


def main():
    if not BASE:
        print("1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)")
        return 0
    name = f"e2e_{os.getpid()}_{random.randint(0, 99999)}"
    q(BASE, f"CREATE DATABASE {name}")
    tmp = tempfile.mkdtemp(prefix="cairn-e2e-")
    url = db_url(name)
    env = dict(os.environ, CAIRN_DATABASE_URL=url)
    try:
        run_all(url, env, tmp)
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        for p in procs:
            if failures:
                sys.stdout.write(f"# --- {p.name} log (tail) ---\n")
                for line in p.text().splitlines()[-15:]:
                    sys.stdout.write("# " + line + "\n")
        q(BASE, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{n_checks}")
    return 1 if failures else 0


def ctl(env, *args, timeout=120):
    return subprocess.run([CTL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def runner(env, tmp, name, sock, *extra):
    return Proc(name, [RUNNER, "--worker-listen", sock, "--poll-interval-ms", "100",
                       "--lock-ttl-ms", "2000", "--lock-heartbeat-ms", "400",
                       "--worker-idle-ms", "1000", "--shutdown-grace-ms", "5000", *extra],
                env, tmp)


def worker(env, tmp, name, sock, slots="8"):
    return Proc(name, [WORKER, "--url", sock, "--slots", slots, "--name", name], env, tmp)


def enqueue_many(url, workflow, input_sql, n):
    q(url, f"SELECT count(cairn.enqueue('{workflow}', {input_sql})) FROM generate_series(1, {n}) g")


def counts(url, workflow):
    return q(url, "SELECT count(*) FILTER (WHERE status = 'completed') || ' ' || count(*) "
                  f"FROM cairn.runner_instances WHERE workflow_name = '{workflow}'")


def all_completed(url, workflow, n):
    return counts(url, workflow) == f"{n} {n}"


def duplicate_done(url):
    return q(url, "SELECT count(*) FROM (SELECT 1 FROM cairn.runner_actions_done "
                  "GROUP BY execution_id, attempt HAVING count(*) > 1) d")


def run_all(url, env, tmp):
    r = ctl(env, "migrate")
    check("migrate", r.returncode == 0, r.stderr)
    files = sorted(os.path.join(ROOT, "examples", f) for f in os.listdir(os.path.join(ROOT, "examples")))
    files += sorted(os.path.join(ROOT, "tests/integration/workflows", f)
                    for f in os.listdir(os.path.join(ROOT, "tests/integration/workflows")))
    for f in files:
        if f.endswith(".cairn"):
            r = ctl(env, "register", f)
            check(f"register {os.path.basename(f)}", r.returncode == 0, r.stderr)

    sock1 = f"ipc://{tmp}/r1.sock"
    sock2 = f"ipc://{tmp}/r2.sock"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        http_port = probe.getsockname()[1]
    r1 = runner(env, tmp, "runner1", sock1, "--http-listen", f"127.0.0.1:{http_port}")
    w1 = worker(env, tmp, "worker1a", sock1)
    w2 = worker(env, tmp, "worker1b", sock1)

    # ---- every example case ------------------------------------------------------------
    with open(os.path.join(ROOT, "tests/fixtures/example_cases.json")) as f:
        cases = json.load(f)
    for c in cases:
        r = ctl(env, "run", c["workflow"], "--input", c["input"], "--wait", "--timeout", "60")
        got = None
        try:
            got = json.loads(r.stdout)
        except ValueError:
            pass
        check(f"example {c['workflow']} {c['input'][:50]}",
              r.returncode == 0 and got == json.loads(c["want"]),
              f"exit {r.returncode}, got {r.stdout.strip()!r}, want {c['want']}, {r.stderr[-200:]}")

    # ---- the HTTP endpoints --------------------------------------------------------------
    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}{path}", timeout=5) as f:
                return f.status, f.read().decode()
        except OSError as e:
            return 0, str(e)
    check("/healthz answers ok", get("/healthz") == (200, "ok\n"))
    check("/readyz answers ready", get("/readyz") == (200, "ready\n"))
    st, text = get("/metrics")
    samples = dict(line.split(" ", 1) for line in text.splitlines()
                   if line and not line.startswith("#"))
    check("/metrics counts the completed examples",
          st == 200 and int(samples.get("cairn_instances_completed_total", "0")) >= len(cases),
          text[:300])
    check("/metrics counts the two workers", samples.get("cairn_workers") == "2", text[:300])
    check("/metrics is Prometheus text", "# TYPE cairn_actions_dispatched_total counter" in text)
    check("/metrics has the persist and action-time summaries",
          float(samples.get("cairn_persist_seconds_count", "0")) > 0 and
          float(samples.get('cairn_persist_seconds{quantile="0.5"}', "0")) > 0 and
          float(samples.get("cairn_action_seconds_count", "-1")) ==
          float(samples.get("cairn_pool_results_total", "-2")),
          text[-1500:])
    delay = {k: float(v) for k, v in samples.items()
             if k.startswith("cairn_action_dispatch_delay_seconds")}
    dq = [delay.get(f'cairn_action_dispatch_delay_seconds{{quantile="{q}"}}', -1.0)
          for q in ("0.5", "0.95", "0.99", "1")]
    check("/metrics has the ready-to-dispatch summary: one sample per dispatched action, "
          "ordered quantiles under 10 s",
          delay.get("cairn_action_dispatch_delay_seconds_count") ==
          float(samples.get("cairn_actions_dispatched_total", "-1")) and
          delay["cairn_action_dispatch_delay_seconds_count"] > 0 and
          0 < dq[0] <= dq[1] <= dq[2] <= dq[3] < 10, str(delay))

    # ---- two runners, 1000 instances -------------------------------------------------
    r2 = runner(env, tmp, "runner2", sock2)
    w3 = worker(env, tmp, "worker2a", sock2)
    enqueue_many(url, "hello", "json_build_object('name', g::text)::jsonb", 1000)
    nhello = sum(1 for c in cases if c["workflow"] == "hello") + 1000
    ok = wait_until("1000 done", lambda: all_completed(url, "hello", nhello), 120)
    check("two runners: every hello instance completed", ok, counts(url, "hello"))
    check("two runners: each has its own greeting",
          q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'hello' "
                 "AND result = to_jsonb('Hello, ' || (input->>'name') || '!')") ==
          q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'hello'"))
    check("two runners: one action result per instance (none ran twice)",
          q(url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN cairn.runner_instances "
                 "i USING (instance_id) WHERE i.workflow_name = 'hello'") ==
          q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'hello'"))
    check("two runners: the claim queue is empty",
          q(url, "SELECT count(*) FROM cairn.queued_instances") == "0")

    # ---- kill -9 of a runner mid-run -----------------------------------------------
    # Only runner1 runs: stop runner2 gracefully first (this also checks SIGTERM).
    rc = r2.term()
    check("SIGTERM: runner2 exits 0", rc == 0, f"exit {rc}")
    enqueue_many(url, "steps", "'{\"n\": 30}'::jsonb", 40)
    progressed = wait_until("progress", lambda: int(q(
        url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN cairn.runner_instances i "
             "USING (instance_id) WHERE i.workflow_name = 'steps'")) >= 150, 60)
    check("kill -9: runner1 made progress first", progressed)
    r1.kill9()
    before = int(q(url, "SELECT count(*) FROM cairn.runner_actions_done"))
    r2 = runner(env, tmp, "runner2b", sock2)
    ok = wait_until("steps done", lambda: all_completed(url, "steps", 40), 120)
    check("kill -9: another runner finished every instance", ok, counts(url, "steps"))
    check("kill -9: every sum is right", q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'steps' "
             "AND result = '435'::jsonb") == "40")
    check("kill -9: no action with a recorded result ran again", duplicate_done(url) == "0",
          duplicate_done(url))
    check("kill -9: 40 x 30 results recorded, each once", q(
        url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN cairn.runner_instances i "
             "USING (instance_id) WHERE i.workflow_name = 'steps'") == "1200",
          f"before the crash {before}")

    # ---- kill -9 of a worker mid-action --------------------------------------------
    w4 = worker(env, tmp, "worker2b", sock2)
    enqueue_many(url, "sleepy", "'{\"n\": 4, \"ms\": 300}'::jsonb", 6)
    started = wait_until("sleepy started", lambda: int(q(
        url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN cairn.runner_instances i "
             "USING (instance_id) WHERE i.workflow_name = 'sleepy'")) >= 2, 60)
    check("kill -9 worker: actions were running", started)
    w3.kill9()
    ok = wait_until("sleepy done", lambda: all_completed(url, "sleepy", 6), 60)
    check("kill -9 worker: every instance completed on the other worker", ok,
          counts(url, "sleepy"))
    check("kill -9 worker: results are right", q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'sleepy' AND "
             "result = '4'::jsonb") == "6")

    # ---- a long sleep is handed back and claimed again when due ---------------------
    rc = r2.term()
    check("SIGTERM: runner2b exits 0", rc == 0, f"exit {rc}")
    r3 = runner(env, tmp, "runner3", sock2, "--evict-sleep-threshold-ms", "1000")
    nap = ctl(env, "run", "nap", "--input", '{"seconds": 3}').stdout.strip()
    evicted = wait_until("evicted", lambda: q(
        url, f"SELECT status || ' ' || (lock_uuid IS NULL)::text || ' ' || "
             f"(scheduled_at > now())::text FROM cairn.runner_instances JOIN "
             f"cairn.queued_instances USING (instance_id) WHERE instance_id = '{nap}'") ==
        "queued true true", 10)
    check("long sleep: handed back (queued, no lease, due later)", evicted)
    r = ctl(env, "inspect", nap, "--json")
    try:
        ins = json.loads(r.stdout)
    except ValueError:
        ins = {}
    check("inspect: the evicted instance waits on its sleep",
          [n.get("status") for n in ins.get("waiting_on", [])] == ["sleeping"] and
          ins.get("waiting_on", [{}])[0].get("kind") == "sleep", r.stdout[-300:])
    check("inspect: its first action's result is recorded",
          [a.get("status") for a in ins.get("actions", [])] == ["ok"], r.stdout[-300:])
    r = ctl(env, "inspect", nap)
    check("inspect (text) says what it waits on", "sleeping" in r.stdout and "until" in r.stdout,
          r.stdout[-300:])
    r = ctl(env, "run", "nap", "--idempotency-key", "nap-" + nap, "--input", '{"seconds": 0}',
            "--wait", "--timeout", "30")
    check("long sleep: a short one meanwhile completes", r.returncode == 0, r.stderr)
    ok = wait_until("nap done", lambda: q(
        url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{nap}'") ==
        "completed", 30)
    check("long sleep: claimed again when due, and completed", ok)
    r = ctl(env, "inspect", nap, "--json")
    ins = json.loads(r.stdout) if r.returncode == 0 else {}
    check("inspect: a completed instance waits on nothing and shows its result",
          ins.get("waiting_on") == [] and ins.get("result") == "awake" and
          len(ins.get("actions", [])) == 2, r.stdout[-300:])
    check("long sleep: the runner logged the hand-back", f"instance {nap}: sleeping" in r3.text())

    # ---- a snapshot that does not decode fails that instance alone ---------------------
    bad = ctl(env, "run", "nap", "--input", '{"seconds": 2}').stdout.strip()
    handed_back = wait_until("evicted", lambda: q(
        url, f"SELECT (lock_uuid IS NULL)::text FROM cairn.queued_instances WHERE instance_id = "
             f"'{bad}' AND scheduled_at > now()") == "true", 10)
    q(url, f"UPDATE cairn.runner_instances SET state = '\\x00ff'::bytea WHERE instance_id = '{bad}'")
    failed = wait_until("poisoned", lambda: q(
        url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{bad}'") == "failed", 15)
    check("poison: an instance whose snapshot does not decode fails",
          handed_back and failed, q(url, f"SELECT status FROM cairn.runner_instances WHERE "
                                         f"instance_id = '{bad}'"))
    check("poison: with a StateError", q(
        url, f"SELECT error->>'type' FROM cairn.runner_instances WHERE instance_id = '{bad}'") ==
        "StateError")
    r = ctl(env, "run", "hello", "--input", '{"name": "after"}', "--wait", "--timeout", "20")
    check("poison: the runner keeps running other instances", r.returncode == 0, r.stderr)

    # ---- a lease taken away ----------------------------------------------------------
    stolen = ctl(env, "run", "nap", "--input", '{"seconds": 0.8}').stdout.strip()
    leased = wait_until("leased", lambda: q(
        url, f"SELECT lock_uuid IS NOT NULL FROM cairn.queued_instances WHERE instance_id = "
             f"'{stolen}'") == "t", 10)
    check("stolen lease: the instance was claimed", leased)
    # Another runner's claim, as SQL: a new token, valid for 2 s.
    q(url, "UPDATE cairn.queued_instances SET lock_uuid = gen_random_uuid(), lock_expires_at = "
           f"clock_timestamp() + interval '2 seconds' WHERE instance_id = '{stolen}'")
    lost = wait_until("lost", lambda: "lease lost" in r3.text(), 10)
    check("stolen lease: the old owner noticed and evicted it", lost)
    done_rows_after_steal = q(url, "SELECT count(*) FROM cairn.runner_actions_done WHERE "
                                   f"instance_id = '{stolen}'")
    ok = wait_until("stolen done", lambda: q(
        url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{stolen}'") ==
        "completed", 30)
    check("stolen lease: completed after the lease was reclaimed", ok)
    check("stolen lease: each action recorded once", q(
        url, "SELECT count(*) FROM cairn.runner_actions_done WHERE instance_id = "
             f"'{stolen}'") == "2", f"{done_rows_after_steal} rows at the steal")
    check("no duplicate action results anywhere", duplicate_done(url) == "0")
    rc = r3.term()
    check("SIGTERM: runner3 exits 0", rc == 0, f"exit {rc}")

    # ---- a loop that never waits fails alone ------------------------------------------------
    # One shard: the poison instances and the ordinary ones share its thread. A small budget:
    # this runner's leases last 2 s, and a step must end well within that (an instance claimed
    # while its shard is busy has its lease renewed only once the shard takes it), which the
    # default's quarter second does not under a sanitizer on a loaded machine; test_cairnctl.sh
    # runs the default.
    r5 = runner(env, tmp, "runner5", sock2, "--shards", "1", "--max-inline-steps", "100000")
    spins = [ctl(env, "run", "spin").stdout.strip()]
    enqueue_many(url, "spread", "'{\"n\": 20}'::jsonb", 10)
    spins.append(ctl(env, "run", "spin").stdout.strip())
    ok = wait_until("spread done", lambda: all_completed(url, "spread", 10), 60)
    check("inline loop: the ordinary instances on its shard complete", ok, counts(url, "spread"))
    check("inline loop: with their results", q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'spread' AND "
             "result = '20'::jsonb") == "10")
    in_spins = ", ".join(f"'{s}'" for s in spins)
    ok = wait_until("spins failed", lambda: q(
        url, f"SELECT count(*) FROM cairn.runner_instances WHERE instance_id IN ({in_spins}) "
             "AND status = 'failed'") == "2", 30)
    errors = q(url, "SELECT string_agg(error->>'type' || ': ' || (error->>'message'), ' | ') "
                    f"FROM cairn.runner_instances WHERE instance_id IN ({in_spins})")
    check("inline loop: each poison instance fails", ok, errors)
    want = ("StepLimitExceeded: more than 100000 inline steps without waiting for an action, "
            "a sleep or a timer (line 5)")
    check("inline loop: with StepLimitExceeded at the loop's line", errors == f"{want} | {want}",
          errors)
    # A third one is claimed just before SIGTERM: the stop waits for at most one step.
    spin = ctl(env, "run", "spin").stdout.strip()
    claimed = wait_until("spin claimed", lambda: q(
        url, f"SELECT count(*) FROM cairn.queued_instances WHERE instance_id = '{spin}' AND "
             "lock_uuid IS NULL") == "0", 10)
    t0 = time.monotonic()
    rc = r5.term(timeout=20)
    took = time.monotonic() - t0
    check("inline loop: SIGTERM stops the runner promptly (exit 0)",
          claimed and rc == 0 and took < 10, f"claimed {claimed}, exit {rc} after {took:.1f} s")

    # ---- a second signal exits at once; JSON logs ----------------------------------------
    r4 = runner(env, tmp, "runner4", sock2, "--log-format", "json", "--shutdown-grace-ms", "60000")
    long_one = ctl(env, "run", "sleepy", "--input", '{"n": 1, "ms": 20000}').stdout.strip()
    busy = wait_until("running", lambda: q(
        url, f"SELECT lock_uuid IS NOT NULL FROM cairn.queued_instances WHERE instance_id = "
             f"'{long_one}'") == "t", 10) and wait_until("dispatched", lambda: "started" in r4.text(), 5)
    time.sleep(0.5)  # let the action reach the worker (the check below does not depend on it)
    t0 = time.monotonic()
    r4.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    r4.p.send_signal(signal.SIGTERM)
    try:
        rc = r4.p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    check("a second SIGTERM exits at once with status 3",
          busy and rc == 3 and time.monotonic() - t0 < 5, f"exit {rc}")
    lines = [line for line in r4.text().splitlines() if line.strip()]
    try:
        parsed = [json.loads(line) for line in lines]
    except ValueError:
        parsed = []
    check("CAIRN_LOG_FORMAT=json: every log line is a JSON object with ts, level and msg",
          len(parsed) >= 2 and all({"ts", "level", "msg"} <= set(p) for p in parsed),
          "\n".join(lines[:3]))
    for w in (w1, w2, w4):
        w.term()

    # ---- the README's configuration table is what cairn-runner accepts -------------------
    help_text = subprocess.run([RUNNER, "--help"], capture_output=True, text=True).stdout
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## Configuration"):readme.index("The tools and scripts read")]
    documented = set(re.findall(r"^\| `(CAIRN_[A-Z_]+)` \| `--", section, re.M))
    accepted = set(re.findall(r"(CAIRN_[A-Z_]+)", help_text))
    check("README configuration table lists exactly the settings of cairn-runner --help",
          documented == accepted and len(documented) > 10,
          f"only in README: {documented - accepted}, only in --help: {accepted - documented}")


if __name__ == "__main__":
    sys.exit(main())

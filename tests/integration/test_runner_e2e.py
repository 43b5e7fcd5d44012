#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): cairn-runner end to end, with real processes and the real PostgreSQL
that scripts/test starts. In a fresh database of its own (dropped at the end):

- every example case of tests/fixtures/example_cases.json runs through cairn-runner and two
  cairn-worker processes and returns its expected result; the idle runner's claimer says it
  waits (cairn.claim_waits), so that an enqueue notifies;
- an input exactly at the enqueue size limit and one at the depth limit run and come back whole;
- an error the worker marks not retryable fails its instance after one attempt, whatever the
  workflow's retry policy;
- two runners share the database: 1000 instances, each completes exactly once, none lost;
- kill -9 of a runner mid-run: the other runner finishes all its instances once the leases
  expire, and no action with a recorded result runs again; what now() and uuid() gave before
  the crash (published) is what the instances return after it;
- kill -9 of a worker mid-action: its attempts go to the other worker, everything completes;
- SIGTERM: a runner stops gracefully (exit 0) and hands its instances back;
- a long sleep is handed back (evicted) and the instance is claimed again when due;
- a lease taken away (by SQL, as another runner would) makes the old owner evict the instance
  and write nothing more; it completes once the lease is reclaimed;
- a runner paused (SIGSTOP) past its TTL while its pool holds a backlog: another runner takes
  over, and after SIGCONT the stale runner runs no more than its in-flight bound again;
- 300 connections that never say hello: dropped (past the cap at once, the rest after the
  hello timeout) while a real worker is served, and the runner's descriptors come back;
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
import threading
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


def sanitizer_report(lines, n):
    """The first n lines of a sanitizer's (or nng's) report in a log, from its ERROR line:
    a 15-line tail shows the end of a stack, not what went wrong."""
    for i, line in enumerate(lines):
        if re.search(r"ERROR: \w+Sanitizer|runtime error:|panic:|Assertion .* failed", line):
            return lines[i:i + n]
    return []


def exit_detail(rc, proc):
    """A check's detail for an unexpected exit status: the status and, on one line (the test
    summary shows that line), the start of any sanitizer report the process left."""
    report = sanitizer_report(proc.text().splitlines(), 8)
    return f"exit {rc}" + ("; " + " | ".join(l.strip() for l in report) if report else "")


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
    def __init__(self, name, argv, env, log_dir, preexec_fn=None):
        self.name = name
        self.log = os.path.join(log_dir, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
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


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def metrics(port):
    """A runner's /metrics samples as {name: float}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as f:
        text = f.read().decode()
    return {k: float(v) for k, v in (line.split(" ", 1) for line in text.splitlines()
                                     if line and not line.startswith("#"))}


class Sampler:
    """Calls self.sample() on a thread of its own every 20 ms until stop(), counting the
    samples; a subclass sets what sample() reads before calling this __init__."""

    def __init__(self):
        self.samples, self.stop_flag = 0, False
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop_flag:
            self.sample()
            self.samples += 1
            time.sleep(0.02)  # the sampling period, not a wait for anything

    def stop(self):
        self.stop_flag = True
        self.t.join()
        return self


def main_in_fresh_db(prefix, run_all_fn, roles=()):
    """The main of every end-to-end test: a database of its own on the test cluster, run_all_fn
    (url, env, tmp) with TAP checks, then every process killed, their log tails printed when a
    check failed, the database dropped, and last the cluster-wide roles the test made (roles)
    dropped too. A crash of the test is a failed check, with what was running. Skips without
    CAIRN_TEST_DATABASE_URL."""
    try:
        return run_in_fresh_db(prefix, run_all_fn)
    finally:
        if BASE:
            for role in roles:
                subprocess.run(["psql", "-X", "-q", "-d", BASE, "-c",
                                f"DROP ROLE IF EXISTS {role}"], capture_output=True, timeout=60)


def run_in_fresh_db(prefix, run_all_fn):
    """main_in_fresh_db without the roles: the database, the run and the clean-up."""
    if not BASE:
        print("1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)")
        return 0
    name = f"{prefix}_{os.getpid()}_{random.randint(0, 99999)}"
    q(BASE, f"CREATE DATABASE {name}")
    tmp = tempfile.mkdtemp(prefix=f"cairn-{prefix}-")
    url = db_url(name)
    env = dict(os.environ, CAIRN_DATABASE_URL=url)
    try:
        run_all_fn(url, env, tmp)
    except Exception as ex:
        check("the test ran to its end", False, repr(ex))
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        for p in procs:
            if failures:
                lines = p.text().splitlines()
                sys.stdout.write(f"# --- {p.name} log (tail) ---\n")
                for line in lines[-15:]:
                    sys.stdout.write("# " + line + "\n")
                report = sanitizer_report(lines, 60)
                if report:
                    sys.stdout.write(f"# --- {p.name}: sanitizer report ---\n")
                    for line in report:
                        sys.stdout.write("# " + line + "\n")
        q(BASE, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{n_checks}")
    return 1 if failures else 0


def main():
    return main_in_fresh_db("e2e", run_all)


def ctl(env, *args, timeout=120):
    return subprocess.run([CTL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def runner(env, tmp, name, sock, *extra, preexec_fn=None):
    return Proc(name, [RUNNER, "--worker-listen", sock, "--poll-interval-ms", "100",
                       "--lock-ttl-ms", "2000", "--lock-heartbeat-ms", "400",
                       "--worker-idle-ms", "1000", "--shutdown-grace-ms", "5000", *extra],
                env, tmp, preexec_fn=preexec_fn)


def worker(env, tmp, name, sock, slots="8"):
    return Proc(name, [WORKER, "--url", sock, "--slots", slots, "--name", name], env, tmp)


def enqueue_many(url, workflow, input_sql, n):
    q(url, f"SELECT count(cairn.enqueue('{workflow}', {input_sql})) FROM generate_series(1, {n}) g")


def counts(url, workflow):
    return q(url, "SELECT count(*) FILTER (WHERE status = 'completed') || ' ' || count(*) "
                  f"FROM cairn.runner_instances WHERE workflow_name = '{workflow}'")


def all_completed(url, workflow, n):
    return counts(url, workflow) == f"{n} {n}"


def actions_done(url, workflow):
    """The action results recorded for the instances of workflow (as psql's text)."""
    return q(url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN cairn.runner_instances "
                  f"i USING (instance_id) WHERE i.workflow_name = '{workflow}'")


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
    http_port = free_port()
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

    # ---- an idle claimer says it waits, so that enqueues wake it (sql/0033) ----------------
    waiting = "SELECT count(*) FROM cairn.claim_waits WHERE until > clock_timestamp()"
    check("an idle runner's claimer says in cairn.claim_waits that it waits",
          wait_until("a claim wait", lambda: q(url, waiting) == "1", 10), q(url, waiting))
    listen = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-d", url, "-c", "LISTEN cairn_enqueue",
                             "-c", "SELECT cairn.enqueue('echo_input', '{\"a\": 1}')"],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL)
    check("so an enqueue notifies", 'notification "cairn_enqueue"' in listen.stdout + listen.stderr,
          listen.stdout + listen.stderr)

    # ---- inputs at the enqueue limits run (cairn.limits(): 256 KiB of JSON, 32 levels) ----
    deep = "[" * 30 + "]" * 30  # the list is at level 2 of the input, its innermost at 32
    at_size = "x" * (262144 - len('{"a": ""}'))
    for what, value in (("depth", deep), ("size", json.dumps(at_size))):
        path = os.path.join(tmp, f"limit_{what}.json")
        with open(path, "w") as f:
            f.write('{"a": ' + value + '}')
        r = ctl(env, "run", "echo_input", "--input-file", path, "--wait", "--timeout", "60")
        check(f"an input at the {what} limit runs and comes back whole",
              r.returncode == 0 and r.stdout.strip() == value,
              f"exit {r.returncode}, got {r.stdout.strip()[:80]!r}, {r.stderr[-200:]}")

    # ---- an error the worker marks not retryable (cairn_worker_error_final) --------------
    r = ctl(env, "run", "declined", "--wait", "--timeout", "60", "--json")
    iid = q(url, "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = 'declined'")
    check("an error marked not retryable fails the instance after one attempt, despite [retry: 5]",
          r.returncode == 4 and q(url, f"SELECT count(*) || ' ' || (SELECT error->>'type' FROM "
                                       f"cairn.runner_instances WHERE instance_id = '{iid}') FROM "
                                       f"cairn.runner_actions_done WHERE instance_id = '{iid}'")
          == "1 Declined", f"exit {r.returncode}: {r.stdout} {r.stderr}")

    # ---- the HTTP endpoints --------------------------------------------------------------
    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}{path}", timeout=5) as f:
                return f.status, f.read().decode()
        except OSError as e:
            return 0, str(e)
    # Both workers connect on their own time (one that came before the runner's socket retries
    # a second later): wait for the runner to count them, then read the figures.
    wait_until("two workers", lambda: "\ncairn_workers 2\n" in get("/metrics")[1], 20)
    check("/healthz answers ok", get("/healthz") == (200, "ok\n"))
    check("/readyz answers ready", get("/readyz") == (200, "ready\n"))
    st, text = get("/metrics")
    samples = dict(line.split(" ", 1) for line in text.splitlines()
                   if line and not line.startswith("#"))
    check("/metrics counts the completed examples",
          st == 200 and int(samples.get("cairn_instances_completed_total", "0")) >= len(cases),
          text[:300])
    check("/metrics counts the two workers", samples.get("cairn_workers") == "2",
          " ".join(f"{k}={v}" for k, v in samples.items() if "worker" in k or "pool" in k))
    check("/metrics is Prometheus text", "# TYPE cairn_actions_dispatched_total counter" in text)
    check("/metrics has the claim backlog's cap, at least its floor of 256 attempts",
          "# TYPE cairn_pool_backlog_cap gauge" in text and
          int(samples.get("cairn_pool_backlog_cap", "0")) >= 256,
          samples.get("cairn_pool_backlog_cap", "missing"))
    sent = int(samples.get("cairn_pool_sent_total", "-1"))
    msgs = int(samples.get("cairn_pool_dispatch_messages_total", "-1"))
    check("/metrics counts the attempts sent and the dispatch messages that carried them: "
          "every accepted outcome was sent, a message carries one attempt or more",
          sent >= int(samples.get("cairn_pool_results_total", "0")) > 0 and 0 < msgs <= sent,
          f"sent {sent}, messages {msgs}")
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
          actions_done(url, "hello") ==
          q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'hello'"))
    check("two runners: the claim queue is empty",
          q(url, "SELECT count(*) FROM cairn.queued_instances") == "0")

    # ---- kill -9 of a runner mid-run -----------------------------------------------
    # Only runner1 runs: stop runner2 gracefully first (this also checks SIGTERM).
    rc = r2.term()
    check("SIGTERM: runner2 exits 0", rc == 0, exit_detail(rc, r2))
    enqueue_many(url, "steps", "'{\"n\": 30}'::jsonb", 40)
    enqueue_many(url, "stamped", "'{\"ms\": 4000}'::jsonb", 5)
    progressed = wait_until("progress", lambda: int(actions_done(url, "steps")) >= 150, 60)
    check("kill -9: runner1 made progress first", progressed)
    stamped = wait_until("stamped", lambda: q(
        url, "SELECT count(*) FROM cairn.published WHERE name = 'stamp'") == "5", 60)
    stamps = q(url, "SELECT string_agg(instance_id || ' ' || value::text, E'\\n' ORDER BY "
                    "instance_id) FROM cairn.published WHERE name = 'stamp'")
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
    check("kill -9: 40 x 30 results recorded, each once", actions_done(url, "steps") == "1200",
          f"before the crash {before}")
    ok = wait_until("stamped done", lambda: all_completed(url, "stamped", 5), 60)
    ends = q(url, "SELECT string_agg(instance_id || ' ' || jsonb_build_array(result->0, "
                  "result->1, result->2)::text || ' ' || (result->>3 = instance_id::text "
                  "AND result->>4 = 'stamped'), E'\\n' ORDER BY instance_id) FROM "
                  "cairn.runner_instances WHERE workflow_name = 'stamped'")
    want = "\n".join(line + " true" for line in (stamps or "").splitlines())
    check("kill -9: now() and uuid() come back after the resume as the instance computed and "
          "published them before the crash (and instance_id(), workflow_name())",
          stamped and ok and ends == want, f"published:\n{stamps}\nreturned:\n{ends}")

    # ---- kill -9 of a worker mid-action --------------------------------------------
    w4 = worker(env, tmp, "worker2b", sock2)
    enqueue_many(url, "sleepy", "'{\"n\": 4, \"ms\": 300}'::jsonb", 6)
    started = wait_until("sleepy started", lambda: int(actions_done(url, "sleepy")) >= 2, 60)
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
    check("SIGTERM: runner2b exits 0", rc == 0, exit_detail(rc, r2))
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
    check("SIGTERM: runner3 exits 0", rc == 0, exit_detail(rc, r3))

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

    # ---- a runner paused past its leases stops running their actions ----------------------
    paused_runner(url, env, tmp)

    # ---- connections that never say hello ------------------------------------------------
    hello_less(url, env, tmp)

    # ---- the README's configuration table is what cairn-runner accepts -------------------
    help_text = subprocess.run([RUNNER, "--help"], capture_output=True, text=True).stdout
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## Configuration"):readme.index("The tools and scripts read")]
    documented = set(re.findall(r"^\| `(CAIRN_[A-Z_]+)` \| `--", section, re.M))
    accepted = set(re.findall(r"(CAIRN_[A-Z_]+)", help_text))
    check("README configuration table lists exactly the settings of cairn-runner --help",
          documented == accepted and len(documented) > 10,
          f"only in README: {documented - accepted}, only in --help: {accepted - documented}")


def tally(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def paused_runner(url, env, tmp):
    """SIGSTOP of a runner past its TTL, then SIGCONT: another runner has taken its instances,
    and the stale one must withdraw their attempts from its pool (queued ones never start,
    running ones are cancelled) instead of draining its backlog for nothing."""
    exec_dir = os.path.join(ROOT, "tests/integration/exec")
    sock_a, sock_b = f"ipc://{tmp}/pa.sock", f"ipc://{tmp}/pb.sock"
    tally_a, tally_b = os.path.join(tmp, "tally-a"), os.path.join(tmp, "tally-b")
    ra = runner(env, tmp, "runner-paused", sock_a)
    # Two slots and no prefetch: at most 2 attempts of A's are on its worker at any moment.
    Proc("worker-paused", [WORKER, "--url", sock_a, "--slots", "2", "--exec-dir", exec_dir],
         dict(env, CAIRN_TEST_TALLY=tally_a), tmp)
    enqueue_many(url, "tally", "'{\"n\": 25}'::jsonb", 8)
    started = wait_until("A runs", lambda: tally(tally_a) >= 4, 30)
    ra.p.send_signal(signal.SIGSTOP)
    paused_at = tally(tally_a)
    check("paused runner: it ran some attempts, with most still queued in its pool",
          started and paused_at < 40, f"{paused_at} executions before the pause")
    rb = runner(env, tmp, "runner-taker", sock_b)
    Proc("worker-taker", [WORKER, "--url", sock_b, "--slots", "8", "--exec-dir", exec_dir],
         dict(env, CAIRN_TEST_TALLY=tally_b), tmp)
    took = wait_until("B took over", lambda: tally(tally_b) >= 1, 30)
    check("paused runner: another runner took its instances once the leases expired", took)
    time.sleep(0.5)  # the worker finished what it held; A's pool still holds its backlog
    at_cont = tally(tally_a)
    ra.p.send_signal(signal.SIGCONT)
    ok = wait_until("tally done", lambda: all_completed(url, "tally", 8), 60)
    check("paused runner: every instance completed", ok, counts(url, "tally"))
    check("paused runner: every result is right", q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'tally' AND "
             "result = '25'::jsonb") == "8")
    # Let A act on whatever it still would, then count what its worker ran after SIGCONT:
    # at most what its two slots took before it learnt of the lost leases.
    time.sleep(1.5)
    extra = tally(tally_a) - at_cont
    check("paused runner: after SIGCONT it ran at most its in-flight bound (2) again",
          0 <= extra <= 2, f"{extra} executions after SIGCONT, {at_cont} before")
    check("paused runner: it logged the lost leases", "lease lost" in ra.text())
    rc = ra.term()
    check("paused runner: exits 0 on SIGTERM", rc == 0, exit_detail(rc, ra))
    rb.term()


def hello_less(url, env, tmp):
    """300 connections that complete nng's TCP handshake but never say hello: past 128 waiting
    at once the runner drops them as they come, the rest after its hello timeout (5 s), and a
    real worker is served meanwhile; the runner's descriptors come back."""
    import selectors
    port = free_port()
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    low = min(256, hard)
    # Started with a low soft limit on open files, as Debian's default of 1 024 is for a fleet.
    r = runner(env, tmp, "runner-greet", f"tcp://127.0.0.1:{port}",
               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard)))
    w = Proc("worker-greet", [WORKER, "--url", f"tcp://127.0.0.1:{port}", "--slots", "2"], env, tmp)
    up = wait_until("worker up", lambda: "serving" in w.text(), 20)
    ok = ctl(env, "run", "hello", "--input", '{"name": "greet"}', "--wait", "--timeout", "30")
    check("hello-less: a worker over tcp is served", up and ok.returncode == 0, ok.stderr)
    with open(f"/proc/{r.p.pid}/limits") as f:
        nofile = [line.split()[3:5] for line in f if line.startswith("Max open files")][0]
    check("hello-less: the runner raised its open-file soft limit to the hard limit",
          nofile[0] == nofile[1] == str(hard) or hard == low, f"{nofile}, started at {low}")
    base = fd_count(r)
    socks = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"\x00SP\x00\x00\x30\x00\x00")  # SP header: REQ0 (0x30), as a worker's
        s.setblocking(False)
        socks.append(s)
    t0 = time.monotonic()
    during = subprocess.Popen([CTL, "run", "hello", "--input", '{"name": "during"}', "--wait",
                               "--timeout", "30"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed_at = {}
    while len(closed_at) < len(socks) and time.monotonic() - t0 < 15:
        for key, _ in sel.select(timeout=0.2):
            try:
                data = key.fileobj.recv(64)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                closed_at[key.fileobj] = time.monotonic() - t0
                sel.unregister(key.fileobj)
    err = during.communicate(timeout=60)[1]
    check("hello-less: a real worker is served while they wait", during.returncode == 0, err)
    early = sum(1 for v in closed_at.values() if v < 3)
    check("hello-less: past 128 waiting, connections are dropped as they come",
          early >= 300 - 128, f"{early} dropped within 3 s")
    check("hello-less: the rest are dropped after the hello timeout (5 s)",
          len(closed_at) == 300 and max(closed_at.values()) < 12,
          f"{len(closed_at)} dropped, last at {max(closed_at.values(), default=-1):.1f} s")
    for s in socks:
        s.close()
    back = wait_until("fds back", lambda: fd_count(r) <= base + 5, 10)
    check("hello-less: the runner's descriptors come back", back, f"{fd_count(r)} vs {base}")
    ok = ctl(env, "run", "hello", "--input", '{"name": "after"}', "--wait", "--timeout", "30")
    check("hello-less: the runner still serves afterwards", ok.returncode == 0, ok.stderr)
    check("hello-less: it logged the drops", "said no hello" in r.text())
    w.term()
    rc = r.term()
    check("hello-less: exits 0 on SIGTERM", rc == 0, exit_detail(rc, r))


def fd_count(proc):
    try:
        return len(os.listdir(f"/proc/{proc.p.pid}/fd"))
    except OSError:
        return -1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): action timeouts with a real runner, a real worker and the real
PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end):

- [timeout: D] counts from when a worker starts the attempt: ten 600 ms actions with
  [timeout: 1s] on a worker with 8 slots all finish, although two of them waited for a slot;
- at the timeout the work stops: a 10 s sleep with [timeout: 300ms] fails with ActionTimeout
  within a couple of seconds, and the worker's slots are all free right after (the sleep was
  cancelled on the worker, not left running);
- [deadline: D] counts from when the step made the action ready: a 10 s sleep with
  [deadline: 500ms] fails with ActionTimeout.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl = e2e.check, e2e.q, e2e.ctl


def run(env, workflow, input_json):
    t0 = time.monotonic()
    r = ctl(env, "run", workflow, "--input", input_json, "--wait", "--timeout", "60", "--json")
    return r, time.monotonic() - t0


def run_all(url, env, tmp):
    wf = os.path.join(e2e.ROOT, "tests/integration/workflows")
    for args in (["migrate"], ["register", f"{wf}/slowten.cairn"],
                 ["register", f"{wf}/overdue.cairn"]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock = f"ipc://{tmp}/r.sock"
    e2e.runner(env, tmp, "runner", sock)
    e2e.worker(env, tmp, "worker", sock, slots="8")

    r, took = run(env, "slowten", '{"n": 10, "ms": 600}')
    check("ten 600 ms actions with [timeout: 1s] on 8 slots all finish (waiting for a slot "
          "does not count)", r.returncode == 0 and json.loads(r.stdout)["result"] == 10,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    check("two of them waited for a slot", took >= 1.2, f"{took:.2f} s")

    r, took = run(env, "overdue", '{"ms": 10000, "deadline": false}')
    check("a 10 s action with [timeout: 300ms] fails with ActionTimeout",
          r.returncode == 4 and "ActionTimeout" in r.stdout and took < 5,
          f"exit {r.returncode} after {took:.1f} s: {r.stdout} {r.stderr}")
    # Eight 300 ms actions need all eight slots at once: with the 10 s sleep still running on
    # one of them, the eighth would wait for it and time the run out past 5 s.
    r, took = run(env, "slowten", '{"n": 8, "ms": 300}')
    check("the timed-out action was stopped on the worker: all 8 slots free at once",
          r.returncode == 0 and took < 5, f"exit {r.returncode} after {took:.1f} s: {r.stderr}")

    r, took = run(env, "overdue", '{"ms": 10000, "deadline": true}')
    check("a 10 s action with [deadline: 500ms] fails with ActionTimeout",
          r.returncode == 4 and "ActionTimeout" in r.stdout and took < 5,
          f"exit {r.returncode} after {took:.1f} s: {r.stdout} {r.stderr}")


def main():
    if not e2e.BASE:
        print("1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)")
        return 0
    name = f"timeouts_{os.getpid()}_{random.randint(0, 99999)}"
    q(e2e.BASE, f"CREATE DATABASE {name}")
    tmp = tempfile.mkdtemp(prefix="cairn-timeouts-")
    url = e2e.db_url(name)
    env = dict(os.environ, CAIRN_DATABASE_URL=url)
    try:
        run_all(url, env, tmp)
    except Exception as ex:  # a crash of the test is a failure, with what was running
        check("the test ran to its end", False, repr(ex))
    finally:
        for p in e2e.procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        for p in e2e.procs:
            if e2e.failures:
                sys.stdout.write(f"# --- {p.name} log (tail) ---\n")
                for line in p.text().splitlines()[-15:]:
                    sys.stdout.write("# " + line + "\n")
        q(e2e.BASE, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{e2e.n_checks}")
    return 1 if e2e.failures else 0


if __name__ == "__main__":
    sys.exit(main())

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
  [deadline: 500ms] fails with ActionTimeout;
- `parallel [fail_fast]`: a branch failing at once ends the instance at once, and its 60 s
  sibling is cancelled on the worker (all slots are free right after);
- [deadline: D] is durable: an action with [deadline: 2s] (deadline_crash.cairn) is started on
  a worker, then its runner and worker are killed with kill -9; once the deadline has passed, a
  fresh runner and worker take the instance over and it fails with ActionTimeout within 10 s,
  without the action being dispatched again (the fresh runner's dispatch count stays 0 and the
  fresh worker never starts it).

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def run(env, workflow, input_json):
    t0 = time.monotonic()
    r = ctl(env, "run", workflow, "--input", input_json, "--wait", "--timeout", "60", "--json")
    return r, time.monotonic() - t0


def fails_within_5s(env, what, workflow, input_json, error_type):
    """A run of workflow that must fail (exit 4) with error_type, in under 5 s."""
    r, took = run(env, workflow, input_json)
    check(what, r.returncode == 4 and error_type in r.stdout and took < 5,
          f"exit {r.returncode} after {took:.1f} s: {r.stdout} {r.stderr}")


def all_slots_free(env, what):
    """Eight 300 ms actions need all eight slots at once: the run finishes in under 5 s only if
    nothing earlier still holds a slot."""
    r, took = run(env, "slowten", '{"n": 8, "ms": 300}')
    check(what, r.returncode == 0 and took < 5,
          f"exit {r.returncode} after {took:.1f} s: {r.stderr}")


def run_all(url, env, tmp):
    wf = os.path.join(e2e.ROOT, "tests/integration/workflows")
    for args in (["migrate"], ["register", f"{wf}/slowten.cairn"],
                 ["register", f"{wf}/overdue.cairn"], ["register", f"{wf}/deadline_crash.cairn"],
                 ["register", f"{wf}/failfast.cairn"]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock = f"ipc://{tmp}/r.sock"
    runner = e2e.runner(env, tmp, "runner", sock)
    worker = e2e.worker(env, tmp, "worker", sock, slots="8")

    r, took = run(env, "slowten", '{"n": 10, "ms": 600}')
    check("ten 600 ms actions with [timeout: 1s] on 8 slots all finish (waiting for a slot "
          "does not count)", r.returncode == 0 and json.loads(r.stdout)["result"] == 10,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    check("two of them waited for a slot", took >= 1.2, f"{took:.2f} s")

    fails_within_5s(env, "a 10 s action with [timeout: 300ms] fails with ActionTimeout",
                    "overdue", '{"ms": 10000, "deadline": false}', "ActionTimeout")
    # Eight 300 ms actions need all eight slots at once: with the 10 s sleep still running on
    # one of them, the eighth would wait for it and time the run out past 5 s.
    all_slots_free(env, "the timed-out action was stopped on the worker: all 8 slots free at once")

    fails_within_5s(env, "a 10 s action with [deadline: 500ms] fails with ActionTimeout",
                    "overdue", '{"ms": 10000, "deadline": true}', "ActionTimeout")

    fails_within_5s(env, "parallel [fail_fast]: the failing branch ends the run at once (Declined)",
                    "failfast", '{"ms": 60000}', "Declined")
    all_slots_free(env, "[fail_fast] cancelled the 60 s sibling on its worker: all 8 slots free "
                   "at once")

    # The crash case needs its instance on a runner of its own, with a worker serving exec.*.
    worker.term()
    rc = runner.term()
    check("SIGTERM: the runner exits 0", rc == 0, f"exit {rc}")
    deadline_after_crash(url, env, tmp)


def deadline_after_crash(url, env, tmp):
    """kill -9 of a runner (and its worker) while an attempt with [deadline: 2s] runs: the
    deadline is in the snapshot, so the runner that takes over times the attempt out instead of
    dispatching it again (at least once stops at the deadline)."""
    exec_dir = os.path.join(e2e.ROOT, "tests/integration/exec")
    # exec.pidfile writes its process id there when it starts: one file per worker tells
    # which worker ran it.
    pid_a, pid_b = os.path.join(tmp, "pid-a"), os.path.join(tmp, "pid-b")
    sock_a, sock_b = f"ipc://{tmp}/crash-a.sock", f"ipc://{tmp}/crash-b.sock"
    ra = e2e.runner(env, tmp, "runner-crash", sock_a)
    wa = e2e.Proc("worker-crash", [e2e.WORKER, "--url", sock_a, "--slots", "1", "--exec-dir",
                                   exec_dir], dict(env, CAIRN_TEST_PIDFILE=pid_a), tmp)
    iid = ctl(env, "run", "deadline_crash").stdout.strip()
    started = wait_until("started", lambda: os.path.exists(pid_a), 20)
    started_at = time.monotonic()
    check("deadline after kill -9: the action started on the first worker", started
          and q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{iid}'")
          == "running")
    ra.kill9()
    wa.kill9()  # its exec.pidfile dies with it: the attempt can never report
    # The step made the action ready before the worker started it, so 2.5 s after that start
    # its 2 s deadline has passed: the fresh runner finds it expired, not running out.
    time.sleep(max(0.0, started_at + 2.5 - time.monotonic()))
    port = e2e.free_port()
    t0 = time.monotonic()
    e2e.runner(env, tmp, "runner-after", sock_b, "--http-listen", f"127.0.0.1:{port}")
    wb = e2e.Proc("worker-after", [e2e.WORKER, "--url", sock_b, "--slots", "1", "--exec-dir",
                                   exec_dir], dict(env, CAIRN_TEST_PIDFILE=pid_b), tmp)

    def outcome():
        return q(url, "SELECT status || ' ' || coalesce(error->>'type', '') || ' ' || "
                      "coalesce(error->>'message', '') FROM cairn.runner_instances "
                      f"WHERE instance_id = '{iid}'")
    # The lease (2 s TTL) expired meanwhile too: the new runner may claim it on its first poll.
    failed = wait_until("timed out", lambda: outcome().startswith("failed"), 20)
    took = time.monotonic() - t0
    check("deadline after kill -9: the new runner fails it with ActionTimeout within 10 s",
          failed and took < 10 and outcome() == "failed ActionTimeout attempt 1 was not done "
          "within its deadline of 2000 ms", f"after {took:.1f} s: {outcome()}")
    samples = e2e.metrics(port)
    check("deadline after kill -9: the new runner claimed it and dispatched nothing",
          samples.get("cairn_instances_claimed_total") == 1
          and samples.get("cairn_actions_dispatched_total") == 0,
          str({k: v for k, v in samples.items() if k.startswith(("cairn_instances_claimed",
                                                                  "cairn_actions_dispatched"))}))
    # The dispatch count is the proof: a dispatch the deadline timer cancels right after may
    # never start on the worker. This catches one that does start (an attempt sent again
    # without its deadline, say), which the connected worker would begin within half a second.
    serving = wait_until("worker-after serves", lambda: "serving" in wb.text(), 20)
    time.sleep(0.5)
    check("deadline after kill -9: the action did not run again on the new worker",
          serving and not os.path.exists(pid_b), wb.text()[-300:])


def main():
    return e2e.main_in_fresh_db("timeouts", run_all)


if __name__ == "__main__":
    sys.exit(main())

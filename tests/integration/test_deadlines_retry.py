#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): workflow deadlines and redrive (cairnctl retry), with a real runner,
real workers and the real PostgreSQL that scripts/test starts (a fresh database of its own,
dropped at the end):

- an `exec.*` action gets its context in its environment (attempt, ids, deadline, the previous
  attempt's error);
- `fn main(...) [timeout: 2s]`: a 60 s action ends the instance `timed_out` (WorkflowTimeout)
  within seconds, and the worker's only slot is free at once (the attempt was cancelled);
- `cairnctl run --workflow-timeout 1s` does the same for a workflow without a timeout; bad
  durations are refused (exit 1) and nothing is enqueued;
- a long sleep handed back to the database is timed out there (cairn.expire_overdue, which the
  runners call every 2 s);
- `cairnctl retry` of a failed instance resumes it: the actions that had completed do not run
  again (counted by the worker's own log), the failed one runs again with a fresh budget, and
  inspect shows the earlier outcome; retry of a cancelled and of a timed_out instance runs them
  again (the timed_out one gets a new deadline and times out again, not at once);
- the outcome of an attempt that comes after its instance was cancelled is recorded (the
  instance stays cancelled), and a retry runs the action again since that outcome was an error;
- a sequence's steps are recorded by their results alone (numbered, no snapshot), and inspect
  of the running instance replays them to show the action it waits on;
- `retry --workflow W --status failed` counts without --yes and queues them all with it;
- retry of a completed instance is refused (exit 1, the result kept), of a running one is a
  no-op (exit 6), of an unknown id an error (exit 1).

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


def status(url, iid):
    return q(url, f"SELECT status || ' ' || coalesce(error->>'type', '') FROM "
                  f"cairn.runner_instances WHERE instance_id = '{iid}'")


def lines(path, word=None):
    try:
        with open(path) as f:
            return sum(1 for line in f if word is None or line.strip() == word)
    except FileNotFoundError:
        return 0


def run_all(url, env, tmp):
    wf = os.path.join(e2e.ROOT, "tests/integration/workflows")
    for args in (["migrate"], ["register", f"{wf}/bounded.cairn"], ["register", f"{wf}/hold.cairn"],
                 ["register", f"{wf}/nap.cairn"], ["register", f"{wf}/gated.cairn"],
                 ["register", f"{wf}/crunch.cairn"], ["register", f"{wf}/paced.cairn"],
                 ["register", f"{wf}/exec_context.cairn"]):
        r = ctl(env, *args)
        check(f"cairnctl {' '.join(args[:1])} {os.path.basename(args[-1])}", r.returncode == 0,
              r.stderr)
    sock = f"ipc://{tmp}/r.sock"
    tally, gate = os.path.join(tmp, "tally"), os.path.join(tmp, "gate")
    http_port = e2e.free_port()
    e2e.runner(env, tmp, "runner", sock, "--evict-sleep-threshold-ms", "1000", "--http-listen",
               f"127.0.0.1:{http_port}")
    e2e.Proc("worker", [e2e.WORKER, "--url", sock, "--slots", "1", "--name", "worker",
                        "--exec-dir", os.path.join(e2e.ROOT, "tests/integration/exec")],
             dict(env, CAIRN_TEST_TALLY=tally, CAIRN_TEST_GATE=gate), tmp)

    # ---- an executable action's context, in its environment -----------------------------------
    r = ctl(env, "run", "exec_context", "--wait", "--timeout", "60", "--json")
    doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    ctx = doc.get("result") or {}
    check("exec.* actions get their context in their environment: attempt, ids, deadline, the "
          "previous attempt's error",
          r.returncode == 0 and ctx.get("action") == "exec.context" and ctx.get("attempt") == 2
          and ctx.get("instance") == doc.get("id") and len(ctx.get("exec", "")) == 36
          and ctx.get("deadline_ms", 0) > 0
          and (ctx.get("last_error") or {}).get("type") == "NotYet"
          and (ctx.get("last_error") or {}).get("message") == "first attempt",
          f"exit {r.returncode}: {r.stdout} {r.stderr}")

    # ---- workflow deadlines -----------------------------------------------------------------
    t0 = time.monotonic()
    r = ctl(env, "run", "bounded", "--input", '{"ms": 60000}', "--wait", "--timeout", "60",
            "--json")
    took = time.monotonic() - t0
    doc = json.loads(r.stdout) if r.stdout.strip() else {}
    check("[timeout: 2s] ends a 60 s action's instance timed_out with WorkflowTimeout",
          r.returncode == 4 and doc.get("status") == "timed_out"
          and doc.get("error", {}).get("type") == "WorkflowTimeout" and 1.5 < took < 10,
          f"exit {r.returncode} after {took:.1f} s: {r.stdout} {r.stderr}")
    t0 = time.monotonic()
    r = ctl(env, "run", "hold", "--input", '{"ms": 1}', "--wait", "--timeout", "20")
    check("the worker's only slot was freed at the timeout (the attempt was cancelled)",
          r.returncode == 0 and time.monotonic() - t0 < 5, f"exit {r.returncode}: {r.stderr}")

    r = ctl(env, "run", "hold", "--input", '{"ms": 60000}', "--workflow-timeout", "1 second",
            "--wait", "--timeout", "60", "--json")
    doc = json.loads(r.stdout) if r.stdout.strip() else {}
    check("run --workflow-timeout 1s times out a workflow that has no timeout of its own",
          r.returncode == 4 and doc.get("status") == "timed_out", f"{r.stdout} {r.stderr}")
    before = q(url, "SELECT count(*) FROM cairn.runner_instances")
    for bad, why in (("-5 seconds", "timeout must be positive"),
                     ("400 days", "at most 366 days"),
                     ("soon", "is not a duration: give a number with a unit")):
        r = ctl(env, "run", "hold", "--input", '{"ms": 1}', "--workflow-timeout", bad)
        check(f"--workflow-timeout '{bad}' is refused", r.returncode == 1 and why in r.stderr,
              f"exit {r.returncode}: {r.stderr}")
    check("nothing was enqueued by the refused runs",
          q(url, "SELECT count(*) FROM cairn.runner_instances") == before)

    nap = ctl(env, "run", "nap", "--input", '{"seconds": 3600}', "--workflow-timeout",
              "3 seconds").stdout.strip()
    handed = wait_until("handed back", lambda: q(
        url, f"SELECT status = 'queued' AND state IS NOT NULL FROM cairn.runner_instances "
             f"WHERE instance_id = '{nap}'") == "t", 30)
    check("a long sleep is handed back to the database", handed, status(url, nap))
    check("past its deadline nobody holds it, and the sweep times it out", wait_until(
        "expired", lambda: status(url, nap) == "timed_out WorkflowTimeout", 20), status(url, nap))

    # ---- steps recorded by their results: what inspect shows ----------------------------------
    paced = ctl(env, "run", "paced", "--input", '{"n": 5, "ms": 60000}').stdout.strip()
    wait_until("on its sleep", lambda: q(url, f"SELECT count(*) FROM cairn.runner_actions_done "
                                              f"WHERE instance_id = '{paced}'") == "5", 30)
    check("five steps recorded by their results alone, numbered, and no snapshot written",
          q(url, f"SELECT string_agg(step::text, ',' ORDER BY step) FROM "
                 f"cairn.runner_actions_done WHERE instance_id = '{paced}'") == "1,2,3,4,5"
          and q(url, f"SELECT state IS NULL FROM cairn.runner_instances "
                     f"WHERE instance_id = '{paced}'") == "t",
          q(url, f"SELECT step, attempt FROM cairn.runner_actions_done "
                 f"WHERE instance_id = '{paced}'"))
    r = ctl(env, "inspect", paced, "--json")
    live = json.loads(r.stdout).get("waiting_on", []) if r.returncode == 0 else []
    check("inspect replays them: the instance waits on its sixth action, std.sleep",
          [n.get("action") for n in live if n.get("status") == "running"] == ["std.sleep"],
          f"{r.stdout} {r.stderr}")
    r = ctl(env, "cancel", paced, "--wait", "--timeout", "30")
    check("and it is cancelled (the worker's only slot is free again)",
          r.returncode == 0 and status(url, paced) == "cancelled Cancelled",
          f"exit {r.returncode}: {r.stderr} {status(url, paced)}")

    # ---- retry: a failed instance resumes from where it stopped ------------------------------
    r = ctl(env, "run", "gated", "--input", '{"n": 3}', "--wait", "--timeout", "60")
    iid = r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""
    check("the gated instance fails while the gate is closed",
          r.returncode == 4 and status(url, iid) == "failed Closed",
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    ran = lines(tally) - lines(tally, "gate")
    check("its three actions ran once each, the gate twice (one retry)",
          ran == 3 and lines(tally, "gate") == 2, f"{ran} tally, {lines(tally, 'gate')} gate")
    open(gate, "w").close()
    r = ctl(env, "retry", iid, "--reason", "gate fixed", "--wait", "--timeout", "60")
    check("retry --wait resumes it and prints its result",
          r.returncode == 0 and json.loads(r.stdout) == [3, "open"],
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    check("the completed actions did not run again; the gate ran once more",
          lines(tally) - lines(tally, "gate") == 3 and lines(tally, "gate") == 3,
          f"{lines(tally)} lines, {lines(tally, 'gate')} gate")
    r = ctl(env, "inspect", iid, "--json")
    hist = json.loads(r.stdout).get("history", []) if r.returncode == 0 else []
    check("inspect shows the earlier outcome",
          len(hist) == 1 and hist[0]["status"] == "failed"
          and hist[0]["error"]["type"] == "Closed" and hist[0]["reason"] == "gate fixed",
          f"{r.stdout} {r.stderr}")
    r = ctl(env, "inspect", iid)
    check("inspect's text says so too", "earlier run failed (Closed: the gate is closed)"
          in r.stdout, r.stdout)

    before = q(url, f"SELECT result::text FROM cairn.runner_instances WHERE instance_id = '{iid}'")
    r = ctl(env, "retry", iid)
    check("retry of a completed instance is refused, the result kept",
          r.returncode == 1 and "completed: only a failed, cancelled or timed_out" in r.stderr
          and q(url, f"SELECT result::text FROM cairn.runner_instances "
                     f"WHERE instance_id = '{iid}'") == before
          and q(url, f"SELECT count(*) FROM cairn.instance_history "
                     f"WHERE instance_id = '{iid}'") == "1",
          f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "retry", "00000000-0000-4000-8000-000000000000")
    check("retry of an unknown id is refused", r.returncode == 1 and "no instance" in r.stderr,
          f"exit {r.returncode}: {r.stderr}")

    # ---- retry in bulk -------------------------------------------------------------------------
    os.remove(gate)
    bulk = [ctl(env, "run", "gated", "--input", '{"n": 1}').stdout.strip() for _ in range(3)]
    wait_until("all failed", lambda: all(status(url, i) == "failed Closed" for i in bulk), 60)
    r = ctl(env, "retry", "--workflow", "gated", "--status", "failed")
    check("retry --workflow without --yes only counts",
          r.returncode == 1 and "would retry 3 instance(s) of gated" in r.stdout,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    open(gate, "w").close()
    r = ctl(env, "retry", "--workflow", "gated", "--status", "failed", "--reason", "bulk",
            "--yes")
    check("retry --workflow --yes queues them again", r.returncode == 0
          and r.stdout.startswith("3 queued again"), f"exit {r.returncode}: {r.stdout} {r.stderr}")
    check("and they complete", wait_until(
        "bulk done", lambda: all(status(url, i).startswith("completed") for i in bulk), 60),
        [status(url, i) for i in bulk])
    r = ctl(env, "retry", "--workflow", "gated", "--status", "completed", "--yes")
    check("retry --workflow --status completed is refused (exit 2)", r.returncode == 2,
          f"exit {r.returncode}: {r.stderr}")

    # ---- retry of a cancelled and of a timed_out instance ------------------------------------
    # 6 s: the retry no-op and the cancel below must come while it runs, and under ASan on a
    # loaded machine three cairnctl calls can take most of 1.5 s
    held = ctl(env, "run", "hold", "--input", '{"ms": 6000}').stdout.strip()
    wait_until("running", lambda: status(url, held).startswith("running"), 30)
    r = ctl(env, "retry", held)
    check("retry of a running instance is a no-op (exit 6)",
          r.returncode == 6 and "already running: nothing to retry" in r.stdout,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    ctl(env, "cancel", held, "--wait", "--timeout", "30")
    check("the instance is cancelled", status(url, held) == "cancelled Cancelled",
          status(url, held))
    r = ctl(env, "retry", held, "--wait", "--timeout", "60")
    check("retry of a cancelled instance runs it to completion",
          r.returncode == 0 and r.stdout.strip() == "null", f"exit {r.returncode}: {r.stdout}")

    # ---- the outcome of an attempt cancelled with its instance is recorded --------------------
    sent = e2e.metrics(http_port).get("cairn_pool_sent_total", 0)
    crunch = ctl(env, "run", "crunch", "--input", '{"n": 50000000}').stdout.strip()
    # Sent to the worker (the runner's own count, at once; the row it publishes in
    # cairn.runners lags by seconds, in which a fast machine finished the hash before the
    # cancel came), so the cancel reaches a running attempt, whose outcome comes back.
    wait_until("on the worker", lambda: e2e.metrics(http_port).get("cairn_pool_sent_total", 0)
               > sent, 30)
    r = ctl(env, "cancel", crunch, "--reason", "too slow", "--wait", "--timeout", "30")
    check("a crunching instance is cancelled",
          r.returncode == 0 and status(url, crunch) == "cancelled Cancelled",
          f"exit {r.returncode}: {r.stdout} {r.stderr} {status(url, crunch)}")

    def recorded():
        r = ctl(env, "inspect", crunch, "--json")
        return json.loads(r.stdout)["actions"] if r.returncode == 0 else []
    got = wait_until("late outcome", lambda: len(recorded()) == 1, 30)
    acts = recorded()
    check("the attempt's outcome, which came after the cancel, is recorded (std.hash saw the "
          "worker's cancel and reported Cancelled)",
          got and acts[0]["status"] == "error" and acts[0]["value"]["type"] == "Cancelled"
          and acts[0]["attempt"] == 1, str(acts))
    check("the cancelled instance kept its status and error",
          status(url, crunch) == "cancelled Cancelled", status(url, crunch))
    r = ctl(env, "retry", crunch, "--wait", "--timeout", "60")
    check("a retry runs the cancelled action again (a recorded error is not reused)",
          r.returncode == 0 and len(json.loads(r.stdout)) == 16 and len(recorded()) == 2,
          f"exit {r.returncode}: {r.stdout} {r.stderr} {recorded()}")

    slow = ctl(env, "run", "hold", "--input", '{"ms": 60000}', "--workflow-timeout",
               "1 second").stdout.strip()
    wait_until("timed out", lambda: status(url, slow) == "timed_out WorkflowTimeout", 30)
    t0 = time.monotonic()
    r = ctl(env, "retry", slow, "--wait", "--timeout", "60", "--json")
    took = time.monotonic() - t0
    check("a retried timed_out instance gets a new deadline: it runs again, then times out",
          r.returncode == 4 and json.loads(r.stdout)["status"] == "timed_out" and took >= 0.9,
          f"exit {r.returncode} after {took:.1f} s: {r.stdout} {r.stderr}")


def main():
    return e2e.main_in_fresh_db("deadlines", run_all)


if __name__ == "__main__":
    sys.exit(main())

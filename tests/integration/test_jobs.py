#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): the runner's background jobs each back off on their own, with a real
runner, a real worker and the real PostgreSQL that scripts/test starts (a fresh database of its
own, dropped at the end).

- an `--every 1s` schedule fires, and /metrics counts each job's runs by name
  (cairn_job_runs_total{job="..."}) with no failure;
- with the schedules' statement broken (a column it reads renamed away), the schedules job
  fails again and again (cairn_job_failures_total{job="schedules"} grows) and logs one warning
  naming it ("firing due schedules failed"), while every other job keeps running without a
  failure: a running instance is still cancelled within 5 s (the canceller), a cancel whose
  notification was missed is still found (the sweep), and the sweep's runs keep growing;
- once the statement is back, the schedule fires again and the log says the job works again;
- a SIGTERM during a backoff stops the runner at once (exit 0).

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until
free_port, metrics = e2e.free_port, e2e.metrics

# Breaks the statement that finds the due schedules (a schedule that cannot fire alone is
# paused instead, and the job goes on: the whole job must fail here).
BREAK = "ALTER TABLE cairn.schedules RENAME COLUMN catch_up TO catch_up_off"
MEND = "ALTER TABLE cairn.schedules RENAME COLUMN catch_up_off TO catch_up"


def job(port, series, name):
    return metrics(port).get(f'{series}{{job="{name}"}}', -1)


def status(url, iid):
    return q(url, f"SELECT status || ' ' || coalesce(error->>'message', '') "
                  f"FROM cairn.runner_instances WHERE instance_id = '{iid}'")


def fired(url):
    return int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE schedule_name = 'tick'"))


def run_all(url, env, tmp):
    for args in (["migrate"],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/hold.cairn")],
                 ["schedule", "add", "tick", "--workflow", "hold", "--every", "1s",
                  "--input", '{"ms": 1}']):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock = f"ipc://{tmp}/r.sock"
    port = free_port()
    r1 = e2e.runner(env, tmp, "runner", sock, "--http-listen", f"127.0.0.1:{port}")
    e2e.worker(env, tmp, "worker", sock, slots="4")

    check("the schedule fires", wait_until("fired", lambda: fired(url) >= 2, 30), str(fired(url)))
    names = ("sweep", "schedules", "backfills", "late", "reap", "signals", "notices", "retention")
    check("every job's runs are counted by name, none failed", wait_until(
        "runs", lambda: all(job(port, "cairn_job_runs_total", n) >= 1 for n in names[:7])
        and all(job(port, "cairn_job_failures_total", n) == 0 for n in names), 30),
        {n: (job(port, "cairn_job_runs_total", n), job(port, "cairn_job_failures_total", n))
         for n in names})

    # ---- one job broken -----------------------------------------------------------------
    q(url, BREAK)
    check("the schedules job fails, again and again", wait_until(
        "failures", lambda: job(port, "cairn_job_failures_total", "schedules") >= 3, 30),
        str(job(port, "cairn_job_failures_total", "schedules")))
    log = r1.text()
    check("it logs one warning, naming the job",
          log.count("firing due schedules failed") == 1 and "catch_up" in log,
          [line for line in log.splitlines() if "failed" in line][-3:])
    sweeps = job(port, "cairn_job_runs_total", "sweep")

    iid = q(url, "SELECT cairn.enqueue('hold', '{\"ms\": 60000}')")
    check("an instance starts meanwhile", wait_until(
        "running", lambda: status(url, iid).startswith("running"), 30), status(url, iid))
    t0 = time.monotonic()
    r = ctl(env, "cancel", iid, "--reason", "still heard", "--wait", "--timeout", "30")
    took = time.monotonic() - t0
    check("a cancel still takes effect within 5 s", r.returncode == 0 and took < 5
          and status(url, iid) == "cancelled still heard",
          f"exit {r.returncode} in {took:.1f} s: {r.stderr} {status(url, iid)}")
    miss = q(url, "SELECT cairn.enqueue('hold', '{\"ms\": 60000}')")
    wait_until("running", lambda: status(url, miss).startswith("running"), 30)
    q(url, f"UPDATE cairn.runner_instances SET cancel_requested_at = now(), "
           f"cancel_reason = 'swept' WHERE instance_id = '{miss}'")
    check("a cancel whose notification was missed is still swept", wait_until(
        "swept", lambda: status(url, miss) == "cancelled swept", 15), status(url, miss))
    check("the sweep kept running on its own clock",
          job(port, "cairn_job_runs_total", "sweep") > sweeps,
          f"{sweeps} -> {job(port, 'cairn_job_runs_total', 'sweep')}")
    others = {n: job(port, "cairn_job_failures_total", n) for n in names if n != "schedules"}
    check("no other job failed", all(v == 0 for v in others.values()), str(others))

    # ---- mended ---------------------------------------------------------------------------
    before = fired(url)
    q(url, MEND)
    check("once mended the schedule fires again", wait_until(
        "fired again", lambda: fired(url) > before, 30), f"{before} -> {fired(url)}")
    check("and the log says the job works again",
          wait_until("works", lambda: "firing due schedules works again" in r1.text(), 10))

    # ---- a stop during a backoff ------------------------------------------------------------
    f0 = job(port, "cairn_job_failures_total", "schedules")
    q(url, BREAK)
    check("broken again, it fails again (and backs off)", wait_until(
        "failing", lambda: job(port, "cairn_job_failures_total", "schedules") > f0, 30))
    check("a SIGTERM during a backoff: exit 0", r1.term(timeout=30) == 0, r1.text()[-500:])


if __name__ == "__main__":
    sys.exit(e2e.main_in_fresh_db("jobs", run_all))

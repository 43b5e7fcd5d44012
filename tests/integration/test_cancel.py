#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): cancelling instances, with real runners, a real worker and the real
PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end):

- a running instance is cancelled by `cairnctl cancel --wait` (its runner hears NOTIFY
  cairn_cancel): it ends `cancelled` with the reason as its error, its running attempt is cancelled on the worker (the worker's only slot is free for
  the next instance at once, not after the 60 s the action would take);
- a queued instance (due later) is cancelled at once by cairn.cancel itself; so is a durable
  sleep the runner handed back;
- a cancel whose notification was missed (the mark set by hand) is found by the runners' sweep;
- cancelling a finished instance is a no-op: exit 6, "nothing to cancel", the result kept;
- an unknown id is refused (exit 1); `--workflow W` counts without --yes and cancels with it.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def status(url, iid):
    return q(url, f"SELECT status || ' ' || coalesce(error->>'type', '') || ' ' || "
                  f"coalesce(error->>'message', '') FROM cairn.runner_instances "
                  f"WHERE instance_id = '{iid}'")


def enqueue(url, workflow, input_json, at=None):
    when = f", scheduled_at => '{at}'" if at else ""
    return q(url, f"SELECT cairn.enqueue('{workflow}', '{input_json}'{when})")


def run_all(url, env, tmp):
    for args in (["migrate"], ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/hold.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/nap.cairn")]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock1 = f"ipc://{tmp}/r1.sock"
    e2e.runner(env, tmp, "runner1", sock1, "--evict-sleep-threshold-ms", "1000")
    e2e.worker(env, tmp, "worker1", sock1, slots="1")

    # ---- a running instance --------------------------------------------------------------
    iid = enqueue(url, "hold", '{"ms": 60000}')
    check("the held instance starts", wait_until(
        "running", lambda: status(url, iid).startswith("running"), 30), status(url, iid))
    t0 = time.monotonic()
    r = ctl(env, "cancel", iid, "--reason", "no longer needed", "--wait", "--timeout", "30")
    took = time.monotonic() - t0
    check("cancel --wait of a running instance ends it cancelled",
          r.returncode == 0 and r.stdout.strip() == f"{iid} cancelled",
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    check("its error is Cancelled with the reason",
          status(url, iid) == "cancelled Cancelled no longer needed", status(url, iid))
    check("the cancel took effect within 5 s", took < 5, f"{took:.1f} s")
    check("no queue row is left", q(url, f"SELECT count(*) FROM cairn.queued_instances "
                                        f"WHERE instance_id = '{iid}'") == "0")
    # The worker has one slot: the next action runs only once the cancelled one let go of it.
    nxt = enqueue(url, "hold", '{"ms": 1}')
    check("the worker's only slot is free again (the attempt was cancelled on the worker)",
          wait_until("next", lambda: status(url, nxt).startswith("completed"), 20),
          status(url, nxt))

    # ---- a queued instance, due later -----------------------------------------------------
    later = enqueue(url, "hold", '{"ms": 1}', at="2999-01-01")
    r = ctl(env, "cancel", later)
    check("a queued instance is cancelled at once",
          r.returncode == 0 and r.stdout.strip() == f"{later} cancelled"
          and status(url, later) == "cancelled Cancelled cancelled",
          f"exit {r.returncode}: {r.stdout} {r.stderr} {status(url, later)}")

    # ---- a durable sleep handed back --------------------------------------------------------
    nap = enqueue(url, "nap", '{"seconds": 3600}')
    handed = wait_until("handed back", lambda: q(
        url, f"SELECT status = 'queued' AND state IS NOT NULL FROM cairn.runner_instances "
             f"WHERE instance_id = '{nap}'") == "t", 30)
    check("a long sleep is handed back", handed, status(url, nap))
    r = ctl(env, "cancel", nap, "--reason", "stop napping", "--wait", "--timeout", "30")
    check("a sleeping instance is cancelled",
          r.returncode == 0 and status(url, nap) == "cancelled Cancelled stop napping",
          f"exit {r.returncode}: {r.stdout} {r.stderr} {status(url, nap)}")

    # ---- a missed notification: the sweep finds the mark ------------------------------------
    miss = enqueue(url, "hold", '{"ms": 60000}')
    wait_until("running", lambda: status(url, miss).startswith("running"), 30)
    q(url, f"UPDATE cairn.runner_instances SET cancel_requested_at = now(), "
           f"cancel_reason = 'swept' WHERE instance_id = '{miss}'")
    check("a cancel whose notification was missed is found by the sweep", wait_until(
        "swept", lambda: status(url, miss) == "cancelled Cancelled swept", 15), status(url, miss))

    # ---- finished, unknown, bulk ----------------------------------------------------------
    done = enqueue(url, "hold", '{"ms": 1}')
    wait_until("done", lambda: status(url, done).startswith("completed"), 30)
    before = q(url, f"SELECT result::text FROM cairn.runner_instances WHERE instance_id = '{done}'")
    r = ctl(env, "cancel", done)
    check("cancelling a finished instance is a no-op (exit 6) that says so",
          r.returncode == 6 and "already completed: nothing to cancel" in r.stdout
          and status(url, done).startswith("completed")
          and q(url, f"SELECT result::text FROM cairn.runner_instances "
                     f"WHERE instance_id = '{done}'") == before,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    r = ctl(env, "cancel", "00000000-0000-4000-8000-000000000000")
    check("an unknown id is refused", r.returncode == 1 and "no instance" in r.stderr,
          f"exit {r.returncode}: {r.stderr}")
    for _ in range(3):
        enqueue(url, "nap", '{"seconds": 1}', at="2999-01-01")
    r = ctl(env, "cancel", "--workflow", "nap")
    check("--workflow without --yes only counts",
          r.returncode == 1 and "would cancel 3 unfinished instance(s) of nap" in r.stdout,
          f"exit {r.returncode}: {r.stdout} {r.stderr}")
    r = ctl(env, "cancel", "--workflow", "nap", "--status", "queued", "--yes")
    check("--workflow --yes cancels them",
          r.returncode == 0 and r.stdout.startswith("3 cancelled, 0 requested")
          and q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'nap'"
                     " AND status = 'cancelled'") == "4",
          f"exit {r.returncode}: {r.stdout} {r.stderr}")


def main():
    if not e2e.BASE:
        print("1..0 # SKIP CAIRN_TEST_DATABASE_URL is not set (scripts/test sets it)")
        return 0
    name = f"cancel_{os.getpid()}_{random.randint(0, 99999)}"
    q(e2e.BASE, f"CREATE DATABASE {name}")
    tmp = tempfile.mkdtemp(prefix="cairn-cancel-")
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

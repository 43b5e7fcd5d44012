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
- an unknown id is refused (exit 1); `--workflow W` counts without --yes and cancels with it;
- two runners share the database, each holding two held instances (one running on its worker,
  one waiting for its worker's only slot): every cancel reaches the runner that holds the
  instance (each runner writes the cancels of its own two), and each ends `cancelled` with its
  reason within 5 s;
- a sleep the runner keeps (shorter than its eviction threshold, so not handed back) is
  cancelled at once, not when the 60 s sleep ends, and the action after it never runs;
- cancelling an instance twice: the second `cairnctl cancel` exits 6 with "already cancelled"
  and the stored row is unchanged (error, reason and completed_at kept).

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until
free_port, metrics = e2e.free_port, e2e.metrics


def status(url, iid):
    return q(url, f"SELECT status || ' ' || coalesce(error->>'type', '') || ' ' || "
                  f"coalesce(error->>'message', '') FROM cairn.runner_instances "
                  f"WHERE instance_id = '{iid}'")


def enqueue(url, workflow, input_json, at=None):
    when = f", scheduled_at => '{at}'" if at else ""
    return q(url, f"SELECT cairn.enqueue('{workflow}', '{input_json}'{when})")


def cancel_waited(env, url, what, iid, reason):
    """cairnctl cancel --wait of iid: it must end cancelled with reason, within 5 s."""
    t0 = time.monotonic()
    r = ctl(env, "cancel", iid, "--reason", reason, "--wait", "--timeout", "30")
    took = time.monotonic() - t0
    check(what,
          r.returncode == 0 and r.stdout.strip() == f"{iid} cancelled" and took < 5
          and status(url, iid) == f"cancelled Cancelled {reason}",
          f"exit {r.returncode} after {took:.1f} s: {r.stdout.strip()} {r.stderr.strip()} "
          f"{status(url, iid)}")


def run_all(url, env, tmp):
    for args in (["migrate"], ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/hold.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/nap.cairn")]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)
    sock1 = f"ipc://{tmp}/r1.sock"
    port1 = free_port()
    r1 = e2e.runner(env, tmp, "runner1", sock1, "--evict-sleep-threshold-ms", "1000",
                    "--http-listen", f"127.0.0.1:{port1}")
    w1 = e2e.worker(env, tmp, "worker1", sock1, slots="1")

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

    two_runners(url, env, tmp, r1, w1, port1)


def two_runners(url, env, tmp, r1, w1, port1):
    """Cancels that must reach the other runner, a sleep a runner keeps, a second cancel."""
    sock2 = f"ipc://{tmp}/r2.sock"
    port2 = free_port()
    # --max-instances 2 makes the split below certain; the high eviction threshold keeps the
    # 60 s nap of the sleeping case on the runner instead of handing it back.
    e2e.runner(env, tmp, "runner2", sock2, "--max-instances", "2",
               "--evict-sleep-threshold-ms", "600000", "--http-listen", f"127.0.0.1:{port2}")
    w2 = e2e.worker(env, tmp, "worker2", sock2, slots="1")
    up = wait_until("worker2 serves", lambda: "serving" in w2.text(), 20)
    check("runner2 and its worker are up beside runner1", up)

    # ---- cancels across two runners ---------------------------------------------------------
    def held(ids):
        in_ids = ", ".join(f"'{i}'" for i in ids)
        return int(q(url, "SELECT count(*) FROM cairn.runner_instances i JOIN "
                          "cairn.queued_instances USING (instance_id) WHERE i.status = 'running'"
                          f" AND lock_uuid IS NOT NULL AND instance_id IN ({in_ids})"))

    # runner1 is paused while it holds nothing, so runner2 claims the first two; it may hold
    # no more than two, so runner1 claims the next two once it goes on.
    before = {port: metrics(port) for port in (port1, port2)}
    r1.p.send_signal(signal.SIGSTOP)
    try:
        first = [enqueue(url, "hold", '{"ms": 60000}') for _ in range(2)]
        on2 = wait_until("runner2 holds two", lambda: held(first) == 2, 20)
        second = [enqueue(url, "hold", '{"ms": 60000}') for _ in range(2)]
    finally:
        r1.p.send_signal(signal.SIGCONT)
    on1 = wait_until("runner1 holds two", lambda: held(second) == 2, 20)
    active = {port: metrics(port).get("cairn_instances_active") for port in (port1, port2)}
    check("two runners each hold two of the held instances",
          on2 and on1 and active == {port1: 2, port2: 2}, f"{on2} {on1} {active}")
    # One of each runner's two runs on its worker's only slot; the other waits for the slot.
    for iid in first + second:
        cancel_waited(env, url, "cancel --wait of an instance held by either runner ends it "
                      "cancelled, in 5 s", iid, "two runners")
    after = {port: metrics(port) for port in (port1, port2)}
    wrote = {port: after[port]["cairn_instances_failed_total"] -
             before[port]["cairn_instances_failed_total"] for port in (port1, port2)}
    check("each runner wrote the cancels of the two it held (the cancel reached it)",
          wrote == {port1: 2, port2: 2}, str(wrote))
    left = {port: (after[port]["cairn_instances_active"], after[port]["cairn_pool_queued"])
            for port in (port1, port2)}
    check("neither runner holds or queues anything afterwards",
          left == {port1: (0, 0), port2: (0, 0)}, str(left))

    # ---- a sleep the runner keeps ------------------------------------------------------------
    # runner1 would hand a 60 s sleep back (its threshold is 1 s): stop it, so runner2 takes it.
    w1.term()
    rc = r1.term()
    check("SIGTERM: runner1 exits 0", rc == 0, f"exit {rc}")
    nap = enqueue(url, "nap", '{"seconds": 60}')
    asleep = wait_until("asleep", lambda: q(
        url, f"SELECT count(*) FROM cairn.runner_actions_done WHERE instance_id = '{nap}'") == "1"
        and held([nap]) == 1, 30)
    time.sleep(0.5)  # past the step that would hand it back, were it going to
    kept = held([nap]) == 1 and metrics(port2)["cairn_instances_evicted_total"] == 0
    check("runner2 keeps the 60 s sleep (not handed back)", asleep and kept, status(url, nap))
    failed_before = metrics(port2)["cairn_instances_failed_total"]
    cancel_waited(env, url, "a sleep the runner holds is cancelled at once, with the reason", nap,
                  "wake up")
    check("runner2 wrote that cancel, and the action after the sleep never ran",
          metrics(port2)["cairn_instances_failed_total"] == failed_before + 1
          and q(url, f"SELECT count(*) FROM cairn.runner_actions_done "
                     f"WHERE instance_id = '{nap}'") == "1"
          and q(url, f"SELECT count(*) FROM cairn.queued_instances "
                     f"WHERE instance_id = '{nap}'") == "0")

    # ---- cancelling twice ------------------------------------------------------------------
    row = f"SELECT row_to_json(i)::text FROM cairn.runner_instances i WHERE instance_id = '{nap}'"
    stored = q(url, row)
    r = ctl(env, "cancel", nap, "--reason", "again", "--wait", "--timeout", "30")
    check("a second cancel exits 6 and says already cancelled",
          r.returncode == 6 and r.stdout.strip() == f"{nap} already cancelled: nothing to cancel",
          f"exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()}")
    was, now = json.loads(stored), json.loads(q(url, row))
    check("a second cancel changes nothing stored (error, reason, completed_at kept)",
          now == was and status(url, nap) == "cancelled Cancelled wake up",
          str({k: (was[k], now.get(k)) for k in was if k != "state" and was[k] != now.get(k)}))


def main():
    return e2e.main_in_fresh_db("cancel", run_all)


if __name__ == "__main__":
    sys.exit(main())

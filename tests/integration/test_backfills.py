#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): backfills, with two real runners driving them, real workers and the
real PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end).

- bad ranges and arguments are refused with clear messages (start after end, a zero step, an
  unknown workflow, an input the workflow does not take, a mix of a date and an integer);
- 100 daily partitions with concurrency 5: never more than 5 running (sampled throughout), each
  partition exactly once with its day in its input;
- a pause mid-run lands on a partition boundary: nothing new starts, the running ones finish,
  the checkpoint stays; a pause of a paused backfill is refused; resume completes the rest
  without running any partition again;
- the ETA, read on a steady workload, is within reason of the time it really took;
- kill -9 of a runner while it drives a backfill: the other runner takes over, each partition
  still exactly once;
- cancel and retry-failed; partitions on /metrics.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def status(env, bid):
    r = ctl(env, "backfill", "status", bid, "--json")
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr}


def partitions(url, bid, where="true"):
    return int(q(url, f"SELECT count(*) FROM cairn.runner_instances WHERE backfill_id = '{bid}' "
                      f"AND {where}"))


class Sampler(e2e.Sampler):
    """The most partitions of a backfill running at once, sampled until stopped."""

    def __init__(self, url, bid):
        self.url, self.bid, self.most = url, bid, 0
        super().__init__()

    def sample(self):
        self.most = max(self.most, partitions(self.url, self.bid, "status = 'running'"))


def exactly_once(url, bid, total):
    row = q(url, "SELECT count(*) || ' ' || count(DISTINCT backfill_index) || ' ' || "
                 "coalesce(min(backfill_index), -1) || ' ' || coalesce(max(backfill_index), -1) "
                 f"FROM cairn.runner_instances WHERE backfill_id = '{bid}'")
    return row == f"{total} {total} 0 {total - 1}", row


def run_all(url, env, tmp):
    root = os.path.join(e2e.ROOT, "tests/integration")
    for args in (["migrate"], ["register", f"{root}/workflows/daily.cairn"],
                 ["register", f"{root}/children/kid_fail.cairn"]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)

    # ---- what is refused ----------------------------------------------------------------------
    base = ["backfill", "create", "daily", "--param", "day", "--input", '{"ms": 1}']
    for argv, why in (
            (["--from", "2026-03-31", "--to", "2026-01-01", "--step", "1d"],
             "the range starts after it ends (2026-03-31 > 2026-01-01)"),
            (["--from", "2026-01-01", "--to", "2026-03-31", "--step", "0d"],
             'a step of whole days or weeks (1d, 7d, 2w), got "0d"'),
            (["--from", "1", "--to", "10", "--step", "0"], "positive integer step"),
            (["--from", "2026-01-01", "--to", "10", "--step", "1"], "two dates (YYYY-MM-DD) or two"),
            (["--from", "2026-02-30", "--to", "2026-03-01", "--step", "1d"], "is not a date")):
        r = ctl(env, *base, *argv)
        check(f"backfill create {' '.join(argv)} is refused: {why}",
              r.returncode == 1 and why in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "backfill", "create", "nope", "--param", "day", "--from", "1", "--to", "2",
            "--step", "1")
    check("an unknown workflow is refused", r.returncode == 1 and
          'unknown workflow "nope"' in r.stderr, r.stderr)
    r = ctl(env, "backfill", "create", "daily", "--param", "date", "--from", "1", "--to", "2",
            "--step", "1", "--input", '{"ms": 1}')
    check("a parameter the workflow does not take is refused", r.returncode == 1 and
          'has no input "date" (its inputs: day, ms)' in r.stderr, r.stderr)
    r = ctl(env, "backfill", "create", "daily", "--param", "day", "--from", "1", "--to", "2",
            "--step", "1")
    check("an input the workflow needs and would not get is refused", r.returncode == 1 and
          "--input lacks ms" in r.stderr, r.stderr)
    r = ctl(env, "backfill", "create", "daily", "--param", "day", "--from", "1")
    check("a create without --to and --step is a usage error", r.returncode == 2, r.stderr)
    # typed inputs: the partitions' input checked as cairn.enqueue checks it
    r = ctl(env, "register", os.path.join(e2e.ROOT, "tests/fixtures/typed.cairn"))
    check("register a workflow with typed inputs", r.returncode == 0, r.stderr)
    r = ctl(env, "backfill", "create", "typed", "--param", "qty", "--from", "2026-01-01",
            "--to", "2026-01-03", "--step", "1d", "--input", '{"order": {}}')
    check("a date partition for an int input is refused with its path", r.returncode == 1 and
          "input.qty: expected int, got str" in r.stderr, r.stderr)
    r = ctl(env, "backfill", "create", "typed", "--param", "qty", "--from", "1", "--to", "3",
            "--step", "1", "--input", '{"order": 5}')
    check("a mistyped --input is refused with its path", r.returncode == 1 and
          "input.order: expected dict, got int" in r.stderr, r.stderr)
    check("nothing was created", q(url, "SELECT count(*) FROM cairn.backfills") == "0")
    r = ctl(env, "backfill", "create", "typed", "--param", "qty", "--from", "1", "--to", "3",
            "--step", "1", "--input", '{"order": {"id": 1}}')
    check("a backfill whose partitions fit the typed inputs (the others have defaults)",
          r.returncode == 0, r.stderr)
    q(url, "DELETE FROM cairn.backfills")

    # ---- 100 daily partitions, 5 at a time, two runners ---------------------------------------
    socks = [f"ipc://{tmp}/r{i}.sock" for i in (1, 2)]
    port = e2e.free_port()
    r1 = e2e.runner(env, tmp, "runner1", socks[0], "--http-listen", f"127.0.0.1:{port}")
    e2e.worker(env, tmp, "worker1", socks[0])
    r2 = e2e.runner(env, tmp, "runner2", socks[1])
    e2e.worker(env, tmp, "worker2", socks[1])
    # 600 ms a partition: the action, not the per-partition overhead (claim, dispatch, persist),
    # sets the pace, so the ETA's check is not at the mercy of the machine's load changing
    # between the stretch it was read on and the rest (at 300 ms it once fell outside 2x)
    r = ctl(env, "backfill", "create", "daily", "--param", "day", "--from", "2026-01-01",
            "--to", "2026-04-10", "--step", "1d", "--input", '{"ms": 600}', "--concurrency", "5",
            "--json")
    bid = json.loads(r.stdout or "{}").get("id", "")
    check("backfill create: 100 daily partitions", r.returncode == 0 and
          json.loads(r.stdout or "{}").get("partitions") == 100, r.stdout + r.stderr)
    s = Sampler(url, bid)
    check("it runs", wait_until("running", lambda: status(env, bid).get("done", 0) >= 20, 30),
          str(status(env, bid)))
    # The ETA on a steady workload, against what it really takes.
    st = status(env, bid)
    eta, t_eta, left = st.get("eta_seconds"), time.monotonic(), st.get("remaining")
    check("status reports an ETA and a rate", eta is not None and st.get("per_minute"), str(st))

    # ---- pause: on a partition boundary ------------------------------------------------------
    wait_until("40 done", lambda: status(env, bid).get("done", 0) >= 40, 60)
    r = ctl(env, "backfill", "pause", bid)
    check("backfill pause", r.returncode == 0 and "paused" in r.stdout, r.stdout + r.stderr)
    t_paused = time.monotonic()
    check("the partitions running at the pause finish", wait_until(
        "drained", lambda: partitions(url, bid, "status IN ('queued', 'running')") == 0, 30))
    started = partitions(url, bid)
    time.sleep(1.5)
    st = status(env, bid)
    check("... and nothing new starts: the pause lands on a boundary (checkpoint = started = "
          "done)", partitions(url, bid) == started and st.get("checkpoint") == started
          and st.get("done") == started and st.get("state") == "paused" and started < 100,
          f"{started} started, {st}")
    check("paused, it has no ETA", st.get("eta_seconds") is None, str(st))
    r = ctl(env, "backfill", "pause", bid)
    check("a pause of a paused backfill is refused", r.returncode == 1 and
          "only a running backfill can be paused" in r.stderr, r.stderr)
    r = ctl(env, "backfill", "resume", bid)
    check("backfill resume", r.returncode == 0 and "resuming" in r.stdout, r.stdout + r.stderr)
    pause_s = time.monotonic() - t_paused
    check("it completes", wait_until("completed", lambda: status(env, bid).get("state") ==
                                     "completed", 90), str(status(env, bid)))
    took = time.monotonic() - t_eta - pause_s
    s.stop()
    check("never more than 5 partitions ran at once, and 5 did", s.most == 5,
          f"most {s.most} over {s.samples} samples")
    ok, row = exactly_once(url, bid, 100)
    check("each of the 100 partitions ran exactly once (none again after the resume)", ok, row)
    days = q(url, "SELECT string_agg(input->>'day', ',' ORDER BY backfill_index) FROM "
                  f"cairn.runner_instances WHERE backfill_id = '{bid}'").split(",")
    want = [str(datetime.date(2026, 1, 1) + datetime.timedelta(days=i)) for i in range(100)]
    check("each partition got its day", days == want, f"{days[:3]}...{days[-3:]}")
    check("every partition completed, each action once", partitions(
        url, bid, "status = 'completed'") == 100 and e2e.duplicate_done(url) == "0")
    ratio = eta / took if eta and took > 0 else 0
    print(f"# ETA {eta} s for {left} partitions; took {took:.1f} s; ratio {ratio:.2f}")
    check("the ETA was within reason (0.5x to 2x of the time the rest really took, pause left "
          "out)", 0.5 <= ratio <= 2.0,
          f"ETA {eta} s for {left} partitions; took {took:.1f} s; ratio {ratio:.2f}")
    text = ctl(env, "backfill", "status", bid).stdout
    check("backfill status in text", "state       completed" in text and
          "100 done, 0 running, 0 failed, 0 remaining of 100" in text, text)
    lst = json.loads(ctl(env, "backfill", "list", "--json").stdout or "[]")
    check("backfill list shows it", any(b["id"] == bid and b["state"] == "completed"
                                        for b in lst), str(lst)[:500])

    # ---- retention keeps the partitions of a backfill still going ----------------------------
    q(url, f"UPDATE cairn.runner_instances SET created_at = created_at - interval '40 days', "
           f"completed_at = completed_at - interval '40 days' WHERE backfill_id = '{bid}'")
    r = ctl(env, "prune", "--older-than", "30d")
    check("retention deletes a finished backfill's partitions (its counts stay)",
          r.returncode == 0 and partitions(url, bid) == 0 and status(env, bid).get("done") == 100,
          r.stdout + r.stderr + str(status(env, bid)))

    # ---- kill -9 of a runner while backfills run ---------------------------------------------
    r = ctl(env, "backfill", "create", "daily", "--param", "day", "--from", "1", "--to", "60",
            "--step", "1", "--input", '{"ms": 200}', "--concurrency", "6", "--json")
    bid2 = json.loads(r.stdout or "{}").get("id", "")
    check("an integer backfill of 60 partitions", r.returncode == 0 and bid2, r.stderr)
    wait_until("some done", lambda: status(env, bid2).get("done", 0) >= 10, 30)
    q(url, f"UPDATE cairn.runner_instances SET created_at = created_at - interval '40 days', "
           f"completed_at = completed_at - interval '40 days' WHERE backfill_id = '{bid2}' "
           "AND status = 'completed'")
    r = ctl(env, "prune", "--older-than", "30d")
    check("... but keeps those of a backfill still going", r.returncode == 0 and
          partitions(url, bid2, "status = 'completed'") >= 10, r.stdout + r.stderr)
    done_key = f'cairn_backfill_partitions{{backfill="{bid2}",workflow="daily",state="done"}}'
    # a runner's figures are those of its last tick (a quarter of a second old at most)
    check("/metrics shows its partitions by state", wait_until(
        "metrics", lambda: e2e.metrics(port).get(done_key, 0) >= 10, 10),
        str({k: v for k, v in e2e.metrics(port).items() if "backfill" in k})[:600])
    r1.kill9()
    check("after kill -9 of a runner the backfill completes", wait_until(
        "completed", lambda: status(env, bid2).get("state") == "completed", 90),
        str(status(env, bid2)))
    ok, row = exactly_once(url, bid2, 60)
    check("... each partition exactly once", ok, row)
    ints = q(url, "SELECT string_agg(input->>'day', ',' ORDER BY backfill_index) FROM "
                  f"cairn.runner_instances WHERE backfill_id = '{bid2}'")
    check("integer partitions carry integers", ints == ",".join(str(i) for i in range(1, 61)),
          ints[:80])
    del r2

    # ---- failures, retry-failed, cancel -------------------------------------------------------
    r = ctl(env, "backfill", "create", "kid_fail", "--param", "kind", "--from", "1", "--to", "4",
            "--step", "1", "--concurrency", "2", "--json")
    bid3 = json.loads(r.stdout or "{}").get("id", "")
    check("a backfill whose partitions fail ends failed", wait_until(
        "failed", lambda: status(env, bid3).get("state") == "failed", 60), str(status(env, bid3)))
    st = status(env, bid3)
    check("... counting them", st.get("failed") == 4 and st.get("done") == 0, str(st))
    r = ctl(env, "backfill", "retry-failed", bid3)
    check("retry-failed queues them again", r.returncode == 0 and "4 partition(s) queued again"
          in r.stdout, r.stdout + r.stderr)
    check("... and it runs, then fails again", wait_until(
        "failed again", lambda: status(env, bid3).get("state") == "failed" and
        q(url, "SELECT count(*) FROM cairn.instance_history h JOIN cairn.runner_instances ri "
               f"USING (instance_id) WHERE ri.backfill_id = '{bid3}'") == "4", 60),
        str(status(env, bid3)))
    r = ctl(env, "backfill", "create", "daily", "--param", "day", "--from", "1", "--to", "50",
            "--step", "1", "--input", '{"ms": 5000}', "--concurrency", "3", "--json")
    bid4 = json.loads(r.stdout or "{}").get("id", "")
    wait_until("started", lambda: partitions(url, bid4, "status = 'running'") == 3, 30)
    r = ctl(env, "backfill", "cancel", bid4)
    check("cancel cancels the running partitions", r.returncode == 0 and
          "3 partition(s) cancelled" in r.stdout, r.stdout + r.stderr)
    check("... which end cancelled, and nothing more starts", wait_until(
        "cancelled", lambda: partitions(url, bid4, "status = 'cancelled'") == 3, 30)
        and partitions(url, bid4) == 3 and status(env, bid4).get("state") == "cancelled",
        str(status(env, bid4)))
    r = ctl(env, "backfill", "resume", bid4)
    check("a cancelled backfill cannot be resumed", r.returncode == 1 and
          "only a paused backfill can be resumed" in r.stderr, r.stderr)
    r = ctl(env, "backfill", "status", "00000000-0000-4000-8000-000000000000")
    check("status of an unknown backfill", r.returncode == 1 and "no backfill" in r.stderr,
          r.stderr)


def main():
    return e2e.main_in_fresh_db("backfills", run_all)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): concurrency limits and per-workflow idempotency keys, with two real
runners, two real workers and the real PostgreSQL that scripts/test starts (a fresh database of
its own, dropped at the end).

- `register --max-running 3`: with 12 instances queued and two runners with 16 worker slots
  between them, never more than 3 run at once (sampled in the database throughout), all 12
  complete, the higher priority ones start first and the rest in age order; `inspect` of a
  waiting one says it waits for a concurrency slot; `limit list` shows running and waiting;
- a limit lowered while instances wait holds from then on; `limit set W none` lets the rest run;
- `run --concurrency-key K`: one instance per key at a time (the default), instances without a
  key unhindered; `--per-key 2` allows two;
- kill -9 of a runner holding limited instances: the limit still holds while the other runner
  takes them over, and all complete;
- bad limits and keys are refused with clear messages;
- an idempotency key is unique per workflow: the same key under another workflow makes another
  instance.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import calendar
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


class Sampler(e2e.Sampler):
    """Samples, every few milliseconds until stopped, the largest number of running instances
    of a workflow, overall and per concurrency key."""

    def __init__(self, url, workflow):
        self.url, self.workflow = url, workflow
        self.max_total, self.max_key = 0, 0
        super().__init__()

    def sample(self):
        total, keyed = map(int, q(self.url, (
            "SELECT count(*) || ' ' || coalesce(max(n) FILTER (WHERE k IS NOT NULL), 0) "
            "FROM (SELECT concurrency_key AS k, count(*) OVER (PARTITION BY "
            "concurrency_key) AS n FROM cairn.runner_instances WHERE workflow_name = "
            f"'{self.workflow}' AND status = 'running') r")).split())
        self.max_total = max(self.max_total, total)
        self.max_key = max(self.max_key, keyed)


def completed(url, workflow):
    return int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = "
                      f"'{workflow}' AND status = 'completed'"))


def run_all(url, env, tmp):
    src = os.path.join(e2e.ROOT, "tests/integration/children/kid_hold.cairn")
    r = ctl(env, "migrate")
    check("cairnctl migrate", r.returncode == 0, r.stderr)
    r = ctl(env, "register", src, "--name", "limited", "--max-running", "3")
    check("register --max-running 3", r.returncode == 0, r.stderr)
    r = ctl(env, "register", src, "--name", "limited", "--max-per-key", "2")
    check("register --max-per-key alone keeps the running limit", r.returncode == 0 and q(
        url, "SELECT max_running || ' ' || max_per_key FROM cairn.workflow_limits WHERE "
             "workflow_name = 'limited'") == "3 2", r.stderr + q(
        url, "SELECT max_running, max_per_key FROM cairn.workflow_limits"))
    for name in ("keyed", "free", "other"):
        r = ctl(env, "register", src, "--name", name)
        check(f"register {name}", r.returncode == 0, r.stderr)

    # ---- bad input ----------------------------------------------------------------------------
    r = ctl(env, "limit", "set", "nope", "2")
    check("a limit on an unknown workflow is refused",
          r.returncode != 0 and 'unknown workflow "nope"' in r.stderr, r.stderr)
    r = ctl(env, "limit", "set", "limited", "0")
    check("a limit of 0 is refused", r.returncode == 2 and "1..1000000 or none" in r.stderr,
          r.stderr)
    r = ctl(env, "limit", "set", "limited", "2", "--per-key", "0")
    check("a per-key limit of 0 is refused", r.returncode == 2 and "per-key" in r.stderr,
          r.stderr)
    r = ctl(env, "run", "keyed", "--input", '{"ms": 1}', "--concurrency-key", "")
    check("an empty concurrency key is refused", r.returncode != 0 and
          "concurrency key is empty" in r.stderr, r.stderr)
    r = ctl(env, "run", "keyed", "--input", '{"ms": 1}', "--concurrency-key", "k" * 300)
    check("a concurrency key over 255 bytes is refused", r.returncode != 0 and
          "over the limit of 255 bytes" in r.stderr, r.stderr)

    # ---- a limit set while a runner holds rows of the workflow marks them too -----------------
    # (a claim-like transaction takes two of five queued instances and commits a moment later;
    # limit_set must wait for it and count them as holding slots, not skip them)
    r = ctl(env, "register", src, "--name", "race")
    check("register race", r.returncode == 0, r.stderr)
    q(url, "SELECT count(cairn.enqueue('race', jsonb_build_object('ms', 1))) "
           "FROM generate_series(1, 5)")
    claim = subprocess.Popen(
        ["psql", "-X", "-q", "-d", url, "-c",
         "BEGIN; WITH c AS (SELECT q.instance_id FROM cairn.queued_instances q JOIN "
         "cairn.runner_instances ri USING (instance_id) WHERE ri.workflow_name = 'race' "
         "ORDER BY q.instance_id LIMIT 2) UPDATE cairn.queued_instances q SET lock_uuid = "
         "gen_random_uuid(), lock_expires_at = now() + interval '1 hour' FROM c WHERE "
         "q.instance_id = c.instance_id; UPDATE cairn.runner_instances SET status = 'running' "
         "WHERE instance_id IN (SELECT instance_id FROM cairn.queued_instances WHERE lock_uuid "
         "IS NOT NULL AND instance_id IN (SELECT instance_id FROM cairn.runner_instances WHERE "
         "workflow_name = 'race')); SELECT pg_sleep(0.3); COMMIT;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PGAPPNAME="limits-claim-race"))
    # limit_set comes once the claim holds its rows (it sleeps), not after a guess at psql's
    # start-up; the sleep stays under limit_set's lock_timeout
    check("the claim-like transaction holds its rows", wait_until(
        "claim sleeps", lambda: q(url, "SELECT count(*) FROM pg_stat_activity WHERE "
                                       "application_name = 'limits-claim-race' AND "
                                       "wait_event = 'PgSleep'") == "1", 10))
    r = ctl(env, "limit", "set", "race", "1")
    claim.wait(timeout=30)
    check("limit set during a claim marks every instance (the claimed ones hold slots)",
          r.returncode == 0 and q(url, "SELECT running || ' ' || waiting FROM "
                                       "cairn.limit_status WHERE workflow_name = 'race'")
          == "2 3", r.stdout + r.stderr + q(url, "SELECT running, waiting FROM "
                                                  "cairn.limit_status"))
    q(url, "SELECT cairn.cancel(instance_id) FROM cairn.runner_instances WHERE workflow_name = "
           "'race'")
    r = ctl(env, "limit", "delete", "race")
    check("limit delete removes the row", r.returncode == 0 and q(
        url, "SELECT count(*) FROM cairn.workflow_limits WHERE workflow_name = 'race'") == "0",
        r.stdout + r.stderr)
    r = ctl(env, "limit", "delete", "race")
    check("... a second time there is nothing to do (exit 6)", r.returncode == 6, r.stdout)

    # ---- idempotency keys are unique per workflow ---------------------------------------------
    a1 = ctl(env, "run", "free", "--input", '{"ms": 1}', "--idempotency-key", "same").stdout
    a2 = ctl(env, "run", "free", "--input", '{"ms": 1}', "--idempotency-key", "same").stdout
    b1 = ctl(env, "run", "other", "--input", '{"ms": 1}', "--idempotency-key", "same").stdout
    check("the same idempotency key in one workflow gives the same instance",
          a1 and a1 == a2, f"{a1!r} {a2!r}")
    check("... and under another workflow a new instance of that workflow",
          b1 and b1 != a1 and q(url, f"SELECT workflow_name FROM cairn.runner_instances WHERE "
                                     f"instance_id = '{b1.strip()}'") == "other", b1)

    # ---- a workflow limit: priority, then age --------------------------------------------------
    # Queued in one transaction, before any runner runs: the claim order is the limit's alone.
    # The three first (priority 5) hold the limit full for 5 s, with no gap for inspect to fall
    # into (at 700 ms they finished together and a poll could land before the next claim).
    q(url, "SELECT count(cairn.enqueue('limited', jsonb_build_object('ms', CASE WHEN g > 9 "
           "THEN 5000 ELSE 700 END, 'i', g), priority => CASE WHEN g > 9 THEN 5 ELSE 0 END)) "
           "FROM generate_series(1, 12) g")
    lst = json.loads(ctl(env, "limit", "list", "--json").stdout or "[]")
    check("limit list shows the limit and 12 waiting", any(
        x["workflow"] == "limited" and x["max_running"] == 3 and x["waiting"] == 12
        and x["running"] == 0 for x in lst), str(lst))
    sock1, sock2 = f"ipc://{tmp}/r1.sock", f"ipc://{tmp}/r2.sock"
    r1 = e2e.runner(env, tmp, "runner1", sock1)
    e2e.worker(env, tmp, "worker1", sock1)
    e2e.runner(env, tmp, "runner2", sock2)
    e2e.worker(env, tmp, "worker2", sock2)
    s = Sampler(url, "limited")
    wait_until("some run", lambda: int(q(url, "SELECT count(*) FROM cairn.runner_instances "
                                              "WHERE workflow_name = 'limited' AND status = "
                                              "'running'")) >= 3, 30)
    waiting = q(url, "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = "
                     "'limited' AND status = 'queued' ORDER BY created_at DESC LIMIT 1")
    text = ctl(env, "inspect", waiting).stdout if waiting else ""
    check("inspect says a waiting instance waits for a concurrency slot",
          "waiting for a concurrency slot: workflow runs 3 of at most 3" in text, text)
    js = json.loads(ctl(env, "inspect", waiting, "--json").stdout or "{}") if waiting else {}
    check("... in its JSON too", any("concurrency slot" in w for w in js.get("waiting_for", [])),
          str(js.get("waiting_for")))
    check("all 12 complete", wait_until("completed", lambda: completed(url, "limited") == 12, 60),
          str(completed(url, "limited")))
    s.stop()
    check("never more than 3 ran at once, and 3 did", s.max_total == 3,
          f"max {s.max_total} over {s.samples} samples")
    order = q(url, "SELECT string_agg((input->>'i'), ',' ORDER BY started_at) FROM "
                   "cairn.runner_instances WHERE workflow_name = 'limited'").split(",")
    check("the higher priority ones start first, the rest in age order",
          sorted(order[:3], key=int) == ["10", "11", "12"] and order[3:] == [
              str(i) for i in range(1, 10)], str(order))
    check("no slot is left held", q(url, "SELECT count(*) FROM cairn.queued_instances WHERE "
                                         "limit_name = 'limited'") == "0")

    # ---- lowering a limit while instances wait; removing it -----------------------------------
    q(url, "SELECT count(cairn.enqueue('limited', jsonb_build_object('ms', 600))) "
           "FROM generate_series(1, 8)")
    wait_until("3 run", lambda: int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE "
                                           "workflow_name = 'limited' AND status = 'running'"))
               == 3, 30)
    r = ctl(env, "limit", "set", "limited", "1")
    check("limit set lowers the limit", r.returncode == 0 and "at most 1 running" in r.stdout,
          r.stdout + r.stderr)
    # the ones claimed under the old limit finish (waited for, not slept on: under ASan on a
    # loaded machine one second was not always enough)
    before = q(url, "SELECT string_agg(quote_literal(instance_id), ',') FROM "
                    "cairn.runner_instances WHERE workflow_name = 'limited' AND status = "
                    "'running'")
    check("the ones running under the old limit finish", not before or wait_until(
        "old ones", lambda: q(url, "SELECT count(*) FROM cairn.runner_instances WHERE "
                                   f"instance_id IN ({before}) AND status <> 'completed'") == "0",
        30), before)
    s = Sampler(url, "limited")
    time.sleep(1.5)
    s.stop()
    check("from then on at most 1 runs", s.max_total == 1,
          f"max {s.max_total} over {s.samples} samples")
    # three more wait behind the limit of 1, so that several are queued when it goes
    q(url, "SELECT count(cairn.enqueue('limited', jsonb_build_object('ms', 600))) "
           "FROM generate_series(1, 3)")
    r = ctl(env, "limit", "set", "limited", "none")
    check("limit set none removes it", r.returncode == 0 and "no limit on the whole workflow"
          in r.stdout, r.stdout + r.stderr)
    s = Sampler(url, "limited")
    check("the rest complete", wait_until("completed", lambda: completed(url, "limited") == 23,
                                          30), str(completed(url, "limited")))
    s.stop()
    check("... several at once now", s.max_total >= 2, f"max {s.max_total}")

    # ---- concurrency keys ------------------------------------------------------------------
    s = Sampler(url, "keyed")
    for k, n in (("cust-a", 4), ("cust-b", 3)):
        for _ in range(n):
            r = ctl(env, "run", "keyed", "--input", '{"ms": 300}', "--concurrency-key", k)
            check(f"run --concurrency-key {k}", r.returncode == 0, r.stderr)
    q(url, "SELECT count(cairn.enqueue('keyed', jsonb_build_object('ms', 1500))) "
           "FROM generate_series(1, 3)")
    check("keyless instances of the same workflow are not held back",
          wait_until("keyless", lambda: int(q(url, "SELECT count(*) FROM cairn.runner_instances "
                                                   "WHERE workflow_name = 'keyed' AND status = "
                                                   "'running' AND concurrency_key IS NULL")) == 3,
                     10))
    check("all keyed complete", wait_until("completed", lambda: completed(url, "keyed") == 10,
                                           60), str(completed(url, "keyed")))
    s.stop()
    check("one instance per key at a time", s.max_key == 1,
          f"max per key {s.max_key} over {s.samples} samples")
    r = ctl(env, "limit", "set", "keyed", "none", "--per-key", "2")
    check("limit set --per-key 2", r.returncode == 0 and "at most 2 per concurrency key" in
          r.stdout, r.stdout + r.stderr)
    s = Sampler(url, "keyed")
    q(url, "SELECT count(cairn.enqueue('keyed', jsonb_build_object('ms', 500), "
           "concurrency_key => 'cust-c')) FROM generate_series(1, 6)")
    check("they complete", wait_until("completed", lambda: completed(url, "keyed") == 16, 60))
    s.stop()
    check("two per key at a time", s.max_key == 2, f"max per key {s.max_key}")

    # ---- kill -9 of a runner holding limited instances ----------------------------------------
    r = ctl(env, "limit", "set", "limited", "4")
    check("limit set 4", r.returncode == 0, r.stderr)
    q(url, "SELECT count(cairn.enqueue('limited', jsonb_build_object('ms', 1500))) "
           "FROM generate_series(1, 10)")
    wait_until("runner1 holds some", lambda: int(q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'limited' AND "
             "status = 'running'")) == 4, 30)
    s = Sampler(url, "limited")
    r1.kill9()
    check("after kill -9 of a runner all complete", wait_until(
        "completed", lambda: completed(url, "limited") == 33, 90), str(completed(url, "limited")))
    s.stop()
    check("... and the limit held meanwhile", s.max_total <= 4 and s.max_total >= 1,
          f"max {s.max_total} over {s.samples} samples")
    check("no action result recorded twice", e2e.duplicate_done(url) == "0")

    # ---- what inspect says other instances wait for -------------------------------------------
    root = e2e.ROOT
    for f in ("children/kid_hold.cairn", "children/waiter.cairn", "workflows/nap.cairn",
              "workflows/backs_off.cairn"):
        r = ctl(env, "register", os.path.join(root, "tests/integration", f))
        check(f"register {f}", r.returncode == 0, r.stderr)

    def says(iid, text):
        return text in ctl(env, "inspect", iid).stdout

    later = ctl(env, "run", "free", "--input", '{"ms": 1}', "--at", "2099-01-01T00:00:00Z")
    later = later.stdout.strip()
    check("inspect: an instance enqueued --at later waits for its start time",
          says(later, "waiting for its start time, 2099-01-01"), ctl(env, "inspect", later).stdout)
    nap = ctl(env, "run", "nap", "--input", '{"seconds": 40}').stdout.strip()
    check("inspect: a sleeping instance waits for its sleep", wait_until(
        "sleeping", lambda: says(nap, "waiting for a sleep, until "), 30),
        ctl(env, "inspect", nap).stdout)
    boff = ctl(env, "run", "backs_off").stdout.strip()
    # Backoffs have full jitter (docs/semantics.md): retry N waits uniform in [0, 30 s * 2^(N-2)],
    # so a short draw can run attempt 2 before a poll sees its wait; whichever retry waits, the
    # reason names it and its wake time lies within that retry's cap of now.
    seen = {}

    def backoff_reason():
        out = ctl(env, "inspect", boff).stdout
        m = re.search(r"waiting for a retry backoff: `std\.fail` attempt (\d+) at "
                      r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", out)
        if m is None:
            return False
        seen["attempt"], seen["at"] = int(m.group(1)), m.group(2)
        seen["ahead"] = calendar.timegm(time.strptime(m.group(2), "%Y-%m-%dT%H:%M:%SZ")) - \
            time.time()
        return True
    ok = wait_until("backoff", backoff_reason, 30)
    check("inspect: a failed attempt waits for its retry backoff", ok and
          2 <= seen["attempt"] <= 4 and -5 <= seen["ahead"] <= 30 * 2 ** (seen["attempt"] - 2) + 1,
          f"{seen} {ctl(env, 'inspect', boff).stdout}")
    wt = ctl(env, "run", "waiter", "--input", '{"ms": 30000}').stdout.strip()
    check("inspect: a parent waits for its child workflow", wait_until(
        "child", lambda: says(wt, "waiting for child workflow kid_hold "), 30),
        ctl(env, "inspect", wt).stdout)
    js = json.loads(ctl(env, "inspect", wt, "--json").stdout or "{}")
    child = js.get("children", [{}])[0].get("id", "") if js.get("children") else ""
    check("inspect: the child waits for its action's result from a worker", child and wait_until(
        "held", lambda: says(child, "waiting for the result of `std.sleep` (attempt 1)"), 30),
        ctl(env, "inspect", child).stdout if child else str(js)[:500])


def main():
    return e2e.main_in_fresh_db("limits", run_all)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): the races a send can run, with a real runner and the real PostgreSQL
(a fresh database of its own, dropped at the end); the workflows are in
tests/integration/signals/.

- a signal racing the park write: 200 instances, each signalled within 50 ms of its enqueue,
  from four sessions, while the runner claims them and registers their waits; each takes its
  own signal, once, whether the send found the wait registered (delivered) or not (buffered);
- a timeout racing a signal: 100 one-second waits, each signalled within 40 ms of its
  deadline; exactly one wins each: the instance returns the payload and the signal is
  consumed, or it returns its default and the signal stays buffered (or, sent after the end,
  was refused and stored nothing);
- 1 000 waiters on one key: one publish wakes all of them (woken = 1000) and each returns the
  event's payload;
- kill -9 of the runner while a mailbox takes 2 000 buffered signals, one per write and its
  acknowledgement: another runner ends it with every signal once, in the order sent.
"""

import json
import os
import random
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, ctl, q, wait_until = e2e.check, e2e.ctl, e2e.q, e2e.wait_until


def in_sessions(url, jobs, fn, sessions=4):
    """fn(conn, job) for every job, spread over `sessions` connections at once; returns
    {job: what fn returned, or the exception it raised}."""
    out, lock = {}, threading.Lock()

    def work(part):
        with psycopg.connect(url, autocommit=True) as c:
            for job in part:
                try:
                    got = fn(c, job)
                except psycopg.Error as ex:
                    got = ex
                with lock:
                    out[job] = got
    threads = [threading.Thread(target=work, args=(jobs[k::sessions],)) for k in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def results(url, workflow):
    rows = q(url, f"SELECT instance_id || ' ' || result::text FROM cairn.runner_instances "
                  f"WHERE workflow_name = '{workflow}' AND status = 'completed'")
    return {r.split(" ", 1)[0]: json.loads(r.split(" ", 1)[1]) for r in rows.splitlines()}


def send(c, iid):
    return c.execute("SELECT cairn.signal(%s, 'go', %s)", (iid, json.dumps(iid))).fetchone()[0]


def park_race(url, env):
    ctl(env, "register", os.path.join(e2e.ROOT, "tests/integration/signals/mailbox.cairn"),
        "--name", "parked")

    def enqueue_and_signal(c, i):
        iid = str(c.execute("SELECT cairn.enqueue('parked', %s)",
                            (json.dumps({"n": 1, "i": i}),)).fetchone()[0])
        time.sleep(random.uniform(0, 0.05))  # around the claim and the write that parks it
        return iid, c.execute("SELECT cairn.signal(%s, 'item', %s)",
                              (iid, json.dumps(i))).fetchone()[0]
    answers = in_sessions(url, list(range(200)), enqueue_and_signal)
    bad = [a for a in answers.values() if not isinstance(a, tuple) or
           a[1] not in ("delivered", "buffered")]
    kinds = sorted({a[1] for a in answers.values() if isinstance(a, tuple)})
    check("200 instances signalled as their waits are being registered: each signal delivered "
          f"or buffered ({', '.join(kinds)} here)", not bad, str(bad[:3]))
    check("... every instance completes with its own signal", wait_until(
        "parked done", lambda: e2e.all_completed(url, "parked", 200), 120) and all(
        results(url, "parked").get(a[0]) == [i] for i, a in answers.items()),
        e2e.counts(url, "parked"))
    check("... each signal taken once, by a wait of its own", q(
        url, "SELECT count(*) FILTER (WHERE consumed_at IS NOT NULL) || ' ' || "
             "count(DISTINCT consumed_exec) FROM cairn.signals s JOIN cairn.runner_instances "
             "ri USING (instance_id) WHERE ri.workflow_name = 'parked'") == "200 200")


def timeout_race(url, env):
    ctl(env, "register", os.path.join(e2e.ROOT, "tests/integration/signals/race.cairn"))
    q(url, "SELECT count(cairn.enqueue('race', jsonb_build_object('i', g))) "
           "FROM generate_series(1, 100) g")
    check("100 one-second waits registered", wait_until("race waits", lambda: q(
        url, "SELECT count(*) FROM cairn.waits w JOIN cairn.runner_instances ri USING "
             "(instance_id) WHERE ri.workflow_name = 'race'") == "100", 60))
    # Each send is timed to its wait's deadline, on the database's clock: the race is the point.
    rows = q(url, "SELECT instance_id || ' ' || extract(epoch FROM timeout_at - now()) FROM "
                  "cairn.waits")
    start = time.monotonic()
    due = {r.split()[0]: start + float(r.split()[1]) + random.uniform(-0.04, 0.04)
           for r in rows.splitlines()}

    def at_deadline(c, iid):
        time.sleep(max(0.0, due[iid] - time.monotonic()))
        return send(c, iid)
    answers = in_sessions(url, sorted(due, key=due.get), at_deadline, sessions=8)
    check("... every instance ends", wait_until(
        "race done", lambda: e2e.all_completed(url, "race", 100), 60), e2e.counts(url, "race"))
    got = results(url, "race")
    sig = {r.split()[0]: r.split()[1] for r in q(
        url, "SELECT instance_id || ' ' || (consumed_at IS NOT NULL) FROM cairn.signals"
    ).splitlines()}
    won = [i for i in due if got.get(i) == i]
    lost = [i for i in due if got.get(i) == "timeout"]
    wrong = [i for i in due if i not in won and i not in lost]
    wrong += [i for i in won if sig.get(i) != "true"]  # the payload, and the signal consumed
    wrong += [i for i in lost if sig.get(i, "false") != "false" or (
        i not in sig and not isinstance(answers.get(i), psycopg.errors.ObjectNotInPrerequisiteState))]
    check(f"a timeout racing a signal: exactly one wins each ({len(won)} signals, {len(lost)} "
          "timeouts); a signal that lost stays buffered, or was refused once the instance ended",
          not wrong, str([(i, got.get(i), sig.get(i), answers.get(i)) for i in wrong[:3]]))


def many_waiters(url, env):
    ctl(env, "register", os.path.join(e2e.ROOT, "tests/integration/signals/keyed.cairn"),
        "--name", "crowd")
    q(url, "SELECT count(cairn.enqueue('crowd', '{\"key\": \"k-crowd\"}')) "
           "FROM generate_series(1, 1000) g")
    check("1 000 instances wait on one key", wait_until("crowd waits", lambda: q(
        url, "SELECT count(*) FROM cairn.waits WHERE key = 'k-crowd'") == "1000", 120))
    r = ctl(env, "event", "ready", "k-crowd", "--payload", '"all"', "--json")
    check("... one publish wakes every one of them", r.returncode == 0 and
          json.loads(r.stdout).get("woken") == 1000, r.stdout + r.stderr)
    check("... and each returns the event's payload", wait_until(
        "crowd done", lambda: e2e.all_completed(url, "crowd", 1000), 120) and q(
        url, "SELECT count(*) FROM cairn.runner_instances WHERE workflow_name = 'crowd' AND "
             "result = '\"all\"'") == "1000", e2e.counts(url, "crowd"))


def kill_mid_stream(url, env, tmp, r1):
    """A mailbox of 2 000 buffered signals takes one per step, each taken in a write the runner
    then acknowledges: a kill -9 once about half are taken lands between some write and its
    acknowledgement (or within either); the next runner goes on from what was committed."""
    iid = q(url, "SELECT cairn.enqueue('parked', '{\"n\": 2000}')")
    q(url, f"SELECT count(cairn.signal('{iid}', 'item', to_jsonb(g))) FROM generate_series(1, "
           "2000) g")
    at = random.randint(300, 1500)
    taken = f"SELECT count(*) FROM cairn.signals WHERE instance_id = '{iid}' AND consumed_at " \
            "IS NOT NULL"
    wait_until("half taken", lambda: int(q(url, taken)) >= at, 60)
    r1.kill9()
    before = q(url, taken)
    sock = f"ipc://{tmp}/r2.sock"
    e2e.runner(env, tmp, "runner2", sock, "--evict-child-wait-ms", "200")
    order = json.loads(q(url, "SELECT json_agg(payload ORDER BY id) FROM cairn.signals WHERE "
                              f"instance_id = '{iid}'"))
    check(f"kill -9 with {before} of 2000 signals taken: the next runner ends the mailbox with "
          "every signal once, in the order they were sent", wait_until(
              "mailbox done", lambda: q(url, "SELECT status FROM cairn.runner_instances WHERE "
                                             f"instance_id = '{iid}'") == "completed", 90) and
          json.loads(q(url, "SELECT result::text FROM cairn.runner_instances WHERE instance_id "
                            f"= '{iid}'")) == order,
          q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{iid}'"))
    check("... each taken by a wait of its own", q(
        url, "SELECT count(DISTINCT consumed_exec) FROM cairn.signals WHERE instance_id = "
             f"'{iid}'") == "2000")


def run_all(url, env, tmp):
    r = ctl(env, "migrate")
    check("migrate", r.returncode == 0, r.stderr)
    sock = f"ipc://{tmp}/r1.sock"
    r1 = e2e.runner(env, tmp, "runner1", sock, "--evict-child-wait-ms", "200")
    e2e.worker(env, tmp, "worker1", sock)
    park_race(url, env)
    timeout_race(url, env)
    many_waiters(url, env)
    kill_mid_stream(url, env, tmp, r1)
    check("no result recorded twice", e2e.duplicate_done(url) == "0", e2e.duplicate_done(url))


def main():
    return e2e.main_in_fresh_db("signal_races", run_all)


if __name__ == "__main__":
    sys.exit(main())

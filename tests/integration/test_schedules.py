#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): schedules, with two real runners, a real worker and the real
PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end).

- `cairnctl schedule add` checks its cron expression (line and column of the error), its zone
  and its workflow; `schedule next` shows the slots of a cron schedule across both daylight
  saving changes of America/New_York (a slot in the skipped hour an hour later, the repeated
  hour once);
- an `--every 1s` schedule enqueues one instance per slot with two runners looking for due
  schedules, each slot exactly once (the unique slot), and `list --schedule` / `inspect` show
  which schedule started an instance;
- pause stops it, resume starts again from now (nothing caught up), trigger runs it once by
  hand, delete removes it;
- after downtime (next_at in the past), --catch-up skip enqueues nothing missed, one enqueues
  the latest, all every missed slot;
- a schedule added by SQL with an expression no runner can read is paused with the reason;
- cairn-runner, cairn-worker and cairnctl answer --version.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def count(url, name, extra=""):
    return int(q(url, f"SELECT count(*) FROM cairn.runner_instances WHERE schedule_name = "
                      f"'{name}' {extra}"))


def run_all(url, env, tmp):
    for prog, name in ((e2e.RUNNER, "cairn-runner"), (e2e.WORKER, "cairn-worker"),
                       (e2e.CTL, "cairnctl")):
        r = subprocess.run([prog, "--version"], capture_output=True, text=True, timeout=30)
        check(f"{name} --version", r.returncode == 0 and r.stdout.startswith(name + " 0."),
              r.stdout + r.stderr)
    src = os.path.join(e2e.ROOT, "tests/integration/children")
    for args in (["migrate"], ["register", f"{src}/kid_echo.cairn"]):
        r = ctl(env, *args)
        check(f"cairnctl {args[0]}", r.returncode == 0, r.stderr)

    # ---- adding: what is refused --------------------------------------------------------------
    for argv, why in (
            (["--cron", "*/5 * * *"], "expected 5 fields"),
            (["--cron", "0 25 * * *"], "column 3: hour 25 is out of range"),
            (["--cron", "0 9 * * MON", "--timezone", "Mars/Olympus"], "time zone"),
            (["--every", "10 ms"], "every_ms"),
            (["--cron", "0 9 * * *", "--every", "1 hour"], "usage")):
        r = ctl(env, "schedule", "add", "bad", "--workflow", "kid_echo", *argv)
        check(f"schedule add {' '.join(argv)} is refused ({why})",
              r.returncode != 0 and why in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "schedule", "add", "bad", "--workflow", "nope", "--every", "1 hour")
    check("a schedule of an unknown workflow is refused",
          r.returncode != 0 and 'unknown workflow "nope"' in r.stderr, r.stderr)
    check("nothing was added", q(url, "SELECT count(*) FROM cairn.schedules") == "0")

    # ---- cron slots across daylight saving changes ------------------------------------------
    r = ctl(env, "schedule", "add", "ny", "--workflow", "kid_echo", "--cron", "30 2 * * *",
            "--timezone", "America/New_York", "--input", '{"i": 1}', "--paused")
    check("a cron schedule in a zone is added (paused)", r.returncode == 0, r.stderr)
    spring = json.loads(ctl(env, "schedule", "next", "ny", "--from", "2026-03-06 12:00Z",
                            "--count", "3", "--json").stdout or "[]")
    check("spring forward: 02:30 does not exist on 2026-03-08 and runs at 03:30 EDT",
          [s["at"] for s in spring] == ["2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z",
                                        "2026-03-09T06:30:00Z"]
          and spring[1]["local"] == "2026-03-08 03:30", str(spring))
    fall = json.loads(ctl(env, "schedule", "next", "ny", "--from", "2026-10-31 12:00Z",
                          "--count", "2", "--json").stdout or "[]")
    check("fall back: 02:30 on 2026-11-01 runs once (EST)",
          [s["at"] for s in fall] == ["2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"], str(fall))
    hourly = json.loads(ctl(env, "schedule", "next", "ny", "--from", "2026-11-01 04:00Z",
                            "--count", "1", "--json").stdout or "[]")
    check("a slot's local time is shown in its zone", hourly and hourly[0]["local"] ==
          "2026-11-01 02:30", str(hourly))

    # ---- every 1s, two runners: each slot once ----------------------------------------------
    sock1, sock2 = f"ipc://{tmp}/r1.sock", f"ipc://{tmp}/r2.sock"
    e2e.runner(env, tmp, "runner1", sock1)
    e2e.worker(env, tmp, "worker1", sock1)
    e2e.runner(env, tmp, "runner2", sock2)
    e2e.worker(env, tmp, "worker2", sock2)
    r = ctl(env, "schedule", "add", "tick", "--workflow", "kid_echo", "--every", "1 second",
            "--input", '{"i": 7}')
    check("schedule add --every 1s", r.returncode == 0, r.stderr)
    check("it fires", wait_until("fired", lambda: count(url, "tick") >= 6, 30),
          str(count(url, "tick")))
    ctl(env, "schedule", "pause", "tick")
    time.sleep(1.5)
    n = count(url, "tick")
    slots = q(url, "SELECT count(DISTINCT schedule_slot) || ' ' || "
                   "extract(epoch FROM max(schedule_slot) - min(schedule_slot))::int "
                   "FROM cairn.runner_instances WHERE schedule_name = 'tick'").split()
    check("one instance per slot, slots a second apart, none missing",
          int(slots[0]) == n and int(slots[1]) == n - 1, f"{n} instances, {slots}")
    check("every one of them completed", wait_until(
        "completed", lambda: count(url, "tick", "AND status = 'completed'") == n, 30))
    lst = json.loads(ctl(env, "list", "--schedule", "tick", "--limit", "100", "--json").stdout
                     or "[]")
    check("list --schedule shows them, with the schedule and the slot",
          len(lst) == n and all(i["schedule"] == "tick" and i["schedule_slot"] for i in lst),
          str(lst[:1]))
    text = ctl(env, "inspect", lst[0]["id"]).stdout if lst else ""
    check("inspect names the schedule and the slot", "schedule    tick (slot " in text, text)

    # ---- pause, resume, trigger, delete ----------------------------------------------------
    time.sleep(2)
    check("paused, it fires no more", count(url, "tick") == n, str(count(url, "tick")))
    r = ctl(env, "schedule", "trigger", "tick")
    tid = r.stdout.strip()
    check("trigger runs it once by hand", r.returncode == 0 and wait_until(
        "triggered", lambda: q(url, f"SELECT status || ' ' || (schedule_slot IS NULL) FROM "
                                    f"cairn.runner_instances WHERE instance_id = '{tid}'")
        == "completed true", 30), r.stdout + r.stderr)
    ctl(env, "schedule", "resume", "tick")
    check("resumed, it fires again", wait_until(
        "resumed", lambda: count(url, "tick") >= n + 3, 30), str(count(url, "tick")))
    gaps = q(url, "SELECT count(*) FILTER (WHERE nx - schedule_slot > interval '2.5 s') || ' ' "
                  "|| count(*) FILTER (WHERE nx - schedule_slot <> interval '1 s') FROM (SELECT "
                  "schedule_slot, lead(schedule_slot) OVER (ORDER BY schedule_slot) AS nx FROM "
                  "cairn.runner_instances WHERE schedule_name = 'tick' AND schedule_slot IS NOT "
                  "NULL) g WHERE nx IS NOT NULL")
    check("no slot of the paused time was caught up: one gap, every other slot 1 s apart",
          gaps == "1 1", gaps)
    r = ctl(env, "schedule", "delete", "tick")
    check("delete", r.returncode == 0 and q(url, "SELECT count(*) FROM cairn.schedules WHERE "
                                                 "name = 'tick'") == "0", r.stderr)
    r = ctl(env, "schedule", "pause", "tick")
    check("pause of an unknown schedule exits 1", r.returncode == 1, r.stderr)

    # ---- catch-up after downtime -------------------------------------------------------------
    for mode in ("skip", "one", "all"):
        name = f"late_{mode}"
        r = ctl(env, "schedule", "add", name, "--workflow", "kid_echo", "--every", "1 minute",
                "--catch-up", mode, "--input", '{"i": 2}', "--paused")
        check(f"schedule add --catch-up {mode}", r.returncode == 0, r.stderr)
        # As if no runner had run for 10 minutes: the next slot is 10 minutes and a bit ago.
        q(url, f"UPDATE cairn.schedules SET paused = false, next_at = now() - interval "
               f"'10 minutes 30 seconds' WHERE name = '{name}'")
    want = {"skip": 0, "one": 1, "all": 11}
    moved = wait_until("caught up", lambda: q(
        url, "SELECT count(*) FROM cairn.schedules WHERE name LIKE 'late_%' AND next_at > "
             "now()") == "3", 30)
    check("the runners moved the three late schedules past now", moved)
    for mode, n_want in want.items():
        got = count(url, f"late_{mode}")
        check(f"--catch-up {mode}: {n_want} missed slot(s) enqueued", got == n_want, str(got))

    # ---- a schedule from SQL that no runner can read ----------------------------------------
    q(url, "SELECT cairn.schedule_add('sqlbad', 'kid_echo', '0 0 31 2 *')")
    check("a runner pauses a schedule with no slot, saying why", wait_until(
        "paused", lambda: q(url, "SELECT paused || ' ' || coalesce(error, '') FROM "
                                 "cairn.schedules WHERE name = 'sqlbad'")
        == "true its expression has no more slots", 30),
        q(url, "SELECT paused, error FROM cairn.schedules WHERE name = 'sqlbad'"))
    q(url, "SELECT cairn.schedule_add('sqlbad2', 'kid_echo', '0 0 * *')")
    check("... and one whose expression does not parse", wait_until(
        "paused", lambda: q(url, "SELECT paused || ' ' || coalesce(error, '') FROM "
                                 "cairn.schedules WHERE name = 'sqlbad2'").startswith(
            "true expected 5 fields"), 30),
        q(url, "SELECT paused, error FROM cairn.schedules WHERE name = 'sqlbad2'"))


def main():
    return e2e.main_in_fresh_db("schedules", run_all)


if __name__ == "__main__":
    sys.exit(main())

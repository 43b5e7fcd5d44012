#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): the least-privilege roles of sql/0016, with a real runner and worker
logged in as a member of cairn_runner, cairnctl as a member of cairn_app, and the real
PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end, with the
login roles this test makes).

- the application role registers, enqueues, reads, cancels, schedules, limits and backfills
  through cairnctl; the runner role runs instances end to end (an action, a child workflow, a
  schedule's slot, a backfill's partitions);
- neither can create, alter, drop or truncate anything in the schema (hand-written SQL), nor
  write which migrations ran; the application role cannot write the fleet table; `cairnctl
  migrate` as the application role fails, saying why.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until
SUFFIX = f"{os.getpid()}_{random.randint(0, 99999)}"
APP, RUNNER = f"app_{SUFFIX}", f"run_{SUFFIX}"


def as_user(url, user):
    return re.sub(r"^postgresql://[^@/]*@", f"postgresql://{user}@", url)


def denied(url, sql):
    """Runs sql; returns the error text (None if it succeeded)."""
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                       capture_output=True, text=True, timeout=60)
    return r.stderr.strip() if r.returncode != 0 else None


def run_all(url, env, tmp):
    root = os.path.join(e2e.ROOT, "tests/integration")
    r = ctl(env, "migrate")
    check("cairnctl migrate (as the owner)", r.returncode == 0, r.stderr)
    q(url, f"CREATE ROLE {APP} LOGIN IN ROLE cairn_app")
    q(url, f"CREATE ROLE {RUNNER} LOGIN IN ROLE cairn_runner")
    app_url, run_url = as_user(url, APP), as_user(url, RUNNER)
    app = dict(env, CAIRN_DATABASE_URL=app_url)
    check("the application role connects as itself", q(app_url, "SELECT current_user") == APP)

    # ---- the application role through cairnctl ----------------------------------------------
    for f in ("children/kid_echo.cairn", "children/kid_double.cairn", "children/parent_one.cairn",
              "workflows/daily.cairn"):
        r = ctl(app, "register", os.path.join(root, f))
        check(f"app: register {f}", r.returncode == 0, r.stderr)
    ids = [ctl(app, "run", "parent_one", "--input", json.dumps({"n": i})).stdout.strip()
           for i in range(5)]
    check("app: run", all(len(i) == 36 for i in ids), str(ids))
    for args in (["limit", "set", "kid_echo", "4"], ["schedule", "add", "tick", "--workflow",
                 "kid_echo", "--every", "1 second", "--input", '{"i": 1}'],
                 ["retention", "set", "kid_echo", "30d"], ["list", "--limit", "3"]):
        r = ctl(app, *args)
        check(f"app: {' '.join(args[:2])}", r.returncode == 0, r.stdout + r.stderr)
    r = ctl(app, "backfill", "create", "daily", "--param", "day", "--from", "1", "--to", "6",
            "--step", "1", "--input", '{"ms": 1}', "--concurrency", "3", "--json")
    bid = json.loads(r.stdout or "{}").get("id", "")
    check("app: backfill create", r.returncode == 0 and bid, r.stderr)
    victim = ctl(app, "run", "kid_echo", "--input", '{"i": 9}', "--at",
                 "2099-01-01T00:00:00Z").stdout.strip()
    r = ctl(app, "cancel", victim)
    check("app: cancel", r.returncode == 0, r.stdout + r.stderr)

    # ---- the runner role runs them ------------------------------------------------------------
    sock = f"ipc://{tmp}/r.sock"
    runner = e2e.runner(dict(env, CAIRN_DATABASE_URL=run_url), tmp, "runner", sock)
    e2e.worker(env, tmp, "worker", sock)
    check("runner role: the instances and their children complete", wait_until(
        "done", lambda: all(q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id "
                                   f"= '{i}'") == "completed" for i in ids), 60),
        runner.text()[-800:])
    check("... with their results", [json.loads(ctl(app, "result", i).stdout or "null")
                                     for i in ids] == [2 * n + 1 for n in range(5)])
    check("runner role: the schedule fires", wait_until(
        "fired", lambda: int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE "
                                    "schedule_name = 'tick' AND status = 'completed'")) >= 2, 30))
    check("runner role: the backfill completes", wait_until(
        "backfill", lambda: q(url, f"SELECT state FROM cairn.backfills WHERE id = '{bid}'") ==
        "completed", 60))
    check("runner role: it publishes itself in cairn.runners", wait_until(
        "row", lambda: q(url, "SELECT count(*) FROM cairn.runners") == "1", 15))
    check("runner role: no permission error in its log", "permission denied" not in
          runner.text(), runner.text()[-800:])

    # ---- what neither may do ----------------------------------------------------------------
    for who, u in (("app", app_url), ("runner", run_url)):
        for sql, what in (
                ("ALTER TABLE cairn.runner_instances ADD COLUMN x int", "alter a table"),
                ("DROP TABLE cairn.backfills", "drop a table"),
                ("CREATE TABLE cairn.mine (x int)", "create a table in the schema"),
                ("TRUNCATE cairn.runner_actions_done", "truncate a table"),
                ("CREATE INDEX ON cairn.runner_instances (input)", "create an index"),
                ("CREATE OR REPLACE FUNCTION cairn.enqueue() RETURNS int LANGUAGE sql AS "
                 "'SELECT 1'", "replace a function"),
                ("UPDATE cairn.schema_migrations SET applied_at = now()",
                 "rewrite which migrations ran")):
            err = denied(u, sql)
            check(f"{who} role may not {what}", err is not None and
                  ("must be owner" in err or "permission denied" in err), str(err))
    err = denied(app_url, "DELETE FROM cairn.runners")
    check("app role may not write the fleet table", err is not None and
          "permission denied" in err, str(err))
    check("app role may read it", q(app_url, "SELECT count(*) FROM cairn.runners") == "1")
    q(url, "CREATE TABLE cairn.zz_later (x int)")  # as a later migration would
    check("what a later migration creates is readable by the app role",
          denied(app_url, "SELECT count(*) FROM cairn.zz_later") is None)
    err = denied(app_url, "INSERT INTO cairn.zz_later VALUES (1)")
    check("... and not writable (applications write through the SQL API)",
          err is not None and "permission denied" in err, str(err))
    check("... and writable by the runner role",
          denied(run_url, "INSERT INTO cairn.zz_later VALUES (1)") is None)
    for sql, what in (
            ("UPDATE cairn.runner_instances SET priority = priority", "update its instances"),
            ("DELETE FROM cairn.queued_instances", "delete its queue rows"),
            ("INSERT INTO cairn.workflow_versions (workflow_name, workflow_version, ir_hash,"
             " source) VALUES ('x', 'v', 'h', 's')", "insert a workflow version"),
            ("SELECT 1 FROM cairn.runner_instances FOR UPDATE", "lock its instances' rows"),
            ("BEGIN; LOCK TABLE cairn.queued_instances IN EXCLUSIVE MODE; COMMIT",
             "lock the queue")):
        err = denied(app_url, sql)
        check(f"app role may not {what} by hand (only through the SQL API's functions)",
              err is not None and "permission denied" in err, str(err))
    fresh = f"roles_fresh_{SUFFIX}"
    q(e2e.BASE, f"CREATE DATABASE {fresh}")
    try:
        r = ctl(dict(env, CAIRN_DATABASE_URL=as_user(e2e.db_url(fresh), APP)), "migrate")
        check("cairnctl migrate as the application role fails, saying why",
              r.returncode != 0 and "permission denied" in r.stderr,
              f"exit {r.returncode}: {r.stderr}")
    finally:
        q(e2e.BASE, f"DROP DATABASE IF EXISTS {fresh} WITH (FORCE)")
    check("the runner stops gracefully", runner.term() == 0)


def main():
    return e2e.main_in_fresh_db("roles", run_all, roles=(APP, RUNNER))


if __name__ == "__main__":
    sys.exit(main())

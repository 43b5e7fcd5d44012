#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): tenants (sql/0017, 0018), with real runners and a worker, hand-written SQL
under each role, and the real PostgreSQL that scripts/test starts (a fresh database of its own,
dropped at the end, with the roles this test makes).

- two tenants register a workflow of the same name with different source; one runner, logged
  in as a member of cairn_runner, runs both tenants' instances, each with its own tenant's
  workflow (and child workflow, schedule, backfill);
- row-level security: for every table, a login acting as tenant A cannot select tenant B's
  rows, and writes no row by hand, not even its own (sql/0018: insert, update, delete, row and
  table locks refused); the SQL API's functions given B's ids refuse them; it cannot act as B;
  a login that acts as no tenant sees nothing; cairnctl --tenant lists only its tenant's
  instances; references across tenants are refused to any writer;
- fairness: tenant B's one instance, enqueued behind tenant A's backlog of 3 000, starts at the
  next claim, not after the backlog (counted in instances of A started meanwhile, not timed);
- a tenant's quota: never more of its instances running than the quota (sampled), and it is
  reached; other tenants unhindered.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import random
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until
# Roles belong to the cluster, which other tests share: every name is this run's own.
SUFFIX = f"{os.getpid()}_{random.randint(0, 99999)}"
A, B, C = f"ta_{SUFFIX}", f"tb_{SUFFIX}", f"tc_{SUFFIX}"
LOGIN, RUNNER, APP = f"tl_{SUFFIX}", f"tr_{SUFFIX}", f"tapp_{SUFFIX}"
ROLES = (LOGIN, RUNNER, APP, f"cairn_tenant_{A}", f"cairn_tenant_{B}", f"cairn_tenant_{C}")
# Listens on cairn_cancel as a tenant until it hears something (at most 20 s); prints the
# payloads it heard, as JSON.
LISTENER = """
import json, sys, time
import psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("SET ROLE " + sys.argv[2])
heard = []
conn.add_notify_handler(lambda n: heard.append(n.payload))
conn.execute("LISTEN cairn_cancel")
print("listening", flush=True)
end = time.monotonic() + 20
while time.monotonic() < end and not heard:
    conn.execute("SELECT 1")
    time.sleep(0.1)
print(json.dumps(heard))
"""


def as_user(url, user):
    return re.sub(r"^postgresql://[^@/]*@", f"postgresql://{user}@", url)


def attempt(url, sql):
    """Runs sql; returns (output, error text or None)."""
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c",
                        sql], capture_output=True, text=True, timeout=60)
    return r.stdout.strip(), (r.stderr.strip() if r.returncode != 0 else None)


def ids_of(url, tenant, workflow):
    return q(url, f"SELECT string_agg(quote_literal(instance_id), ',') FROM "
                  f"cairn.runner_instances WHERE tenant_id = '{tenant}' AND "
                  f"workflow_name = '{workflow}'")


def rls_checks(url, login_url):
    """Tenant A's login against every table holding B's rows."""
    b_ids = ids_of(url, B, "job")
    act = f"SET ROLE cairn_tenant_{A};"
    tables = {
        # table: (what picks B's rows, a column to write, an insert of a row of B's)
        "workflow_versions": (f"tenant_id = '{B}'", "source",
                              f"INSERT INTO cairn.workflow_versions (tenant_id, workflow_name,"
                              f" workflow_version, ir_hash, source) VALUES ('{B}', 'x', 'v',"
                              f" 'h', 's')"),
        "runner_instances": (f"tenant_id = '{B}'", "priority",
                             f"INSERT INTO cairn.runner_instances (tenant_id,"
                             f" workflow_version_id, workflow_name, input) SELECT '{B}', id,"
                             f" 'job', '{{}}' FROM cairn.workflow_versions LIMIT 1"),
        # (holds_slot: of the queue's columns, applications may write only the limits' marks)
        "queued_instances": (f"instance_id IN ({b_ids})", "holds_slot",
                             f"INSERT INTO cairn.queued_instances (instance_id,"
                             f" workflow_version_id) VALUES ({b_ids.split(',')[0]},"
                             f" gen_random_uuid())"),
        "runner_actions_done": (f"instance_id IN ({b_ids})", "worker",
                                f"INSERT INTO cairn.runner_actions_done (instance_id,"
                                f" execution_id, attempt, status, result) VALUES"
                                f" ({b_ids.split(',')[0]}, gen_random_uuid(), 1, 'ok', '')"),
        "instance_history": (f"instance_id IN ({b_ids})", "reason",
                             f"INSERT INTO cairn.instance_history (instance_id, status)"
                             f" VALUES ({b_ids.split(',')[0]}, 'failed')"),
        "schedules": (f"tenant_id = '{B}'", "input",
                      f"INSERT INTO cairn.schedules (tenant_id, name, workflow_name, every_ms)"
                      f" VALUES ('{B}', 'sneak', 'job', 60000)"),
        "backfills": (f"tenant_id = '{B}'", "input",
                      f"INSERT INTO cairn.backfills (tenant_id, workflow_name, param, kind,"
                      f" range_from, range_to, step, from_int, step_int, total) VALUES"
                      f" ('{B}', 'job', 'a', 'int', '1', '2', '1', 1, 1, 2)"),
        "workflow_limits": (f"tenant_id = '{B}'", "max_per_key",
                            f"INSERT INTO cairn.workflow_limits (tenant_id, workflow_name)"
                            f" VALUES ('{B}', 'other')"),
        "workflow_retention": (f"tenant_id = '{B}'", "keep",
                               f"INSERT INTO cairn.workflow_retention (tenant_id,"
                               f" workflow_name, keep) VALUES ('{B}', 'other', '1 day')"),
    }
    for t, (pred, col, ins) in tables.items():
        before = q(url, f"SELECT count(*) FROM cairn.{t} WHERE {pred}")
        check(f"{t}: tenant B has rows to protect", int(before) > 0, before)
        out, err = attempt(login_url, f"{act} SELECT count(*) FROM cairn.{t} WHERE {pred}")
        check(f"{t}: A cannot select B's rows", err is None and out == "0", f"{out} {err}")
        out, err = attempt(login_url, f"{act} SELECT count(*) FROM cairn.{t}")
        check(f"{t}: A sees its own rows", err is None and int(out or 0) > 0, f"{out} {err}")
        # Applications write through the SQL API's functions alone (sql/0018): by hand, not
        # even their own rows, nor lock them (what the runners would wait for).
        out, err = attempt(login_url, f"{act} WITH u AS (UPDATE cairn.{t} SET {col} = {col}"
                                      f" WHERE {pred} RETURNING 1) SELECT count(*) FROM u")
        check(f"{t}: A cannot update B's rows", err is not None and "permission denied" in err,
              f"{out} {err}")
        out, err = attempt(login_url, f"{act} UPDATE cairn.{t} SET {col} = {col}")
        check(f"{t}: A cannot update its own rows by hand", err is not None and
              "permission denied" in err, f"{out} {err}")
        out, err = attempt(login_url, f"{act} WITH d AS (DELETE FROM cairn.{t} WHERE {pred}"
                                      f" RETURNING 1) SELECT count(*) FROM d")
        check(f"{t}: A cannot delete B's rows", err is not None and "permission denied" in err,
              f"{out} {err}")
        out, err = attempt(login_url, f"{act} DELETE FROM cairn.{t}")
        check(f"{t}: A cannot delete its own rows by hand", err is not None and
              "permission denied" in err, f"{out} {err}")
        out, err = attempt(login_url, f"{act} {ins}")
        check(f"{t}: A cannot insert a row of B's", err is not None and
              "permission denied" in err, f"{out} {err}")
        out, err = attempt(login_url, f"{act} SELECT count(*) FROM (SELECT 1 FROM cairn.{t}"
                                      f" FOR KEY SHARE) x")
        check(f"{t}: A cannot lock its own rows", err is not None and
              "permission denied" in err, f"{out} {err}")
        out, err = attempt(login_url, f"BEGIN; {act} LOCK TABLE cairn.{t} IN SHARE MODE;"
                                      f" COMMIT")
        check(f"{t}: A cannot lock the table against writes", err is not None and
              "permission denied" in err, f"{out} {err}")
        check(f"{t}: B's rows are all still there",
              q(url, f"SELECT count(*) FROM cairn.{t} WHERE {pred}") == before)
    # A tenant cannot change another tenant's row into its own either.
    out, err = attempt(login_url, f"{act} UPDATE cairn.runner_instances SET tenant_id = '{B}'")
    check("A cannot move its rows into B", err is not None and "permission denied" in err,
          f"{out} {err}")
    # ... nor fake an expired lease (the claim takes those first), nor jump the limits' turns
    for sql in ("UPDATE cairn.queued_instances SET lock_uuid = gen_random_uuid(),"
                " lock_expires_at = '-infinity'",
                "UPDATE cairn.workflow_limits SET claimed_at = NULL",
                "INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, lock_uuid,"
                " lock_expires_at) SELECT instance_id, workflow_version_id, gen_random_uuid(),"
                " '-infinity' FROM cairn.runner_instances LIMIT 1"):
        out, err = attempt(login_url, f"{act} {sql}")
        check(f"A may not write what the claim goes by: {sql[:60]}...",
              err is not None and "permission denied" in err, f"{out} {err}")
    # ... nor make its queue rows count as B's (the fair claim's turns, B's quota)
    out, err = attempt(login_url, f"{act} UPDATE cairn.queued_instances SET tenant_id = '{B}'")
    check("A cannot make its queue rows count as B's (no right on the column; the policy"
          " would refuse it too)", err is not None and "permission denied" in err,
          f"{out} {err}")
    # The SQL API runs with the caller's rights: B's ids are unknown to A.
    victim = b_ids.split(",")[0]
    out, err = attempt(login_url, f"{act} SELECT cairn.cancel({victim})")
    check("cairn.cancel of B's instance as A is refused",
          err is not None and "no instance" in err, f"{out} {err}")
    out, err = attempt(login_url, f"{act} SELECT cairn.retry({victim})")
    check("cairn.retry of B's instance as A is refused", err is not None, f"{out} {err}")
    check("... and B's instance is untouched", q(url, f"SELECT cancel_requested_at IS NULL FROM"
                                                     f" cairn.runner_instances WHERE"
                                                     f" instance_id = {victim}") == "t")
    out, err = attempt(login_url, f"{act} SELECT name FROM cairn.tenants")
    check("A sees only itself among the tenants", err is None and out == A, f"{out} {err}")
    out, err = attempt(login_url, f"{act} INSERT INTO cairn.tenants (name) VALUES ('zz')")
    check("A cannot make tenants", err is not None and "permission denied" in err, str(err))
    out, err = attempt(login_url, f"{act} UPDATE cairn.tenants SET max_running = 1")
    check("A cannot set its quota", err is not None and "permission denied" in err, str(err))
    out, err = attempt(login_url, f"SET ROLE cairn_tenant_{B}")
    check("A's login cannot act as B", err is not None and "permission denied" in err, str(err))
    out, err = attempt(login_url, "SELECT count(*) FROM cairn.runner_instances")
    check("a tenant's login that acts as no tenant sees nothing", err is None and out == "0",
          f"{out} {err}")
    out, err = attempt(login_url, "SELECT cairn.enqueue('job', '{\"ms\": 1}')")
    check("... nor finds a workflow to enqueue", err is not None and "unknown workflow" in err,
          f"{out} {err}")
    out, err = attempt(login_url, f"{act} SELECT count(*) FROM cairn.limit_status")
    check("A sees its own limits through the view, not B's", err is None and out == "1",
          f"{out} {err}")


def forgery_checks(url, login_url, ctl_as):
    """What A's login cannot do to B through the runners: forge a cancel notification, point a
    row of its own at B's version, backfill or instance, or overhear B's cancel reasons."""
    act = f"SET ROLE cairn_tenant_{A};"
    slow = ctl_as(B, "run", "slow", "--input", '{"ms": 2500}').stdout.strip()
    check("B's slow instance runs", wait_until(
        "running", lambda: q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id"
                                  f" = '{slow}'") == "running", 30))
    out, err = attempt(login_url, f"{act} SELECT pg_notify('cairn_cancel', '{slow} forged')")
    check("A may send a notification on the runners' channel", err is None, str(err))
    time.sleep(1.0)
    check("... but the forged cancel cancels nothing: B's instance completes", wait_until(
        "done", lambda: q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id ="
                               f" '{slow}'") == "completed", 30),
        q(url, f"SELECT status, error FROM cairn.runner_instances WHERE instance_id = '{slow}'"))
    bver = q(url, f"SELECT id FROM cairn.workflow_versions WHERE tenant_id = '{B}' AND"
                  " workflow_name = 'slow'")
    aver = q(url, f"SELECT id FROM cairn.workflow_versions WHERE tenant_id = '{A}' AND"
                  " workflow_name = 'job'")
    bfill = q(url, f"SELECT id FROM cairn.backfills WHERE tenant_id = '{B}'")
    # A's login may not write rows at all (sql/0018); the references are checked for every
    # writer even so: a role that may write (the runners' login) is refused the same rows.
    run_url = as_user(url, RUNNER)
    for what, sql in (
            ("B's workflow version", f"INSERT INTO cairn.runner_instances (tenant_id,"
                                     f" workflow_version_id, workflow_name, input) VALUES"
                                     f" ('{A}', '{bver}', 'job', '{{}}')"),
            ("B's backfill", f"INSERT INTO cairn.runner_instances (tenant_id,"
                             f" workflow_version_id, workflow_name, input, backfill_id,"
                             f" backfill_index) VALUES ('{A}', '{aver}', 'job', '{{}}',"
                             f" '{bfill}', 7)"),
            ("B's instance as its parent", f"INSERT INTO cairn.runner_instances (tenant_id,"
                                           f" workflow_version_id, workflow_name, input,"
                                           f" parent_id, parent_pending) VALUES ('{A}',"
                                           f" '{aver}', 'job', '{{}}', '{slow}', true)"),
            ("B's workflow version, by update", f"UPDATE cairn.runner_instances SET"
                                                f" workflow_version_id = '{bver}' WHERE"
                                                f" tenant_id = '{A}'")):
        out, err = attempt(login_url, f"{act} {sql}")
        check(f"A cannot point a row of its own at {what}",
              err is not None and "permission denied" in err, f"{out} {err}")
        out, err = attempt(run_url, sql)
        check(f"... nor can any writer (a runner's login): {what}", err is not None and (
            "foreign key" in err or f"is no instance of tenant {A}" in err), f"{out} {err}")
    own = q(run_url, f"INSERT INTO cairn.runner_instances (tenant_id, workflow_version_id,"
                     f" workflow_name, input) VALUES ('{A}', '{aver}', 'job', '{{\"ms\": 1}}')"
                     f" RETURNING instance_id")
    q(run_url, f"INSERT INTO cairn.queued_instances (instance_id, workflow_version_id,"
               f" scheduled_at) VALUES ('{own}', '{bver}', '2099-01-01')")
    check("a queue row written with B's version gets its instance's version (and tenant)",
          q(url, f"SELECT workflow_version_id || ' ' || tenant_id FROM cairn.queued_instances"
                 f" WHERE instance_id = '{own}'") == f"{aver} {A}")
    # The listener runs in Debian's python3, which has psycopg (the python_sdk suite's).
    listener = subprocess.Popen(
        ["/usr/bin/python3", "-c", LISTENER, login_url, f"cairn_tenant_{A}"],
        stdout=subprocess.PIPE, text=True)
    listening = listener.stdout.readline().strip() == "listening"
    victim = ctl_as(B, "run", "slow", "--input", '{"ms": 5000}').stdout.strip()
    wait_until("running", lambda: q(url, f"SELECT status FROM cairn.runner_instances"
                                         f" WHERE instance_id = '{victim}'") == "running", 30)
    r = ctl_as(B, "cancel", victim, "--reason", "b-private-reason")
    heard = json.loads(listener.communicate(timeout=30)[0] or "[]")
    check("B cancels its instance", r.returncode == 0, r.stderr)
    check("A overhears an id on the channel at most, never B's reason",
          listening and heard and not any("b-private-reason" in h for h in heard), str(heard))
    check("B's cancel took effect, with its reason", wait_until(
        "cancelled", lambda: q(url, f"SELECT status || ' ' || (error->>'message') FROM"
                                    f" cairn.runner_instances WHERE instance_id = '{victim}'")
        == "cancelled b-private-reason", 30))


def quota_checks(url, env, tmp, ctl_as):
    """Tenant C with a quota of 2: never more than 2 running, and 2 reached."""
    q(url, f"SELECT cairn.tenant_quota('{C}', 2)")
    # a second runner and worker: the quota holds across runners claiming at the same time
    sock = f"ipc://{tmp}/r2.sock"
    e2e.runner(env, tmp, "runner2", sock, "--max-instances", "64")
    e2e.worker(env, tmp, "worker2", sock, slots="16")
    # 800 ms each: the quota sits full, with some waiting, for about 3 s, long enough for a few
    # inspects on a loaded machine (at 300 ms, a 2-core machine running the chaos suite beside
    # this test inspected only twice in that window, each time just after a slot freed). Each
    # batch is one statement: fourteen cairnctl calls in a row, slow under ASan, let the first
    # of C's finish before the last was enqueued, and the default tenant's never overlapped.
    n_c = q(url, f"SET ROLE cairn_tenant_{C}; SELECT count(cairn.enqueue('job', "
                 "'{\"ms\": 800}')) FROM generate_series(1, 8)")
    n_d = q(url, "SELECT count(cairn.enqueue('job', '{\"ms\": 1000}')) FROM generate_series(1, 6)")
    check("C's and default's instances enqueued", (n_c, n_d) == ("8", "6"), f"{n_c} {n_d}")
    peak, samples, peak_default, why, tries = 0, 0, 0, "", []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        n = int(q(url, f"SELECT count(*) FROM cairn.runner_instances WHERE tenant_id = '{C}'"
                       " AND status = 'running'"))
        d = int(q(url, "SELECT count(*) FROM cairn.runner_instances WHERE tenant_id = 'default'"
                       " AND status = 'running' AND workflow_name = 'job'"))
        peak, peak_default, samples = max(peak, n), max(peak_default, d), samples + 1
        if n == 2 and f"tenant {C} runs 2 of at most 2" not in why:
            # tried again while the quota is full: a slot may free between the two reads
            waiting = q(url, f"SELECT instance_id FROM cairn.runner_instances WHERE tenant_id ="
                             f" '{C}' AND status = 'queued' LIMIT 1")
            if waiting:
                r = ctl_as(C, "inspect", waiting)
                why = r.stdout
                tries.append(f"exit {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}")
        if q(url, f"SELECT count(*) FROM cairn.runner_instances WHERE tenant_id = '{C}' AND "
                  "status = 'completed'") == "8":
            break
        time.sleep(0.02)
    check("C's instances all complete", q(url, f"SELECT count(*) FROM cairn.runner_instances "
                                               f"WHERE tenant_id = '{C}' AND status = "
                                               "'completed'") == "8")
    check(f"C never ran more than its quota of 2 (peak {peak} over {samples} samples)",
          peak <= 2, str(peak))
    check("... and reached it", peak == 2, str(peak))
    check("inspect of a waiting one says the tenant's quota holds it",
          f"tenant {C} runs 2 of at most 2" in why,
          f"{len(tries)} inspect(s), the last: {tries[-1]}" if tries
          else "no sample saw C at its quota with one of its instances queued")
    check(f"the default tenant ran more than 2 at once meanwhile (peak {peak_default})",
          peak_default > 2, str(peak_default))
    q(url, f"SELECT cairn.tenant_quota('{C}', NULL)")
    check("removing the quota removes the limits rows it made", q(
        url, f"SELECT count(*) FROM cairn.workflow_limits WHERE tenant_id = '{C}'") == "0")


def fairness_checks(url, ctl_as, log):
    """B's one instance behind A's backlog of 3 000, on a runner holding at most 64."""
    n = 3000
    done_a = f"SELECT count(*) FROM cairn.runner_instances WHERE tenant_id = '{A}' AND " \
        "workflow_name = 'job' AND status = 'completed'"
    base = int(q(url, done_a))
    q(url, f"SET ROLE cairn_tenant_{A}; SELECT count(cairn.enqueue('job', '{{\"ms\": 2}}'))"
           f" FROM generate_series(1, {n})")
    time.sleep(0.3)  # the backlog is draining
    bid = ctl_as(B, "run", "job", "--input", '{"a": "fair"}').stdout.strip()
    check("B's instance enqueued behind A's backlog", len(bid) == 36, bid)
    check("B's instance completes", wait_until(
        "B", lambda: q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = "
                            f"'{bid}'") == "completed", 120))
    row = q(url, f"""
        WITH b AS (SELECT created_at, started_at, completed_at FROM cairn.runner_instances
                    WHERE instance_id = '{bid}')
        SELECT count(*) FILTER (WHERE a.started_at < b.created_at) || ' ' ||
               count(*) FILTER (WHERE a.started_at >= b.created_at
                                  AND a.started_at < b.started_at) || ' ' ||
               round(extract(epoch FROM b.started_at - b.created_at) * 1000) || ' ' ||
               round(extract(epoch FROM b.completed_at - b.created_at) * 1000)
          FROM cairn.runner_instances a, b
         WHERE a.tenant_id = '{A}' AND a.workflow_name = 'job' AND a.started_at IS NOT NULL
           AND a.created_at >= (SELECT max(created_at) - interval '1 minute'
                                  FROM cairn.runner_instances WHERE tenant_id = '{A}')
           AND a.schedule_name IS NULL AND a.backfill_id IS NULL
         GROUP BY b.created_at, b.started_at, b.completed_at""")
    before, between, start_ms, done_ms = (int(x) for x in row.split())
    log(f"# fairness: A had started {before} of {n} when B enqueued; {between} more of A's "
        f"started before B's (B: started after {start_ms} ms, completed after {done_ms} ms)")
    check(f"A's backlog was still there when B enqueued ({n - before} of {n} not started)",
          n - before >= 1000, str(before))
    # FIFO would start every one of A's waiting instances first; a fair claim starts B at the
    # next claim, behind at most what the runner claims at once (its backlog room: 64).
    check(f"B started before all but {between} of A's waiting instances (<= 2 claims of 64)",
          between <= 128, f"{between} of {n - before}")
    check("A's backlog completes", wait_until(
        "A", lambda: int(q(url, done_a)) == base + n, 180), q(url, f"SELECT status, count(*) FROM cairn.runner_instances WHERE"
                                 f" tenant_id = '{A}' GROUP BY 1"))


def run_all(url, env, tmp):
    root = os.path.join(e2e.ROOT, "tests/integration")
    r = ctl(env, "migrate")
    check("cairnctl migrate", r.returncode == 0, r.stderr)
    for t in (A, B, C):
        check(f"tenant {t} made", q(url, f"SELECT cairn.tenant_create('{t}')") ==
              f"cairn_tenant_{t}")
    q(url, f"CREATE ROLE {LOGIN} LOGIN IN ROLE cairn_tenant_{A}")
    q(url, f"CREATE ROLE {RUNNER} LOGIN IN ROLE cairn_runner")
    q(url, f"CREATE ROLE {APP} LOGIN IN ROLE cairn_app")
    login_url = as_user(url, LOGIN)

    def ctl_as(tenant, *args):
        return ctl(dict(env, CAIRN_TENANT=tenant), *args)

    # The same names in every tenant, with different source: A's job holds a worker for ms, B's
    # echoes its input a; each tenant's parent calls its own tenant's kid_double (B's triples).
    wf = os.path.join(root, "workflows")
    for tenant, src, name in ((A, "hold.cairn", "job"), (B, "echo_input.cairn", "job"),
                              (C, "hold.cairn", "job"), ("default", "hold.cairn", "job"),
                              (B, "hold.cairn", "slow")):
        r = ctl(env, "register", "--tenant", tenant, os.path.join(wf, src), "--name", name)
        check(f"register {name} in {tenant} (from {src})", r.returncode == 0, r.stderr)
    for tenant, kid in ((A, "children/kid_double.cairn"), (B, "tenants/kid_triple.cairn")):
        r = ctl(env, "register", "--tenant", tenant, os.path.join(root, kid), "--name",
                "kid_double")
        check(f"register kid_double in {tenant} (from {kid})", r.returncode == 0, r.stderr)
        r = ctl(env, "register", "--tenant", tenant,
                os.path.join(root, "children", "parent_one.cairn"))
        check(f"register parent_one in {tenant}", r.returncode == 0, r.stderr)
    a_ids = [ctl_as(A, "run", "job", "--input", json.dumps({"ms": 5 + i})).stdout.strip()
             for i in range(3)]
    b_ids = [ctl_as(B, "run", "job", "--input", json.dumps({"a": f"b{i}"})).stdout.strip()
             for i in range(3)]
    parents = {t: ctl_as(t, "run", "parent_one", "--input", '{"n": 5}').stdout.strip()
               for t in (A, B)}
    check("instances enqueued in A and B", all(len(i) == 36 for i in a_ids + b_ids +
                                                list(parents.values())))
    d_id = ctl(env, "run", "job", "--input", '{"ms": 1}').stdout.strip()
    inp = {A: '{"ms": 1}', B: '{"a": 1}'}
    for t in (A, B):
        for args in (["schedule", "add", "tick", "--workflow", "job", "--every", "1 hour",
                      "--input", inp[t], "--paused"],
                     ["limit", "set", "kid_double", "50"],
                     ["retention", "set", "kid_double", "30d"],
                     ["backfill", "create", "job", "--param", "a" if t == B else "ms",
                      "--from", "1", "--to", "3", "--step", "1"]):
            r = ctl_as(t, *args)
            check(f"{t}: {' '.join(args[:2])}", r.returncode == 0, r.stdout + r.stderr)
    # in each, an instance that stays queued, and a row of instance_history (a cancelled
    # instance retried)
    for t in (A, B):
        later = [ctl_as(t, "run", "job", "--input", inp[t], "--at",
                        "2099-01-01T00:00:00Z").stdout.strip() for _ in range(2)]
        r1, r2 = ctl_as(t, "cancel", later[0]), ctl_as(t, "retry", later[0])
        check(f"{t}: cancel and retry (history)", r1.returncode == 0 and r2.returncode == 0,
              r1.stderr + r2.stderr)
        ctl_as(t, "cancel", later[0])

    # ---- one runner, as a member of cairn_runner, runs both tenants --------------------------
    sock = f"ipc://{tmp}/r.sock"
    runner = e2e.runner(dict(env, CAIRN_DATABASE_URL=as_user(url, RUNNER)), tmp, "runner", sock,
                        "--max-instances", "64")
    e2e.worker(env, tmp, "worker", sock, slots="16")
    done = a_ids + b_ids + list(parents.values()) + [d_id]
    check("the runner runs both tenants' instances", wait_until(
        "done", lambda: q(url, "SELECT count(*) FROM cairn.runner_instances WHERE instance_id "
                               f"IN ({','.join(repr(i) for i in done)}) AND status = "
                               "'completed'") == str(len(done)), 60), runner.text()[-800:])
    res = {i: json.loads(ctl_as(t, "result", i).stdout or "null")
           for t, ids in ((A, a_ids), (B, b_ids)) for i in ids}
    check("each ran its own tenant's workflow of the same name",
          [res[i] for i in b_ids] == ["b0", "b1", "b2"] and
          all(not isinstance(res[i], str) for i in a_ids), str(res))
    pr = {t: json.loads(ctl_as(t, "result", parents[t]).stdout or "null") for t in (A, B)}
    check("each parent called its own tenant's child workflow", pr == {A: 11, B: 16} and
          q(url, f"SELECT count(DISTINCT tenant_id) || ' ' || min(tenant_id) FROM"
                 f" cairn.runner_instances WHERE parent_id = '{parents[A]}'") == f"1 {A}", str(pr))
    check("the backfills' partitions ran in their tenants", wait_until(
        "bf", lambda: q(url, "SELECT string_agg(tenant_id || ':' || state, ' ' ORDER BY"
                             " tenant_id) FROM cairn.backfills") ==
        f"{A}:completed {B}:completed", 60),
        q(url, "SELECT string_agg(tenant_id || ':' || state || ':' || coalesce(error, ''), ' ')"
               " FROM cairn.backfills"))
    check("... each partition of its backfill's tenant", q(
        url, "SELECT count(*) FROM cairn.runner_instances ri JOIN cairn.backfills b ON"
             " b.id = ri.backfill_id WHERE ri.tenant_id <> b.tenant_id") == "0")
    for t in (A, B):
        r = ctl_as(t, "schedule", "trigger", "tick")
        check(f"{t}: schedule trigger", r.returncode == 0, r.stderr)
    check("each schedule fired in its own tenant", wait_until(
        "sched", lambda: q(url, "SELECT string_agg(tenant_id || ':' || status, ' ' ORDER BY"
                                " tenant_id) FROM cairn.runner_instances WHERE schedule_name ="
                                " 'tick'") == f"{A}:completed {B}:completed", 30),
        q(url, "SELECT string_agg(tenant_id || ':' || status, ' ') FROM cairn.runner_instances"
               " WHERE schedule_name = 'tick'"))

    # ---- isolation ---------------------------------------------------------------------------
    rls_checks(url, login_url)
    for t, mine in ((A, a_ids), (B, b_ids)):
        r = ctl_as(t, "list", "--json", "--limit", "1000")
        rows = json.loads(r.stdout or "[]")
        tenants = set(q(url, f"SELECT tenant_id FROM cairn.runner_instances WHERE instance_id ="
                             f" '{x['id']}'") for x in rows[:50])
        check(f"cairnctl list under {t} shows its instances only",
              r.returncode == 0 and set(mine) <= {x["id"] for x in rows} and tenants == {t},
              f"{tenants} {r.stderr}")
    r = ctl(dict(env, CAIRN_DATABASE_URL=login_url, CAIRN_TENANT=A), "list", "--json")
    check("cairnctl as A's own login, CAIRN_TENANT set, lists A's instances",
          r.returncode == 0 and set(a_ids) <= {x["id"] for x in json.loads(r.stdout or "[]")},
          r.stderr)
    r = ctl(dict(env, CAIRN_DATABASE_URL=login_url), "list", "--tenant", B)
    check("cairnctl as A's login with --tenant B is refused, saying why",
          r.returncode != 0 and f'may not act as tenant "{B}"' in r.stderr, r.stderr)
    r = ctl(dict(env, CAIRN_DATABASE_URL=login_url), "inspect", b_ids[0], "--tenant", A)
    check("cairnctl inspect of B's instance under A: not found", r.returncode != 0, r.stdout)
    r = ctl(dict(env, CAIRN_DATABASE_URL=as_user(url, APP)), "list", "--json")
    check("a member of cairn_app acts as the default tenant (as before tenants)",
          r.returncode == 0 and [x["id"] for x in json.loads(r.stdout or "[]")] == [d_id],
          r.stdout + r.stderr)

    forgery_checks(url, login_url, ctl_as)

    # ---- fairness and quotas -----------------------------------------------------------------
    fairness_checks(url, ctl_as, lambda s: print(s, flush=True))
    quota_checks(url, env, tmp, ctl_as)
    check("no permission error in the runner's log", "permission denied" not in runner.text(),
          runner.text()[-800:])
    check("the runner stops gracefully", runner.term() == 0)


def main():
    return e2e.main_in_fresh_db("tenants", run_all, roles=ROLES)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): tenants through cairnctl and the Python client, on the real PostgreSQL
that scripts/test starts (a fresh database of its own, dropped at the end, with the login role
this test makes). No runner: every instance stays queued, which is all isolation needs.

- `cairnctl tenant create/list/quota`; `--tenant T` and CAIRN_TENANT on the database commands;
- the same workflow name registered in tenants acme, globex and default (the owner without a
  tenant) with different sources; `run` and `list` per tenant, each seeing only its own;
  `status`, `inspect` and `cancel` of another tenant's instance say "no instance" and change
  nothing; schedules, limits and retention of the same name per tenant;
- a login granted cairn_tenant_acme only acts as acme, and is refused globex with the GRANT it
  lacks; unknown and malformed tenants, `migrate --tenant` refused;
- cairn.Client(tenant="acme") sees and enqueues acme's instances only.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl = e2e.check, e2e.q, e2e.ctl
SUFFIX = f"{os.getpid()}_{random.randint(0, 99999)}"
LOGIN = f"acme_login_{SUFFIX}"
# The client needs psycopg: Debian's python3 has it (as for the python_sdk suite).
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")

# The same name, three different graphs: which one an instance ran tells its tenant's version.
SOURCES = {
    "acme": "fn main(input: [i], output: [o]):\n    o = @std.echo(value=i)\n    return o\n",
    "globex": "fn main(input: [i], output: [o]):\n    a = @std.echo(value=i)\n"
              "    o = @std.echo(value=a)\n    return o\n",
    "default": "fn main(input: [i], output: [o]):\n    a = @std.echo(value=i)\n"
               "    b = @std.echo(value=a)\n    o = @std.echo(value=b)\n    return o\n",
}


def as_user(url, user):
    return re.sub(r"^postgresql://[^@/]*@", f"postgresql://{user}@", url)


def ids_of(r):
    return {row["id"] for row in json.loads(r.stdout or "[]")} if r.returncode == 0 else None


def json_rows(env, *args):
    """cairnctl ARGS (a --json list): the run and its rows ([] when it failed)."""
    r = ctl(env, *args)
    return r, (json.loads(r.stdout or "[]") if r.returncode == 0 else [])


def set_per_tenant(env, command, workflow, values):
    """cairnctl COMMAND set WORKFLOW VALUE under each (tenant, value) of values."""
    for tenant, v in values:
        r = ctl(env, command, "set", workflow, v, "--tenant", tenant)
        check(f"{command} set {workflow} {v} under {tenant}", r.returncode == 0,
              r.stdout + r.stderr)


CLIENT_SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import cairn
url, login_url = sys.argv[2], sys.argv[3]
out = {}
with cairn.Client(url, tenant="acme") as c:
    out["acme_list"] = sorted(str(s["id"]) for s in c.list(limit=100))
    out["enqueued"] = c.enqueue("greet", {"i": 7})
    out["own_status"] = c.status(out["enqueued"])["status"]
    try:
        c.status(sys.argv[4])
        out["other_status"] = "visible"
    except LookupError:
        out["other_status"] = "LookupError"
for tenant, key in (("nosuch", "unknown"), ("Bad", "bad")):
    try:
        cairn.Client(url, tenant=tenant).close()
        out[key] = "connected"
    except Exception as e:
        out[key] = type(e).__name__ + ": " + str(e)
try:
    cairn.Client(login_url, tenant="globex").close()
    out["denied"] = "connected"
except Exception as e:
    out["denied"] = type(e).__name__ + ": " + str(e)
with cairn.Client(login_url, tenant="acme") as c:
    out["login_acme_count"] = len(c.list(limit=100))
async def main():
    async with await cairn.AsyncClient.connect(url, tenant="globex") as c:
        out["globex_list"] = sorted(str(s["id"]) for s in await c.list(limit=100))
asyncio.run(main())
print(json.dumps(out))
"""


def run_all(url, env, tmp):
    r = ctl(env, "migrate")
    check("cairnctl migrate (as the owner)", r.returncode == 0, r.stderr)
    r = ctl(env, "migrate", "--tenant", "acme")
    check("migrate --tenant is refused: migrations are the owner's",
          r.returncode == 2 and "schema owner" in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(dict(env, CAIRN_TENANT="acme"), "migrate")
    check("... and so is migrate with CAIRN_TENANT", r.returncode == 2, r.stderr)

    # ---- tenant create / list -------------------------------------------------------------
    r = ctl(env, "tenant", "create", "acme")
    check("tenant create acme", r.returncode == 0 and "cairn_tenant_acme" in r.stdout and
          "GRANT cairn_tenant_acme TO" in r.stdout, r.stdout + r.stderr)
    r = ctl(env, "tenant", "create", "globex", "--max-running", "3", "--json")
    doc = json.loads(r.stdout or "{}") if r.returncode == 0 else {}
    check("tenant create globex --max-running 3 --json", doc == {
        "tenant": "globex", "role": "cairn_tenant_globex", "max_running": 3}, r.stdout + r.stderr)
    r = ctl(env, "tenant", "create", "acme")
    check("tenant create of an existing tenant: nothing to do (exit 6)",
          r.returncode == 6 and "exists already" in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "tenant", "create", "Not-A-Name")
    check("tenant create of a bad name is a usage error", r.returncode == 2 and
          '"Not-A-Name" is not a tenant name' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "tenant", "list")
    lines = r.stdout.splitlines()
    check("tenant list shows default, acme and globex", r.returncode == 0 and
          lines[0].split() == ["NAME", "MAX_RUNNING", "CREATED_AT"] and
          [ln.split()[:2] for ln in lines[1:]] ==
          [["acme", "-"], ["default", "-"], ["globex", "3"]], r.stdout + r.stderr)
    r, rows = json_rows(env, "tenant", "list", "--json")
    check("tenant list --json", [(t["name"], t["max_running"]) for t in rows] ==
          [("acme", None), ("default", None), ("globex", 3)] and
          all(t["created_at"] for t in rows), r.stdout + r.stderr)

    # ---- register the same name in three tenants --------------------------------------------
    files = {}
    for tenant, src in SOURCES.items():
        files[tenant] = os.path.join(tmp, tenant, "greet.cairn")
        os.makedirs(os.path.dirname(files[tenant]))
        with open(files[tenant], "w") as f:
            f.write(src)
    # default's first: the owner's name lookups must not take a tenant's newer version
    r = ctl(env, "register", files["default"], "--version", "v1")
    check("register greet v1 as the owner, without a tenant", r.returncode == 0,
          r.stdout + r.stderr)
    r = ctl(env, "register", files["acme"], "--version", "v1", "--tenant", "acme")
    check("register greet v1 (another source) --tenant acme", r.returncode == 0,
          r.stdout + r.stderr)
    r = ctl(dict(env, CAIRN_TENANT="globex"), "register", files["globex"], "--version", "v1")
    check("register greet v1 (a third source) with CAIRN_TENANT=globex", r.returncode == 0,
          r.stdout + r.stderr)
    got = q(url, "SELECT string_agg(tenant_id || '=' || md5(source), ',' ORDER BY tenant_id) "
                 "FROM cairn.workflow_versions WHERE workflow_name = 'greet'")
    want = ",".join(f"{t}={hashlib.md5(SOURCES[t].encode()).hexdigest()}"
                    for t in sorted(SOURCES))
    check("... three versions v1 of greet, one per tenant, each with its own source",
          got == want, f"{got} != {want}")
    r = ctl(env, "register", files["acme"], "--version", "v1", "--tenant", "acme")
    check("registering acme's source again under acme is a no-op", r.returncode == 0,
          r.stdout + r.stderr)
    r = ctl(env, "register", files["acme"], "--version", "v1")
    check("acme's source as v1 in default is refused (default's v1 is another source)",
          r.returncode == 1 and "different" in r.stderr, f"exit {r.returncode}: {r.stderr}")

    # A child call is checked against the child as registered in the caller's own tenant.
    kid, parent = os.path.join(tmp, "kid.cairn"), os.path.join(tmp, "parent.cairn")
    with open(kid, "w") as f:
        f.write("fn main(input: [x], output: [o]):\n    o = @std.echo(value=x)\n    return o\n")
    with open(parent, "w") as f:
        f.write("fn main(input: [n], output: [r]):\n    r = run kid(x=n)\n    return r\n")
    r = ctl(env, "register", kid, "--tenant", "acme")
    check("register kid --tenant acme", r.returncode == 0, r.stdout + r.stderr)
    r = ctl(env, "register", parent)
    check("the owner's parent calling kid is refused: default has no kid (acme's is not seen)",
          r.returncode == 1 and 'no workflow "kid"' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "register", parent, "--tenant", "acme")
    check("... under acme, the parent registers", r.returncode == 0, r.stdout + r.stderr)

    # ---- run and list per tenant -------------------------------------------------------------
    ids = {"acme": [], "globex": [], "default": []}
    for n in range(2):
        r = ctl(env, "run", "greet", "--input", json.dumps({"i": n}), "--tenant", "acme")
        ids["acme"].append(r.stdout.strip())
        r = ctl(dict(env, CAIRN_TENANT="globex"), "run", "greet", "--input", json.dumps({"i": n}))
        ids["globex"].append(r.stdout.strip())
        r = ctl(env, "run", "greet", "--input", json.dumps({"i": n}))
        ids["default"].append(r.stdout.strip())
    check("run under acme, globex and default", all(len(i) == 36 for v in ids.values()
                                                    for i in v), str(ids))
    for tenant in ids:
        got = q(url, "SELECT string_agg(DISTINCT ri.tenant_id || '/' || wv.tenant_id, ',')"
                     " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv"
                     " ON wv.id = ri.workflow_version_id WHERE ri.instance_id IN ("
                     + ",".join(f"'{i}'" for i in ids[tenant]) + ")")
        check(f"{tenant}'s instances are {tenant}'s, of {tenant}'s version of greet",
              got == f"{tenant}/{tenant}", got)
    for tenant in ("acme", "globex"):
        r = ctl(env, "list", "--json", "--tenant", tenant)
        check(f"list --tenant {tenant} shows its instances only", ids_of(r) == set(ids[tenant]),
              r.stdout + r.stderr)
        r2 = ctl(dict(env, CAIRN_TENANT=tenant), "list", "--json")
        check(f"CAIRN_TENANT={tenant} lists the same", ids_of(r2) == ids_of(r), r2.stderr)
    r = ctl(env, "list", "--json", "--tenant", "default")
    check("list --tenant default shows default's only", ids_of(r) == set(ids["default"]),
          r.stdout + r.stderr)
    r = ctl(env, "list", "--tenant", "acme", "--workflow", "greet")
    check("list --tenant acme --workflow greet (text)", r.returncode == 0 and
          all(i in r.stdout for i in ids["acme"]) and
          not any(i in r.stdout for i in ids["globex"] + ids["default"]), r.stdout + r.stderr)

    # ---- another tenant's instance: no instance, nothing changed ------------------------------
    theirs = ids["globex"][0]
    for cmd in ("status", "inspect", "cancel", "result", "tree"):
        r = ctl(env, cmd, theirs, "--tenant", "acme")
        check(f"{cmd} of globex's instance under acme: no instance", r.returncode == 1 and
              f"no instance {theirs}" in r.stderr, f"exit {r.returncode}: {r.stderr}")
    check("... and globex's instance is still queued",
          q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{theirs}'")
          == "queued")
    r = ctl(env, "cancel", "--workflow", "greet", "--yes", "--tenant", "acme")
    check("cancel --workflow greet --yes under acme", r.returncode == 0, r.stdout + r.stderr)
    got = q(url, "SELECT string_agg(tenant_id || ':' || status || ':' || count, ',' ORDER BY"
                 " tenant_id) FROM (SELECT tenant_id, status, count(*) FROM cairn.runner_instances"
                 " GROUP BY 1, 2) s")
    check("... cancels acme's greet instances only", got ==
          "acme:cancelled:2,default:queued:2,globex:queued:2", got)
    r = ctl(env, "run", "greet", "--input", '{"i": 5}', "--tenant", "acme")
    ids["acme"].append(r.stdout.strip())
    check("run again under acme", r.returncode == 0, r.stderr)

    # ---- schedules, limits, retention of the same name per tenant -----------------------------
    for tenant, every in (("acme", "1 hour"), ("globex", "2 hours")):
        r = ctl(env, "schedule", "add", "nightly", "--workflow", "greet", "--every", every,
                "--input", '{"i": 1}', "--tenant", tenant)
        check(f"schedule add nightly under {tenant}", r.returncode == 0, r.stdout + r.stderr)
    r, rows = json_rows(env, "schedule", "list", "--json", "--tenant", "acme")
    check("schedule list under acme shows acme's nightly only, every hour",
          [(s["name"], s["every_ms"]) for s in rows] == [("nightly", 3600000)],
          r.stdout + r.stderr)
    r = ctl(env, "schedule", "next", "nightly", "--tenant", "globex")
    check("schedule next nightly under globex", r.returncode == 0, r.stdout + r.stderr)
    got = q(url, "SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM cairn.schedules"
                 " WHERE name = 'nightly'")
    check("... one nightly per tenant", got == "acme,globex", got)

    set_per_tenant(env, "limit", "greet", (("acme", "2"), ("globex", "5")))
    got = q(url, "SELECT string_agg(tenant_id || '=' || max_running, ',' ORDER BY tenant_id)"
                 " FROM cairn.workflow_limits WHERE workflow_name = 'greet'")
    check("... a limit per tenant", got == "acme=2,globex=5", got)
    r, rows = json_rows(env, "limit", "list", "--json", "--tenant", "acme")
    check("limit list under acme shows acme's limit only",
          [(x["workflow"], x["max_running"]) for x in rows] == [("greet", 2)], r.stdout + r.stderr)

    set_per_tenant(env, "retention", "greet", (("acme", "30d"), ("globex", "forever")))
    got = q(url, "SELECT string_agg(tenant_id || '=' || coalesce(keep::text, 'forever'), ','"
                 " ORDER BY tenant_id) FROM cairn.workflow_retention WHERE workflow_name = 'greet'")
    check("... a retention per tenant", got == "acme=30 days,globex=forever", got)
    r, rows = json_rows(env, "retention", "list", "--json", "--tenant", "globex")
    check("retention list under globex shows globex's only", rows == [
        {"workflow": "greet", "keep": None}], r.stdout + r.stderr)

    # ---- a login granted acme only -------------------------------------------------------------
    q(url, f"CREATE ROLE {LOGIN} LOGIN")
    q(url, f"GRANT cairn_tenant_acme TO {LOGIN}")
    login_url = as_user(url, LOGIN)
    login = dict(env, CAIRN_DATABASE_URL=login_url)
    r = ctl(login, "list", "--json", "--tenant", "acme")
    check("a login granted cairn_tenant_acme lists acme's instances with --tenant acme",
          ids_of(r) == set(ids["acme"]), r.stdout + r.stderr)
    r = ctl(login, "run", "greet", "--input", '{"i": 9}', "--tenant", "acme")
    check("... and runs acme's greet", r.returncode == 0 and q(
        url, f"SELECT tenant_id FROM cairn.runner_instances WHERE instance_id = "
             f"'{r.stdout.strip()}'") == "acme", r.stdout + r.stderr)
    ids["acme"].append(r.stdout.strip())
    r = ctl(login, "list", "--tenant", "globex")
    check("... but may not act as globex, saying which GRANT it lacks", r.returncode == 1 and
          f'this login may not act as tenant "globex" (GRANT cairn_tenant_globex TO {LOGIN})'
          in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(dict(login, CAIRN_TENANT="globex"), "status", ids["globex"][0])
    check("... nor with CAIRN_TENANT=globex", r.returncode == 1 and "may not act as tenant"
          in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(login, "tenant", "list", "--tenant", "acme")
    check("tenant list as acme shows acme only", r.returncode == 0 and
          [ln.split()[0] for ln in r.stdout.splitlines()[1:]] == ["acme"], r.stdout + r.stderr)

    # ---- unknown and malformed tenants -------------------------------------------------------
    r = ctl(env, "list", "--tenant", "nosuch")
    check("an unknown tenant: exit 1, saying so", r.returncode == 1 and
          'no tenant "nosuch" (cairnctl tenant list shows them)' in r.stderr,
          f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "schedule", "list", "--tenant", "nosuch")
    check("... for every database command (schedule list)", r.returncode == 1 and
          'no tenant "nosuch"' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    for bad in ("Acme", "1acme", "acme-corp", "a" * 49, "acme; DROP TABLE x"):
        r = ctl(env, "list", "--tenant", bad)
        check(f"tenant name {bad[:20]!r} is a usage error naming it", r.returncode == 2 and
              f'"{bad}" is not a tenant name' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(dict(env, CAIRN_TENANT="Bad"), "limit", "list")
    check("... from CAIRN_TENANT too", r.returncode == 2 and "CAIRN_TENANT" in r.stderr,
          f"exit {r.returncode}: {r.stderr}")

    # ---- quota ---------------------------------------------------------------------------------
    r = ctl(env, "tenant", "quota", "acme", "5")
    check("tenant quota acme 5", r.returncode == 0, r.stdout + r.stderr)
    r = ctl(env, "tenant", "list", "--json")
    rows = {t["name"]: t["max_running"] for t in json.loads(r.stdout or "[]")}
    check("... tenant list shows it", rows.get("acme") == 5, r.stdout + r.stderr)
    r = ctl(env, "tenant", "quota", "globex", "none")
    check("tenant quota globex none", r.returncode == 0 and q(
        url, "SELECT max_running IS NULL FROM cairn.tenants WHERE name = 'globex'") == "t",
        r.stdout + r.stderr)
    r = ctl(env, "tenant", "quota", "nosuch", "3")
    check("tenant quota of an unknown tenant: exit 1", r.returncode == 1 and
          'no tenant "nosuch"' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "tenant", "quota", "acme", "0")
    check("tenant quota acme 0 is a usage error", r.returncode == 2, r.stderr)

    # ---- the Python client ---------------------------------------------------------------------
    pkg = os.path.join(e2e.ROOT, "worker-protocol", "python")
    r = subprocess.run([PYTHON, "-c", CLIENT_SCRIPT, pkg, url, login_url, ids["globex"][0]],
                       capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout or "{}") if r.returncode == 0 else {}
    check("python: the client ran", r.returncode == 0, r.stderr[-2000:])
    check("python: Client(tenant='acme').list() is acme's instances",
          out.get("acme_list") == sorted(ids["acme"]), json.dumps(out))
    enq = out.get("enqueued", "")
    check("python: Client(tenant='acme').enqueue enqueues into acme", q(
        url, f"SELECT tenant_id FROM cairn.runner_instances WHERE instance_id = '{enq}'")
        == "acme" and out.get("own_status") == "queued", json.dumps(out))
    check("python: another tenant's instance is unknown (LookupError)",
          out.get("other_status") == "LookupError", json.dumps(out))
    check("python: an unknown tenant raises UnknownTenant",
          out.get("unknown", "").startswith("UnknownTenant: no tenant 'nosuch'"), json.dumps(out))
    check("python: a bad name raises ValueError", out.get("bad", "").startswith("ValueError"),
          json.dumps(out))
    check("python: a tenant not granted raises TenantNotPermitted, naming the GRANT",
          out.get("denied", "").startswith("TenantNotPermitted") and
          f"GRANT cairn_tenant_globex TO {LOGIN}" in out.get("denied", ""), json.dumps(out))
    check("python: the acme login acts as acme", out.get("login_acme_count") ==
          len(ids["acme"]) + 1, json.dumps(out))
    check("python: AsyncClient.connect(tenant='globex') lists globex's only",
          out.get("globex_list") == sorted(ids["globex"]), json.dumps(out))


def main():
    return e2e.main_in_fresh_db("tenant_cli", run_all, roles=(LOGIN,))


if __name__ == "__main__":
    sys.exit(main())

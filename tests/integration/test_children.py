#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): child workflows and task trees, with two real runners, real workers
and the real PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the
end). The workflows are in tests/integration/children/.

- registration checks child calls: inputs that do not fit a registered child are errors with
  line:col; an unregistered child is an error unless --allow-missing-children;
- a parent with one child (list --parent, inspect's children, tree); a spread over 1 000
  children (every one created once, the sum right); three levels; a recursive merge sort that
  splits its list down to single elements; `start` (the child's id, the child detached);
- a child's failure caught by its own error type, and by ChildWorkflowError; uncaught, it fails
  the parent with ChildWorkflowError (the child's type among its bases, its id in details); a
  call's [timeout: D] times the child out (ChildWorkflowTimeout, the child timed_out);
- cancelling a parent cancels its running grandchildren (and frees their workers);
- the depth limit (CAIRN_MAX_CHILD_DEPTH) fails the call that would pass it with
  ChildDepthExceeded;
- a parent waiting only for a slow child is handed back to the database and woken by it;
- `wait for` a started child: one that has ended already answers at once, one still running
  (the parent handed back meanwhile) wakes the parent with its result, a spread waits for
  several, a failed child's error is caught by its own type, waiting again for an ended child
  gives its result again; an id that is no child raises ChildWorkflowNotFound, a non-id
  TypeError;
- kill -9 of the runner holding a parent mid-fan-out: another runner finishes it, no child is
  created twice, none is lost, no result recorded twice.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until

# Registered in this order: each child before the workflows that call it.
ORDER = ["kid_double", "kid_echo", "kid_fail", "kid_hold", "parent_one", "fan_children",
         "fan_hold", "level2", "level1", "msort", "catcher", "uncaught", "holdmid", "holdtree",
         "deep", "starter", "waiter", "timed_child", "timed_parent", "kid_pick", "ff_children", "bad_input", "joiner", "joiner_bad"]


def status(url, iid):
    return q(url, f"SELECT status || coalesce(' ' || (error->>'type'), '') FROM "
                  f"cairn.runner_instances WHERE instance_id = '{iid}'")


def run_json(env, name, inp, timeout=60):
    """Runs an instance to its end; (exit code, its id, the --json document)."""
    r = ctl(env, "run", name, "--input", json.dumps(inp), "--wait", "--timeout", str(timeout),
            "--json", timeout=timeout + 30)
    doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    return r.returncode, doc.get("id", ""), doc, r


def tree_size(url, root):
    return int(q(url, f"SELECT count(*) FROM cairn.runner_instances WHERE instance_id = '{root}'"
                      f" OR root_id = '{root}'"))


def run_all(url, env, tmp):
    src = os.path.join(e2e.ROOT, "tests/integration/children")
    r = ctl(env, "migrate")
    check("migrate", r.returncode == 0, r.stderr)

    # ---- registration checks the calls -------------------------------------------------------
    r = ctl(env, "register", f"{src}/parent_one.cairn")
    check("a parent whose child is not registered yet is refused, with line:col",
          r.returncode == 1 and 'parent_one.cairn:3:9: error: no workflow "kid_double" is '
          'registered' in r.stderr, f"exit {r.returncode}: {r.stderr}")
    r = ctl(env, "register", f"{src}/parent_one.cairn", "--allow-missing-children")
    check("--allow-missing-children registers it with a warning",
          r.returncode == 0 and "warning: no workflow \"kid_double\"" in r.stderr,
          f"exit {r.returncode}: {r.stderr}")
    for name in ORDER:
        r = ctl(env, "register", f"{src}/{name}.cairn")
        check(f"register {name}", r.returncode == 0, r.stderr)
    r = ctl(env, "register", f"{src}/bad_call.cairn")
    check("a call whose inputs do not fit the registered child is refused at registration",
          r.returncode == 1 and "bad_call.cairn:3:9: error: kid_double has no input 'y'" in r.stderr
          and "kid_double needs input 'x' (its inputs: x)" in r.stderr,
          f"exit {r.returncode}: {r.stderr}")

    sock1, sock2 = f"ipc://{tmp}/r1.sock", f"ipc://{tmp}/r2.sock"
    knobs = ("--evict-child-wait-ms", "300", "--max-child-depth", "4")
    r1 = e2e.runner(env, tmp, "runner1", sock1, *knobs)
    e2e.worker(env, tmp, "worker1", sock1, slots="16")
    e2e.runner(env, tmp, "runner2", sock2, *knobs)
    e2e.worker(env, tmp, "worker2", sock2, slots="16")

    # ---- one child, and what cairnctl shows of it ---------------------------------------------
    rc, pid, doc, r = run_json(env, "parent_one", {"n": 20})
    check("a parent with one child completes with the child's result (20 * 2 + 1)",
          rc == 0 and doc.get("result") == 41, f"exit {rc}: {r.stdout} {r.stderr}")
    lst = json.loads(ctl(env, "list", "--parent", pid, "--json").stdout or "[]")
    check("list --parent shows its one child, completed",
          len(lst) == 1 and lst[0]["workflow"] == "kid_double" and lst[0]["status"] == "completed"
          and lst[0]["parent"] == pid and lst[0]["root"] == pid, str(lst))
    ins = json.loads(ctl(env, "inspect", pid, "--json").stdout or "{}")
    kids = ins.get("children", [])
    check("inspect --json lists the child with its status and the call that started it",
          len(kids) == 1 and kids[0]["status"] == "completed" and kids[0]["started_by"] == "run"
          and ins.get("parent") is None, str(ins.get("children")))
    cins = json.loads(ctl(env, "inspect", lst[0]["id"] if lst else pid, "--json").stdout or "{}")
    check("the child's inspect names its parent", (cins.get("parent") or {}).get("id") == pid,
          str(cins.get("parent")))
    text = ctl(env, "inspect", pid).stdout
    check("inspect's text shows the children", "children    1" in text and "kid_double" in text,
          text)

    # ---- a spread over 1 000 children ---------------------------------------------------------
    t0 = time.monotonic()
    rc, fid, doc, r = run_json(env, "fan_children", {"n": 1000}, timeout=120)
    took = time.monotonic() - t0
    check(f"a spread over 1 000 children sums their results ({took:.1f} s)",
          rc == 0 and doc.get("result") == 499500, f"exit {rc}: {r.stdout} {r.stderr}")
    check("1 000 children, each created once, all completed",
          q(url, f"SELECT count(*) || ' ' || count(DISTINCT (parent_exec_id, parent_attempt)) || "
                 f"' ' || count(*) FILTER (WHERE status = 'completed') FROM "
                 f"cairn.runner_instances WHERE parent_id = '{fid}'") == "1000 1000 1000")

    # ---- three levels, a recursive split ------------------------------------------------------
    rc, lid, doc, r = run_json(env, "level1", {"n": 1})
    check("three levels of children: 1 * 2 + 10 + 100", rc == 0 and doc.get("result") == 112,
          f"exit {rc}: {r.stdout} {r.stderr}")
    tr = json.loads(ctl(env, "tree", lid, "--json").stdout or "[]")
    check("tree --json shows the three levels, in order, completed",
          [(t["workflow"], t["depth"], t["status"]) for t in tr]
          == [("level1", 0, "completed"), ("level2", 1, "completed"),
              ("kid_double", 2, "completed")], str(tr))
    text = ctl(env, "tree", lid).stdout
    check("tree's text indents each level", "\n    " in text and "3 completed" in text, text)
    xs = [13, 2, 7, 11, 5, 3, 15, 0, 9, 14, 1, 8, 12, 6, 10, 4]
    rc, mid, doc, r = run_json(env, "msort", {"xs": xs}, timeout=120)
    check("a recursive merge sort down to single elements sorts the list",
          rc == 0 and doc.get("result") == sorted(xs), f"exit {rc}: {r.stdout} {r.stderr}")
    check("its tree holds 31 instances (16 leaves), 4 levels deep",
          tree_size(url, mid) == 31 and q(url, f"SELECT max(depth) FROM cairn.runner_instances "
                                               f"WHERE root_id = '{mid}'") == "4",
          str(tree_size(url, mid)))

    # ---- the examples (examples/children) --------------------------------------------------------
    ex = os.path.join(e2e.ROOT, "examples/children")
    for name in ("split_sum", "regions"):
        r = ctl(env, "register", f"{ex}/{name}.cairn")
        check(f"register the example {name}", r.returncode == 0, r.stderr)
    rc, xid, doc, r = run_json(env, "split_sum", {"xs": [1, 2, 3, 4, 5, 6, 7, 8]})
    check("examples/children/split_sum sums 1..8 with a tree of 15 instances",
          rc == 0 and doc.get("result") == 36 and tree_size(url, xid) == 15,
          f"exit {rc}: {r.stdout} {r.stderr}")
    rc, _, doc, r = run_json(env, "split_sum", {"xs": []})
    check("split_sum of [] is 0, without children", rc == 0 and doc.get("result") == 0)
    rc, gid, doc, r = run_json(env, "regions", {"regions": [{"sales": [5, 7]},
                                                            {"sales": [1, 2, 3]}]})
    res = doc.get("result") or {}
    check("examples/children/regions: one child per region, and a started audit child",
          rc == 0 and res.get("totals") == [12, 6] and res.get("regions") == 2
          and q(url, f"SELECT detached FROM cairn.runner_instances WHERE instance_id = "
                     f"'{res.get('audit')}'") == "t", f"exit {rc}: {r.stdout} {r.stderr}")

    # ---- failures ------------------------------------------------------------------------------
    rc, _, doc, r = run_json(env, "catcher", {"kind": "PaymentDeclined"})
    check("`except PaymentDeclined` catches the child's PaymentDeclined",
          rc == 0 and doc.get("result") == "declined: card declined", f"{r.stdout} {r.stderr}")
    rc, _, doc, r = run_json(env, "catcher", {"kind": "Other"})
    check("`except ChildWorkflowError` catches any child failure, with the child's error",
          rc == 0 and doc.get("result") == "other: Other", f"{r.stdout} {r.stderr}")
    rc, uid, doc, r = run_json(env, "uncaught", {})
    err = doc.get("error") or {}
    child = q(url, f"SELECT instance_id FROM cairn.runner_instances WHERE parent_id = '{uid}'")
    check("an uncaught child failure fails the parent with ChildWorkflowError",
          rc == 4 and doc.get("status") == "failed" and err.get("type") == "ChildWorkflowError"
          and "PaymentDeclined" in err.get("bases", []) and "ValueError" in err.get("bases", [])
          and (err.get("details") or {}).get("child_id") == child
          and (err.get("details") or {}).get("error", {}).get("message") == "card declined",
          json.dumps(doc))
    rc, tid, doc, r = run_json(env, "timed_child", {})
    check("a call's [timeout: 1s] times the child out (ChildWorkflowTimeout, caught)",
          rc == 0 and doc.get("result") == "timed out", f"{r.stdout} {r.stderr}")
    check("the child ended timed_out", q(url, f"SELECT status FROM cairn.runner_instances "
                                              f"WHERE parent_id = '{tid}'") == "timed_out")

    rc, _, doc, r = run_json(env, "bad_input", {})
    check("inputs no JSON object holds (an infinity, U+0000) raise ChildInputError",
          rc == 0 and doc.get("result") == ["inf refused", "nul refused"],
          f"exit {rc}: {r.stdout} {r.stderr}")
    rc, _, doc, r = run_json(env, "parent_one", {"n": 2})
    check("... and the runner goes on writing (nothing wedged)", rc == 0 and doc.get("result") == 5,
          f"exit {rc}: {r.stdout} {r.stderr}")

    # ---- start: fire and forget ----------------------------------------------------------------
    rc, sid, doc, r = run_json(env, "starter", {"n": 4})
    cid = doc.get("result")
    check("start returns the child's id at once", rc == 0 and isinstance(cid, str)
          and q(url, f"SELECT parent_id || ' ' || detached FROM cairn.runner_instances WHERE "
                     f"instance_id = '{cid}'") == f"{sid} true", f"{r.stdout} {r.stderr}")
    check("the started child runs to its own result", wait_until(
        "child done", lambda: q(url, f"SELECT status || ' ' || result::text FROM "
                                     f"cairn.runner_instances WHERE instance_id = '{cid}'")
        == "completed 8", 30))

    # ---- cancel cascades down the tree ---------------------------------------------------------
    root = ctl(env, "run", "holdtree", "--input", '{"ms": 60000}').stdout.strip()
    grown = wait_until("grandchildren running", lambda: q(
        url, f"SELECT count(*) FROM cairn.runner_instances WHERE root_id = '{root}' AND "
             f"depth = 2 AND status = 'running'") == "2", 30)
    check("holdtree's two grandchildren run", grown, ctl(env, "tree", root).stdout)
    r = ctl(env, "cancel", root, "--reason", "stop the tree", "--wait", "--timeout", "30")
    check("cancel of the root succeeds", r.returncode == 0, f"{r.stdout} {r.stderr}")
    check("every instance of the tree ends cancelled", wait_until("tree cancelled", lambda: q(
        url, f"SELECT string_agg(DISTINCT status, ',') FROM cairn.runner_instances WHERE "
             f"instance_id = '{root}' OR root_id = '{root}'") == "cancelled", 30),
          ctl(env, "tree", root).stdout)
    t0 = time.monotonic()
    rc, _, doc, r = run_json(env, "parent_one", {"n": 1})
    check("the grandchildren's workers are free again", rc == 0 and time.monotonic() - t0 < 10)

    # ---- a parent that times out, [fail_fast] over children -----------------------------------
    rc, pid2, doc, r = run_json(env, "timed_parent", {"ms": 60000})
    check("a parent past its [timeout: 1s] ends timed_out",
          rc == 4 and doc.get("status") == "timed_out", f"exit {rc}: {r.stdout} {r.stderr}")
    check("... and its running child is cancelled", wait_until("child cancelled", lambda: q(
        url, f"SELECT status FROM cairn.runner_instances WHERE parent_id = '{pid2}'")
        == "cancelled", 30), q(url, f"SELECT status FROM cairn.runner_instances WHERE "
                                    f"parent_id = '{pid2}'"))
    t0 = time.monotonic()
    rc, ffid, doc, r = run_json(env, "ff_children", {"n": 4, "ms": 60000})
    check("[fail_fast] over children raises the first child failure at once (caught by type)",
          rc == 0 and doc.get("result") == "first failure" and time.monotonic() - t0 < 20,
          f"exit {rc}: {r.stdout} {r.stderr}")
    check("... and cancels the sibling children", wait_until("siblings cancelled", lambda: q(
        url, f"SELECT count(*) FILTER (WHERE status = 'cancelled') || ' ' || count(*) FILTER "
             f"(WHERE status = 'failed') FROM cairn.runner_instances WHERE parent_id = "
             f"'{ffid}'") == "3 1", 30), q(url, f"SELECT string_agg(status, ',') FROM "
                                             f"cairn.runner_instances WHERE parent_id = '{ffid}'"))

    # ---- the depth limit -----------------------------------------------------------------------
    rc, did, doc, r = run_json(env, "deep", {"d": 0})
    deepest = q(url, f"SELECT depth || ' ' || (error->>'type') FROM cairn.runner_instances WHERE "
                     f"root_id = '{did}' ORDER BY depth DESC LIMIT 1")
    check("past --max-child-depth 4 the call fails with ChildDepthExceeded, up the tree",
          rc == 4 and (doc.get("error") or {}).get("type") == "ChildWorkflowError"
          and "ChildDepthExceeded" in (doc.get("error") or {}).get("bases", [])
          and deepest == "4 ChildDepthExceeded" and tree_size(url, did) == 5,
          f"{deepest}; {json.dumps(doc)[:300]}")

    # ---- a waiting parent is handed back and woken --------------------------------------------
    wid = ctl(env, "run", "waiter", "--input", '{"ms": 4000}').stdout.strip()
    handed = wait_until("handed back", lambda: q(
        url, f"SELECT ri.status = 'queued' AND ri.state IS NOT NULL AND q.lock_uuid IS NULL "
             f"FROM cairn.runner_instances ri JOIN cairn.queued_instances q USING (instance_id) "
             f"WHERE instance_id = '{wid}'") == "t", 20)
    check("a parent waiting only for a slow child is handed back to the database", handed,
          status(url, wid))
    waits = json.loads(ctl(env, "inspect", wid, "--json").stdout or "{}").get("waiting_on", [])
    kid = q(url, f"SELECT instance_id FROM cairn.runner_instances WHERE parent_id = '{wid}'")
    check("inspect shows what it waits on: the run call and the child's id",
          len(waits) == 1 and waits[0].get("call") == "run" and waits[0].get("action") == "kid_hold"
          and waits[0].get("child_id") == kid, str(waits))
    logs = "".join(p.text() for p in e2e.procs if p.name.startswith("runner"))
    line = next((ln for ln in logs.splitlines() if "handed back until one answers" in ln
                 and wid in ln), "")
    check("the log line of the hand-back carries its fields (instance=, workflow=)",
          f"instance={wid}" in line and "workflow=waiter" in line, line)
    check("its child's outcome wakes it, and it completes", wait_until(
        "woken", lambda: status(url, wid) == "completed", 30), status(url, wid))
    check("... with the result", q(url, f"SELECT result::text FROM cairn.runner_instances WHERE "
                                        f"instance_id = '{wid}'") == '"woken"')

    # ---- waiting for started children (`wait for`) ---------------------------------------------
    t0 = time.monotonic()
    rc, jid, doc, r = run_json(env, "joiner", {"ms": 3000})
    took = time.monotonic() - t0
    check("wait for: the children's results, a failed one caught by its type",
          rc == 0 and doc.get("result") == {"quick": 7, "slow": None, "many": [1, 2, 3],
                                             "bad": "PaymentDeclined", "again": 7},
          f"exit {rc}: {r.stdout} {r.stderr}")
    check("... the slow child's end woke the parent within seconds", took < 15, f"{took:.1f} s")
    check("... the started children are its children, each ran once", q(
        url, f"SELECT count(*) || ' ' || count(*) FILTER (WHERE status = 'completed') FROM "
             f"cairn.runner_instances WHERE parent_id = '{jid}'") == "6 5",
          q(url, f"SELECT string_agg(status, ',') FROM cairn.runner_instances WHERE parent_id = "
                 f"'{jid}'"))
    rc, _, doc, r = run_json(env, "joiner_bad", {"x": 5})
    check("wait for an id that is no child, or a value that is no id, raises",
          rc == 0 and doc.get("result") == "not a child, not an id",
          f"exit {rc}: {r.stdout} {r.stderr}")

    # ---- kill -9 of the runner holding a parent mid-fan-out -----------------------------------
    fan = ctl(env, "run", "fan_hold", "--input", '{"n": 200, "ms": 300}').stdout.strip()
    started = wait_until("children started", lambda: int(q(
        url, f"SELECT count(*) FROM cairn.runner_instances WHERE parent_id = '{fan}' AND "
             f"status = 'completed'")) >= 20, 60)
    check("the fan-out is under way", started)
    r1.kill9()
    e2e.runner(env, tmp, "runner3", sock1, *knobs)
    rc, _, doc, r = run_json(env, "fan_hold", {"n": 1, "ms": 1})  # the fleet still works
    done = wait_until("fan done", lambda: status(url, fan) == "completed", 120)
    check("after kill -9 the parent completes on another runner", done, status(url, fan))
    check("its result counts all 200 children", q(
        url, f"SELECT result::text FROM cairn.runner_instances WHERE instance_id = '{fan}'")
        == "200")
    check("200 children, none created twice (one per call), all completed", q(
        url, f"SELECT count(*) || ' ' || count(DISTINCT parent_exec_id) || ' ' || count(*) "
             f"FILTER (WHERE status = 'completed') FROM cairn.runner_instances WHERE "
             f"parent_id = '{fan}'") == "200 200 200")
    check("no result recorded twice", e2e.duplicate_done(url) == "0", e2e.duplicate_done(url))


def main():
    return e2e.main_in_fresh_db("children", run_all)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): retention, with real runners, a real worker and the real PostgreSQL
that scripts/test starts (a fresh database of its own, dropped at the end).

- `cairnctl prune --older-than D --dry-run` counts the finished instances and action results
  it would delete and deletes nothing; without --dry-run it deletes exactly those, in batches
  (--batch 7 over 30), and keeps newer ones, unfinished ones and children whose outcome has not
  reached their parent yet;
- a pruned instance's idempotency key makes a new instance;
- keyed events go with the same cutoff once no unfinished instance can take them: an instance
  created before an event pins it (an instance takes only events published after it was
  created), younger events stay, and --dry-run counts them;
- two runners with CAIRN_RETENTION delete what is past it on their own, each instance once,
  honouring a workflow's own retention (`cairnctl retention set W D | forever`), and count it
  on /metrics;
- bad settings and arguments are refused with clear messages.

Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until


def n_instances(url, where="true"):
    return int(q(url, f"SELECT count(*) FROM cairn.runner_instances ri WHERE {where}"))


def n_actions(url, where="true"):
    return int(q(url, "SELECT count(*) FROM cairn.runner_actions_done d JOIN "
                      "cairn.runner_instances ri USING (instance_id) WHERE " + where))


def age(url, where, interval):
    """Makes finished instances look as if they had been created and finished INTERVAL ago."""
    q(url, f"UPDATE cairn.runner_instances SET created_at = created_at - interval '{interval}', "
           f"completed_at = completed_at - interval '{interval}' WHERE {where}")


def run_all(url, env, tmp):
    src = os.path.join(e2e.ROOT, "tests/integration/children/kid_echo.cairn")
    r = ctl(env, "migrate")
    check("cairnctl migrate", r.returncode == 0, r.stderr)
    for name in ("short", "long", "mine"):
        r = ctl(env, "register", src, "--name", name)
        check(f"register {name}", r.returncode == 0, r.stderr)

    # ---- bad input ----------------------------------------------------------------------------
    r = ctl(env, "prune")
    check("prune without --older-than is refused", r.returncode == 2 and "--older-than D is "
          "required" in r.stderr, r.stderr)
    r = ctl(env, "prune", "--older-than", "banana")
    check("prune --older-than banana is refused", r.returncode == 2 and "'banana'" in r.stderr,
          r.stderr)
    r = ctl(env, "prune", "--older-than", "-3 days")
    check("a negative age is refused", r.returncode == 2 and "negative" in r.stderr, r.stderr)
    r = ctl(env, "retention", "set", "nope", "1d")
    check("retention set of an unknown workflow is refused", r.returncode != 0 and
          'unknown workflow "nope"' in r.stderr, r.stderr)
    r = ctl(env, "retention", "set", "short", "0s")
    check("a zero retention is refused", r.returncode != 0 and "must be positive" in r.stderr,
          r.stderr)
    r = subprocess.run([e2e.RUNNER, "--retention", "banana"], env=env, capture_output=True,
                       text=True, timeout=30)
    check("cairn-runner refuses CAIRN_RETENTION=banana", r.returncode == 2 and
          "CAIRN_RETENTION 'banana'" in r.stderr, r.stderr)

    # ---- finished instances, then prune by hand ---------------------------------------------
    sock = f"ipc://{tmp}/r1.sock"
    runner = e2e.runner(env, tmp, "runner1", sock)
    e2e.worker(env, tmp, "worker1", sock)
    for wf in ("short", "long"):
        e2e.enqueue_many(url, wf, "jsonb_build_object('i', g)", 20)
    r = ctl(env, "run", "short", "--input", '{"i": 0}', "--idempotency-key", "order-1")
    first_key_id = r.stdout.strip()
    check("all finish", wait_until("finished", lambda: n_instances(
        url, "status = 'completed'") == 41, 60), str(n_instances(url, "status = 'completed'")))
    # a future instance (unfinished) and a child whose outcome its parent has not had yet
    r = ctl(env, "run", "short", "--input", '{"i": 1}', "--at", "2099-01-01T00:00:00Z")
    future = r.stdout.strip()
    age(url, "workflow_name = 'short'", "40 days")
    age(url, "workflow_name = 'long' AND (input->>'i')::int <= 10", "40 days")
    pending = q(url, "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = "
                     "'long' AND (input->>'i')::int = 1")
    q(url, f"UPDATE cairn.runner_instances SET parent_pending = true WHERE instance_id = "
           f"'{pending}'")
    # keyed events: two from before the unfinished instance was created (nobody can take them),
    # three after it (it may still wait for them), one younger than the cutoff
    q(url, f"UPDATE cairn.runner_instances SET created_at = now() - interval '45 days' "
           f"WHERE instance_id = '{future}'")
    for k, ago in (("a", "50 days"), ("b", "50 days"), ("c", "40 days"), ("d", "40 days"),
                   ("e", "40 days"), ("f", "0 days")):
        q(url, f"SELECT event_id FROM cairn.publish_event('paid', '{k}', '1')")
        q(url, f"UPDATE cairn.events SET published_at = published_at - interval '{ago}' "
               f"WHERE key = '{k}'")
    old = "ri.completed_at < now() - interval '30 days' AND NOT ri.parent_pending"
    want_i, want_a = n_instances(url, old), n_actions(url, old)
    check("the setting: 30 old instances (one of them pending), each with an action result",
          want_i == 30 and want_a == 30, f"{want_i} {want_a}")
    r = ctl(env, "prune", "--older-than", "30d", "--dry-run", "--json")
    d = json.loads(r.stdout or "{}")
    check("prune --dry-run counts them", d.get("instances") == 30 and d.get("actions") == 30
          and d.get("events") == 2 and d.get("dry_run") is True, r.stdout + r.stderr)
    check("... and deletes nothing", n_instances(url) == 42, str(n_instances(url)))
    r = ctl(env, "prune", "--older-than", "30d", "--batch", "7")
    check("prune deletes them, in batches", r.returncode == 0 and r.stdout.startswith(
        "deleted 30 finished instances and 30 action results") and ", 2 keyed events in "
        in r.stdout, r.stdout + r.stderr)
    keys = q(url, "SELECT string_agg(key, ',' ORDER BY key) FROM cairn.events")
    check("... the events nobody could take, not those the unfinished instance may still wait "
          "for nor the young one", keys == "c,d,e,f", keys)
    check("... exactly them: the newer ones, the unfinished one and the pending child remain",
          n_instances(url) == 12 and n_instances(url, f"instance_id = '{future}'") == 1
          and n_instances(url, f"instance_id = '{pending}'") == 1
          and n_actions(url) == 11, f"{n_instances(url)} instances, {n_actions(url)} actions")
    check("no orphan action result is left", q(
        url, "SELECT count(*) FROM cairn.runner_actions_done d WHERE NOT EXISTS (SELECT 1 FROM "
             "cairn.runner_instances ri WHERE ri.instance_id = d.instance_id)") == "0")
    r = ctl(env, "prune", "--older-than", "30d")
    check("a second prune finds nothing", r.returncode == 0 and r.stdout.startswith(
        "deleted 0 finished instances") and ", 0 keyed events in " in r.stdout, r.stdout)
    q(url, f"UPDATE cairn.runner_instances SET created_at = now() WHERE instance_id = '{future}'")
    r = ctl(env, "prune", "--older-than", "30d", "--batch", "2")
    keys = q(url, "SELECT string_agg(key, ',' ORDER BY key) FROM cairn.events")
    check("once the instance that pinned them is younger than they are, they go too (in batches)",
          r.returncode == 0 and ", 3 keyed events in " in r.stdout and keys == "f",
          r.stdout + r.stderr + keys)
    r = ctl(env, "run", "short", "--input", '{"i": 0}', "--idempotency-key", "order-1")
    check("a pruned instance's idempotency key makes a new instance",
          r.returncode == 0 and r.stdout.strip() not in ("", first_key_id), r.stdout + r.stderr)
    runner.term()

    # ---- the runner prunes on its own, with workflows' own retention ------------------------
    r = ctl(env, "retention", "set", "long", "forever")
    check("retention set long forever", r.returncode == 0 and "kept for ever" in r.stdout,
          r.stdout + r.stderr)
    r = ctl(env, "retention", "set", "mine", "3h")
    check("retention set mine 3h", r.returncode == 0, r.stderr)
    lst = json.loads(ctl(env, "retention", "list", "--json").stdout or "[]")
    check("retention list shows both", sorted((x["workflow"], x["keep"]) for x in lst) ==
          [("long", None), ("mine", "03:00:00")], str(lst))
    e2e.enqueue_many(url, "mine", "jsonb_build_object('i', g)", 10)
    # two runners prune: one at a time (an advisory lock), each instance deleted once
    port, port3 = e2e.free_port(), e2e.free_port()
    runner = e2e.runner(env, tmp, "runner2", sock, "--retention", "1h",
                        "--prune-interval-ms", "200", "--http-listen", f"127.0.0.1:{port}")
    runner3 = e2e.runner(env, tmp, "runner3", f"ipc://{tmp}/r3.sock", "--retention", "1h",
                         "--prune-interval-ms", "200", "--http-listen", f"127.0.0.1:{port3}")
    e2e.worker(env, tmp, "worker3", f"ipc://{tmp}/r3.sock")
    check("mine finish", wait_until("finished", lambda: n_instances(
        url, "workflow_name = 'mine' AND status = 'completed'") == 10, 60))
    age(url, "workflow_name = 'mine' AND (input->>'i')::int <= 5", "2 hours")
    age(url, "workflow_name = 'mine' AND (input->>'i')::int > 8", "4 hours")
    age(url, "workflow_name IN ('short', 'long') AND completed_at IS NOT NULL", "2 hours")
    q(url, "UPDATE cairn.events SET published_at = published_at - interval '2 hours'")
    check("the runner deletes what is past each workflow's retention", wait_until(
        "pruned", lambda: n_instances(url, "workflow_name = 'short' AND status = 'completed'")
        == 0 and n_instances(url, "workflow_name = 'mine'") == 8, 30),
        q(url, "SELECT string_agg(workflow_name || ':' || status, ' ') FROM "
               "cairn.runner_instances"))
    check("... and keeps the rest: 'long' for ever, 'mine' younger than 3 h",
          n_instances(url, "workflow_name = 'long'") == 11
          and n_instances(url, "workflow_name = 'mine' AND (input->>'i')::int > 8") == 0
          and n_instances(url, f"instance_id = '{future}'") == 1,
          q(url, "SELECT string_agg(workflow_name || ':' || (input->>'i'), ' ') FROM "
                 "cairn.runner_instances"))
    # by hand: workflows with a retention of their own are left to it, unless named
    age(url, "workflow_name = 'long'", "400 days")
    r = ctl(env, "prune", "--older-than", "1h")
    check("prune by hand leaves out a workflow kept for ever", r.returncode == 0 and
          n_instances(url, "workflow_name = 'long'") == 11, r.stdout + r.stderr)
    parent = q(url, "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = 'long' "
                    "ORDER BY created_at LIMIT 1")
    q(url, f"UPDATE cairn.runner_instances SET parent_id = '{parent}' WHERE instance_id = "
           f"'{future}'")
    r = ctl(env, "prune", "--older-than", "1h", "--workflow", "long")
    check("... and deletes it when named, but for a parent whose child has not finished",
          r.returncode == 0 and n_instances(url, "workflow_name = 'long'") == 1
          and n_instances(url, f"instance_id = '{parent}'") == 1, r.stdout + r.stderr)
    m, m3 = e2e.metrics(port), e2e.metrics(port3)
    pruned = [x.get(k, 0) for k in ("cairn_pruned_instances_total", "cairn_pruned_actions_total")
              for x in (m, m3)]
    # short: the one made again with the key; mine: the two past 3 h
    check("/metrics of the two runners count what retention deleted, once",
          pruned[0] + pruned[1] == 3 and pruned[2] + pruned[3] == 3, str(pruned))
    check("the runners delete the event past CAIRN_RETENTION that nobody can take", wait_until(
        "events pruned", lambda: q(url, "SELECT count(*) FROM cairn.events") == "0", 30))
    m, m3 = e2e.metrics(port), e2e.metrics(port3)
    check("... and count it on /metrics, once", m.get("cairn_pruned_events_total", 0)
          + m3.get("cairn_pruned_events_total", 0) == 1, f"{m} {m3}")
    check("the runners log it", wait_until("logged", lambda: "retention: deleted" in
                                           runner.text() + runner3.text(), 10),
          runner.text()[-500:])
    check("no runner's pruning failed", "pruning failed" not in runner.text() + runner3.text(),
          runner.text()[-500:] + runner3.text()[-500:])


def main():
    return e2e.main_in_fresh_db("retention", run_all)


if __name__ == "__main__":
    sys.exit(main())

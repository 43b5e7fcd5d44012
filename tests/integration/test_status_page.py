#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): the status page and the fleet table, with a real cairn-runner, a real
cairn-worker (std.* actions) and the real PostgreSQL that scripts/test starts (a fresh database
of its own, dropped at the end).

- the runner publishes its row in cairn.runners: host, pid, HTTP address, its worker's slots,
  and per action {"workers", "slots", "busy", "waiting"}: std.sleep served and busy with the
  instance that holds it and the cancelled one's cleanup, billing.charge (no worker serves it) with its 3 attempts waiting;
- the page, loaded in headless Chromium (the DOM after parsing), shows the running instance of
  `hold`, the banner "no connected worker serves billing.charge; 3 attempts waiting", the
  worker with the actions it serves, and the failed instance's error, which holds markup,
  escaped: it is text on the page, and the page has no script element;
- the page lists what instances wait for: the approval instance's signals approve and reject,
  grouped by workflow, then as the oldest wait with the `cairnctl signal` command that answers;
- the page lists the instances cleaning up: tidy, cancelled, running its finally block, with the
  `cairnctl cancel ID --force` that abandons it;
- / and /status answer the same page (text/html), /metrics still answers;
- after a graceful stop (SIGTERM, exit 0) the runner's row is gone.

Without chromium installed the browser checks are reported as skipped, with the reason; the
rest runs. Arguments: CAIRN_RUNNER CAIRN_WORKER CAIRNCTL SOURCE_ROOT. TAP output; without
CAIRN_TEST_DATABASE_URL it reports a skip.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, q, ctl, wait_until = e2e.check, e2e.q, e2e.ctl, e2e.wait_until

EVIL = "card <script>alert('x')</script> & co"


def skip(what, why):
    e2e.n_checks += 1
    print(f"ok {e2e.n_checks} - {what} # SKIP {why}", flush=True)


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as f:
        return f.status, f.headers.get("Content-Type", ""), f.read().decode()


def row(url, runner_id=None):
    where = f"WHERE runner_id = '{runner_id}'" if runner_id else ""
    text = q(url, "SELECT coalesce(json_agg(json_build_object('id', runner_id, 'host', host, "
                  "'pid', pid, 'http', http, 'workers', workers, 'slots', slots, 'busy', busy, "
                  f"'actions', actions, 'age', extract(epoch FROM now() - seen_at))), '[]') "
                  f"FROM cairn.runners {where}")
    return json.loads(text)


def chromium_dom(page_url, tmp):
    """The page's DOM as Chromium serializes it after parsing, or None with the reason."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return None, "chromium is not installed (scripts/setup-deps installs it)"
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    # As root Chromium needs --no-sandbox; its own profile keeps it away from any other.
    argv = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
            "--virtual-time-budget=2000", "--dump-dom", page_url]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)  # its own session: the browser and every helper it started
        p.communicate()
        return None, "chromium did not finish within 90 s"
    if p.returncode != 0 or not out.strip():
        return None, f"chromium exited {p.returncode}: {err.decode(errors='replace')[-500:]}"
    return out.decode(), None


def visible_text(dom):
    """The DOM's text as a reader sees it: tags dropped, references decoded, spaces collapsed."""
    body = re.sub(r"(?s)<style.*?</style>", " ", dom)
    body = re.sub(r"</?code>", "", body)  # inline: no space around a name
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()


def run_all(url, env, tmp):
    for args in (["migrate"],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/workflows/hold.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/status/charge.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/status/boom.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/status/tidy.cairn")],
                 ["register", os.path.join(e2e.ROOT, "tests/integration/signals/approval.cairn")]):
        r = ctl(env, *args)
        check(f"cairnctl {' '.join(os.path.basename(a) for a in args)}", r.returncode == 0,
              r.stderr)
    check("cairn.runners exists and is empty", q(url, "SELECT count(*) FROM cairn.runners") == "0")

    port = e2e.free_port()
    sock = f"ipc://{tmp}/r1.sock"
    runner = e2e.runner(env, tmp, "runner", sock, "--http-listen", f"127.0.0.1:{port}")
    e2e.worker(env, tmp, "worker-std", sock, slots="4")

    hold = ctl(env, "run", "hold", "--input", '{"ms": 120000}').stdout.strip()
    for i in range(3):
        ctl(env, "run", "charge", "--input", json.dumps({"amount": i + 1}))
    boom = ctl(env, "run", "boom", "--input", json.dumps({"msg": EVIL})).stdout.strip()
    approval = ctl(env, "run", "approval", "--input", '{"order": {"id": "o-1"}}').stdout.strip()
    check("the approval instance waits for its signal", wait_until(
        "waiting", lambda: q(url, "SELECT count(*) FROM cairn.instance_waits WHERE instance_id "
                                  f"= '{approval}'") == "1", 30))
    check("the hold instance runs", wait_until(
        "running", lambda: q(url, "SELECT status FROM cairn.runner_instances WHERE instance_id "
                                  f"= '{hold}'") == "running", 30))
    tidy = ctl(env, "run", "tidy", "--input", '{"ms": 120000}').stdout.strip()
    check("the tidy instance runs", wait_until(
        "running", lambda: q(url, "SELECT status FROM cairn.runner_instances WHERE instance_id "
                                  f"= '{tidy}'") == "running", 30))
    r = ctl(env, "cancel", tidy)
    check("cancelled, the tidy instance cleans up", r.returncode == 0 and wait_until(
        "cleaning", lambda: q(url, "SELECT status = 'running' AND cleanup_until IS NOT NULL FROM "
                                   f"cairn.runner_instances WHERE instance_id = '{tidy}'") == "t",
        30), r.stdout + r.stderr)
    check("the boom instance failed", wait_until(
        "failed", lambda: q(url, "SELECT status FROM cairn.runner_instances WHERE instance_id "
                                 f"= '{boom}'") == "failed", 30))

    # ---- the fleet table ----------------------------------------------------------------------
    def published():
        rows = row(url)
        if len(rows) != 1:
            return False
        a = rows[0]["actions"]
        return (a.get("billing.charge", {}).get("waiting") == 3
                and a.get("std.sleep", {}).get("busy") == 2)

    check("the runner publishes its row, with the attempts waiting and busy",
          wait_until("published", published, 30), json.dumps(row(url)))
    rows = row(url)
    me = rows[0] if rows else {}
    check("the row names the runner's host, pid and HTTP address",
          me.get("pid") == runner.p.pid and me.get("http") == f"127.0.0.1:{port}"
          and me.get("host") == os.uname().nodename, json.dumps(me))
    # Two attempts run: hold's, and tidy's cleanup.
    check("the row counts the worker and its slots, and what runs on it",
          (me.get("workers"), me.get("slots"), me.get("busy")) == (1, 4, 2), json.dumps(me))
    acts = me.get("actions", {})
    check("billing.charge: no worker, 3 attempts waiting",
          acts.get("billing.charge") == {"workers": 0, "slots": 0, "busy": 0, "waiting": 3},
          json.dumps(acts))
    check("std.sleep: one worker, its slots, two attempts running, none waiting",
          acts.get("std.sleep") == {"workers": 1, "slots": 4, "busy": 2, "waiting": 0},
          json.dumps(acts))
    check("every std action the worker serves is listed",
          all(acts.get(a, {}).get("workers") == 1 for a in ("std.echo", "std.fail", "std.noop")),
          json.dumps(acts))
    age = [r["age"] for r in row(url)]
    check("seen_at is refreshed every few seconds", wait_until(
        "refreshed", lambda: all(r["age"] < 6 for r in row(url)), 12), str(age))
    q(url, "INSERT INTO cairn.runners (runner_id, host, pid, seen_at) VALUES "
           "('00000000-0000-4000-8000-000000000001', 'gone.example', 1, now() - interval '5 min')")
    check("a dead runner's row (seen 5 minutes ago) is deleted by the next publish", wait_until(
        "reaped", lambda: q(url, "SELECT count(*) FROM cairn.runners WHERE host = "
                                 "'gone.example'") == "0", 12))

    # ---- what inspect says an instance waits for (from the fleet table) -----------------------
    charge = q(url, "SELECT instance_id FROM cairn.runner_instances WHERE workflow_name = "
                    "'charge' LIMIT 1")
    text = ctl(env, "inspect", charge).stdout
    check("inspect: no connected worker serves billing.charge, 3 attempts waiting",
          "waiting for no connected worker serves `billing.charge` (3 attempts waiting across "
          "the fleet)" in text, text)
    text = ctl(env, "inspect", hold).stdout
    check("inspect: the hold instance waits for std.sleep's result from a worker",
          "waiting for the result of `std.sleep` (attempt 1) from a worker" in text, text)

    # ---- a workflow at its concurrency limit ---------------------------------------------------
    r = ctl(env, "limit", "set", "hold", "1")
    check("limit set hold 1", r.returncode == 0, r.stdout + r.stderr)
    held = ctl(env, "run", "hold", "--input", '{"ms": 1}').stdout.strip()
    time.sleep(1.5)
    check("a second hold instance stays queued behind the limit",
          q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{held}'")
          == "queued")
    text = ctl(env, "inspect", held).stdout
    check("inspect: it waits for a concurrency slot",
          "waiting for a concurrency slot: workflow runs 1 of at most 1" in text, text)

    # ---- the page over HTTP -------------------------------------------------------------------
    status, ctype, page = get(port, "/")
    check("GET / answers 200 with HTML", status == 200 and ctype.startswith("text/html"),
          f"{status} {ctype}")
    status2, _, page2 = get(port, "/status")
    check("GET /status answers the same page", status2 == 200 and "<h1>Cairn status</h1>"
          in page2, page2[:200])
    check("the error's markup is escaped in the HTML",
          "card &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co" in page
          and "<script" not in page, page)
    check("/metrics still answers", "cairn_workers 1" in get(port, "/metrics")[2])

    # ---- a second runner: the fleet on the page ----------------------------------------------
    port2 = e2e.free_port()
    runner2 = e2e.runner(env, tmp, "runner2", f"ipc://{tmp}/r2.sock", "--http-listen",
                         f"127.0.0.1:{port2}")
    check("a second runner publishes its row too", wait_until(
        "two rows", lambda: len(row(url)) == 2, 30), json.dumps(row(url)))
    other = [r for r in row(url) if r.get("pid") == runner2.p.pid]
    other_id = other[0].get("id", "?") if other else "?"
    time.sleep(2.5)  # the page's data is at most 2 s old when read

    # ---- the page in a browser ----------------------------------------------------------------
    dom, why = chromium_dom(f"http://127.0.0.1:{port}/", tmp)
    browser_checks = [
        ("the page shows the running instance of hold (and the one queued behind its limit)",
         lambda d, t: re.search(r"<td>hold</td><td class=\"n\">1</td><td class=\"n\">1</td>", d)),
        ("the banner: no connected worker serves billing.charge, 3 attempts waiting",
         lambda d, t: "no connected worker serves billing.charge; 3 attempts waiting on this "
                      "runner" in t),
        ("the worker and the actions it serves",
         lambda d, t: "worker-std" in t and re.search(r"std\.sleep.*std\.fail|std\.fail.*"
                                                      r"std\.sleep", t)),
        ("the failure's error is shown as text, escaped",
         lambda d, t: f"ValueError: {EVIL}" in t and boom in t),
        ("the waits: approval waits for signal approve, reject (1 instance)",
         lambda d, t: re.search(r"<td>approval</td><td>signal <code>approve, reject</code></td>"
                                r"<td class=\"n\">1</td>", d)),
        ("... and the oldest waits, with the command that answers",
         lambda d, t: f"{approval} signal approve, reject" in t
         and f"cairnctl signal {approval} approve --payload JSON" in t),
        ("the instance cleaning up after its cancel, with the command that abandons it",
         lambda d, t: re.search(rf"<td>tidy</td><td><code>{tidy}</code></td><td>cancel</td>", d)
         and f"cairnctl cancel {tidy} --force" in t),
        ("the page has no script element",
         lambda d, t: "<script" not in d.lower()),
        ("the banner: workflow hold at its concurrency limit",
         lambda d, t: "workflow hold at its concurrency limit (1 running, 1 waiting; limit 1)"
                      in t),
        ("the fleet table shows this runner",
         lambda d, t: f"{me.get('id')} (this one)" in t),
        ("... and the other runner of the fleet",
         lambda d, t: other_id in t and f"127.0.0.1:{port2}" in t),
    ]
    if dom is None:
        for what, _ in browser_checks:
            skip(what, why)
    else:
        text = visible_text(dom)
        for what, ok in browser_checks:
            check(what, bool(ok(dom, text)), text[:3000])

    # ---- graceful stop -------------------------------------------------------------------------
    rc = runner.term()
    check("the runner stops gracefully", rc == 0, str(rc))
    check("its row is gone from cairn.runners, the other runner's stays",
          [r.get("pid") for r in row(url)] == [runner2.p.pid], json.dumps(row(url)))
    check("the second runner stops gracefully too", runner2.term() == 0)
    check("no row is left", row(url) == [], json.dumps(row(url)))


def main():
    return e2e.main_in_fresh_db("status", run_all)


if __name__ == "__main__":
    sys.exit(main())

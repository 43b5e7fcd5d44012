#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Meson test (suite db): signals and keyed events, with real runners, a real worker and the
real PostgreSQL that scripts/test starts (a fresh database of its own, dropped at the end). The
workflows are in tests/integration/signals/.

- a signal sent before the instance's first claim is kept and taken by its wait; one sent to a
  waiter handed back to the database wakes it; several names give [name, payload];
- a mailbox: n signals taken first in, first out; a dedup key makes a resend a no-op;
- refusals, each with its exit status and message: an unknown instance, a name the workflow
  never waits for, an instance that has ended, --only-if-waiting with nothing waiting, a
  payload that is not JSON;
- a timeout: WaitTimeout caught, a default; a signal sent after the timeout stays buffered;
- a keyed event taken by every instance waiting on its name and key, and by a later wait of an
  instance created before it, but not by one created after it; dedup of events;
- waits in a spread and a parallel block; cancel while waiting withdraws the wait;
- kill -9 of the runner holding a waiter: another takes it over and the signal is taken once;
- the end is pushed: the write that ends an instance (completed, failed, cancelled, timed out
  by the deadline sweep) notifies its cairn.done_channel; cairnctl wait prints the result,
  exits 5 at its timeout, 4 for a failed instance, 1 for an unknown one;
- published values: the latest of each name while the instance waits (cairnctl get), --wait
  --after V for the next one, exit 5 for none yet, 6 for none to come, 1 for an unknown
  instance;
- another tenant can neither signal the instance nor read its values (no instance);
- a workflow signals other instances (sender.cairn): a child it started takes two signals in
  order, a handed-back waiter is woken ("delivered"), refusals are caught as SignalError with
  their reason; each send is stored once, as the sending instance, its answer recorded as the
  call's result; cairn.runner_signals made again (a write retried) sends nothing more, and one
  from another tenant's instance is refused as no instance.
"""

import json
import os
import select
import sys
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runner_e2e as e2e  # noqa: E402  (its helpers: processes, psql, TAP checks)

check, ctl, q, wait_until = e2e.check, e2e.ctl, e2e.q, e2e.wait_until
TENANT = f"sig{os.getpid()}"
ROLE = f"cairn_tenant_{TENANT}"


def status(url, iid):
    return q(url, f"SELECT status FROM cairn.runner_instances WHERE instance_id = '{iid}'")


def result(url, iid):
    r = q(url, f"SELECT result::text FROM cairn.runner_instances WHERE instance_id = '{iid}'")
    return json.loads(r) if r else None


def run(env, name, inp):
    return ctl(env, "run", name, "--input", json.dumps(inp)).stdout.strip()


def waiting(url, iid, n=1):
    """Whether the instance has n registered waits and no runner holds it (handed back)."""
    return q(url, f"SELECT count(*) = {n} AND bool_and(q.lock_uuid IS NULL) FROM cairn.waits w "
                  f"JOIN cairn.queued_instances q USING (instance_id) WHERE instance_id = "
                  f"'{iid}'") == "t"


def signal(env, iid, name, payload, *extra):
    return ctl(env, "signal", iid, name, "--payload", json.dumps(payload), *extra)


class Listener:
    """A session listening on an instance's cairn.done_channel, as a client would."""

    def __init__(self, url, iid):
        self.got = []
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.add_notify_handler(lambda n: self.got.append(n.payload))
        chan = self.conn.execute("SELECT cairn.done_channel(%s)", (iid,)).fetchone()[0]
        self.conn.execute(f'LISTEN "{chan}"')

    def heard(self, timeout):
        """The payloads heard, once one has come or after timeout seconds."""
        end = time.monotonic() + timeout
        while not self.got and time.monotonic() < end:
            select.select([self.conn.fileno()], [], [], max(0.0, end - time.monotonic()))
            self.conn.execute("SELECT 1")  # takes in what came
        return self.got

    def close(self):
        self.conn.close()


def done(url, iid, timeout=30):
    return wait_until("completed", lambda: status(url, iid) == "completed", timeout)


def run_all(url, env, tmp):
    src = os.path.join(e2e.ROOT, "tests/integration/signals")
    r = ctl(env, "migrate")
    check("migrate", r.returncode == 0, r.stderr)
    for name in ("approval", "mailbox", "timed", "keyed", "branches", "progress", "sender"):
        r = ctl(env, "register", f"{src}/{name}.cairn")
        check(f"register {name} (a workflow with waits)", r.returncode == 0, r.stderr)
    check("the version records the signal names its waits take", q(
        url, "SELECT signals::text FROM cairn.workflow_versions WHERE workflow_name = "
             "'approval'") == "{approve,reject}")

    # ---- before the first claim: kept ------------------------------------------------------
    early = run(env, "approval", {"order": {"id": "o1"}})
    r = signal(env, early, "approve", {"by": "ann"})
    check("a signal before any runner runs the instance is buffered",
          r.returncode == 0 and "buffered" in r.stdout, r.stdout + r.stderr)

    sock = f"ipc://{tmp}/r1.sock"
    knobs = ("--evict-child-wait-ms", "200")
    port = e2e.free_port()
    r1 = e2e.runner(env, tmp, "runner1", sock, *knobs, "--http-listen", f"127.0.0.1:{port}")
    e2e.worker(env, tmp, "worker1", sock)
    check("... and its wait takes it: the instance goes on to wait for the event",
          wait_until("event wait", lambda: q(
              url, f"SELECT names[1] FROM cairn.waits WHERE instance_id = '{early}'")
              == "order_paid", 30), q(url, f"SELECT * FROM cairn.waits WHERE instance_id = "
                                         f"'{early}'"))
    r = ctl(env, "event", "order_paid", "o1", "--payload", '{"amount": 12}')
    check("cairnctl event says how many waits took it", r.returncode == 0 and
          "1 wait(s) took it" in r.stdout, r.stdout + r.stderr)
    check("the instance completes with the signal's and the event's payloads",
          done(url, early) and result(url, early) == {"approved_by": "ann", "paid": 12},
          str(result(url, early)))

    # ---- to a waiter handed back: woken ----------------------------------------------------
    late = run(env, "approval", {"order": {"id": "o2"}})
    check("a waiting instance is handed back to the database", wait_until(
        "handed back", lambda: waiting(url, late), 30), status(url, late))
    text = ctl(env, "inspect", late).stdout
    check("inspect says what it waits for and how to send it", "signal approve,reject, since" in
          text and f"cairnctl signal {late} approve --payload JSON" in text, text)
    r = signal(env, late, "reject", "too dear")
    check("a signal to it is delivered", r.returncode == 0 and "delivered" in r.stdout,
          r.stdout + r.stderr)
    check("... it wakes and takes [name, payload] of the first of several names",
          done(url, late) and result(url, late) == {"rejected": "too dear"},
          str(result(url, late)))

    # ---- a mailbox, dedup ----------------------------------------------------------------------
    box = run(env, "mailbox", {"n": 3})
    for i, p in enumerate(["a", "b"]):
        r = signal(env, box, "item", p, "--dedup-key", f"k{i}")
    doc = json.loads(ctl(env, "inspect", box, "--json").stdout or "{}")
    check("inspect --json counts the signals sent and those buffered", doc.get(
        "signals_sent") == 2 and [g["payload"] for g in doc.get("signals", [])] == ["a", "b"],
        str(doc.get("signals")))
    r = signal(env, box, "item", "b", "--dedup-key", "k1")
    check("a resend with the same dedup key is a no-op (exit 6)",
          r.returncode == 6 and "duplicate" in r.stdout, f"{r.returncode}: {r.stdout}")
    signal(env, box, "item", "c")
    check("a mailbox takes its signals first in, first out, each once",
          done(url, box) and result(url, box) == ["a", "b", "c"], str(result(url, box)))
    check("... each signal records the wait that took it", q(
        url, f"SELECT count(DISTINCT consumed_exec) || ' ' || count(*) FROM cairn.signals "
             f"WHERE instance_id = '{box}'") == "3 3")

    # ---- refusals ------------------------------------------------------------------------------
    r = signal(env, "00000000-0000-0000-0000-000000000001", "approve", 1)
    check("a signal to an unknown instance: exit 1, no instance", r.returncode == 1 and
          "no instance" in r.stderr, f"{r.returncode}: {r.stderr}")
    other = run(env, "mailbox", {"n": 1})
    r = signal(env, other, "approve", 1)
    check("a name the workflow never waits for: exit 1, with the names it takes",
          r.returncode == 1 and 'never waits for signal "approve"' in r.stderr, r.stderr)
    wait_until("other waits", lambda: waiting(url, other), 30)
    r = signal(env, other, "item", 1, "--only-if-waiting")
    check("--only-if-waiting with a wait there: delivered", r.returncode == 0 and
          "delivered" in r.stdout, f"{r.returncode}: {r.stdout} {r.stderr}")
    check("... and the instance completes", done(url, other))
    ap = run(env, "approval", {"order": {"id": "o9"}})
    signal(env, ap, "approve", {"by": "bo"})
    wait_until("ap waits for its event", lambda: q(
        url, f"SELECT names[1] FROM cairn.waits WHERE instance_id = '{ap}'") == "order_paid", 30)
    r = signal(env, ap, "approve", {"by": "cy"}, "--only-if-waiting")
    check("--only-if-waiting with nothing waiting on the name: exit 1, nothing stored",
          r.returncode == 1 and "not sent" in r.stdout and q(
              url, f"SELECT count(*) FROM cairn.signals WHERE instance_id = '{ap}'") == "1",
          f"{r.returncode}: {r.stdout} {r.stderr}")
    ctl(env, "event", "order_paid", "o9", "--payload", '{"amount": 1}')
    check("... the instance goes on with the event", done(url, ap))
    r = signal(env, other, "item", 2)
    check("a signal to an instance that has ended: exit 1, has ended",
          r.returncode == 1 and "has ended (completed)" in r.stderr, r.stderr)
    r = ctl(env, "signal", other, "item", "--payload", "{not json")
    check("a payload that is not JSON: exit 1", r.returncode == 1 and "json" in r.stderr.lower(),
          r.stderr)

    # ---- timeouts ------------------------------------------------------------------------------
    t = run(env, "timed", {"ms": 1})
    check("a wait's timeout raises WaitTimeout (caught), a default stands in at the other",
          done(url, t) and result(url, t) == ["timeout: no signal nudge came within 300ms",
                                              "no poke"], str(result(url, t)))

    # ---- keyed events ------------------------------------------------------------------------------
    ks = [run(env, "keyed", {"key": "k1"}) for _ in range(3)]
    odd = run(env, "keyed", {"key": "k2"})
    check("three instances wait on one key", wait_until("keyed waits", lambda: q(
        url, "SELECT count(*) FROM cairn.waits WHERE event AND key = 'k1'") == "3", 30))
    r = ctl(env, "event", "ready", "k1", "--payload", '"go"', "--json")
    doc = json.loads(r.stdout or "{}")
    check("one publish wakes all three (woken 3)", doc.get("woken") == 3, r.stdout + r.stderr)
    check("... each completes with the payload", all(done(url, k) for k in ks) and
          all(result(url, k) == "go" for k in ks), str([result(url, k) for k in ks]))
    r = ctl(env, "event", "ready", "k2", "--payload", '"two"', "--dedup-key", "d")
    r2 = ctl(env, "event", "ready", "k2", "--payload", '"again"', "--dedup-key", "d")
    check("an event with a dedup key seen before is a no-op (exit 6)", r.returncode == 0 and
          r2.returncode == 6 and "duplicate" in r2.stdout, r2.stdout + r2.stderr)
    check("the other key's instance takes only its own event", done(url, odd) and
          result(url, odd) == "two", str(result(url, odd)))
    newer = run(env, "keyed", {"key": "k2"})
    check("an instance created after an event does not take it", wait_until(
        "newer waits", lambda: waiting(url, newer), 30), status(url, newer))
    ctl(env, "event", "ready", "k2", "--payload", '"three"')
    check("... it takes the next one", done(url, newer) and result(url, newer) == "three",
          str(result(url, newer)))

    # ---- spread and parallel -----------------------------------------------------------------------
    br = run(env, "branches", {"names": ["x", "y"]})
    check("a spread registers a wait per item", wait_until(
        "branch waits", lambda: q(url, f"SELECT count(*) FROM cairn.waits WHERE instance_id = "
                                       f"'{br}'") == "2", 30))
    for p in ("s1", "s2"):
        signal(env, br, "slot", p)
    signal(env, br, "right", "R")
    signal(env, br, "left", "L")
    check("... each branch takes its own signal", done(url, br) and result(url, br) ==
          {"spread": ["s1", "s2"], "left": "L", "right": "R"}, str(result(url, br)))

    # ---- cancel while waiting ----------------------------------------------------------------------
    c = run(env, "mailbox", {"n": 1})
    wait_until("cancel target waits", lambda: waiting(url, c), 30)
    r = ctl(env, "cancel", c, "--wait")
    check("cancel of a waiting instance cancels it and withdraws its wait",
          status(url, c) == "cancelled" and q(
              url, f"SELECT count(*) FROM cairn.waits WHERE instance_id = '{c}'") == "0",
          r.stdout + r.stderr)

    # ---- the end is pushed -------------------------------------------------------------------------
    ends = {}
    for how in ("completed", "failed", "cancelled", "timed_out"):
        extra = ("--workflow-timeout", "3s") if how == "timed_out" else ()
        iid = ctl(env, "run", "approval", "--input", f'{{"order": {{"id": "{how}"}}}}',
                  *extra).stdout.strip()
        ends[how] = (iid, Listener(url, iid))
        if how != "timed_out":
            wait_until(f"{how} target waits", lambda: waiting(url, iid), 30)
    bg = e2e.subprocess.Popen([e2e.CTL, "wait", ends["completed"][0], "--timeout", "60"],
                              env=env, stdout=e2e.subprocess.PIPE, stderr=e2e.subprocess.PIPE,
                              text=True)
    r = ctl(env, "wait", ends["failed"][0], "--timeout", "1")
    check("cairnctl wait --timeout of an instance still waiting: exit 5", r.returncode == 5 and
          "did not finish within 1 s" in r.stderr, f"{r.returncode}: {r.stderr}")
    signal(env, ends["completed"][0], "reject", "no")
    signal(env, ends["failed"][0], "approve", "not a map")  # decision["by"] of a string fails
    ctl(env, "event", "order_paid", "failed", "--payload", '{"amount": 1}')  # ... once it is paid
    ctl(env, "cancel", ends["cancelled"][0])
    for how, (iid, li) in ends.items():
        got = li.heard(30)
        check(f"the write that ends an instance {how} notifies its cairn.done_channel",
              got == [how], f"{got}, {status(url, iid)}")
        li.close()
    out, err = bg.communicate(timeout=60)
    check("cairnctl wait ID, started before the end, prints the result when it comes",
          bg.returncode == 0 and json.loads(out or "null") == {"rejected": "no"},
          f"{bg.returncode}: {out} {err}")
    r = ctl(env, "wait", ends["failed"][0])
    check("cairnctl wait of a failed instance: exit 4 and its error", r.returncode == 4 and
          "failed" in r.stderr, f"{r.returncode}: {r.stderr}")
    r = ctl(env, "wait", "00000000-0000-0000-0000-000000000002")
    check("cairnctl wait of an unknown instance: exit 1, no instance", r.returncode == 1 and
          "no instance" in r.stderr, f"{r.returncode}: {r.stderr}")

    # ---- published values --------------------------------------------------------------------------
    pr = run(env, "progress", {"n": 3})
    bg = e2e.subprocess.Popen([e2e.CTL, "get", pr, "stage", "--wait", "--after", "2",
                               "--timeout", "60"], env=env, stdout=e2e.subprocess.PIPE,
                              stderr=e2e.subprocess.PIPE, text=True)
    wait_until("progress waits", lambda: waiting(url, pr), 30)
    r = ctl(env, "get", pr, "stage")
    check("cairnctl get: the latest value while the instance waits", r.returncode == 0 and
          json.loads(r.stdout) == "waiting", r.stdout + r.stderr)
    r = ctl(env, "get", pr, "done", "--json")
    got = json.loads(r.stdout or "{}")
    check("... the last of a loop's values, with its version (one per write)",
          r.returncode == 0 and got.get("value") == 3 and got.get("status") == "queued" and
          got.get("version") >= 1, r.stdout + r.stderr)
    check("... stored in cairn.published, one row per name", q(
        url, f"SELECT string_agg(name || '=' || value::text, ',' ORDER BY name) FROM "
             f"cairn.published WHERE instance_id = '{pr}'") == 'done=3,stage="waiting"')
    r = ctl(env, "get", pr, "missing")
    check("cairnctl get of a name not published: exit 5", r.returncode == 5 and
          "has published no missing" in r.stderr, f"{r.returncode}: {r.stderr}")
    r = ctl(env, "get", "00000000-0000-0000-0000-000000000003", "stage")
    check("cairnctl get of an unknown instance: exit 1, no instance", r.returncode == 1 and
          "no instance" in r.stderr, f"{r.returncode}: {r.stderr}")
    signal(env, pr, "go", "now")
    out, err = bg.communicate(timeout=60)
    text = ctl(env, "inspect", pr).stdout
    doc = json.loads(ctl(env, "inspect", pr, "--json").stdout or "{}")
    check("inspect lists the values published and the signals, each with the wait that took it",
          'published   stage = {"went": "now"} (version 3' in text and
          "published   done = 3 (version" in text and "signals     1 sent, 0 buffered" in text and
          'go "now" taken by wait ' in text and doc.get("signals_sent") == 1 and
          doc.get("signals")[0].get("consumed_by") and
          [v["name"] for v in doc.get("published", [])] == ["done", "stage"], text)
    check("cairnctl get --wait --after V, started before, prints the next version when it comes",
          bg.returncode == 0 and json.loads(out or "null") == {"went": "now"},
          f"{bg.returncode}: {out} {err}")
    check("... and the instance ends with its result", done(url, pr) and result(url, pr) == 3,
          str(result(url, pr)))
    r = ctl(env, "get", pr, "missing", "--wait", "--timeout", "30")
    check("cairnctl get --wait of a name an ended instance never published: exit 6",
          r.returncode == 6 and "none will come" in r.stderr, f"{r.returncode}: {r.stderr}")
    r = ctl(env, "get", pr, "stage", "--wait", "--after", "9", "--timeout", "1")
    check("... of a version that has not come: exit 6 once ended", r.returncode == 6,
          f"{r.returncode}: {r.stderr}")

    # ---- another tenant --------------------------------------------------------------------------
    q(url, f"SELECT cairn.tenant_create('{TENANT}')")
    out = e2e.subprocess.run(
        [e2e.PSQL, "-X", "-q", "-At", "-d", url, "-c",
         f"SET ROLE {ROLE}; SELECT value FROM cairn.get_value('{pr}', 'stage')"],
        capture_output=True, text=True)
    check("another tenant cannot read the instance's values: no instance",
          out.returncode != 0 and "no instance" in out.stderr, out.stdout + out.stderr)
    victim = run(env, "mailbox", {"n": 1})
    out = e2e.subprocess.run(
        [e2e.PSQL, "-X", "-q", "-At", "-d", url, "-c",
         f"SET ROLE {ROLE}; SELECT cairn.signal('{victim}', 'item', '1')"],
        capture_output=True, text=True)
    check("another tenant cannot signal the instance: no instance", out.returncode != 0 and
          "no instance" in out.stderr and q(
              url, f"SELECT count(*) FROM cairn.signals WHERE instance_id = '{victim}'") == "0",
          out.stdout + out.stderr)

    # ---- a workflow signals other instances ---------------------------------------------------
    waiter = run(env, "approval", {"order": {"id": "o-sender"}})
    ended = run(env, "mailbox", {"n": 0})
    wait_until("waiter handed back", lambda: waiting(url, waiter), 30)
    done(url, ended)
    sender = run(env, "sender", {"waiter": waiter, "ended": ended})
    done(url, sender)
    got = result(url, sender) or {}
    sent = got.get("sent", [])
    check("a workflow's signals: sent and answered (to the child buffered or delivered, as it "
          "waits yet or not; to the handed-back waiter delivered)", status(url, sender) ==
          "completed" and len(sent) == 3 and {"buffered", "delivered"} >= set(sent[:2]) and
          sent[2] == "delivered", f"{status(url, sender)} {got}")
    refused = got.get("refused", {})
    check("... each refusal with its reason: ended, unknown_name, not_found; a bad id a "
          "ValueError", refused.get("ended") == "ended" and refused.get("unknown") ==
          "unknown_name" and refused.get("missing", [None])[0] == "not_found" and
          "no instance 00000000-0000-4000-8000-000000000000" in refused.get("missing")[1] and
          "is not an instance id" in refused.get("bad_id", ""), json.dumps(refused))
    child = got.get("child")
    check("the child it started takes its two signals in the order sent", done(url, child) and
          result(url, child) == ["one", "two"], f"{status(url, child)} {result(url, child)}")
    check("the waiter it woke goes on with the payload (then waits for its event)", wait_until(
        "waiter's event wait", lambda: q(url, f"SELECT names[1] FROM cairn.waits WHERE "
                                              f"instance_id = '{waiter}'") == "order_paid", 30))
    stored = q(url, f"SELECT count(*) || ' ' || count(DISTINCT dedup_key) || ' ' || "
                    f"bool_and(sent_by = 'instance {sender}') FROM cairn.signals WHERE dedup_key "
                    f"LIKE 'cairn:{sender}/%'")
    check("each send stored once, as the sending instance, under its call's dedup key",
          stored == "3 3 true", stored)
    check("... and its answer recorded once as the call's result", e2e.duplicate_done(url) == "0")

    # cairn.runner_signals made again, as a retried write would: the recorded answer, no send.
    held = ctl(env, "run", "mailbox", "--input", '{"n": 1}', "--at", "tomorrow").stdout.strip()
    rcv = ctl(env, "run", "mailbox", "--input", '{"n": 1}', "--at", "tomorrow").stdout.strip()
    lock = "11111111-1111-4111-8111-111111111111"
    q(url, f"UPDATE cairn.queued_instances SET lock_uuid = '{lock}' WHERE instance_id = '{held}'")
    call = (f"SELECT status || '/' || coalesce(message, '') FROM cairn.runner_signals("
            f"ARRAY['{held}']::uuid[], ARRAY['{lock}']::uuid[], ARRAY["
            f"'22222222-2222-4222-8222-222222222222']::uuid[], ARRAY[1], ARRAY['{rcv}']::uuid[],"
            f" ARRAY['item'], ARRAY['\"x\"'])")
    first, again = q(url, call), q(url, call)
    check("cairn.runner_signals made again gives the recorded answer and sends nothing more",
          first == "buffered/" and again == "buffered/" and q(
              url, f"SELECT count(*) FROM cairn.signals WHERE instance_id = '{rcv}'") == "1",
          f"{first} {again}")
    src = os.path.join(e2e.ROOT, "tests/integration/signals/mailbox.cairn")
    r = ctl(env, "register", "--tenant", TENANT, src)
    theirs = ctl(env, "run", "--tenant", TENANT, "mailbox", "--input", '{"n": 1}', "--at",
                 "tomorrow").stdout.strip()
    check("another tenant's instance to send from", r.returncode == 0 and len(theirs) == 36,
          r.stderr + theirs)
    q(url, f"UPDATE cairn.queued_instances SET lock_uuid = '{lock}' WHERE instance_id = "
           f"'{theirs}'")
    other = q(url, call.replace(held, theirs).replace("22222222-2222-4222-8222-222222222222",
                                                      "33333333-3333-4333-8333-333333333333"))
    check("... and from another tenant's instance it is refused as no instance",
          other == f"not_found/no instance {rcv}" and q(
              url, f"SELECT count(*) FROM cairn.signals WHERE instance_id = '{rcv}'") == "1", other)
    r = ctl(env, "signal-token", held, "item", "--ttl", "1h")
    token = r.stdout.strip()
    check("cairnctl signal-token prints a token", r.returncode == 0 and token.startswith("cst_"),
          r.stdout + r.stderr)
    r = ctl(env, "signal", "--token", token, "--payload", '"by token"')
    check("cairnctl signal --token sends the signal its token stands for", r.returncode == 0 and
          "buffered" in r.stdout and q(url, f"SELECT payload::text FROM cairn.signals WHERE "
                                             f"instance_id = '{held}'") == '"by token"',
          r.stdout + r.stderr)
    r = ctl(env, "signal", "--tenant", TENANT, "--token", token, "--payload", "1")
    check("... and from another tenant the token is no token (row security hides it)",
          r.returncode == 1 and "no such token" in r.stderr, f"{r.returncode} {r.stdout} "
                                                               f"{r.stderr}")
    r = ctl(env, "signal", "--token", token, held, "item")
    check("... --token with ID NAME is a usage error", r.returncode == 2 and "--token" in
          r.stderr, f"{r.returncode} {r.stderr}")
    q(url, f"UPDATE cairn.queued_instances SET lock_uuid = NULL WHERE instance_id IN ('{held}', "
           f"'{theirs}')")
    ctl(env, "cancel", "--tenant", TENANT, theirs)
    ctl(env, "cancel", held)
    ctl(env, "cancel", rcv)

    # ---- /metrics ----------------------------------------------------------------------------------
    later = ctl(env, "run", "approval", "--input", '{"order": {"id": "later"}}', "--at",
                "tomorrow").stdout.strip()
    signal(env, later, "approve", {"by": "later"})  # kept until tomorrow: buffered
    want = {  # nothing is sent meanwhile: what the database says now, /metrics says next read
        "cairn_signals_sent_total": q(url, "SELECT last_value FROM cairn.signals_id_seq"),
        "cairn_events_published_total": q(url, "SELECT last_value FROM cairn.events_id_seq"),
        "cairn_signals_buffered": q(url, "SELECT count(*) FROM cairn.signals WHERE consumed_at "
                                         "IS NULL"),
        'cairn_waits{kind="signal"}': q(url, "SELECT count(*) FROM cairn.waits WHERE NOT event"),
    }
    seen = {}

    def figures():
        seen.update(e2e.metrics(port))
        return all(seen.get(k) == float(v) for k, v in want.items())
    check("/metrics has the signals' figures: sent, events, buffered, waits", wait_until(
        "signal metrics", figures, 30) and float(want["cairn_signals_buffered"]) >= 1 and
        seen.get("cairn_signal_oldest_buffered_seconds", 0) > 0,
        f"{want} {[(k, seen.get(k)) for k in want]}")

    # ---- kill -9 of the runner holding a waiter ------------------------------------------------
    held = run(env, "mailbox", {"n": 2})
    wait_until("held waits", lambda: q(
        url, f"SELECT count(*) FROM cairn.waits WHERE instance_id = '{held}'") == "1", 30)
    signal(env, held, "item", "first")
    r1.kill9()
    signal(env, held, "item", "second")
    e2e.runner(env, tmp, "runner2", f"ipc://{tmp}/r2.sock", *knobs)
    e2e.worker(env, tmp, "worker2", f"ipc://{tmp}/r2.sock")
    check("after kill -9 another runner finishes the waiter with both signals, each once",
          done(url, held, 60) and result(url, held) == ["first", "second"],
          f"{status(url, held)} {result(url, held)}")
    check("no result recorded twice", e2e.duplicate_done(url) == "0", e2e.duplicate_done(url))


def main():
    return e2e.main_in_fresh_db("signals", run_all, roles=(ROLE,))


if __name__ == "__main__":
    sys.exit(main())

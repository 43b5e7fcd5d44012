# SPDX-License-Identifier: MIT
"""Cleanup on cancel and timeout, end to end (docs/semantics.md, "Cancel, timeout and finally"):
a saga (workflows/pyrefund.cairn) charges, ships, and refunds in a finally block when shipping
does not finish. A cancel or a workflow timeout while it ships runs the refund once, then the
instance ends cancelled / timed_out; `--force` abandons a cleanup; a runner killed with -9 during
the cleanup (of a cancel or of a timeout), or before the cancel, leaves it to another runner,
which runs the refund, not the shipping. Every action appends "ACTION EXEC_ID ATTEMPT PID" to the test's file when it starts."""
import json
import os
import signal

import psycopg
import pytest

import cairn
from conftest import wait_until


def lines(path, action):
    try:
        with open(path) as f:
            return [ln.split() for ln in f if ln.split()[0] == action]
    except FileNotFoundError:
        return []


def ended(client, iid, timeout=30):
    """The instance's final status and error (it must not complete)."""
    with pytest.raises(cairn.WorkflowFailed) as e:
        client.wait(iid, timeout=timeout)
    return e.value.status, e.value.error


def saga(cluster, client, name, **kw):
    path = os.path.join(cluster.tmp, name)
    iid = client.enqueue("pyrefund", {"order": name, "path": path, **kw.pop("input", {})}, **kw)
    assert wait_until(lambda: len(lines(path, "ship")) == 1, 20), cluster.logs()
    return iid, path


def test_a_cancel_runs_the_refund_once_then_ends_cancelled(cluster, client):
    sock, _ = cluster.runner("runner-cl1")
    cluster.pyworker(sock, name="pyworker-cl1", slots=4)
    iid, path = saga(cluster, client, "cl1", input={"refund_ms": 1500})
    assert client.cancel(iid, "the customer changed their mind") == "requested"
    assert wait_until(lambda: len(lines(path, "refund")) == 1, 20), cluster.logs()
    # While the refund runs, the instance is running and says it is cleaning up.
    shown = cluster.ctl("inspect", iid).stdout
    assert "cleaning up: running its finally blocks after a cancel" in shown, shown
    doc = json.loads(cluster.ctl("inspect", iid, "--json").stdout)
    assert doc["status"] == "running" and doc["cleaning_up"] is True, doc
    assert doc["cleanup_after"] == "cancel" and doc["cleanup_until"], doc
    status, error = ended(client, iid)
    assert status == "cancelled", (status, error)
    assert error["type"] == "Cancelled" and error["message"] == "the customer changed their mind"
    assert error["details"] is None, error  # the cleanup finished
    assert [len(lines(path, a)) for a in ("charge", "ship", "refund")] == [1, 1, 1]
    doc = json.loads(cluster.ctl("inspect", iid, "--json").stdout)
    assert doc["cleaning_up"] is False and doc["cleanup_after"] == "cancel", doc
    # Shipping that finishes refunds nothing.
    ok = client.enqueue("pyrefund", {"order": "ok", "path": path + ".ok", "ship_ms": 10})
    assert client.wait(ok, timeout=30) == "ship"
    assert lines(path + ".ok", "refund") == []


def test_a_workflow_timeout_runs_the_refund_then_ends_timed_out(cluster, client):
    sock, _ = cluster.runner("runner-cl2")
    cluster.pyworker(sock, name="pyworker-cl2", slots=4)
    iid, path = saga(cluster, client, "cl2", timeout=2)
    status, error = ended(client, iid)
    assert status == "timed_out" and error["type"] == "WorkflowTimeout", (status, error)
    assert [len(lines(path, a)) for a in ("charge", "ship", "refund")] == [1, 1, 1]


def test_a_forced_cancel_abandons_the_cleanup(cluster, client):
    sock, _ = cluster.runner("runner-cl3")
    cluster.pyworker(sock, name="pyworker-cl3", slots=4)
    iid, path = saga(cluster, client, "cl3", input={"refund_ms": 60000})
    assert client.cancel(iid, "stop") == "requested"
    assert wait_until(lambda: len(lines(path, "refund")) == 1, 20), cluster.logs()
    # A second plain cancel changes nothing; --force ends it now.
    assert client.cancel(iid, "stop") == "requested"
    r = cluster.ctl("cancel", iid, "--force", "--wait", "--timeout", "10")
    assert r.stdout.strip() == f"{iid} cancelled", r.stdout + r.stderr
    status, error = ended(client, iid)
    assert status == "cancelled", (status, error)
    assert error["details"] == {"cleanup_abandoned": "cancelled with --force"}, error
    # A forced cancel from the start skips the cleanup altogether.
    iid, path = saga(cluster, client, "cl3b")
    assert client.cancel(iid, "now", force=True) == "requested"
    assert ended(client, iid)[0] == "cancelled"
    assert lines(path, "refund") == []


def test_kill9_during_the_cleanup_resumes_the_cleanup_not_the_work(cluster, client):
    sock, a = cluster.runner("runner-cl4")
    cluster.pyworker(sock, name="pyworker-cl4", slots=4)
    iid, path = saga(cluster, client, "cl4", input={"refund_ms": 3000})
    assert client.cancel(iid, "cancel mid-saga") == "requested"
    assert wait_until(lambda: len(lines(path, "refund")) == 1, 20), cluster.logs()
    a.stop(signal.SIGKILL)
    cluster.runner("runner-cl4")  # the same socket: the worker comes back to it
    status, error = ended(client, iid, timeout=60)
    assert status == "cancelled" and error["message"] == "cancel mid-saga", (status, error)
    refunds = lines(path, "refund")
    # The refund is one execution (one id: its effect, keyed by it, happens once), sent again
    # to the worker by the runner that resumed the cleanup; the shipping is not run again.
    assert len({r[1] for r in refunds}) == 1 and {r[2] for r in refunds} == {"1"}, refunds
    assert [len(lines(path, a)) for a in ("charge", "ship")] == [1, 1]
    with psycopg.connect(cluster.url) as conn:
        dup = conn.execute("SELECT count(*) FROM (SELECT 1 FROM cairn.runner_actions_done "
                           "WHERE instance_id = %s GROUP BY execution_id, attempt "
                           "HAVING count(*) > 1) d", (iid,)).fetchone()[0]
    assert dup == 0


def test_kill9_during_a_timeouts_cleanup_resumes_it(cluster, client):
    sock, a = cluster.runner("runner-cl6")
    cluster.pyworker(sock, name="pyworker-cl6", slots=4)
    iid, path = saga(cluster, client, "cl6", input={"refund_ms": 3000}, timeout=2)
    assert wait_until(lambda: len(lines(path, "refund")) == 1, 20), cluster.logs()
    a.stop(signal.SIGKILL)
    cluster.runner("runner-cl6")  # claims it past its deadline, in the middle of its cleanup
    status, error = ended(client, iid, timeout=60)
    assert status == "timed_out", (status, error)
    assert error["details"] is None, error  # the refund finished: nothing was abandoned
    refunds = lines(path, "refund")
    assert len({r[1] for r in refunds}) == 1, refunds  # one execution, sent again
    assert [len(lines(path, a)) for a in ("charge", "ship")] == [1, 1]


def test_an_instance_nobody_holds_gets_its_cleanup_from_the_next_runner(cluster, client):
    sock, a = cluster.runner("runner-cl5")
    cluster.pyworker(sock, name="pyworker-cl5", slots=4)
    iid, path = saga(cluster, client, "cl5")
    late, late_path = saga(cluster, client, "cl5t", timeout=4)
    a.stop(signal.SIGKILL)

    def unheld():
        with psycopg.connect(cluster.url) as conn:
            return conn.execute("SELECT bool_and(lock_expires_at < now()) FROM "
                                "cairn.queued_instances WHERE instance_id = ANY(%s)",
                                ([iid, late],)).fetchone()[0]
    assert wait_until(unheld, 20)
    # Cancelled while no runner holds it: left to the next claim (it has a finally block to
    # run); past its deadline with no runner: not timed out in SQL either.
    assert client.cancel(iid, "nobody home") == "requested"

    def overdue():
        with psycopg.connect(cluster.url) as conn:
            return conn.execute("SELECT deadline_at < now() FROM cairn.runner_instances WHERE "
                                "instance_id = %s", (late,)).fetchone()[0]
    assert wait_until(overdue, 20)
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute("SELECT cairn.expire_overdue()")
        assert conn.execute("SELECT status FROM cairn.runner_instances WHERE instance_id = %s",
                            (late,)).fetchone()[0] in ("running", "queued")
    cluster.runner("runner-cl5")
    status, error = ended(client, iid, timeout=60)
    assert status == "cancelled" and error["message"] == "nobody home", (status, error)
    assert [len(lines(path, a)) for a in ("charge", "ship", "refund")] == [1, 1, 1]
    status, error = ended(client, late, timeout=60)
    assert status == "timed_out", (status, error)
    assert [len(lines(late_path, a)) for a in ("charge", "ship", "refund")] == [1, 1, 1]

# SPDX-License-Identifier: MIT
"""The Python worker as a real process against a real cairn-runner and PostgreSQL."""
import signal
import time

import pytest

import cairn
from conftest import wait_until


@pytest.fixture
def ipc(cluster):
    sock, runner = cluster.runner("runner")
    w = cluster.pyworker(sock, name="pyworker", slots=4)
    return sock, runner, w


def test_every_action_shape(cluster, client, ipc):
    iid = client.enqueue("pyshapes", {"x": [1, 2.5, "é", None, {"k": True}, 2**63 - 1]})
    out = client.wait(iid, timeout=30)
    assert out[0] == [1, 2.5, "é", None, {"k": True}, 2**63 - 1]
    assert out[1] == 3                       # an async action
    assert out[2] == 1                       # cairn.context().attempt
    assert out[3] == {"attempt": 3, "previous": "attempt 2 reset"}  # retried by its bases
    assert out[4] == "ConnectionRefusedError"  # caught by `except ConnectionError`
    assert out[5] == ["card declined", False]  # NonRetryable: not retried despite [retry: 5]
    assert "result['when'] is of type set" in out[6]


def test_an_async_and_a_sync_action_at_once(client, ipc):
    t0 = time.monotonic()
    assert client.wait(client.enqueue("pyboth", {"ms": 500}), timeout=30) == [500, 500]
    assert time.monotonic() - t0 < 2.5, "the two ran at the same time"


def test_cancel_reaches_an_async_action(cluster, client, ipc):
    iid = client.enqueue("pyhold", {"ms": 60000})
    assert wait_until(lambda: client.status(iid)["status"] == "running", 20)
    time.sleep(0.3)
    assert client.cancel(iid, "stop") in ("requested", "cancelled")
    with pytest.raises(cairn.WorkflowFailed) as e:
        client.wait(iid, timeout=10)
    assert e.value.status == "cancelled"
    # The task was cancelled on the worker: its outcome came back as a late Cancelled error.
    assert wait_until(lambda: [a["value"]["type"] for a in recorded(cluster, iid)]
                      == ["Cancelled"], 10), recorded(cluster, iid)


def test_a_timeout_stops_a_sync_action_that_polls(client, ipc):
    iid = client.enqueue("pyblock", {"ms": 30000})
    t0 = time.monotonic()
    with pytest.raises(cairn.WorkflowFailed) as e:
        client.wait(iid, timeout=20)
    assert e.value.type == "ActionTimeout" and time.monotonic() - t0 < 10
    # All 4 slots are free again: 4 half-second actions take about half a second.
    t0 = time.monotonic()
    assert client.wait(client.enqueue("pyechos", {"n": 4, "ms": 500}), timeout=30) == 4
    assert time.monotonic() - t0 < 3


def recorded(cluster, iid):
    """The instance's recorded action outcomes, as cairnctl inspect shows them."""
    import json
    return json.loads(cluster.ctl("inspect", iid, "--json").stdout)["actions"]


def test_sigterm_says_goodbye_and_finishes_running_work(cluster, client):
    sock, _ = cluster.runner("runner-term")
    w = cluster.pyworker(sock, name="pyworker-term", slots=2)
    iid = client.enqueue("pyhold", {"ms": 1500})
    assert wait_until(lambda: client.status(iid)["status"] == "running", 20)
    time.sleep(0.5)
    t0 = time.monotonic()
    assert w.stop(signal.SIGTERM, timeout=20) == 0
    assert time.monotonic() - t0 >= 0.5, "it waited for the running action"
    assert client.wait(iid, timeout=20) == 1500, cluster.logs()
    assert [a["attempt"] for a in recorded(cluster, iid)] == [1], "ran once, not again"


def test_a_wrong_credential_is_refused(cluster):
    sock, _ = cluster.runner("runner-cred", None, "--worker-credential", "sesame")
    p = cluster.pyworker(sock, name="pyworker-bad", extra=["--credential", "nope"])
    assert p.p.wait(20) == 1
    assert "refused" in p.text()


def test_values_travel_to_python_and_back_exactly(client, ipc):
    a, same_after, equal = client.wait(client.enqueue("pyvalues", {}), timeout=30)
    assert a == repr([2**63 - 1, -2**63, 0.1, 1e308, -0.0, 5e-324, "", "é𝄞\n\"", [], {},
                      [[[1]]], {"k": [None, True, 1.5], "": 0}])
    assert same_after and equal, "the echo came back with the same types and values"


def test_results_near_the_message_limit(client, ipc):
    # Three 6 MiB results finish together: they cannot share one 16 MiB message.
    assert client.wait(client.enqueue("pybig", {"n": 3, "mb": 6}), timeout=60) == [6 << 20] * 3
    with pytest.raises(cairn.WorkflowFailed) as e:
        client.wait(client.enqueue("pybig", {"n": 1, "mb": 17}), timeout=60)
    assert e.value.type == "ValueError" and "16 MiB message limit" in e.value.error["message"]


def test_actions_that_exit_or_return_garbage_fail_alone(cluster, client, ipc):
    # Four slots, ten rounds: were any outcome lost, its slot's room would stay taken and the
    # run would stall.
    errors = client.wait(client.enqueue("pymisbehave", {"n": 10}), timeout=60)
    assert errors == ["SystemExit", "ValueError"] * 10
    assert ipc[2].p.poll() is None, "the worker is still running"


def test_a_second_signal_exits_at_once_despite_a_stuck_thread(cluster, client):
    sock, _ = cluster.runner("runner-stuck")
    w = cluster.pyworker(sock, name="pyworker-stuck", slots=1, extra=["--grace", "30"])
    iid = client.enqueue("pystuck", {"s": 60})
    assert wait_until(lambda: client.status(iid)["status"] == "running", 20)
    time.sleep(0.5)
    w.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    w.p.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert w.p.wait(20) == 3
    assert time.monotonic() - t0 < 5, "it did not wait for the stuck thread"

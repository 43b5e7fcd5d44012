# SPDX-License-Identifier: MIT
"""examples/python: the welcome workflow with its actions in Python, end to end, and the
client's calls around it."""
import os
import time

import psycopg
import pytest

import cairn
from conftest import EXAMPLES, wait_until


def test_the_python_welcome_example(cluster, client):
    cluster.ctl("register", os.path.join(EXAMPLES, "welcome.cairn"), "--name", "welcome_py")
    sock, _ = cluster.runner("runner-ex")
    cluster.pyworker(sock, name="pyworker-ex", module="actions")
    iid = client.enqueue("welcome_py", {"user_ids": [1, 2, 3, 4, 5, 6]},
                         idempotency_key="signup-batch-1")
    assert client.wait(iid, timeout=30) == [
        {"to": "user1@example.com", "sent": True, "attempts": 1},
        {"to": "user2@example.com", "sent": True, "attempts": 2},  # reset once, retried
        {"to": "user4@example.com", "sent": True, "attempts": 2},
        {"to": "user5@example.com", "sent": True, "attempts": 1},
    ]
    # The same idempotency key and input give the same instance back; another input is refused
    # (the key's first instance named), unless any_input asks for it anyway.
    assert client.enqueue("welcome_py", {"user_ids": [1, 2, 3, 4, 5, 6]},
                          idempotency_key="signup-batch-1") == iid
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"another input.*{iid}"):
        client.enqueue("welcome_py", {"user_ids": [9]}, idempotency_key="signup-batch-1")
    assert client.enqueue("welcome_py", {"user_ids": [9]}, idempotency_key="signup-batch-1",
                          any_input=True) == iid
    s = client.status(iid)
    assert s["status"] == "completed" and s["workflow"] == "welcome_py"
    assert iid in [i["id"] for i in client.list(workflow="welcome_py")]


def test_the_client_reports_failures_and_refusals(cluster, client):
    sock, _ = cluster.runner("runner-cl")
    cluster.pyworker(sock, name="pyworker-cl")
    iid = client.enqueue("pyhold", {"ms": 60000}, timeout=0.5)
    with pytest.raises(cairn.WorkflowFailed) as e:
        client.wait(iid, timeout=20)
    assert e.value.status == "timed_out" and e.value.type == "WorkflowTimeout"
    assert client.retry(iid, "again") == "queued"
    assert client.retry(iid) in ("already queued", "already running")
    with pytest.raises(cairn.NotFinished):
        client.result(client.enqueue("pyhold", {"ms": 1}, at="2999-01-01T00:00:00Z"))
    with pytest.raises(LookupError):
        client.status("00000000-0000-4000-8000-000000000000")
    with pytest.raises(psycopg.errors.UndefinedObject):
        client.enqueue("no_such_workflow", {})
    with pytest.raises(TypeError):
        client.enqueue("pyhold", [1])


def test_the_client_passes_a_concurrency_key(cluster, client):
    sock, _ = cluster.runner("runner-ck")
    cluster.pyworker(sock, name="pyworker-ck")
    first = client.enqueue("pyhold", {"ms": 1500}, concurrency_key="customer-7")
    second = client.enqueue("pyhold", {"ms": 1}, concurrency_key="customer-7")
    deadline = time.monotonic() + 20
    while client.status(first)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.status(first)["status"] == "running"
    time.sleep(0.5)
    assert client.status(second)["status"] == "queued"  # the key's one slot is the first's
    assert client.wait(second, timeout=30) == 1
    assert client.status(second)["started_at"] >= client.status(first)["completed_at"]


def test_the_async_client(cluster):
    import asyncio

    async def go():
        c = await cairn.AsyncClient.connect(cluster.url)
        try:
            sock, _ = cluster.runner("runner-ac")
            cluster.pyworker(sock, name="pyworker-ac")
            iid = await c.enqueue("pyhold", {"ms": 5})
            out = await c.wait(iid, timeout=20)
            assert iid in [i["id"] for i in await c.list(workflow="pyhold")]
            return out
        finally:
            await c.close()
    assert asyncio.run(go()) == 5


def test_the_client_sends_signals_and_events(cluster, client):
    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests/integration/signals/approval.cairn"),
                "--name", "approval_py")
    # Signal with start: enqueued and signalled in one transaction, before any runner runs it.
    iid, answer = client.signal_with_start("approval_py", "order-py-1", "approve", {"by": "ann"},
                                           input={"order": {"id": "py1"}})
    assert answer == "buffered"
    assert client.signal_with_start("approval_py", "order-py-1", "approve", {"by": "bo"},
                                    dedup_key="d1")[0] == iid  # the same instance
    assert client.signal(iid, "approve", {"by": "bo"}, dedup_key="d1") == "duplicate"
    # Published before the instance waits for it, after it was created: its wait takes it.
    ev = client.publish_event("order_paid", "py1", {"amount": 3})
    assert ev["woken"] == 0 and ev["duplicate"] is False and ev["event_id"] > 0
    sock, _ = cluster.runner("runner-sig")
    cluster.pyworker(sock, name="pyworker-sig")
    assert client.wait(iid, timeout=30) == {"approved_by": "ann", "paid": 3}
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        client.signal(iid, "approve", {})
    with pytest.raises(psycopg.errors.NoDataFound):
        client.signal("00000000-0000-4000-8000-000000000000", "approve", {})


def test_a_signal_token_sends_one_signal_to_one_instance(cluster, client):
    import datetime

    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests/integration/signals/approval.cairn"),
                "--name", "approval_tok")
    iid = client.enqueue("approval_tok", {"order": {"id": "tok1"}})
    token = client.signal_token(iid, "approve", ttl=datetime.timedelta(hours=1))
    assert token.startswith("cst_") and len(token) == 68
    assert client.signal_by_token(token, {"by": "hook"}, dedup_key="h1") == "buffered"
    assert client.signal_by_token(token, {"by": "hook"}, dedup_key="h1") == "duplicate"
    sent = client.conn.execute("SELECT name, payload, sent_by FROM cairn.signals WHERE "
                               "instance_id = %s", (iid,)).fetchall()
    assert [(n, p) for n, p, _ in sent] == [("approve", {"by": "hook"})]
    assert sent[0][2].startswith("token ")
    assert client.conn.execute("SELECT count(*) FROM cairn.signal_tokens WHERE digest = "
                               "convert_to(%s, 'UTF8')", (token,)).fetchone()[0] == 0, \
        "only a digest of the token is kept"
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        client.signal_token(iid, "nope")  # a name its workflow never waits for
    with pytest.raises(psycopg.errors.NoDataFound):
        client.signal_by_token("cst_" + "0" * 64, {})
    brief = client.signal_token(iid, "reject", ttl=datetime.timedelta(microseconds=1))
    with pytest.raises(psycopg.errors.NoDataFound):
        client.signal_by_token(brief, "too late")  # expired
    client.cancel(iid)
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        client.signal_by_token(token, {})  # its instance has ended


def _listening_then_idle(url, pid, look="runner_instances"):
    """The client's session has looked (its last statement has look in it) after its LISTEN
    and now waits: what it hears from here on can only be a notification."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()
    return row is not None and row[0] == "idle" and look in row[1]


def test_wait_is_told_when_the_instance_ends(cluster, client):
    """poll=600 without a timeout: the wait reads the status again only when told, so it ends
    within the test's 60 s only if the notification came."""
    import threading

    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests/integration/signals/approval.cairn"),
                "--name", "approval_told")
    sock, _ = cluster.runner("runner-told")
    cluster.pyworker(sock, name="pyworker-told")
    iid = client.enqueue("approval_told", {"order": {"id": "t1"}})
    assert wait_until(lambda: client.status(iid)["status"] == "queued" and client.conn.execute(
        "SELECT count(*) FROM cairn.waits WHERE instance_id = %s", (iid,)).fetchone()[0] == 1,
        30)
    pid = client.conn.info.backend_pid
    got = []
    t = threading.Thread(target=lambda: got.append(client.wait(iid, poll=600)), daemon=True)
    t.start()
    assert wait_until(lambda: _listening_then_idle(cluster.url, pid), 30)
    with cairn.Client(cluster.url) as other:
        assert other.signal(iid, "reject", "no") == "delivered"
    t.join(60)
    assert not t.is_alive(), "the wait was not told that the instance ended"
    assert got == [{"rejected": "no"}]
    assert client.conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0] == 0


def test_concurrent_async_waits_share_one_client(cluster):
    """Eight waits and the signals that end them, on one AsyncClient at once: each wait is
    told (poll=600, no timeout: they end within 60 s only if told), and the statements run
    between them are answered."""
    import asyncio

    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests/integration/signals/approval.cairn"),
                "--name", "approval_async")
    sock, _ = cluster.runner("runner-aw")
    cluster.pyworker(sock, name="pyworker-aw")

    async def go():
        c = await cairn.AsyncClient.connect(cluster.url)
        try:
            ids = [await c.enqueue("approval_async", {"order": {"id": f"a{i}"}})
                   for i in range(8)]
            waits = [asyncio.ensure_future(c.wait(i, poll=600)) for i in ids]
            waits.append(asyncio.ensure_future(c.wait(ids[0], poll=600)))
            end = time.monotonic() + 30
            while (c._parked is None or len(c._listens) < 8) and time.monotonic() < end:
                await asyncio.sleep(0.01)
            assert c._parked is not None, "the waits never parked"
            for n, i in enumerate(ids):
                assert await c.signal(i, "reject", n) in ("delivered", "buffered")
                assert (await c.status(i))["id"] == i
            got = await asyncio.wait_for(asyncio.gather(*waits), 60)
            left = await (await c.conn.execute(
                "SELECT count(*) FROM pg_listening_channels()")).fetchone()
            return got, left[0]
        finally:
            await c.close()
    got, left = asyncio.run(go())
    assert got == [{"rejected": n} for n in range(8)] + [{"rejected": 0}]
    assert left == 0


PROGRESS = """
fn main(input: [n], output: [total]):
    publish stage = "started"
    total = 0
    for i in range(n):
        total = total + i
        publish done = i + 1
    publish stage = "waiting"
    go = wait go [timeout: 1d]
    publish stage = {"went": go}
    return total
"""


def test_the_client_reads_published_values(cluster, client, tmp_path):
    """get() while the instance waits, get(wait=True, after=V) told of the next one, and
    NotPublished for a name never published or that can no longer come."""
    import asyncio
    import threading

    src = tmp_path / "progress_py.cairn"
    src.write_text(PROGRESS)
    cluster.ctl("register", str(src))
    sock, _ = cluster.runner("runner-pub")
    cluster.pyworker(sock, name="pyworker-pub")
    iid = client.enqueue("progress_py", {"n": 2})
    assert wait_until(lambda: client.conn.execute(
        "SELECT count(*) FROM cairn.waits WHERE instance_id = %s", (iid,)).fetchone()[0] == 1,
        30)
    assert client.get(iid, "stage") == "waiting"
    assert client.get(iid, "done") == 2
    with pytest.raises(cairn.NotPublished):
        client.get(iid, "missing")
    now = client.published(iid, "stage")
    assert now["value"] == "waiting" and now["version"] == 1, "one write: the last of the step's"
    assert client.published(iid, "missing")["version"] == 0
    pid = client.conn.info.backend_pid
    got = []
    t = threading.Thread(target=lambda: got.append(client.get(
        iid, "stage", wait=True, after=now["version"], poll=600)), daemon=True)
    t.start()
    assert wait_until(lambda: _listening_then_idle(cluster.url, pid, "get_value"), 30)
    with cairn.Client(cluster.url) as other:
        other.signal(iid, "go", "now")
    t.join(60)
    assert not t.is_alive(), "get(wait=True) was not told of the value"
    assert got == [{"went": "now"}]
    assert client.wait(iid, timeout=30) == 1

    async def go():
        async with await cairn.AsyncClient.connect(cluster.url) as c:
            assert await c.get(iid, "stage") == {"went": "now"}
            with pytest.raises(cairn.NotPublished, match="none will come"):
                await c.get(iid, "missing", wait=True, timeout=30)
    asyncio.run(go())


def test_typed_inputs_checked_at_enqueue(cluster, client):
    """A workflow with typed inputs: its schema from the client, and an input that does not fit
    refused by enqueue with the path, before anything is stored."""
    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests", "fixtures", "typed.cairn"),
                "--name", "typed_py")
    s = client.schema("typed_py")
    assert s["title"] == "typed_py" and s["required"] == ["order"]
    assert s["properties"]["qty"] == {"type": "integer", "default": 1}
    with pytest.raises(cairn.InputRefused) as e:
        client.enqueue("typed_py", {"order": {"id": 1}, "tags": ["a", 2]})
    assert str(e.value) == "input.tags[1]: expected str, got int"
    assert isinstance(e.value, ValueError)
    assert client.list(workflow="typed_py") == []
    assert client.enqueue("typed_py", {"order": {"id": 1}}) != ""
    assert s["additionalProperties"] is False


def test_enqueue_many_returns_the_ids_in_order_all_or_nothing(cluster, client):
    """enqueue_many: one call, the ids in the inputs' order (each instance its own input and
    key), a key used before giving its instance; a refused item names itself and stores none."""
    root = os.path.dirname(os.path.dirname(EXAMPLES))
    cluster.ctl("register", os.path.join(root, "tests", "fixtures", "typed.cairn"),
                "--name", "typed_many")
    first = client.enqueue("typed_many", {"order": {"id": 0}}, idempotency_key="o-0")
    ids = client.enqueue_many("typed_many", [{"order": {"id": i}} for i in range(3)],
                              idempotency_keys=["o-0", None, "o-2"], priority=3)
    assert len(ids) == 3 and ids[0] == first and len(set(ids)) == 3
    for i, iid in enumerate(ids):
        assert client.status(iid)["input"] == {"order": {"id": i}}
    with pytest.raises(cairn.InputRefused) as e:
        client.enqueue_many("typed_many", [{"order": {"id": 9}}, {"order": {"id": 9}, "qty": "2"}])
    assert str(e.value) == "item 2 of 2: input.qty: expected int, got str"
    assert len(client.list(workflow="typed_many")) == 3  # nothing of the refused call
    with pytest.raises(ValueError, match="1 idempotency_keys for 2 inputs"):
        client.enqueue_many("typed_many", [{"order": {}}, {"order": {}}], idempotency_keys=["k"])
    assert client.enqueue_many("typed_many", []) == []

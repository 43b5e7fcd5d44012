# SPDX-License-Identifier: MIT
"""Start and watch workflows from Python over Cairn's SQL API (docs/python.md), with psycopg 3.

    client = cairn.Client("postgresql://cairn@db/cairn")
    iid = client.enqueue("welcome", {"user_ids": [1, 2]}, idempotency_key="signup-42")
    print(client.wait(iid, timeout=60))        # the result; WorkflowFailed if it failed

Each method is one statement of the SQL API (cairn.enqueue, cairn.cancel, cairn.retry,
cairn.signal, cairn.signal_with_start, cairn.publish_event) or a read
of cairn.runner_instances, so the client, cairnctl and psql see the same thing. AsyncClient has
the same methods as coroutines. A Client holds one connection (autocommit); it is not for
concurrent use from several threads. Client(dsn, tenant="acme") acts as tenant acme (SET ROLE
cairn_tenant_acme): it sees, enqueues and controls acme's instances only.

Each statement is built, and its rows decoded, in one place (the _Statement functions below);
Client and AsyncClient only run them, on a psycopg Connection or AsyncConnection."""
import asyncio
import collections
import datetime
import re
import select
import time
import uuid

import psycopg
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

FINISHED = ("completed", "failed", "cancelled", "timed_out")

_STATUS_SQL = (
    "SELECT ri.instance_id, ri.workflow_name, wv.workflow_version, ri.status, ri.input,"
    " ri.result, ri.error, ri.created_at, ri.started_at, ri.completed_at, ri.deadline_at"
    " FROM cairn.runner_instances ri JOIN cairn.workflow_versions wv"
    " ON wv.id = ri.workflow_version_id")
_FIELDS = ("id", "workflow", "version", "status", "input", "result", "error", "created_at",
           "started_at", "completed_at", "deadline_at")


class WorkflowFailed(Exception):
    """An instance ended failed, cancelled or timed_out: status and error (its type, message,
    bases and details, as the workflow saw it)."""

    def __init__(self, instance_id, status, error):
        error = error or {}
        super().__init__(f"{instance_id} {status}: {error.get('type')}: {error.get('message')}")
        self.instance_id = instance_id
        self.status = status
        self.error = error

    @property
    def type(self):
        return self.error.get("type")


class NotFinished(Exception):
    """result() of an instance still queued or running, or wait() past its timeout."""


class _Statement(collections.namedtuple("_Statement", "sql params many decode")):
    """One call of the SQL API, without its I/O: the SQL, its parameters, whether it reads every
    row or the first, and decode(), which turns those into the method's result. Client and
    AsyncClient run the same ones, so the two cannot drift apart."""


def _row(r):
    d = dict(zip(_FIELDS, r))
    d["id"] = str(d["id"])
    return d


def _first(r):
    return r[0]


def _interval(timeout):
    """An enqueue's timeout for PostgreSQL: seconds (a number), a timedelta or interval text."""
    if timeout is not None and not isinstance(timeout, (str, datetime.timedelta)):
        return f"{float(timeout)} seconds"
    return timeout


def _enqueue(workflow, input, idempotency_key, priority, at, version, timeout,
             concurrency_key, any_input):
    if input is None:
        input = {}
    if not isinstance(input, dict):
        raise TypeError("input must be a dict (the workflow's inputs by name)")
    return _Statement("SELECT cairn.enqueue(%s, %s, %s, %s, %s, %s, %s::interval, %s, %s)",
                      (workflow, Jsonb(input), idempotency_key, priority, at, version,
                       _interval(timeout),
                       concurrency_key, bool(any_input)),
                      False, lambda r: str(r[0]))


def _enqueue_many(workflow, inputs, idempotency_keys, priority, at, version, timeout,
                  concurrency_keys, any_input):
    inputs = list(inputs)
    if not all(isinstance(i, dict) for i in inputs):
        raise TypeError("each input must be a dict (the workflow's inputs by name)")
    for what, keys in (("idempotency_keys", idempotency_keys),
                       ("concurrency_keys", concurrency_keys)):
        if keys is not None and len(keys) != len(inputs):
            raise ValueError(f"{len(keys)} {what} for {len(inputs)} inputs (one per input, "
                             "None for an input without one)")
    return _Statement("SELECT cairn.enqueue_many(%s, %s, %s::text[], %s, %s, %s, %s::interval,"
                      " %s::text[], %s)",
                      (workflow, Jsonb(inputs), None if idempotency_keys is None
                       else list(idempotency_keys), priority, at, version, _interval(timeout),
                       None if concurrency_keys is None else list(concurrency_keys),
                       bool(any_input)),
                      False, lambda r: [str(i) for i in r[0]])


def _status(instance_id):
    def decode(r):
        if r is None:
            raise LookupError(f"no instance {instance_id}")
        return _row(r)
    return _Statement(_STATUS_SQL + " WHERE ri.instance_id = %s", (uuid.UUID(str(instance_id)),),
                      False, decode)


def _list(status, workflow, limit):
    cond, args = [], []
    if status is not None:
        cond.append("ri.status = %s")
        args.append(status)
    if workflow is not None:
        cond.append("ri.workflow_name = %s")
        args.append(workflow)
    where = (" WHERE " + " AND ".join(cond)) if cond else ""
    return _Statement(_STATUS_SQL + where + " ORDER BY ri.created_at DESC LIMIT %s",
                      (*args, limit), True, lambda rows: [_row(r) for r in rows])


def _cancel(instance_id, reason, force):
    return _Statement("SELECT cairn.cancel(%s, %s, %s)",
                      (uuid.UUID(str(instance_id)), reason, bool(force)), False, _first)


def _retry(instance_id, reason):
    return _Statement("SELECT cairn.retry(%s, %s)", (uuid.UUID(str(instance_id)), reason),
                      False, _first)


def _signal(instance_id, name, payload, dedup_key, only_if_waiting):
    return _Statement("SELECT cairn.signal(%s, %s, %s, %s, %s)",
                      (uuid.UUID(str(instance_id)), name, Jsonb(payload), dedup_key,
                       only_if_waiting), False, _first)


def _signal_token(instance_id, name, ttl):
    return _Statement("SELECT cairn.signal_token(%s, %s, %s)",
                      (uuid.UUID(str(instance_id)), name, ttl), False, _first)


def _signal_by_token(token, payload, dedup_key):
    return _Statement("SELECT cairn.signal_by_token(%s, %s, %s)",
                      (token, Jsonb(payload), dedup_key), False, _first)


def _signal_with_start(workflow, idempotency_key, name, payload, input, dedup_key):
    return _Statement("SELECT instance_id, signal FROM cairn.signal_with_start(%s, %s, %s, %s, "
                      "%s, %s)", (workflow, idempotency_key, name, Jsonb(payload),
                                  Jsonb({} if input is None else input), dedup_key),
                      False, lambda r: (str(r[0]), r[1]))


def _publish_event(name, key, payload, dedup_key):
    return _Statement("SELECT event_id, woken, duplicate FROM cairn.publish_event(%s, %s, %s, %s)",
                      (name, str(key), Jsonb(payload), dedup_key), False,
                      lambda r: {"event_id": r[0], "woken": r[1], "duplicate": r[2]})


def _outcome(s):
    if s["status"] == "completed":
        return s["result"]
    if s["status"] in FINISHED:
        raise WorkflowFailed(s["id"], s["status"], s["error"])
    raise NotFinished(f"{s['id']} has not finished (status {s['status']})")


class _Wait:
    """A wait's schedule, without its I/O. The caller listens on the instance's channels
    (cairn.done_channel: the database notifies it when the write that ends the instance
    commits; cairn.value_channel: when one that publishes a value does), then looks (reads the
    status or the value), and until the look finds what it waits for waits up to pause(s)
    seconds for a notification, so Client and AsyncClient wait alike. It looks again at least
    every `poll` seconds: a notification is lost only with the session (and then the next read
    fails), and the look bounds what any surprise could cost."""

    def __init__(self, instance_id, timeout, poll, kinds=("done",), late=None):
        self.instance_id, self.timeout, self.poll = instance_id, timeout, poll
        self.end = None if timeout is None else time.monotonic() + timeout
        hexid = uuid.UUID(str(instance_id)).hex
        self.channels = [f"cairn_{k}_{hexid}" for k in kinds]
        self.late = late or (lambda s: NotFinished(
            f"{instance_id} did not finish within {timeout} s (status {s['status']})"))
        self.heard = False

    @staticmethod
    def sql(verb, channels):
        """LISTEN or UNLISTEN of channels, one statement each, sent as one."""
        return pgsql.SQL("; ").join(pgsql.SQL(verb + " {}").format(pgsql.Identifier(c))
                                    for c in channels)

    def notified(self, n):
        """psycopg's notify handler: what it waits for may have come (the look says)."""
        if n.channel in self.channels:
            self.heard = True

    def pause(self, s):
        """Seconds to wait for a notification after look s found nothing yet (0: one came
        meanwhile, look again now); late(s) is raised once past the timeout."""
        end = self.end
        if end is not None and time.monotonic() >= end:
            raise self.late(s)
        if self.heard:
            self.heard = False
            return 0.0
        return self.poll if end is None else max(0.0, min(self.poll, end - time.monotonic()))


class InputRefused(ValueError):
    """enqueue() (or signal_with_start()) of an input the workflow's typed inputs refuse
    (SQLSTATE 22Z01): the message names the path and what was expected, e.g.
    "input.items[2]: expected int, got str". Nothing was stored."""


def _refused(e):
    """The InputRefused for psycopg error e when it is a typed input's refusal, else None."""
    if getattr(e, "sqlstate", None) == "22Z01":
        msg = e.diag.message_primary or str(e)
        return InputRefused(msg.split(": ", 1)[1] if msg.startswith("cairn.") else msg)
    return None


class NotPublished(LookupError):
    """get() of a value the instance has not published (newer than `after`): with wait=True,
    once it ended without one, or past the timeout."""


def _get_value(instance_id, name):
    def decode(r):
        return {"value": r[0], "version": r[1], "published_at": r[2], "status": r[3]}
    return _Statement("SELECT value, version, published_at, status FROM cairn.get_value(%s, %s)",
                      (uuid.UUID(str(instance_id)), name), False, decode)


def _schema(workflow, version):
    def decode(r):
        schema, inputs = r
        if schema is None:  # no input typed: any value for each, other keys allowed
            schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                      "type": "object", "properties": {n: {} for n in inputs or []},
                      "required": list(inputs or []), "additionalProperties": True}
        return dict(schema, title=workflow)
    return _Statement("SELECT v.input_schema, v.inputs FROM cairn.find_version('schema', %s, %s) v",
                      (workflow, version), False, decode)


def _value_wait(instance_id, name, timeout, poll):
    """get(wait=True)'s schedule: told of a value written or of the end."""
    return _Wait(instance_id, timeout, poll, ("value", "done"), lambda v: NotPublished(
        f"{instance_id} published no {name} within {timeout} s"))


def _got(instance_id, name, after, waiting):
    """get()'s look: (True, value) once a value newer than after is there, else (False, row);
    NotPublished when none can come (the instance ended) or the caller does not wait."""
    def look(v):
        if v["version"] > after:
            return True, v["value"]
        if not waiting or v["status"] in FINISHED:
            newer = f" newer than version {after}" if after else ""
            ended = ": it has ended, none will come" if v["status"] in FINISHED else ""
            raise NotPublished(f"{instance_id} has published no {name}{newer} "
                               f"(status {v['status']}){ended}")
        return False, v
    return look


_TENANT_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")


class TenantError(Exception):
    """The client cannot act as the tenant it was given: UnknownTenant or TenantNotPermitted."""

    def __init__(self, tenant, message):
        super().__init__(message)
        self.tenant = tenant


class UnknownTenant(TenantError, LookupError):
    """No such tenant (`cairnctl tenant list` shows them)."""


class TenantNotPermitted(TenantError, PermissionError):
    """The login was not granted the tenant's role."""


def _tenant_sql(tenant):
    """SET ROLE for tenant (None: nothing to run); ValueError for a name no tenant can have."""
    if tenant is None:
        return None
    if not isinstance(tenant, str) or not _TENANT_NAME.fullmatch(tenant):
        raise ValueError(f"{tenant!r} is not a tenant name (a lowercase letter, then at most 47 "
                         "of a-z, 0-9 and _)")
    # The role, not a setting, is what row-level security keys on: only its members may take it.
    return pgsql.SQL("SET ROLE {}").format(pgsql.Identifier(f"cairn_tenant_{tenant}"))


def _tenant_error(tenant, e, user):
    """The TenantError for SET ROLE's failure e, or None when it is something else."""
    if e.sqlstate in ("22023", "42704"):  # SET ROLE of a role that does not exist: 22023
        return UnknownTenant(tenant, f"no tenant {tenant!r} (cairnctl tenant list shows them)")
    if e.sqlstate == "42501":
        return TenantNotPermitted(tenant, f"this login may not act as tenant {tenant!r} (GRANT "
                                  f"cairn_tenant_{tenant} TO {user})")
    return None


class Client:
    def __init__(self, dsn, *, tenant=None, **connect_args):
        """Connects to dsn (psycopg's connect_args pass through). tenant: act as that tenant
        (SET ROLE cairn_tenant_<tenant>), so every call sees and makes only its rows; the login
        must have been granted the role. ValueError for a bad name, UnknownTenant or
        TenantNotPermitted when the database refuses it. Without it, the login acts as itself
        (the schema owner sees every tenant and enqueues into tenant default)."""
        set_role = _tenant_sql(tenant)
        connect_args["autocommit"] = True  # each call is its own transaction
        self.conn = psycopg.connect(dsn, **connect_args)
        if set_role is not None:
            try:
                self.conn.execute(set_role)
            except psycopg.Error as e:
                err = _tenant_error(tenant, e, self.conn.info.user)
                self.conn.close()
                if err is not None:
                    raise err from e
                raise

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, st):
        try:
            cur = self.conn.execute(st.sql, st.params)
        except psycopg.errors.DataError as e:
            raise (_refused(e) or e) from e
        return st.decode(cur.fetchall() if st.many else cur.fetchone())

    def enqueue(self, workflow, input=None, *, idempotency_key=None, priority=0, at=None,
                version=None, timeout=None, concurrency_key=None, any_input=False):
        """Enqueues an instance of the workflow's newest (or the given) version and returns its
        id. The same idempotency key with the same input returns the workflow's first instance
        with it; with another input it raises psycopg.errors.InvalidParameterValue, unless
        any_input=True asks for the first instance anyway. An input the workflow's typed inputs
        refuse raises InputRefused. at: not before this datetime;
        timeout: seconds (or an interval text) after which it ends timed_out; concurrency_key:
        instances with the same key run at most the workflow's per-key limit at once (1 unless
        `cairnctl limit set --per-key`)."""
        return self._run(_enqueue(workflow, input, idempotency_key, priority, at, version,
                                  timeout, concurrency_key, any_input))

    def enqueue_many(self, workflow, inputs, *, idempotency_keys=None, priority=0, at=None,
                     version=None, timeout=None, concurrency_keys=None, any_input=False):
        """Enqueues one instance per input (a list of dicts) in one call (cairn.enqueue_many)
        and returns their ids in the same order: all of them, or, if one is refused, none.
        idempotency_keys and concurrency_keys, if given, hold one key (or None) per input; the
        other arguments apply to every input, as in enqueue. A refusal names the item, counted
        from 1 ("item 3 of 500: input.qty: expected int, got str"): InputRefused for typed
        inputs, else the psycopg error as enqueue raises it."""
        return self._run(_enqueue_many(workflow, inputs, idempotency_keys, priority, at,
                                       version, timeout, concurrency_keys, any_input))

    def status(self, instance_id):
        """The instance as a dict (id, workflow, version, status, input, result, error, times);
        LookupError if there is none."""
        return self._run(_status(instance_id))

    def schema(self, workflow, version=None):
        """The JSON Schema (2020-12, a dict) of the inputs the newest (or the given) version of
        the workflow takes, as cairn.enqueue checks them (`cairnctl schema`); an input that does
        not fit makes enqueue raise InputRefused (SQLSTATE 22Z01)."""
        return self._run(_schema(workflow, version))

    def result(self, instance_id):
        """The result of a completed instance; WorkflowFailed if it failed, was cancelled or
        timed out; NotFinished if it has not finished."""
        return _outcome(self.status(instance_id))

    def wait(self, instance_id, timeout=None, poll=1.0):
        """Waits until the instance finishes and returns result(); NotFinished after timeout
        seconds. Told by the database when the instance ends (LISTEN on its
        cairn.done_channel), it reads the status again only then, or every poll seconds."""
        def look():
            s = self.status(instance_id)
            return s["status"] in FINISHED, s
        return _outcome(self._wait_for(_Wait(instance_id, timeout, poll), look))

    def get(self, instance_id, name, *, wait=False, after=0, timeout=None, poll=1.0):
        """The value the instance published last as name (`publish name = v`), if newer than
        version after; else NotPublished, or with wait=True the next one: told by the database
        when it is written (cairn.value_channel) or the instance ends."""
        got = _got(instance_id, name, after, wait)
        if not wait:
            return got(self._run(_get_value(instance_id, name)))[1]
        return self._wait_for(_value_wait(instance_id, name, timeout, poll),
                              lambda: got(self._run(_get_value(instance_id, name))))

    def published(self, instance_id, name):
        """cairn.get_value: {"value", "version", "published_at", "status"}; version 0 (value
        None) while the instance has published none; LookupError-like psycopg NoDataFound for
        an instance the client cannot see. get(..., wait=True, after=version) waits for the next
        one."""
        return self._run(_get_value(instance_id, name))

    def _wait_for(self, w, look):
        """LISTENs on w's channels, then look() -> (found, what) until found: what."""
        self.conn.add_notify_handler(w.notified)
        try:
            self.conn.execute(w.sql("LISTEN", w.channels))
            while True:
                found, what = look()
                if found:
                    return what
                pause = w.pause(what)
                if pause > 0:
                    select.select([self.conn.fileno()], [], [], pause)
        finally:
            self.conn.remove_notify_handler(w.notified)
            if not self.conn.closed:
                self.conn.execute(w.sql("UNLISTEN", w.channels))

    def list(self, status=None, workflow=None, limit=20):
        """Instances, newest first."""
        return self._run(_list(status, workflow, limit))

    def cancel(self, instance_id, reason=None, *, force=False):
        """cairn.cancel: 'cancelled', 'requested' (its runner stops it, after the finally blocks
        around what it interrupts), or 'already <status>'. force=True skips those blocks, or
        abandons a cleanup under way."""
        return self._run(_cancel(instance_id, reason, force))

    def retry(self, instance_id, reason=None):
        """cairn.retry: 'queued', or 'already queued' / 'already running'; a completed instance
        raises psycopg.errors.CheckViolation."""
        return self._run(_retry(instance_id, reason))

    def signal(self, instance_id, name, payload=None, *, dedup_key=None, only_if_waiting=False):
        """cairn.signal: 'delivered' (a wait took it), 'buffered' (kept for the next wait),
        'duplicate' (dedup_key sent before), or 'not waiting' (only_if_waiting: nothing stored).
        An unknown instance raises psycopg.errors.NoDataFound, one that has ended
        ObjectNotInPrerequisiteState, a name it never waits for InvalidParameterValue."""
        return self._run(_signal(instance_id, name, payload, dedup_key, only_if_waiting))

    def signal_token(self, instance_id, name, *, ttl=None):
        """cairn.signal_token: a token ('cst_...') that sends signal name to the instance and
        nothing else, for a webhook's URL; ttl a datetime.timedelta (None: while the instance
        lives). Refuses as signal would."""
        return self._run(_signal_token(instance_id, name, ttl))

    def signal_by_token(self, token, payload=None, *, dedup_key=None):
        """cairn.signal_by_token: sends the signal token stands for; answers as signal. An
        unknown or expired token raises psycopg.errors.NoDataFound."""
        return self._run(_signal_by_token(token, payload, dedup_key))

    def signal_with_start(self, workflow, idempotency_key, name, payload=None, *, input=None,
                          dedup_key=None):
        """cairn.signal_with_start: the instance with that idempotency key (enqueued with input
        if there is none) and the signal's answer, as (instance_id, answer), in one
        transaction."""
        return self._run(_signal_with_start(workflow, idempotency_key, name, payload, input,
                                            dedup_key))

    def publish_event(self, name, key, payload=None, *, dedup_key=None):
        """cairn.publish_event: {"event_id", "woken" (how many waits took it), "duplicate"}."""
        return self._run(_publish_event(name, key, payload, dedup_key))


class AsyncClient:
    """Client's methods as coroutines, on psycopg's AsyncConnection."""

    def __init__(self, conn):
        """conn: a psycopg AsyncConnection in autocommit mode (AsyncClient.connect makes one)."""
        if not conn.autocommit:
            raise ValueError("AsyncClient needs an autocommit connection (each call commits)")
        self.conn = conn
        # Waiting for a notification means watching the connection's socket, which psycopg
        # also watches while a statement runs, and asyncio keeps one reader per socket: so
        # the waits watch it (all of them through one reader, _parked) only while no
        # statement is in flight (_busy), and every statement first takes it back (_unpark).
        # A notification that arrives meanwhile is read by psycopg with the statement's
        # answer; one that arrives while parked is read here (_readable); either way it
        # reaches the waits' notify handlers, and a wait reads the status only then.
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._parked = None
        self._listens = collections.Counter()  # channel -> waits on it, for the last UNLISTEN

    def _unpark(self):
        if self._parked is not None:
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self._parked.set_result(None)
            self._parked = None

    def _readable(self):
        pg = self.conn.pgconn
        try:
            pg.consume_input()
            while (n := pg.notifies()) is not None:
                if pg.notify_handler is not None:
                    pg.notify_handler(n)
        except psycopg.OperationalError:
            pass  # the connection is gone: the waits' next status read says so
        self._unpark()

    async def _park(self, seconds):
        """Until a notification may have come (it was read, here or with a statement's
        answer) or seconds pass."""
        if self._busy:
            waiting = self._idle.wait()
        else:
            if self._parked is None:
                loop = asyncio.get_running_loop()
                self._parked = loop.create_future()
                loop.add_reader(self.conn.fileno(), self._readable)
            waiting = asyncio.shield(self._parked)
        try:
            await asyncio.wait_for(waiting, seconds)
        except asyncio.TimeoutError:
            pass

    async def _execute(self, sql, params=None):
        self._unpark()
        self._busy += 1
        self._idle.clear()
        try:
            return await self.conn.execute(sql, params)
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    @classmethod
    async def connect(cls, dsn, *, tenant=None, **connect_args):
        """Connects as Client does, tenant included (an AsyncClient(conn) acts as whatever role
        conn has)."""
        set_role = _tenant_sql(tenant)
        connect_args["autocommit"] = True
        conn = await psycopg.AsyncConnection.connect(dsn, **connect_args)
        if set_role is not None:
            try:
                await conn.execute(set_role)
            except psycopg.Error as e:
                err = _tenant_error(tenant, e, conn.info.user)
                await conn.close()
                if err is not None:
                    raise err from e
                raise
        return cls(conn)

    async def close(self):
        await self.conn.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _run(self, st):
        try:
            cur = await self._execute(st.sql, st.params)
        except psycopg.errors.DataError as e:
            raise (_refused(e) or e) from e
        return st.decode(await (cur.fetchall() if st.many else cur.fetchone()))

    async def enqueue(self, workflow, input=None, *, idempotency_key=None, priority=0, at=None,
                      version=None, timeout=None, concurrency_key=None, any_input=False):
        return await self._run(_enqueue(workflow, input, idempotency_key, priority, at, version,
                                        timeout, concurrency_key, any_input))

    async def enqueue_many(self, workflow, inputs, *, idempotency_keys=None, priority=0,
                           at=None, version=None, timeout=None, concurrency_keys=None,
                           any_input=False):
        """As Client.enqueue_many."""
        return await self._run(_enqueue_many(workflow, inputs, idempotency_keys, priority, at,
                                             version, timeout, concurrency_keys, any_input))

    async def status(self, instance_id):
        return await self._run(_status(instance_id))

    async def schema(self, workflow, version=None):
        return await self._run(_schema(workflow, version))

    async def result(self, instance_id):
        return _outcome(await self.status(instance_id))

    async def wait(self, instance_id, timeout=None, poll=1.0):
        """As Client.wait; any number of waits may share the client concurrently."""
        async def look():
            s = await self.status(instance_id)
            return s["status"] in FINISHED, s
        return _outcome(await self._wait_for(_Wait(instance_id, timeout, poll), look))

    async def get(self, instance_id, name, *, wait=False, after=0, timeout=None, poll=1.0):
        """As Client.get."""
        got = _got(instance_id, name, after, wait)

        async def look():
            return got(await self._run(_get_value(instance_id, name)))
        if not wait:
            return (await look())[1]
        return await self._wait_for(_value_wait(instance_id, name, timeout, poll), look)

    async def published(self, instance_id, name):
        return await self._run(_get_value(instance_id, name))

    async def _wait_for(self, w, look):
        self.conn.add_notify_handler(w.notified)
        listened = []
        try:
            for c in w.channels:
                self._listens[c] += 1
                listened.append(c)
            await self._execute(w.sql("LISTEN", w.channels))  # by each: another's is in flight
            while True:
                found, what = await look()
                if found:
                    return what
                until = time.monotonic() + w.pause(what)
                while not w.heard and time.monotonic() < until:
                    await self._park(until - time.monotonic())
        finally:
            self.conn.remove_notify_handler(w.notified)
            last = []
            for c in listened:
                self._listens[c] -= 1
                if not self._listens[c]:
                    del self._listens[c]
                    last.append(c)
            if last and not self.conn.closed:
                await self._execute(w.sql("UNLISTEN", last))

    async def list(self, status=None, workflow=None, limit=20):
        return await self._run(_list(status, workflow, limit))

    async def cancel(self, instance_id, reason=None, *, force=False):
        return await self._run(_cancel(instance_id, reason, force))

    async def retry(self, instance_id, reason=None):
        return await self._run(_retry(instance_id, reason))

    async def signal(self, instance_id, name, payload=None, *, dedup_key=None,
                     only_if_waiting=False):
        return await self._run(_signal(instance_id, name, payload, dedup_key, only_if_waiting))

    async def signal_token(self, instance_id, name, *, ttl=None):
        return await self._run(_signal_token(instance_id, name, ttl))

    async def signal_by_token(self, token, payload=None, *, dedup_key=None):
        return await self._run(_signal_by_token(token, payload, dedup_key))

    async def signal_with_start(self, workflow, idempotency_key, name, payload=None, *,
                                input=None, dedup_key=None):
        return await self._run(_signal_with_start(workflow, idempotency_key, name, payload,
                                                  input, dedup_key))

    async def publish_event(self, name, key, payload=None, *, dedup_key=None):
        return await self._run(_publish_event(name, key, payload, dedup_key))


__all__ = ["Client", "AsyncClient", "WorkflowFailed", "NotFinished", "NotPublished", "FINISHED"]

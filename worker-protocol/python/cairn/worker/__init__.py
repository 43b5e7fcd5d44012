# SPDX-License-Identifier: MIT
"""Python workers: actions are ordinary functions (docs/python.md).

    worker = cairn.Worker("tcp://127.0.0.1:24118", slots=8)

    @worker.action("billing.charge")
    async def charge(order, amount):      # or a plain def: it runs in a thread pool
        ...
        return {"charged": amount}

    worker.run()                          # until SIGTERM: goodbye, finish what runs, exit

One Worker connects to every URL it is given (one session each, `slots` per session), so a
runner that dies does not idle it. Everything runs on one asyncio event loop: the sessions'
requests, the async actions, and the bookkeeping of the sync ones, which run in a thread pool
of `slots` threads per session. The wire and its rules are docs/protocol.md's, as the C SDK
follows them: batched ready/dispatch, slots and prefetch, a parked control request as the
heartbeat, reconnect with backoff, goodbye then drain.
"""
import asyncio
import collections
import concurrent.futures
import contextvars
import inspect
import logging
import os
import signal
import socket
import ssl
import threading
import time
import traceback
import uuid

from .. import _proto, _values, _wire

log = logging.getLogger("cairn.worker")

_current = contextvars.ContextVar("cairn_action_context")

RECONNECT_MIN, RECONNECT_MAX = 0.1, 5.0
# A message's msgpack stays below 16 MiB minus what nng and the envelope add (docs/protocol.md):
# a ready carries outcomes up to this many bytes of values; one larger outcome alone is replaced
# by a ValueError, as the C SDK does.
READY_VALUE_BYTES = 16 * 1024 * 1024 - 64 * 1024
CANCELS_REMEMBERED = 64  # cancels for attempts not received yet, per session (as the C SDK)


class Context:
    """What an action knows about the attempt it runs (cairn.context())."""

    def __init__(self, a, cancel_event):
        self.action = a.action
        self.attempt = a.attempt
        self.instance_id = uuid.UUID(bytes=a.instance)
        self.exec_id = uuid.UUID(bytes=a.exec_id)
        self.deadline_ms = a.deadline_ms  # absolute wall clock ms; 0: none
        self.last_error = a.last_error    # the previous attempt's error map, None on attempt 1
        self._cancel = cancel_event

    @property
    def deadline(self):
        """The deadline as seconds since the epoch (time.time()'s clock), or None."""
        return self.deadline_ms / 1000.0 if self.deadline_ms else None

    @property
    def cancelled(self):
        """True once the runner cancelled this attempt (a sync action should poll it)."""
        return self._cancel.is_set()

    @property
    def idempotency_key(self):
        """exec_id and attempt: the same when the runner sends the attempt again."""
        return f"{self.exec_id}:{self.attempt}"


def context():
    """The Context of the action running in this task or thread."""
    try:
        return _current.get()
    except LookupError:
        raise LookupError("cairn.context() is only available inside an action") from None


class NonRetryable(Exception):
    """Raise NonRetryable(exc) or NonRetryable("message") for a failure that trying again
    cannot fix (a declined card): the runner never retries it, whatever the workflow's policy.
    The error the workflow sees has the wrapped exception's type and bases."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class Refused(Exception):
    """The runner refused the worker's hello (bad credential, bad version)."""


class Registry:
    """Action names to functions. cairn.action registers into a default one."""

    def __init__(self):
        self.fns = {}

    def action(self, name):
        if not isinstance(name, str) or "." not in name:
            raise ValueError(f"action names are module-qualified (billing.charge), got {name!r}")

        def register(fn):
            if name in self.fns:
                raise ValueError(f"action {name} is registered twice")
            self.fns[name] = fn
            return fn
        return register


default_registry = Registry()


def action(name):
    """Registers fn as action `name` for workers built without their own registry."""
    return default_registry.action(name)


def error_map(exc, retryable=True):
    """The protocol's error map for an exception: its class name, its bases (the class
    hierarchy, so [ConnectionError -> retry: 3] catches ConnectionRefusedError), str(exc) and
    the traceback."""
    inner = exc.error if isinstance(exc, NonRetryable) else exc
    if isinstance(exc, NonRetryable):
        retryable = False
    if isinstance(inner, BaseException):
        cls = type(inner)
        bases = [c.__name__ for c in cls.__mro__[1:] if c not in (BaseException, object)]
        details = "".join(traceback.format_exception(inner)) if inner.__traceback__ else None
        m = {"type": cls.__name__, "message": str(inner), "bases": bases or ["Exception"],
             "details": details}
    else:  # NonRetryable("message")
        m = {"type": "NonRetryable", "message": str(inner), "bases": ["Exception"],
             "details": None}
    if not retryable:
        m["retryable"] = False
    return m


def _plain_error(type_, message):
    return {"type": type_, "message": message, "bases": ["Exception"], "details": None}


class _Session:
    """One connection to one runner at a time, and the attempts it dispatched. Each connection
    is a generation: attempts and outcomes of an earlier one are never reported on a later one
    (the runner already failed them with WorkerLost, or sent them again)."""

    def __init__(self, worker, url):
        self.w = worker
        self.url = url
        self.conn = None          # set once the runner welcomed this connection
        self.gen = 0
        self.sem = asyncio.Semaphore(worker.slots)
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=worker.slots, thread_name_prefix="cairn-action")
        self.sync_busy = 0        # plain-def actions running on pool threads now
        self.busy_lock = threading.Lock()
        self.outcomes = []        # (exec_id, attempt, token, ok, document) to report
        self.outstanding = 0      # ready requests out
        self.running = {}         # token -> [attempt, cancel event, its task, action task, gen]
        self.cancelled = collections.deque(maxlen=CANCELS_REMEMBERED)
        self.draining = False
        self.changed = asyncio.Event()
        self.tasks = set()        # background tasks, referenced until done (asyncio keeps weak
                                  # references only)

    # ---- work ---------------------------------------------------------------------------------

    def pump(self):
        """Keeps one ready parked asking for work, and sends another when outcomes wait (only
        one can stay parked, so one of the two comes back within a round trip)."""
        conn = self.conn
        while conn is not None and conn.error is None:
            want = 2 if self.outcomes else (0 if self.draining else 1)
            if self.outstanding >= want:
                return
            size, k = 0, 0
            while k < len(self.outcomes) and k < 8192:
                size += len(self.outcomes[k][4]) + 64
                if size > READY_VALUE_BYTES and k > 0:
                    break
                k += 1
            batch, self.outcomes = self.outcomes[:k], self.outcomes[k:]
            self.outstanding += 1
            fut = conn.send(_proto.ready(batch))
            self._spawn(self._ready_reply(fut, self.gen))

    def _spawn(self, coro):
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    async def _ready_reply(self, fut, gen):
        try:
            kind, m = _proto.decode(await fut)
        except (_wire.WireError, _proto.ProtocolError) as e:
            if gen == self.gen:
                self.outstanding -= 1
                self._broken(e)
            return
        if gen != self.gen:
            return
        self.outstanding -= 1
        if kind == "dispatch":
            for a in m["items"]:
                self._start(a)
        elif kind != "noop":
            self._broken(_proto.ProtocolError(f"a {kind} in reply to ready"))
            return
        self.pump()
        self.changed.set()

    def _start(self, a):
        ev = threading.Event()
        if (a.exec_id, a.attempt, a.token) in self.cancelled:
            ev.set()
        entry = [a, ev, None, None, self.gen]
        self.running[a.token] = entry
        entry[2] = self._spawn(self._run(entry))

    async def _run(self, entry):
        a, gen = entry[0], entry[4]
        async with self.sem:
            ok, value = await self._call(entry)
        try:
            doc = _values.pack(value, "the result" if ok else "the error")
        except _values.ValueTypeError as e:
            ok, doc = False, _values.pack(_plain_error("TypeError", str(e)))
        except Exception as e:  # e.g. a str holding a lone surrogate
            ok, doc = False, _values.pack(_plain_error(
                "ValueError", f"{'the result' if ok else 'the error'} cannot be encoded: "
                              f"{_clean(repr(e))}"))
        if len(doc) + 64 > READY_VALUE_BYTES:
            ok, doc = False, _values.pack(_plain_error(
                "ValueError", f"{'the result' if ok else 'the error'} is {len(doc)} bytes of "
                "msgpack, over the protocol's 16 MiB message limit (pass large data by "
                "reference)"))
        if gen != self.gen:
            return  # its session is gone: the runner failed it (WorkerLost) or sent it again
        self.running.pop(a.token, None)
        self.outcomes.append((a.exec_id, a.attempt, a.token, ok, doc))
        self.pump()
        self.changed.set()

    async def _call(self, entry):
        """(ok, value) of running an attempt: its result, or an error map. Whatever the action
        raises (SystemExit included) is its failure; only a cancel of the worker's own task
        (the worker stopping) goes through."""
        a, ev = entry[0], entry[1]
        if ev.is_set():
            return False, _plain_error("Cancelled", "cancelled before it started")
        fn = self.w.registry.fns.get(a.action)
        if fn is None:
            return False, _plain_error("WorkerError", "action not served by this worker")
        ctx = Context(a, ev)
        run_ctx = contextvars.copy_context()
        run_ctx.run(_current.set, ctx)
        task = None
        try:
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
                    getattr(fn, "__call__", None)):
                task = asyncio.get_running_loop().create_task(fn(**a.kwargs), context=run_ctx)
                entry[3] = task  # what a cancel from the runner cancels
                result = await task
            else:
                result = await self._in_thread(run_ctx, fn, a.kwargs, ev)
            return True, result
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the worker is stopping: not the action's doing
            if ev.is_set():
                return False, _plain_error("Cancelled", "the runner cancelled it")
            return False, error_map(asyncio.CancelledError("the action was cancelled"))
        except BaseException as e:  # the action's own failure, reported to the workflow
            return False, error_map(e)

    async def _in_thread(self, run_ctx, fn, kwargs, ev):
        def call():
            if ev.is_set():  # cancelled while it waited for a thread
                raise _CancelledBeforeStart()
            with self.busy_lock:
                self.sync_busy += 1
            try:
                return run_ctx.run(fn, **kwargs)
            finally:  # counted by the thread itself: a cancelled await does not stop it
                with self.busy_lock:
                    self.sync_busy -= 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, call)
        except _CancelledBeforeStart:
            raise asyncio.CancelledError() from None

    def _cancel(self, exec_id, attempt, token):
        self.cancelled.append((exec_id, attempt, token))
        entry = self.running.get(token)
        if entry is not None and entry[0].exec_id == exec_id and entry[0].attempt == attempt:
            entry[1].set()
            if entry[3] is not None and not entry[3].done():
                entry[3].cancel()

    def _broken(self, err):
        if self.conn is not None and self.conn.error is None:
            self.conn.close(err)
        self.changed.set()

    # ---- the session --------------------------------------------------------------------------

    async def serve(self, conn):
        """Says hello, then serves until the connection breaks or the worker stops. Returns
        True if the runner welcomed the worker (the caller resets its backoff)."""
        w = self.w
        try:
            kind, m = _proto.decode(await asyncio.wait_for(
                conn.request(_proto.hello(w.name, sorted(w.registry.fns), w.slots, w.prefetch,
                                          w.credential)), 30))
            if kind == "refused":
                raise Refused(m.get("reason", "refused"))
            if kind != "welcome":
                raise _proto.ProtocolError(f"a {kind} in reply to hello")
        except BaseException:
            conn.close()
            raise
        idle_ms = int(m.get("idle_ms", 20000))
        watchdog = 3 * idle_ms / 1000.0 + 1 if idle_ms > 0 else None  # 0: no idle cycle
        self.gen += 1
        self.conn = conn
        self.outstanding = 0
        self.outcomes = []
        self.cancelled.clear()
        self.draining = False
        log.info("%s: serving %d action(s) with %d slot(s)", self.url, len(w.registry.fns),
                 w.slots)
        self.pump()
        control = self._spawn(self._control(conn, watchdog))
        try:
            while conn.error is None and not w.stopping.is_set():
                self.changed.clear()
                waiter = asyncio.ensure_future(w.stopping.wait())
                changed = asyncio.ensure_future(self.changed.wait())
                await asyncio.wait([waiter, changed, control],
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                changed.cancel()
                if control.done():
                    break
            if conn.error is None and w.stopping.is_set():
                await self._drain(conn)
        finally:
            control.cancel()
            conn.close()
            self.conn = None
            self.gen += 1  # what runs now finishes unreported, as in the C SDK
            self.running.clear()
            self.outcomes = []
            self.outstanding = 0
        if conn.error is not None and not w.stopping.is_set():
            raise conn.error
        return True

    async def _control(self, conn, watchdog):
        """Keeps a control request parked (the heartbeat); applies cancels. A runner that
        answers nothing for three idle periods plus a second is gone: reconnect."""
        while conn.error is None and not self.draining:
            fut = conn.send(_proto.control())
            try:
                kind, m = _proto.decode(await asyncio.wait_for(fut, watchdog))
            except asyncio.TimeoutError:
                self._broken(_wire.WireError("runner silent for three idle periods"))
                return
            except (_wire.WireError, _proto.ProtocolError) as e:
                self._broken(e)
                return
            if kind == "cancel":
                self._cancel(m["exec_id"], int(m.get("attempt", 0)), int(m.get("token", 0)))
            elif kind not in ("noop", "ack"):
                self._broken(_proto.ProtocolError(f"a {kind} in reply to control"))
                return

    async def _drain(self, conn):
        """Goodbye: the runner stops dispatching; what runs finishes and is reported, all
        within the worker's grace period."""
        self.draining = True
        deadline = time.monotonic() + self.w.grace
        try:
            kind, _ = _proto.decode(await asyncio.wait_for(
                conn.request(_proto.goodbye()), max(deadline - time.monotonic(), 0.5)))
        except (asyncio.TimeoutError, _wire.WireError, _proto.ProtocolError):
            return
        if kind != "ack":
            log.warning("%s: a %s in reply to goodbye", self.url, kind)
        while (self.running or self.outcomes or self.outstanding) and conn.error is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                break

    def stop_actions(self):
        """The grace is over: cancel the async actions still running (sync ones are told)."""
        for entry in list(self.running.values()):
            entry[1].set()
            if entry[3] is not None:
                entry[3].cancel()


class _CancelledBeforeStart(Exception):
    pass


def _clean(text):
    """text with anything msgpack cannot carry as UTF-8 (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _name_ok(s):
    return isinstance(s, str) and 0 < len(s.encode("utf-8", "surrogatepass")) <= 256 \
        and "\0" not in s


class Worker:
    """A worker process's connection(s) to runners. See the module's doc."""

    def __init__(self, url, *, registry=None, credential=None, slots=8, prefetch=0, tls=None,
                 tls_server_name=None, name=None, grace=10.0):
        self.urls = [url] if isinstance(url, str) else list(url)
        if not self.urls:
            raise ValueError("a worker needs at least one runner URL")
        for u in self.urls:
            _wire.parse_url(u)
        if not 1 <= slots <= 4096 or not 0 <= prefetch <= 4096:
            raise ValueError("slots must be 1..4096 and prefetch 0..4096")
        self.registry = registry if registry is not None else Registry()
        self.credential = credential
        self.slots = slots
        self.prefetch = prefetch
        self.tls = tls
        self.tls_server_name = tls_server_name
        self.name = name or f"python-{socket.gethostname()}-{os.getpid()}"
        for what, v in (("name", self.name), ("credential", credential)):
            if v is not None and not _name_ok(v):
                raise ValueError(f"the worker's {what} must be 1 to 256 bytes without NUL")
        self.grace = grace
        self.stopping = None
        self._loop = None
        self._stop_requested = False
        self.sessions = []

    def action(self, name):
        """Registers an action on this worker (a decorator)."""
        return self.registry.action(name)

    async def run_async(self):
        """Serves until stop() is called; raises Refused if a runner refuses the hello (the
        other runners' sessions say goodbye and drain first)."""
        fns = self.registry.fns
        if not fns:
            raise ValueError("no actions registered")
        if len(fns) > 4096 or not all(_name_ok(n) for n in fns):
            raise ValueError("at most 4096 actions, each name 1 to 256 bytes without NUL")
        self._loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        if self._stop_requested:
            self.stopping.set()
        self.sessions = [_Session(self, u) for u in self.urls]
        tasks = [self._loop.create_task(self._keep(s)) for s in self.sessions]
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            for s in self.sessions:
                s.stop_actions()
                s.pool.shutdown(wait=False, cancel_futures=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def _keep(self, s):
        backoff = RECONNECT_MIN
        while not self.stopping.is_set():
            welcomed = False
            try:
                conn = await _wire.Conn.open(s.url, self.tls, self.tls_server_name)
                welcomed = await s.serve(conn)
            except Refused as e:
                log.error("%s: refused: %s", s.url, e)
                self.stopping.set()  # the other sessions say goodbye and drain
                raise
            except (_wire.WireError, _proto.ProtocolError, OSError, asyncio.TimeoutError,
                    ssl.SSLError) as e:
                if self.stopping.is_set():
                    return
                if welcomed:
                    backoff = RECONNECT_MIN
                log.warning("%s: %s (reconnecting in %.1f s)", s.url, e, backoff)
                try:
                    await asyncio.wait_for(self.stopping.wait(), backoff)
                except asyncio.TimeoutError:
                    pass
                backoff = min(backoff * 2, RECONNECT_MAX)

    def stop(self):
        """Asks the worker to say goodbye, finish what runs (within `grace`) and return. Safe
        from any thread, and before the worker runs (it then stops at once)."""
        self._stop_requested = True
        loop, ev = self._loop, self.stopping
        if loop is not None and ev is not None:
            loop.call_soon_threadsafe(ev.set)

    def run(self):
        """Runs until SIGTERM or SIGINT (then goodbye and drain within `grace`; a second signal
        stops at once). Returns 0, 1 if a runner refused the worker, or 3 after a second
        signal. Plain-def actions still running then are abandoned: the process exits without
        waiting for their threads."""
        async def main():
            loop = asyncio.get_running_loop()
            task = loop.create_task(self.run_async())
            hits = []

            def on_signal():
                hits.append(1)
                if len(hits) == 1:
                    self.stop()
                else:
                    task.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_signal)
            try:
                await task
                return 0
            except Refused:
                return 1
            except asyncio.CancelledError:
                return 3
        rc = asyncio.run(main())
        if any(s.sync_busy for s in self.sessions):
            # Python would join the pool's threads at exit, waiting for actions that may never
            # return (a socket without a timeout): leave without them.
            logging.shutdown()
            os._exit(rc)
        return rc

# SPDX-License-Identifier: MIT
"""One session: the connection to one runner at a time and the protocol loop on it (hello,
ready/dispatch with slots and prefetch, the parked control request as heartbeat and carrier of
cancels, goodbye then drain), and the attempts it dispatched, run as tasks or on its thread
pool and reported as outcomes (docs/protocol.md)."""
import asyncio
import collections
import concurrent.futures
import inspect
import logging
import threading
import time

from .. import _proto, _values, _wire
from .action_context import bind
from .errors import Refused, error_map, plain_error

log = logging.getLogger("cairn.worker")

# A message's msgpack stays below 16 MiB minus what nng and the envelope add (docs/protocol.md):
# a ready carries outcomes up to this many bytes of values; one larger outcome alone is replaced
# by a ValueError, as the C SDK does.
READY_VALUE_BYTES = 16 * 1024 * 1024 - 64 * 1024
CANCELS_REMEMBERED = 64  # cancels for attempts not received yet, per session (as the C SDK)


class Session:
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
            ok, doc = False, _values.pack(plain_error("TypeError", str(e)))
        except Exception as e:  # e.g. a str holding a lone surrogate
            ok, doc = False, _values.pack(plain_error(
                "ValueError", f"{'the result' if ok else 'the error'} cannot be encoded: "
                              f"{_clean(repr(e))}"))
        if len(doc) + 64 > READY_VALUE_BYTES:
            ok, doc = False, _values.pack(plain_error(
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
            return False, plain_error("Cancelled", "cancelled before it started")
        fn = self.w.registry.fns.get(a.action)
        if fn is None:
            return False, plain_error("WorkerError", "action not served by this worker")
        run_ctx = bind(a, ev)
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
                return False, plain_error("Cancelled", "the runner cancelled it")
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
    """Raised on a pool thread for an attempt cancelled while it waited for a thread;
    _in_thread turns it into the CancelledError that _call reports as the runner's cancel."""


def _clean(text):
    """text with anything msgpack cannot carry as UTF-8 (lone surrogates) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")

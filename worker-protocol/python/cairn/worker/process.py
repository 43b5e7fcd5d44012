# SPDX-License-Identifier: MIT
"""The Worker: one session per runner URL, each kept connected (reconnect with backoff, reset
once a runner welcomes it); run() with its signals and exit codes, stop() from any thread."""
import asyncio
import logging
import os
import signal
import socket
import ssl

from .. import _proto, _wire
from .errors import Refused
from .registry import Registry
from .session import Session

log = logging.getLogger("cairn.worker")

RECONNECT_MIN, RECONNECT_MAX = 0.1, 5.0


def _name_ok(s):
    """The protocol's rule for names (docs/protocol.md, "Messages"): 1 to 256 bytes of UTF-8,
    no NUL. Checked here so that a bad name fails in Python, before any hello."""
    return isinstance(s, str) and 0 < len(s.encode("utf-8", "surrogatepass")) <= 256 \
        and "\0" not in s


class Worker:
    """A worker process's connection(s) to runners. See cairn.worker's doc."""

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
        self.sessions = [Session(self, u) for u in self.urls]
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

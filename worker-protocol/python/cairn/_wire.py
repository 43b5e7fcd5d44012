# SPDX-License-Identifier: MIT
"""The SP (scalability protocols) wire that nng speaks, for one REQ connection to a runner's REP
socket, over tcp://, ipc:// and tls+tcp:// (docs/protocol.md, "Transport"). Written from nng's
transport documentation; no nng binding is needed.

- Handshake: each side sends 8 bytes, 0x00 'S' 'P' 0x00, its protocol id (16-bit big-endian:
  REQ is 0x30, REP 0x31) and two zero bytes, and checks the peer's.
- Frames: tcp (and tls) send an 8-byte big-endian length, then the message; ipc sends a 1-byte
  message type (1) before the length. The message starts with the SP header: for REQ/REP one
  32-bit request id with its high bit set, which the reply carries back. Several requests may
  be out at once on one connection (nng contexts); replies are matched by id.

One Conn is used from one asyncio event loop."""
import asyncio
import ssl
import struct

REQ, REP = 0x30, 0x31
MAX_MESSAGE = 16 * 1024 * 1024  # NNG_OPT_RECVMAXSZ on both sides (docs/protocol.md)


class WireError(Exception):
    """The connection broke, or the peer is not an SP REP socket."""


def parse_url(url):
    """('tcp'|'ipc'|'tls', host, port|None, path|None) for a runner URL."""
    for scheme in ("tls+tcp://", "tcp://", "ipc://"):
        if url.startswith(scheme):
            rest = url[len(scheme):]
            if scheme == "ipc://":
                if not rest:
                    raise ValueError(f"{url}: an ipc:// URL needs a path")
                return "ipc", None, None, rest
            host, sep, port = rest.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"{url}: expected {scheme}HOST:PORT")
            return ("tls" if scheme == "tls+tcp://" else "tcp"), host.strip("[]"), int(port), None
    raise ValueError(f"{url}: the URL must start with tcp://, ipc:// or tls+tcp://")


class Conn:
    """A REQ connection: request(body) sends one request and waits for its reply."""

    def __init__(self, reader, writer, ipc):
        self._r, self._w, self._ipc = reader, writer, ipc
        self._next = 1
        self._waiting = {}  # request id -> future of the reply body
        self._reader_task = None
        self.error = None

    @classmethod
    async def open(cls, url, ssl_context=None, server_name=None, timeout=10.0):
        """Connects and handshakes. ssl_context: for tls+tcp:// (default: the system's CAs);
        server_name: the name to check in the runner's certificate (default: the URL's host)."""
        kind, host, port, path = parse_url(url)
        if kind == "ipc":
            r, w = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        elif kind == "tls":
            ctx = ssl_context or ssl.create_default_context()
            r, w = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname=server_name or host),
                timeout)
        else:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        conn = cls(r, w, kind == "ipc")
        try:
            w.write(b"\x00SP\x00" + struct.pack(">HH", REQ, 0))
            await w.drain()
            peer = await asyncio.wait_for(r.readexactly(8), timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            w.close()
            raise WireError(f"{url}: handshake failed: {e!r}") from None
        if peer[:4] != b"\x00SP\x00" or struct.unpack(">H", peer[4:6])[0] != REP:
            w.close()
            raise WireError(f"{url}: the peer is not an SP REP socket ({peer.hex()})")
        conn._reader_task = asyncio.get_running_loop().create_task(conn._read_loop())
        return conn

    async def _read_loop(self):
        try:
            while True:
                if self._ipc:
                    head = await self._r.readexactly(9)
                    if head[0] != 1:
                        raise WireError(f"unknown ipc message type {head[0]}")
                    (n,) = struct.unpack(">Q", head[1:])
                else:
                    (n,) = struct.unpack(">Q", await self._r.readexactly(8))
                if n > MAX_MESSAGE or n < 4:
                    raise WireError(f"a message of {n} bytes")
                msg = await self._r.readexactly(n)
                (rid,) = struct.unpack(">I", msg[:4])
                fut = self._waiting.pop(rid & 0x7FFFFFFF, None)
                if fut is not None and not fut.done():
                    fut.set_result(msg[4:])
        except (OSError, asyncio.IncompleteReadError, WireError) as e:
            self._fail(e if isinstance(e, WireError) else WireError(f"connection lost: {e!r}"))
        except asyncio.CancelledError:
            self._fail(WireError("connection closed"))
            raise

    def _fail(self, err):
        if self.error is None:
            self.error = err
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(self.error)
        self._waiting.clear()
        self._w.close()

    def send(self, body):
        """Sends a request; returns the future of its reply body."""
        fut = asyncio.get_running_loop().create_future()
        if self.error is not None:
            fut.set_exception(self.error)
            return fut
        rid = self._next
        self._next = self._next % 0x7FFFFFFF + 1
        self._waiting[rid] = fut
        payload = struct.pack(">I", rid | 0x80000000) + body
        head = struct.pack(">Q", len(payload))
        self._w.write((b"\x01" + head if self._ipc else head) + payload)
        return fut

    async def request(self, body):
        return await self.send(body)

    def close(self, why=None):
        """Closes the connection; why (an exception) becomes its error when it had none."""
        self._fail(why if why is not None else WireError("connection closed"))
        if self._reader_task is not None:
            self._reader_task.cancel()

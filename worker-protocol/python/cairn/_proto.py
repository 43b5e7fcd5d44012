# SPDX-License-Identifier: MIT
"""The worker protocol's messages (docs/protocol.md, "Messages"): one msgpack map per message,
`v` 1 and a `kind`; ids are 16-byte bin; values are bin fields holding a value document."""
import msgpack

from . import _values

VERSION = 1
SDK = "cairn-python/0.1"


class ProtocolError(Exception):
    """A reply that does not decode, or that the protocol does not allow here."""


def _msg(kind, **fields):
    fields["v"] = VERSION
    fields["kind"] = kind
    return msgpack.packb(fields, use_bin_type=True)


def hello(worker, actions, slots, prefetch, credential):
    return _msg("hello", worker=worker, sdk=SDK, credential=credential, actions=list(actions),
                slots=slots, prefetch=prefetch)


def ready(outcomes):
    """outcomes: (exec_id, attempt, token, ok, value document) tuples."""
    return _msg("ready", outcomes=[{"exec_id": e, "attempt": a, "token": t, "ok": ok, "value": v}
                                   for e, a, t, ok, v in outcomes])


def control():
    return _msg("control")


def goodbye():
    return _msg("goodbye")


class Attempt:
    """One entry of a dispatch."""
    __slots__ = ("instance", "exec_id", "attempt", "token", "action", "kwargs", "deadline_ms",
                 "timeout_ms", "last_error")

    def __init__(self, m):
        try:
            self.instance = _id(m["instance"])
            self.exec_id = _id(m["exec_id"])
            self.attempt = int(m["attempt"])
            self.token = int(m["token"])
            self.action = m["action"]
            self.kwargs = _values.unpack(m["kwargs"])
            self.deadline_ms = int(m.get("deadline_ms", 0))
            self.timeout_ms = int(m.get("timeout_ms", 0))  # counted from the start, on a slot
            le = m.get("last_error")
            self.last_error = _values.unpack(le) if le is not None else None
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            raise ProtocolError(f"bad dispatch item: {e!r}") from None
        if not isinstance(self.action, str) or not isinstance(self.kwargs, dict):
            raise ProtocolError("bad dispatch item: action must be a str and kwargs a map")


def _id(b):
    if not isinstance(b, bytes) or len(b) != 16:
        raise ProtocolError("an id must be 16 bytes")
    return b


def decode(body):
    """A reply as (kind, dict of its fields); dispatch items become Attempt objects."""
    try:
        m = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as e:
        raise ProtocolError(f"reply does not decode: {e!r}") from None
    if not isinstance(m, dict) or m.get("v") != VERSION or not isinstance(m.get("kind"), str):
        raise ProtocolError("reply is not a version 1 message")
    kind = m["kind"]
    if kind == "dispatch":
        items = m.get("items")
        if not isinstance(items, list) or not items:
            raise ProtocolError("a dispatch needs items")
        m["items"] = [Attempt(i) if isinstance(i, dict) else _bad_item() for i in items]
    elif kind == "cancel":
        _id(m.get("exec_id"))
    elif kind not in ("welcome", "refused", "noop", "ack"):
        raise ProtocolError(f"unknown reply kind {kind!r}")
    return kind, m


def _bad_item():
    raise ProtocolError("a dispatch item must be a map")

# SPDX-License-Identifier: MIT
"""Values between Python and the engine (docs/values.md): None, bool, int (64-bit), float, str,
list, dict with str keys, at most 32 levels deep. Anything else is refused with a message that
names the type and where it is, so an action that returns, say, a datetime fails its attempt
with a clear error instead of an unreadable one on the runner."""
import msgpack

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1


class ValueTypeError(TypeError):
    """A Python value that has no engine value (with where it is, e.g. result["items"][3])."""


def check(value, where="value", depth=1):
    """Raises ValueTypeError if value cannot travel to the engine."""
    if depth > MAX_DEPTH:
        raise ValueTypeError(f"{where} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str, float)):
        return
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise ValueTypeError(f"{where} is the int {value}, outside the 64-bit range")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ValueTypeError(f"{where} has the key {k!r} of type {type(k).__name__}; "
                                     "keys must be str")
            check(item, f"{where}[{k!r}]", depth + 1)
        return
    raise ValueTypeError(f"{where} is of type {type(value).__name__}, which has no engine value "
                         "(use None, bool, int, float, str, list or dict)")


def pack(value, where="value"):
    """A value document: the msgpack of one value (checked first)."""
    check(value, where)
    return msgpack.packb(value, use_bin_type=True)


def unpack(doc):
    """A value document back to Python (lists, dicts with str keys; ints stay ints)."""
    return msgpack.unpackb(doc, raw=False, strict_map_key=True, use_list=True)

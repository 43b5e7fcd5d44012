# SPDX-License-Identifier: MIT
"""Actions the Python SDK tests serve (module `pyactions`, registered with @cairn.action)."""
import asyncio
import time

import cairn


@cairn.action("py.echo")
def echo(value=None):
    return value


@cairn.action("py.add")
async def add(a, b):
    return a + b


@cairn.action("py.sleep")
async def sleep(ms):
    await asyncio.sleep(ms / 1000)
    return ms


@cairn.action("py.block")
def block(ms):
    """A sync action that polls for cancellation."""
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        if cairn.context().cancelled:
            raise RuntimeError("stopped: cancelled")
        time.sleep(0.01)
    return ms


@cairn.action("py.refuse")
def refuse(host="db"):
    raise ConnectionRefusedError(f"{host} refused the connection")


@cairn.action("py.flaky")
def flaky(failures):
    ctx = cairn.context()
    if ctx.attempt <= failures:
        raise ConnectionResetError(f"attempt {ctx.attempt} reset")
    prev = ctx.last_error
    return {"attempt": ctx.attempt, "previous": prev["message"] if prev else None}


@cairn.action("py.declined")
def declined():
    raise cairn.NonRetryable(ValueError("card declined"))


@cairn.action("py.ctx")
async def ctx_info():
    c = cairn.context()
    return {"attempt": c.attempt, "instance": str(c.instance_id), "exec": str(c.exec_id),
            "has_deadline": c.deadline is not None, "action": c.action}


@cairn.action("py.unencodable")
def unencodable():
    return {"when": {1, 2}}


@cairn.action("py.mark")
async def mark(ms, path):
    """Appends this worker's pid to path when it starts, then sleeps ms."""
    import os
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    await asyncio.sleep(ms / 1000)
    return ms


@cairn.action("py.describe")
def describe(value):
    """repr() of what arrived: exact about types (1 vs 1.0, -0.0) and every character."""
    return repr(value)


@cairn.action("py.big")
def big(mb):
    """A str of mb MiB."""
    return "x" * (mb * 1024 * 1024)


@cairn.action("py.exit")
def exit_():
    """An action that calls sys.exit (as argparse does on bad arguments)."""
    import sys
    sys.exit(2)


@cairn.action("py.surrogate")
def surrogate():
    """A result holding a lone surrogate (what a non-UTF-8 file name decodes to)."""
    return "bad \udc80 name"


@cairn.action("py.stuck")
def stuck(s):
    """A plain def that ignores cancellation."""
    time.sleep(s)
    return s


# The saga of pyrefund.cairn (test_cleanup.py): each action appends one line, "ACTION EXEC_ID
# ATTEMPT PID", to path when it starts, then holds its slot for ms (cancelled with its task).
async def _step(name, path, ms):
    import os
    c = cairn.context()
    with open(path, "a") as f:
        f.write(f"{name} {c.exec_id} {c.attempt} {os.getpid()}\n")
    await asyncio.sleep(ms / 1000)
    return name


@cairn.action("shop.charge")
async def charge(order, path):
    return await _step("charge", path, 0)


@cairn.action("shop.ship")
async def ship(order, path, ms):
    return await _step("ship", path, ms)


@cairn.action("shop.refund")
async def refund(order, path, ms):
    return await _step("refund", path, ms)

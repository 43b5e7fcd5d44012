# SPDX-License-Identifier: MIT
"""chaos.hold, the takeover scenario's action (tests/chaos/takeover): appends the wall-clock
time, the instance's key, the step and the attempt to $CAIRN_CHAOS_LOG (the worker's own
execution log, one line per start), holds its slot for `ms` milliseconds without blocking the
worker's other slots, and returns the step."""
import asyncio
import os
import time

import cairn

_log = open(os.environ["CAIRN_CHAOS_LOG"], "a", buffering=1)


@cairn.action("chaos.hold")
async def hold(key, i, ms):
    _log.write(f"{time.time():.6f} {key} {i} {cairn.context().attempt}\n")
    await asyncio.sleep(ms / 1000)
    return i

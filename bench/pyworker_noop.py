# SPDX-License-Identifier: MIT
"""The no-op actions the Python worker benchmark serves (bench/python-worker): bench.noop as an
async def (runs on the event loop) and bench.noop_sync as a plain def (runs in the thread
pool)."""
import cairn


@cairn.action("bench.noop")
async def noop():
    return None


@cairn.action("bench.noop_sync")
def noop_sync():
    return None

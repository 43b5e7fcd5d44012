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

This module only gathers cairn.worker's public names; each is defined in the module of its
job: process.py (Worker), session.py (one runner connection and the attempts on it),
registry.py (Registry, action), action_context.py (Context, context), errors.py
(NonRetryable, Refused, error_map). `python3 -m cairn.worker` is cairn/_cli.py.
"""
from .action_context import Context, context
from .errors import NonRetryable, Refused, error_map
from .process import RECONNECT_MAX, RECONNECT_MIN, Worker
from .registry import Registry, action, default_registry
from .session import CANCELS_REMEMBERED, READY_VALUE_BYTES, log

__all__ = ["Worker", "Registry", "Context", "NonRetryable", "Refused", "action", "context",
           "default_registry", "error_map", "log", "RECONNECT_MIN", "RECONNECT_MAX",
           "READY_VALUE_BYTES", "CANCELS_REMEMBERED"]

# SPDX-License-Identifier: MIT
"""The action context: what an action knows about the attempt it runs (cairn.context()), and
the context variable that carries it into the action's task or pool thread."""
import contextvars
import time
import uuid

_current = contextvars.ContextVar("cairn_action_context")


class Context:
    """What an action knows about the attempt it runs (cairn.context())."""

    def __init__(self, a, cancel_event):
        self.action = a.action
        self.attempt = a.attempt
        self.instance_id = uuid.UUID(bytes=a.instance)
        self.exec_id = uuid.UUID(bytes=a.exec_id)
        # Absolute wall clock ms (0: none): the runner's deadline, or the attempt's timeout
        # counted from now, when a slot starts it (time queued here does not count), if sooner.
        self.deadline_ms = a.deadline_ms
        if a.timeout_ms > 0:
            by = int(time.time() * 1000) + a.timeout_ms
            if self.deadline_ms <= 0 or by < self.deadline_ms:
                self.deadline_ms = by
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


def bind(a, cancel_event):
    """A copy of the caller's contextvars context in which context() is attempt a's Context.
    The action runs inside it, as a task or on a pool thread, so that concurrent attempts each
    see their own."""
    run_ctx = contextvars.copy_context()
    run_ctx.run(_current.set, Context(a, cancel_event))
    return run_ctx

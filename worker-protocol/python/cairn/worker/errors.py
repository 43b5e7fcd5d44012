# SPDX-License-Identifier: MIT
"""The worker's failures: NonRetryable (raised by actions), Refused (a runner refused the
hello), and the protocol's error maps that an action's failure is reported as."""
import traceback


class NonRetryable(Exception):
    """Raise NonRetryable(exc) or NonRetryable("message") for a failure that trying again
    cannot fix (a declined card): the runner never retries it, whatever the workflow's policy.
    The error the workflow sees has the wrapped exception's type and bases."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class Refused(Exception):
    """The runner refused the worker's hello (bad credential, bad version)."""


def error_map(exc, retryable=True):
    """The protocol's error map for an exception: its class name, its bases (the class
    hierarchy, so [ConnectionError -> retry: 3] catches ConnectionRefusedError), str(exc) and
    the traceback."""
    inner = exc.error if isinstance(exc, NonRetryable) else exc
    if isinstance(exc, NonRetryable):
        retryable = False
    if isinstance(inner, BaseException):
        cls = type(inner)
        bases = [c.__name__ for c in cls.__mro__[1:] if c not in (BaseException, object)]
        details = "".join(traceback.format_exception(inner)) if inner.__traceback__ else None
        m = {"type": cls.__name__, "message": str(inner), "bases": bases or ["Exception"],
             "details": details}
    else:  # NonRetryable("message")
        m = {"type": "NonRetryable", "message": str(inner), "bases": ["Exception"],
             "details": None}
    if not retryable:
        m["retryable"] = False
    return m


def plain_error(type_, message):
    """An error map for a failure the worker itself reports (no exception, no traceback)."""
    return {"type": type_, "message": message, "bases": ["Exception"], "details": None}

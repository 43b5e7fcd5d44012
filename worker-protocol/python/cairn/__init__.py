# SPDX-License-Identifier: MIT
"""Cairn for Python: workers whose actions are ordinary Python functions (cairn.Worker), and a
client to start and watch workflows (cairn.Client). docs/python.md is the reference."""
from .worker import (Context, NonRetryable, Refused, Registry, Worker, action, context,
                     default_registry)

__all__ = ["Worker", "Registry", "Context", "NonRetryable", "Refused", "action", "context",
           "default_registry", "Client", "AsyncClient", "WorkflowFailed", "NotFinished", "NotPublished",
           "InputRefused", "TenantError", "UnknownTenant", "TenantNotPermitted"]


def __getattr__(name):
    # The client needs psycopg; a worker does not: import it only when asked for.
    if name in ("Client", "AsyncClient", "WorkflowFailed", "NotFinished", "NotPublished",
                "InputRefused", "TenantError",
                "UnknownTenant", "TenantNotPermitted"):
        from . import client
        return getattr(client, name)
    raise AttributeError(name)

# SPDX-License-Identifier: MIT
"""The action registry: action names to the functions that serve them, and the default registry
that @cairn.action fills for `python3 -m cairn.worker`."""


class Registry:
    """Action names to functions. cairn.action registers into a default one."""

    def __init__(self):
        self.fns = {}

    def action(self, name):
        if not isinstance(name, str) or "." not in name:
            raise ValueError(f"action names are module-qualified (billing.charge), got {name!r}")

        def register(fn):
            if name in self.fns:
                raise ValueError(f"action {name} is registered twice")
            self.fns[name] = fn
            return fn
        return register


default_registry = Registry()


def action(name):
    """Registers fn as action `name` for workers built without their own registry."""
    return default_registry.action(name)

# SPDX-License-Identifier: MIT
"""The actions of examples/python/welcome.cairn, as ordinary Python functions.

Run them with:  python3 -m cairn.worker --url ipc:///tmp/cairn.sock --module actions
(with worker-protocol/python and this directory on PYTHONPATH, or the package installed)."""
import asyncio

import cairn


@cairn.action("users.fetch")
async def fetch(ids):
    """Looks the users up (here: made up; a real one would query a database)."""
    await asyncio.sleep(0.01)
    return [{"id": i, "email": f"user{i}@example.com", "active": i % 3 != 0} for i in ids]


@cairn.action("mail.send_welcome")
def send_welcome(to):
    """Sends the welcome (here: pretends to). The simulated server resets the first connection
    for addresses with an even user number: the workflow's [ConnectionError -> retry: 3] sends
    those again, and the receipt says how many attempts it took."""
    ctx = cairn.context()
    number = int(to.removeprefix("user").split("@")[0])
    if number % 2 == 0 and ctx.attempt == 1:
        raise ConnectionResetError(f"smtp: connection reset while sending to {to}")
    return {"to": to, "sent": True, "attempts": ctx.attempt}

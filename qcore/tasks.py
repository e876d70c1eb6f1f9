"""Stopping asyncio tasks for certain.

On Python before 3.12, ``asyncio.wait_for`` swallows a cancellation that arrives in
the instant its inner awaitable completes, so a loop around such a call (a listener's
heartbeat, a service's pass) carries on as if never cancelled, and an ``await task``
after one ``cancel()`` waits forever. These helpers cancel again until the task ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_and_wait"]

#: how long to wait for a cancelled task before cancelling it again
#: how long a task given up on and cancelled gets to unwind (roll its transaction back)
#: before its owner closes the pool under it
UNWIND_SECONDS = 5.0
RECANCEL_SECONDS = 1.0


async def cancel_and_wait(tasks: asyncio.Future[Any] | Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` (one or several) and return once every one has ended.

    What they raised is retrieved, not re-raised. A cancellation of the caller still
    propagates.
    """
    pending = {tasks} if isinstance(tasks, asyncio.Future) else set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    # the outcomes are retrieved so that asyncio never logs them as unhandled
    for task in {tasks} if isinstance(tasks, asyncio.Future) else tasks:
        if not task.cancelled():
            task.exception()

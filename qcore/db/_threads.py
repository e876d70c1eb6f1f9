"""Running a blocking driver call in a worker thread without sharing its connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["blocking"]

T = TypeVar("T")


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread.

    Cancelled, it still waits for the thread before re-raising: a sync connection is
    never used by two threads at once.
    """
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the caller gets the cancellation
        raise

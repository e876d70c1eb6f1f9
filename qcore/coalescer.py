"""Calls that arrive together share one statement.

This is the coalescer behind shared fetches and completes (a worker's loops, and
``Boss.fetch`` on unlocked claims).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from qcore.errors import (
    ConnectionLostError,
)

T = TypeVar("T")


R = TypeVar("R")


class _Request(Generic[T, R]):
    __slots__ = ("error", "item", "served", "turn", "value")

    def __init__(self, item: T, turn: asyncio.Future[None]) -> None:
        self.item = item
        self.turn = turn  # resolved when served, or when it is this request's turn to lead
        self.served = False
        self.value: R | None = None
        self.error: BaseException | None = None

    def serve(self, value: R | None, error: BaseException | None = None) -> None:
        self.value, self.error, self.served = value, error, True
        if not self.turn.done():
            self.turn.set_result(None)

    def result(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class Coalescer(Generic[T, R]):
    """At most ``lanes`` statements at a time for many callers.

    A call made while every lane is busy waits, and the calls that waited run together
    as one statement when a lane frees (the first of them runs it: no task of its own).
    A call that finds a lane free runs at once, so coalescing never adds latency; it
    merges only what would have queued anyway. ``lanes`` may be changed between calls.
    """

    def __init__(self, run: Callable[[list[T]], Awaitable[list[R]]], lanes: int = 1) -> None:
        self._run = run
        self.lanes = lanes
        self._waiting: list[_Request[T, R]] = []
        self._busy = 0

    async def __call__(self, item: T) -> R:
        request: _Request[T, R] = _Request(item, asyncio.get_running_loop().create_future())
        if self._busy >= self.lanes:
            self._waiting.append(request)
            try:
                await request.turn
            except BaseException:  # cancelled while waiting: give back a lane handed over
                if request in self._waiting:
                    self._waiting.remove(request)
                elif not request.served:
                    self._pass_lane()
                raise
            if request.served:
                return request.result()
            # a lane was handed over: run the next statement
        else:
            self._busy += 1
        batch = [request, *self._waiting]
        self._waiting = []
        try:
            values = await self._run([r.item for r in batch])
        except Exception as exc:
            for r in batch:
                r.serve(None, exc)
        except BaseException:  # this caller was cancelled: the others learn it as an error
            for r in batch:
                if r is not request:
                    r.serve(
                        None, ConnectionLostError("the statement was cancelled", retryable=True)
                    )
            raise
        else:
            for r, value in zip(batch, values, strict=True):
                r.serve(value)
        finally:
            self._pass_lane()
        return request.result()

    def _pass_lane(self) -> None:
        """A statement ended: the first waiting caller runs the next, else the lane frees."""
        if self._waiting:
            self._waiting.pop(0).turn.set_result(None)
        else:
            self._busy -= 1

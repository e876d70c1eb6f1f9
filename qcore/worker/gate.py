"""Idle loops share one poll: the gate that keeps one poller and wakes one loop at a time."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

_FETCH, _POLL, _DUE = "fetch", "poll", "due"


class Gate:
    """Where a worker's idle loops wait, and which of them fetches when.

    One poller sleeps out the poll interval, then fetches; the rest are parked until a
    wake or until the poller leaves and hands them its role. No I/O here: only who
    fetches when.
    """

    def __init__(self) -> None:
        self._parked: deque[asyncio.Future[str]] = deque()
        self._poller: asyncio.Future[str] | None = None
        self._pending = False  # a wake found every loop busy: the next idle loop fetches
        self._closed = False

    @property
    def polling(self) -> bool:
        """Whether a loop sleeps out the poll interval.

        Or has just seen it run out (and has not fetched since).
        """
        poller = self._poller
        return poller is not None and (not poller.done() or poller.result() == _DUE)

    async def idle(self, delay: Callable[[], Awaitable[float]]) -> bool:
        """Return when this loop should fetch: True when the poll interval ran out.

        False when woken; after ``close()`` it returns at once.
        """
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                return False
            if self._pending:
                self._pending = False
                return False
            turn: asyncio.Future[str] = loop.create_future()
            if self._poller is None:
                self._poller = turn
                timer: asyncio.TimerHandle | None = None
                try:
                    seconds = await delay()
                    if not turn.done():
                        timer = loop.call_later(max(0.0, seconds), _resolve, turn, _DUE)
                    why = await turn
                finally:
                    if timer is not None:
                        timer.cancel()
                    if self._poller is turn:
                        self._poller = None
                    self._promote()
                return why == _DUE
            self._parked.append(turn)
            try:
                why = await turn
            except BaseException:  # cancelled while parked: leave no hole behind
                if not turn.done():
                    self._parked.remove(turn)
                elif not turn.cancelled() and turn.result() == _POLL:
                    self._promote()  # the poller's role was just handed to us: pass it on
                raise
            if why == _FETCH:
                return False
            # _POLL: the poller left; take its role (or park again if another took it)

    def _promote(self) -> None:
        while self._poller is None and self._parked:
            turn = self._parked.popleft()
            if not turn.done():
                turn.set_result(_POLL)
                return

    def wake_one(self, *, remember: bool) -> None:
        """Have one idle loop fetch now: a parked one, else the poller.

        With ``remember``, a wake that finds every loop busy makes the next idle loop
        fetch.
        """
        while self._parked:
            turn = self._parked.popleft()
            if not turn.done():
                turn.set_result(_FETCH)
                return
        if self._poller is not None and not self._poller.done():
            self._poller.set_result(_FETCH)
            return
        if remember:
            self._pending = True

    def close(self) -> None:
        """Release every idle loop (the worker is stopping)."""
        self._closed = True
        while self._parked:
            _resolve(self._parked.popleft(), _FETCH)
        if self._poller is not None:
            _resolve(self._poller, _FETCH)


def _resolve(future: asyncio.Future[str], value: str) -> None:
    if not future.done():
        future.set_result(value)

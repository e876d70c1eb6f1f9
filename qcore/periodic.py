"""What every background service of a ``Boss`` is, and the periodic kind most are.

A :class:`Service` has a name, a ``busy`` flag, ``start()`` and ``stop()``; ``Boss``
keeps the running ones in one list, starts them in order and stops them in the same
order. A :class:`Periodic` service runs one pass every ``interval_seconds``: never two
at once (a tick that finds a pass running is skipped), an error is reported as an
``error`` event and the next tick comes all the same, and ``stop()`` lets the pass in
flight finish (a pass checks :attr:`Periodic.stopping` between its steps) while no
new one starts. A subsystem is one subclass with its :meth:`Periodic.run_pass`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, runtime_checkable

from qcore.events import Events
from qcore.tasks import cancel_and_wait

__all__ = ["Periodic", "Service"]

log = logging.getLogger("qcore")

T = TypeVar("T")


@runtime_checkable
class Service(Protocol):
    """A background concern of a started ``Boss``."""

    name: str

    @property
    def busy(self) -> bool:
        """Whether it is doing its work right now (a pass in flight)."""
        ...

    async def start(self) -> object:
        """Begin; starting a started service does nothing."""
        ...

    async def stop(self) -> None:
        """End, after the work in flight; stopping a stopped service does nothing."""
        ...


class Periodic:
    """One pass every ``interval_seconds``.

    The first one comes an interval after ``start()`` (or at once, ``at_start``).

    ``events`` receives a pass's error as ``error`` (without it, the error is logged).
    ``detached`` runs the loop in a context of its own, so it never joins a
    transaction its starter was in. Explicit passes go through :meth:`exclusive`,
    which shares the background passes' lock; with ``enabled=False`` there are only
    those (``start()`` runs no loop, ``stop()`` still waits for the pass in flight).
    """

    name = "periodic"

    def __init__(
        self,
        events: Events | None,
        interval_seconds: float,
        *,
        detached: bool = False,
        enabled: bool = True,
        at_start: bool = False,
    ) -> None:
        self.events = events
        self.interval_seconds = interval_seconds
        self.enabled = enabled
        self._detached = detached
        self._at_start = at_start
        self._lock = asyncio.Lock()
        self._task: asyncio.Future[None] | None = None
        self._pass: asyncio.Future[bool] | None = None
        self._stopping = False
        self._soon: set[asyncio.Task[None]] = set()  # passes asked for out of turn
        #: how long the last background pass took, in seconds (None before the first)
        self.last_pass_seconds: float | None = None

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called: a pass ends at its next step."""
        return self._stopping

    def next_delay(self) -> float:
        """Seconds until the next background pass.

        ``interval_seconds``, none before the first with ``at_start``; a service whose
        passes are gated across instances may aim at the moment the gate opens.
        """
        if self._at_start:
            self._at_start = False
            return 0.0
        return self.interval_seconds

    async def run_pass(self) -> bool | None:
        """One background pass; return False to end the loop (the work is over)."""
        raise NotImplementedError

    async def start(self) -> None:
        self._stopping = False
        if self._task is None and self.enabled:
            if self._detached:
                self._task = contextvars.Context().run(asyncio.ensure_future, self._loop())
            else:
                self._task = asyncio.ensure_future(self._loop())

    async def exclusive(self, work: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``work()`` now, after the pass in flight and never beside another.

        None, without running it, once :meth:`stop` was called.
        """
        async with self._lock:
            if self._stopping:
                return None
            return await work()

    def soon(self, work: Callable[[], Awaitable[object]] | None = None) -> None:
        """Run ``work()`` (a pass by default) in the background, as :meth:`exclusive` runs it.

        Not beside another pass; a failure is an ``error`` event (or a log line), as a
        background pass's. :meth:`stop` waits for it; once stopping, nothing is asked.
        """
        if self._stopping:
            return
        task = asyncio.ensure_future(self._run_soon(work or self.run_pass))
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def _run_soon(self, work: Callable[[], Awaitable[object]]) -> None:
        try:
            await self.exclusive(work)
        except Exception as exc:  # the next pass does the work again
            if self.events is not None:
                self.events.emit("error", exc)
            else:
                log.exception("the %s pass failed", self.name)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.next_delay())
            if self._lock.locked():
                continue  # an explicit pass is running: this tick has nothing to add
            # shielded: stop() cancels the loop, not a pass halfway; the pass ends at its
            # next step once it sees the stop, and stop() waits for it
            self._pass = asyncio.ensure_future(self._background_pass())
            if not await asyncio.shield(self._pass):
                return

    async def _background_pass(self) -> bool:
        async with self._lock:
            if self._stopping:
                return False
            started = time.monotonic()
            try:
                return await self.run_pass() is not False
            except Exception as exc:  # a database outage, a dropped table: next time
                if self.events is not None:
                    self.events.emit("error", exc)
                else:
                    log.exception("the %s pass failed", self.name)
                return True
            finally:
                self.last_pass_seconds = time.monotonic() - started

    async def stop(self) -> None:
        """Cancel the loop, then wait for the pass in flight (background or explicit).

        Later :meth:`exclusive` calls return without running.
        """
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        running, self._pass = self._pass, None
        if running is not None and not running.done():
            with contextlib.suppress(asyncio.CancelledError):
                await running
        async with self._lock:  # an explicit pass in flight
            pass
        if self._soon:  # asked for out of turn: they see the stop and return
            await asyncio.gather(*self._soon, return_exceptions=True)

"""What a worker reports: its status, and the ``wip`` event that carries them."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcore.events import Events

#: ``wip`` is emitted at most once per this many seconds (the last change is never lost)
WIP_INTERVAL_SECONDS = 2.0


def utc(stamp: float | None) -> dt.datetime | None:
    """A ``time.time()`` stamp as an aware UTC datetime; None stays None."""
    return None if stamp is None else dt.datetime.fromtimestamp(stamp, dt.timezone.utc)


@dataclass(frozen=True)
class WorkerStatus:
    """What a worker is doing, as the ``wip`` event reports it (times are UTC)."""

    id: str
    name: str  # the queue
    state: str  # created, active, stopping, stopped
    local_concurrency: int
    batch_size: int
    polling_interval_seconds: float
    active: int  # jobs in hand
    completed: int  # batches settled as completed, since the worker started
    failed: int  # batches settled as failed (errors, timeouts, shutdown)
    created_on: dt.datetime
    last_fetched_on: dt.datetime | None
    last_job_started_on: dt.datetime | None
    last_job_ended_on: dt.datetime | None
    last_error: str | None
    last_error_on: dt.datetime | None
    #: plain-function handler threads still running batches the worker gave up on
    #: (expired, past the stop deadline, lost); at ``local_concurrency`` of them it
    #: claims nothing until one ends
    orphaned_threads: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def registry_entry(self) -> dict[str, Any]:
        """The worker as pg-boss's instance registry lists it (``instance.workers``).

        CamelCase keys, ISO times, options left at their default left out, no error text.
        """

        def iso(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        names = {
            "include_metadata": "includeMetadata",
            "ignore_start_after": "ignoreStartAfter",
            "min_priority": "minPriority",
            "max_priority": "maxPriority",
            "heartbeat_refresh_seconds": "heartbeatRefreshSeconds",
            "notify_polling_interval_seconds": "notifyPollingIntervalSeconds",
        }
        return {
            "id": self.id,
            "queue": self.name,
            "localConcurrency": self.local_concurrency,
            "batchSize": self.batch_size,
            "pollingIntervalSeconds": self.polling_interval_seconds,
            "active": self.active,
            "lastFetchedOn": iso(self.last_fetched_on),
            "lastJobEndedOn": iso(self.last_job_ended_on),
            "lastErrorOn": iso(self.last_error_on),
            "options": {names[k]: v for k, v in self.options.items() if k in names},
        }


class WipReporter:
    """Emits ``wip`` (the status of every worker of a Boss) when a worker changes.

    At most once per ``interval`` seconds: the first change at once, later ones together
    at the end of the interval, so the last state is always reported.

    A :class:`~qcore.periodic.Service` driven by changes, not by a clock: ``stop()``
    drops a report still waiting for its interval (``flush`` gives the final one)."""

    name = "wip"
    busy = False  # a report is one emit: nothing runs between them

    def __init__(
        self,
        events: Events,
        statuses: Callable[[], list[WorkerStatus]],
        *,
        interval: float | None = None,
    ) -> None:
        self._events = events
        self._statuses = statuses
        self._interval = WIP_INTERVAL_SECONDS if interval is None else interval
        self._last = -math.inf
        self._timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Nothing to begin: reports follow the workers' changes."""

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def changed(self) -> None:
        """A worker changed: report now, or at the end of the current interval."""
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self._last + self._interval - loop.time()
        if wait <= 0:
            self._emit()
        else:
            self._timer = loop.call_later(wait, self._emit)

    def flush(self, statuses: list[WorkerStatus] | None = None) -> None:
        """Report now, at stop.

        ``statuses`` if given (workers no longer listed, in their final state), else the
        current ones; a report waiting for its interval is dropped.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = asyncio.get_running_loop().time()
        self._events.emit("wip", self._statuses() if statuses is None else statuses)

    def _emit(self) -> None:
        self._timer = None
        self._last = asyncio.get_running_loop().time()
        self._events.emit("wip", self._statuses())

"""How a worker runs its handler on a batch, and how the batch ends.

The handler is started (a task, or the loop's thread), watched until it ends, its batch
expires or the stop's deadline passes, and its heartbeat jobs touched meanwhile; what it
returns decides how the batch ends.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable
from typing import Any

from qcore.context import Context
from qcore.errors import OrphanedThreadsError
from qcore.job import Job
from qcore.verbs import jobs as job_ops
from qcore.worker.handlers import Orphans, Slot, consume, inside, refresh_seconds
from qcore.worker.options import WorkOptions
from qcore.worker.settlement import Settlement, outcome_of, timed_out

#: the output of a job failed because the worker stopped while it was held
SHUTDOWN_MESSAGE = "qcore shut down while active"


class HandlerRunner:
    """The part of :class:`~qcore.worker.loops.Worker` that runs handlers (a base of it).

    The worker's state it reads is declared here, its reporting is the worker's.
    """

    id: str
    name: str
    handler: Callable[..., Any]
    options: WorkOptions
    _async: bool
    _deadline: float  # loop time after which held jobs are failed
    _stop_signal: asyncio.Future[None] | None
    _stopping: bool
    _orphans: Orphans

    def _report(self, exc: BaseException) -> None:
        raise NotImplementedError

    def _failed(self, jobs: list[Job], settlement: Settlement) -> None:
        """Tell of the jobs ``settlement`` fails (log lines, ``error`` events)."""
        raise NotImplementedError

    def _start_handler(self, jobs: list[Job], slot: Slot) -> asyncio.Future[Any]:
        if not self._async:
            return slot.submit(self.handler, jobs)
        loop = asyncio.get_running_loop()
        try:
            coro = self.handler(jobs)
            if not inspect.iscoroutine(coro):
                awaited: asyncio.Future[Any] = asyncio.ensure_future(coro)
                return awaited
            wrapped = inside(coro, asyncio.current_task())
            return loop.create_task(wrapped, name=f"qcore-handler-{self.name}")
        except Exception as exc:
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(exc)
            return failed

    async def _run_handler(
        self, ctx: Context, jobs: list[Job], slot: Slot, *, touching: bool = True
    ) -> Settlement:
        """Run the handler, bounded by the batch's expiry and the stop deadline; how the batch ends.

        Heartbeats are touched on the way (unless not ``touching``). A batch claimed as
        the worker stopped, too late to start, fails without running. Failed jobs are
        logged and emitted (:meth:`_failed`) before the batch is settled.
        """
        if asyncio.get_running_loop().time() >= self._deadline:
            settlement = Settlement("fail", SHUTDOWN_MESSAGE)
        else:
            running = self._start_handler(jobs, slot)
            settlement = await self._watch(ctx, jobs, slot, running, touching=touching)
        self._failed(jobs, settlement)
        return settlement

    async def _watch(
        self,
        ctx: Context,
        jobs: list[Job],
        slot: Slot,
        running: asyncio.Future[Any],
        *,
        touching: bool = True,
    ) -> Settlement:
        loop = asyncio.get_running_loop()
        limit = max(j.expire_in_seconds for j in jobs)
        expires = loop.time() + limit
        refresh = (
            refresh_seconds(jobs, self.options.heartbeat_refresh_seconds) if touching else None
        )
        beat = loop.time() + refresh if refresh is not None else math.inf
        beating = [j for j in jobs if j.heartbeat_seconds is not None]
        while not running.done():
            now = loop.time()
            if now >= self._deadline:
                self._abandon(running, jobs, slot)
                return Settlement("fail", SHUTDOWN_MESSAGE)
            if now >= expires:
                self._abandon(running, jobs, slot)
                return timed_out(limit)
            if refresh is not None and now >= beat:
                beating = await self._touch(ctx, beating)
                if all(j.cancelled.is_set() for j in jobs):
                    self._abandon(running, jobs, slot)
                    return Settlement(None)  # every job lost: not ours to settle
                beat = loop.time() + refresh
                continue
            waits: set[asyncio.Future[Any]] = {running}
            if self._stop_signal is not None and not self._stop_signal.done():
                waits.add(self._stop_signal)
            await asyncio.wait(
                waits,
                timeout=min(expires, beat, self._deadline) - now,
                return_when=asyncio.FIRST_COMPLETED,
            )
        return outcome_of(running, jobs, self.options.per_job_results)

    def _abandon(self, running: asyncio.Future[Any], jobs: list[Job], slot: Slot) -> None:
        for job in jobs:
            job.cancelled.set()
        running.cancel()
        running.add_done_callback(consume)
        if not self._async:
            slot.abandon(self._orphans)
            if self._orphans.full and not self._stopping:  # a stop claims nothing anyway
                self._report(
                    OrphanedThreadsError(
                        f"worker {self.id} of queue {self.name!r}: {self._orphans.count}"
                        " handler thread(s) still run batches given up on (the handler does"
                        " not return when job.cancelled is set); it claims nothing until"
                        " one ends"
                    )
                )

    async def _touch(self, ctx: Context, beating: list[Job]) -> list[Job]:
        """Refresh the heartbeats; the jobs still ours.

        A lost one has ``cancelled`` set. A failed touch keeps them all: the next one
        tries again.
        """
        if not beating:
            return beating
        try:
            result = await job_ops.touch(ctx, self.name, beating)
        except Exception as exc:
            self._report(exc)
            return beating
        alive = set(result.ids)
        for job in beating:
            if job.id not in alive:
                job.cancelled.set()
        return [j for j in beating if j.id in alive]

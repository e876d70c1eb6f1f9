"""How a worker's batches end in the database: one :class:`Settler` for both paths.

A fetched batch is settled by its own statements (complete, complete with outputs,
fail), tried again with backoff while the database is unreachable; a locked batch is
settled inside the transaction that claimed it. On both, an output the database
refuses fails the batch with why, and a failure output it refuses is replaced by a
plain message (:data:`UNSTORABLE`): a job is never left to run again for ever.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from qcore.context import Context
from qcore.errors import DatabaseError, QueueNotFoundError, ValidationError
from qcore.job import Job
from qcore.options import normalize_output
from qcore.verbs import jobs as job_ops
from qcore.verbs.jobs import LockedBatch
from qcore.worker.settlement import UNSTORABLE, Settlement, transient

#: settling after a database error: first delay, doubled up to the polling interval
SETTLE_RETRY_SECONDS = 0.05

#: settling while stopping: tries before the batch is left to the monitor
SETTLE_TRIES_WHEN_STOPPING = 3

#: a per-job results batch's outcomes: (job, status, output) for every job
Outcomes = list[tuple[Job, str, Any]]


def by_output(
    items: Iterable[tuple[Job, Any, Any]],
) -> dict[tuple[Any, str], tuple[Any, list[Job]]]:
    """``(job, kind, output)`` grouped by kind and stored output: one statement each."""
    groups: dict[tuple[Any, str], tuple[Any, list[Job]]] = {}
    for job, kind, out in items:
        stored = normalize_output(out)
        key = (kind, json.dumps(stored, sort_keys=True, default=str))
        groups.setdefault(key, (stored, []))[1].append(job)
    return groups


def refused_next(verb: str | None, data: Any, exc: BaseException) -> Any:
    """The failure output to store after the database refused ``verb`` with ``data`` for good.

    ``exc`` is the refusal. An output that cannot be stored fails the batch with why; a
    failure output that cannot be stored becomes a plain message; None when nothing is
    left to try.
    """
    if verb == "each" or (verb == "complete" and data is not None):
        return exc
    if verb == "fail" and data is not UNSTORABLE:
        return UNSTORABLE
    return None


class Settler:
    """Settles one worker's batches and counts how they ended.

    ``completed`` and ``failed`` count batches. ``complete`` runs a plain complete (the
    worker's shared statement); ``report`` emits an error; ``stopping`` says whether the
    worker stops; a fetched batch a stop could not settle is kept in ``unsettled``.
    """

    def __init__(
        self,
        name: str,
        *,
        context: Callable[[], Context],
        complete: Callable[[tuple[Context, list[Job]]], Awaitable[None]],
        report: Callable[[BaseException], None],
        stopping: Callable[[], bool],
        max_delay: float,
    ) -> None:
        self.name = name
        self._context = context
        self._complete = complete
        self._report = report
        self._stopping = stopping
        self._max_delay = max_delay
        self.completed = 0
        self.failed = 0
        self.unsettled: dict[uuid.UUID, Job] = {}  # held jobs a stop could not settle

    # -- fetched batches -----------------------------------------------------------------

    async def settle(self, ctx: Context, jobs: list[Job], settlement: Settlement) -> None:
        """Complete or fail a fetched batch, trying again through transient errors.

        A transient database error (connection lost, serialization) is reported and the
        call tried again with backoff — it is fenced, so idempotent — until it lands,
        the batch's expiry has passed again (the monitor fails it by then), or, when
        stopping, after a few tries (the batch is then counted in :attr:`unsettled`). An
        output the database refuses fails the batch with why; a failure output it
        refuses is replaced by a plain message.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(j.expire_in_seconds for j in jobs)
        delay = SETTLE_RETRY_SECONDS
        tries = 0
        verb, data = settlement.verb, settlement.data
        while True:
            tries += 1
            try:
                await self._settle_once(ctx, jobs, verb, data)
                return
            except Exception as exc:
                if not transient(exc) and not isinstance(exc, QueueNotFoundError):
                    instead = refused_next(verb, data, exc)
                    if instead is not None:
                        if verb == "fail":
                            self._report(exc)
                        verb, data = "fail", instead
                        continue
                self._report(exc)
                if not transient(exc) or loop.time() >= give_up:
                    return
                if self._stopping() and tries >= SETTLE_TRIES_WHEN_STOPPING:
                    self.unsettled.update((job.id, job) for job in jobs)
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_delay)
            try:
                ctx = self._context()
            except Exception as exc:
                self._report(exc)
                return

    async def _settle_once(
        self, ctx: Context, jobs: list[Job], verb: str | None, data: Any
    ) -> None:
        """One try of :meth:`settle`: the statement of ``verb`` with ``data``."""
        if verb == "complete" and data is None:
            await self._complete((ctx, jobs))
            self.completed += 1
        elif verb == "complete":
            await job_ops.complete(ctx, self.name, jobs, data)
            self.completed += 1
        elif verb == "each":
            await self._settle_each(ctx, data)
        else:
            await job_ops.fail(ctx, self.name, jobs, data)
            self.failed += 1

    async def _settle_each(self, ctx: Context, outcomes: Outcomes) -> None:
        """Settle a per-job results batch in as few statements as its outcomes allow.

        The completed jobs go in one statement (two when some have an output), the
        failed ones in one statement per distinct output (jobs the handler left out
        share one). Every call is fenced on the attempts, so trying the whole again
        after an error settles only what is left.
        """
        completed = [(job, out) for job, status, out in outcomes if status == "completed"]
        plain = [job for job, out in completed if out is None]
        if plain:
            await job_ops.complete(ctx, self.name, plain)
        if len(plain) < len(completed):
            outputs = [(job, out) for job, out in completed if out is not None]
            await job_ops.complete_each(ctx, self.name, outputs)
        failures = by_output(
            (job, status == "dead_letter", out)
            for job, status, out in outcomes
            if status != "completed"
        )
        for (terminal, _), (stored, failed) in failures.items():
            await job_ops.fail(ctx, self.name, failed, stored, terminal=terminal)
        self.completed += bool(completed)
        self.failed += bool(failures)

    # -- locked batches ------------------------------------------------------------------

    async def settle_locked(self, batch: LockedBatch, settlement: Settlement) -> None:
        """Settle a locked batch in its transaction, as :meth:`settle` settles a fetched one.

        An output that cannot be stored fails the batch with why.
        """
        verb, data = settlement.verb, settlement.data
        try:
            if verb == "complete":
                await batch.complete(data=data)
            elif verb == "each":
                await self._settle_each_locked(batch, data)
        except ValidationError as exc:  # checked before anything was written
            verb, data = "fail", exc
        if verb == "fail":
            await batch.fail(batch.unsettled, data)
            self.failed += 1
        elif verb is not None:
            self.completed += 1

    async def _settle_each_locked(self, batch: LockedBatch, outcomes: Outcomes) -> None:
        """A per-job results batch, locked: one statement per distinct (status, output)."""
        for (status, _), (stored, jobs) in by_output(outcomes).items():
            if status == "completed":
                await batch.complete(jobs, stored)
            else:
                await batch.fail(jobs, stored, terminal=status == "dead_letter")

    async def fail_refused(self, ctx: Context, jobs: list[Job], exc: DatabaseError) -> None:
        """Fail a locked batch whose ending the database refused, so it does not run for ever.

        The database refused how the batch ended (an output it cannot store), and the
        rollback gave the jobs back uncounted: left so, they would run again and be
        refused again for ever, holding up the queue. Fail them now as :meth:`settle`
        fails a fetched batch whose output is refused: with why, else a plain message;
        the attempt counts, so they retry, fail and dead-letter as the queue says.
        """
        self._report(exc)
        data: Any = exc
        while True:
            try:
                await job_ops.fail_released(ctx, self.name, jobs, data)
            except Exception as again:
                self._report(again)
                if transient(again):
                    return  # the jobs are queued: they run again, no attempt counted
                data = refused_next("fail", data, again)
                if data is None:
                    return
                continue
            self.failed += 1
            return

"""The queue and job verbs of ``Boss``, but the claim.

Each checks its arguments (:func:`qcore.arguments.verb`) and forwards to
:mod:`qcore.verbs.queues` or :mod:`qcore.verbs.jobs` with the context of the call (with
``db=``, the caller's own transaction).
"""

from __future__ import annotations

import datetime as dt
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

from typing_extensions import Unpack

from qcore.arguments import verb
from qcore.backend import FetchStrategy
from qcore.boss.verbs.parts import BossParts
from qcore.context import Context
from qcore.job import CommandResult, EditResult, Job, JobState, Queue, RedrivePreview
from qcore.options import (
    EditOptions,
    FetchOptions,
    QueueOptions,
    ScheduledSendOptions,
    SendOptions,
    check_batch_size,
    ids_and_fences,
    queue_name,
)
from qcore.verbs import jobs as job_ops
from qcore.verbs import pubsub
from qcore.verbs import queues as queue_ops
from qcore.verbs.jobs import Ids, LockedBatch, RedriveFilter

__all__ = ["QueueAndJobVerbs"]


def _own(ctx: Context, db: Any) -> bool:
    """Whether a call runs on the Boss's own pool, outside any transaction.

    Such a call may share a statement with other calls.
    """
    return db is None and not ctx.db.in_transaction


class QueueAndJobVerbs:
    """The verbs on queues and jobs (a part of ``Boss``)."""

    # -- queues ----------------------------------------------------------------------------

    @verb(QueueOptions)
    async def create_queue(
        self: BossParts, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Create a queue (a no-op if it exists; its options are not changed then)."""
        await queue_ops.create_queue(self.context(db), name, **options)

    @verb(QueueOptions)
    async def update_queue(
        self: BossParts, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Change the given options of a queue; policy and partition cannot change."""
        await queue_ops.update_queue(self.context(db), name, **options)

    @verb()
    async def delete_queue(self: BossParts, name: str, *, db: Any = None) -> None:
        """Delete a queue and its jobs (a no-op for an unknown queue)."""
        await queue_ops.delete_queue(self.context(db), name)

    @verb()
    async def get_queue(
        self: BossParts, name: str, *, live: bool = False, db: Any = None
    ) -> Queue | None:
        """A queue's settings and cached counts (``live``: counted now), or None."""
        return await queue_ops.get_queue(self.context(db), name, live=live)

    @verb()
    async def get_queues(
        self: BossParts,
        names: list[str] | None = None,
        *,
        live: bool = False,
        limit: int | None = None,
        after: str | None = None,
        db: Any = None,
    ) -> list[Queue]:
        """Every queue (or those named), ordered by name (``live``: counted now).

        A page: at most ``limit`` (1 to 100,000), named after ``after`` (the previous
        page's last name).
        """
        return await queue_ops.get_queues(
            self.context(db), names, live=live, limit=limit, after=after
        )

    @verb()
    async def delete_queued_jobs(self: BossParts, name: str, *, db: Any = None) -> int:
        """Delete a queue's created and retry jobs; how many."""
        return await queue_ops.delete_queued_jobs(self.context(db), name)

    @verb()
    async def delete_stored_jobs(self: BossParts, name: str, *, db: Any = None) -> int:
        """Delete a queue's completed, cancelled and failed jobs; how many."""
        return await queue_ops.delete_stored_jobs(self.context(db), name)

    @verb()
    async def delete_all_jobs(
        self: BossParts, name: str | None = None, *, db: Any = None
    ) -> int | None:
        """Delete every job of a queue (of every queue without a name)."""
        return await queue_ops.delete_all_jobs(self.context(db), name)

    @verb()
    async def get_blocked_keys(
        self: BossParts,
        name: str,
        *,
        limit: int | None = None,
        after: str | None = None,
        db: Any = None,
    ) -> list[str]:
        """The singleton keys of a key_strict_fifo queue held back by a failed job, in order.

        A page: at most ``limit`` (1 to 100,000), the keys after ``after``.
        """
        return await queue_ops.get_blocked_keys(self.context(db), name, limit=limit, after=after)

    # -- jobs ------------------------------------------------------------------------------

    @verb(SendOptions)
    async def send(
        self: BossParts,
        name: str,
        data: Any = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> uuid.UUID | None:
        """Queue a job: its id, or None when the queue's policy dropped it."""
        return await job_ops.send(self.context(db), name, data, **options)

    @verb(ScheduledSendOptions)
    async def send_after(
        self: BossParts,
        name: str,
        data: Any,
        start_after: dt.datetime | dt.timedelta | float | str,
        *,
        db: Any = None,
        **options: Unpack[ScheduledSendOptions],
    ) -> uuid.UUID | None:
        """Queue a job that becomes ready at ``start_after``."""
        return await job_ops.send(self.context(db), name, data, start_after=start_after, **options)

    @verb(SendOptions)
    async def send_throttled(
        self: BossParts,
        name: str,
        data: Any,
        seconds: int,
        key: str | None = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> uuid.UUID | None:
        """Queue a job unless one for ``key`` was sent in the current ``seconds`` slot."""
        return await job_ops.send_throttled(
            self.context(db), name, data, seconds=seconds, key=key, **options
        )

    @verb(SendOptions)
    async def send_debounced(
        self: BossParts,
        name: str,
        data: Any,
        seconds: int,
        key: str | None = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> uuid.UUID | None:
        """As ``send_throttled``, but a job whose slot is taken goes into the next one."""
        return await job_ops.send_debounced(
            self.context(db), name, data, seconds=seconds, key=key, **options
        )

    # -- editing and moving jobs -----------------------------------------------------------

    @verb(EditOptions)
    async def update(
        self: BossParts,
        name: str,
        data: Any = job_ops.KEEP,
        *,
        id: uuid.UUID | str | None = None,
        singleton_key: str | None = None,
        match: str | None = None,
        db: Any = None,
        **options: Unpack[EditOptions],
    ) -> EditResult:
        """Change queued jobs in place, by ``id`` or by ``singleton_key``.

        ``match`` is ``newest``, ``oldest`` or ``all``; only what is given changes.
        """
        return await job_ops.update(
            self.context(db), name, data, id=id, singleton_key=singleton_key, match=match, **options
        )

    @verb(EditOptions)
    async def upsert(
        self: BossParts,
        name: str,
        data: Any = None,
        *,
        id: uuid.UUID | str | None = None,
        singleton_key: str | None = None,
        match: str | None = None,
        db: Any = None,
        **options: Unpack[EditOptions],
    ) -> EditResult:
        """``update`` the job(s) addressed, else send one with that id or key.

        All in one transaction; concurrent upserts of a key agree on one job.
        """
        return await job_ops.upsert(
            self.context(db), name, data, id=id, singleton_key=singleton_key, match=match, **options
        )

    @verb(RedriveFilter)
    async def redrive(
        self: BossParts, name: str, *, db: Any = None, **filters: Unpack[RedriveFilter]
    ) -> int:
        """Send queued jobs of dead letter queue ``name`` back to where they came from.

        Or to ``destination``; up to ``limit``, oldest first, narrowed by ``source_name``,
        ``data``, ``created_before`` and ``ids``. Returns how many moved.
        """
        return await job_ops.redrive(self.context(db), name, **filters)

    @verb(RedriveFilter)
    async def preview_redrive(
        self: BossParts, name: str, *, db: Any = None, **filters: Unpack[RedriveFilter]
    ) -> RedrivePreview:
        """What ``redrive`` with the same filters would move, and where, moving nothing.

        ``total`` read, ``destinations`` (queue, count) most first, ``unroutable``; up to
        ``limit`` of each kind (a count that reaches it means at least that many).
        """
        return await job_ops.preview_redrive(self.context(db), name, **filters)

    # -- publish / subscribe ---------------------------------------------------------------

    @verb()
    async def subscribe(self: BossParts, event: str, name: str, *, db: Any = None) -> None:
        """Subscribe queue ``name`` to ``event``: each ``publish(event)`` sends it a job."""
        await pubsub.subscribe(self.context(db), event, name)

    @verb()
    async def unsubscribe(self: BossParts, event: str, name: str, *, db: Any = None) -> bool:
        """End queue ``name``'s subscription to ``event``; whether it had one."""
        return await pubsub.unsubscribe(self.context(db), event, name)

    @verb(SendOptions)
    async def publish(
        self: BossParts,
        event: str,
        data: Any = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> dict[str, uuid.UUID | None]:
        """Send a job to every queue subscribed to ``event``.

        Returns the job id per queue (None where its policy dropped the job). One
        queue's failure does not stop the others: a ``PublishError`` then names the
        queues that failed and holds what was sent.
        """
        return await pubsub.publish(self.context(db), event, data, **options)

    @verb()
    async def insert(
        self: BossParts,
        name: str,
        jobs: list[dict[str, Any]],
        *,
        return_id: bool = True,
        db: Any = None,
    ) -> list[uuid.UUID] | None:
        """Queue a batch of jobs in one statement (each a dict of ``data`` and send options)."""
        return await job_ops.insert(self.context(db), name, jobs, return_id=return_id)

    @verb(FetchOptions)
    async def fetch(
        self: BossParts, name: str, *, db: Any = None, **options: Unpack[FetchOptions]
    ) -> list[Job]:
        """Claim up to ``batch_size`` ready jobs; they are active until settled.

        Where claims are unlocked (atomic-update fetch), concurrent calls of this
        instance for one queue and the same options share one statement instead of
        racing each other for the same rows (not in a transaction).
        """
        ctx = self.context(db)
        if _own(ctx, db) and ctx.backend.fetch is FetchStrategy.ATOMIC_UPDATE:
            size = check_batch_size(options.pop("batch_size", 1))
            return await self._shared.fetch(ctx, name, size, dict(options))
        return await job_ops.fetch(ctx, name, **options)

    @verb()
    async def complete(
        self: BossParts,
        name: str,
        ids: Ids,
        data: Any = None,
        *,
        include_queued: bool = False,
        db: Any = None,
    ) -> CommandResult:
        """Complete active jobs (``include_queued``: queued ones too), storing ``data``.

        Concurrent calls of this instance on one queue with no ``data`` share one
        statement while another is in flight (not in a transaction)."""
        ctx = self.context(db)
        if data is None and _own(ctx, db):
            queue_name(name)
            targets = ids_and_fences(ids)
            return await self._shared.complete(ctx, name, targets, include_queued)
        return await job_ops.complete(ctx, name, ids, data, include_queued=include_queued)

    @verb(FetchOptions)
    async def complete_and_fetch(
        self: BossParts,
        name: str,
        done: list[Job],
        *,
        db: Any = None,
        **options: Unpack[FetchOptions],
    ) -> list[Job]:
        """Complete the jobs ``done`` and claim the next, in one round trip and one commit.

        The jobs complete with no output, fenced on the attempts they were fetched in, and
        the claim is ``fetch``'s: a fetch loop's settle and next claim. Both happen or
        neither. One statement where the backend takes two mutations of a table in one
        (MutationStrategy.CTE), else two in one transaction, pipelined where the adapter
        can (psycopg); with an ``execute_sql`` object on such a backend a ConfigError says
        to complete, then fetch.
        """
        return await job_ops.complete_and_fetch(self.context(db), name, done, **options)

    def locked_fetch(
        self: BossParts, name: str, *, db: Any = None, **options: Unpack[FetchOptions]
    ) -> AbstractAsyncContextManager[LockedBatch]:
        """Claim jobs in a transaction held for a block, and settle them in it.

        ``async with boss.locked_fetch(name, batch_size=...) as batch:`` costs one write per
        job instead of two (``fetch``'s options and order). Jobs left unsettled complete on
        a normal exit, fail with the exception otherwise; a block that dies with its
        connection gives them back, no attempt counted. While held they read as queued. Not
        on singleton/stately queues nor with ``group_concurrency`` (a ValidationError /
        ConfigError); needs a SKIP LOCKED backend and a pooled adapter (ConfigError). See
        the guide's "Locked claims".
        """
        return job_ops.locked_fetch(self.context(db), name, **options)

    @verb()
    async def fail(
        self: BossParts, name: str, ids: Ids, data: Any = None, *, db: Any = None
    ) -> CommandResult:
        """Fail jobs: retry them while retries are left, else failed and dead-lettered."""
        return await job_ops.fail(self.context(db), name, ids, data)

    @verb()
    async def cancel(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Cancel jobs that have not finished."""
        return await job_ops.cancel(self.context(db), name, ids)

    @verb()
    async def restore(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Hand active jobs back unstarted (the next claim spends no attempt)."""
        return await job_ops.restore(self.context(db), name, ids)

    @verb()
    async def resume(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Bring cancelled jobs back to created."""
        return await job_ops.resume(self.context(db), name, ids)

    @verb()
    async def retry(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Retry failed jobs (one more attempt each)."""
        return await job_ops.retry(self.context(db), name, ids)

    @verb()
    async def delete_job(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Delete jobs whatever their state."""
        return await job_ops.delete_job(self.context(db), name, ids)

    @verb()
    async def touch(self: BossParts, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Refresh the heartbeat of active jobs."""
        return await job_ops.touch(self.context(db), name, ids)

    @verb()
    async def get_job_by_id(
        self: BossParts, name: str, id: uuid.UUID | str, *, db: Any = None
    ) -> Job | None:
        """One job of a queue by id, or None."""
        return await job_ops.get_job_by_id(self.context(db), name, id)

    @verb()
    async def find_jobs(
        self: BossParts,
        name: str,
        *,
        id: uuid.UUID | str | None = None,
        key: str | None = None,
        data: Any = None,
        queued: bool = False,
        states: list[JobState | str] | None = None,
        limit: int | None = None,
        after: uuid.UUID | str | None = None,
        db: Any = None,
    ) -> list[Job]:
        """Find a queue's jobs by id, singleton key or data containment, oldest first.

        ``queued``: waiting only; ``states``: in one of them; at most ``limit`` (1 to
        100,000); ``after`` (the previous page's last job id): the next page, refused
        once that job is deleted.
        """
        return await job_ops.find_jobs(
            self.context(db),
            name,
            id=id,
            key=key,
            data=data,
            queued=queued,
            states=states,
            limit=limit,
            after=after,
        )

    @verb()
    async def browse_jobs(
        self: BossParts,
        name: str,
        *,
        states: list[JobState | str] | None = None,
        key: str | None = None,
        data: Any = None,
        before: tuple[dt.datetime, uuid.UUID | str] | None = None,
        limit: int = 50,
        db: Any = None,
    ) -> list[Job]:
        """A page of a queue's jobs, newest first.

        ``states``: only those; ``key``: with that singleton key; ``data``: whose data
        contains this JSON value. The next page is ``before=(job.created_on, job.id)`` of
        this page's last job. At most ``limit`` (1 to 1,000); a deep page costs what the
        first does (keyset, not offset).
        """
        return await job_ops.browse_jobs(
            self.context(db),
            name,
            states=states,
            key=key,
            data=data,
            before=before,
            limit=limit,
        )

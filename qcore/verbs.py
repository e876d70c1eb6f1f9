"""The queue and job verbs of ``Boss``, but the claim: each checks its arguments
(:func:`qcore.arguments.verb`) and forwards to :mod:`qcore.queues` or :mod:`qcore.jobs`
with the context of the call (with ``db=``, the caller's own transaction).

``Boss`` inherits them and gives :meth:`QueueAndJobVerbs.context`; ``fetch``, which
keeps per-instance state (shared claims), is ``Boss``'s own.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from typing_extensions import Unpack

from qcore import jobs as job_ops
from qcore import queues as queue_ops
from qcore.arguments import verb
from qcore.context import Context
from qcore.job import CommandResult, Job, Queue
from qcore.jobs import Ids
from qcore.options import QueueOptions, ScheduledSendOptions, SendOptions

__all__ = ["QueueAndJobVerbs"]


class QueueAndJobVerbs:
    """The verbs on queues and jobs (a part of ``Boss``)."""

    def context(self, db: Any = None) -> Context:
        """The operation context; with ``db``, bound to the caller's connection or
        transaction (``Boss`` gives it)."""
        raise NotImplementedError

    # -- queues ----------------------------------------------------------------------------

    @verb(QueueOptions)
    async def create_queue(
        self, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Create a queue (a no-op if it exists; its options are not changed then)."""
        await queue_ops.create_queue(self.context(db), name, **options)

    @verb(QueueOptions)
    async def update_queue(
        self, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Change the given options of a queue; policy and partition cannot change."""
        await queue_ops.update_queue(self.context(db), name, **options)

    @verb()
    async def delete_queue(self, name: str, *, db: Any = None) -> None:
        """Delete a queue and its jobs (a no-op for an unknown queue)."""
        await queue_ops.delete_queue(self.context(db), name)

    @verb()
    async def get_queue(self, name: str, *, db: Any = None) -> Queue | None:
        """A queue's settings and cached counts, or None."""
        return await queue_ops.get_queue(self.context(db), name)

    @verb()
    async def get_queues(self, names: list[str] | None = None, *, db: Any = None) -> list[Queue]:
        """Every queue (or those named), ordered by name."""
        return await queue_ops.get_queues(self.context(db), names)

    @verb()
    async def delete_queued_jobs(self, name: str, *, db: Any = None) -> int:
        """Delete a queue's created and retry jobs; how many."""
        return await queue_ops.delete_queued_jobs(self.context(db), name)

    @verb()
    async def delete_stored_jobs(self, name: str, *, db: Any = None) -> int:
        """Delete a queue's completed, cancelled and failed jobs; how many."""
        return await queue_ops.delete_stored_jobs(self.context(db), name)

    @verb()
    async def delete_all_jobs(self, name: str | None = None, *, db: Any = None) -> int | None:
        """Delete every job of a queue (of every queue without a name)."""
        return await queue_ops.delete_all_jobs(self.context(db), name)

    @verb()
    async def get_blocked_keys(self, name: str, *, db: Any = None) -> list[str]:
        """The singleton keys of a key_strict_fifo queue held back by a failed job."""
        return await queue_ops.get_blocked_keys(self.context(db), name)

    # -- jobs ------------------------------------------------------------------------------

    @verb(SendOptions)
    async def send(
        self, name: str, data: Any = None, *, db: Any = None, **options: Unpack[SendOptions]
    ) -> uuid.UUID | None:
        """Queue a job: its id, or None when the queue's policy dropped it."""
        return await job_ops.send(self.context(db), name, data, **options)

    @verb(ScheduledSendOptions)
    async def send_after(
        self,
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
        self,
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
        self,
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

    @verb()
    async def insert(
        self, name: str, jobs: list[dict[str, Any]], *, return_id: bool = True, db: Any = None
    ) -> list[uuid.UUID] | None:
        """Queue a batch of jobs in one statement (each a dict of ``data`` and send options)."""
        return await job_ops.insert(self.context(db), name, jobs, return_id=return_id)

    @verb()
    async def complete(
        self,
        name: str,
        ids: Ids,
        data: Any = None,
        *,
        include_queued: bool = False,
        db: Any = None,
    ) -> CommandResult:
        """Complete active jobs (``include_queued``: queued ones too), storing ``data``."""
        return await job_ops.complete(
            self.context(db), name, ids, data, include_queued=include_queued
        )

    @verb()
    async def fail(self, name: str, ids: Ids, data: Any = None, *, db: Any = None) -> CommandResult:
        """Fail jobs: retry them while retries are left, else failed and dead-lettered."""
        return await job_ops.fail(self.context(db), name, ids, data)

    @verb()
    async def cancel(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Cancel jobs that have not finished."""
        return await job_ops.cancel(self.context(db), name, ids)

    @verb()
    async def resume(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Bring cancelled jobs back to created."""
        return await job_ops.resume(self.context(db), name, ids)

    @verb()
    async def retry(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Retry failed jobs (one more attempt each)."""
        return await job_ops.retry(self.context(db), name, ids)

    @verb()
    async def delete_job(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Delete jobs whatever their state."""
        return await job_ops.delete_job(self.context(db), name, ids)

    @verb()
    async def touch(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Refresh the heartbeat of active jobs."""
        return await job_ops.touch(self.context(db), name, ids)

    @verb()
    async def get_job_by_id(self, name: str, id: uuid.UUID | str, *, db: Any = None) -> Job | None:
        """One job of a queue by id, or None."""
        return await job_ops.get_job_by_id(self.context(db), name, id)

    @verb()
    async def find_jobs(
        self,
        name: str,
        *,
        id: uuid.UUID | str | None = None,
        key: str | None = None,
        data: Any = None,
        queued: bool = False,
        db: Any = None,
    ) -> list[Job]:
        """Jobs of a queue by id, singleton key or data containment (``queued``: waiting only)."""
        return await job_ops.find_jobs(
            self.context(db), name, id=id, key=key, data=data, queued=queued
        )

"""The queue and job verbs of ``Boss``, but the claim: each checks its arguments
(:func:`qcore.arguments.verb`) and forwards to :mod:`qcore.verbs.queues` or :mod:`qcore.verbs.jobs`
with the context of the call (with ``db=``, the caller's own transaction).

``Boss`` inherits them and gives :meth:`QueueAndJobVerbs.context`; ``fetch``, which
keeps per-instance state (shared claims), is ``Boss``'s own. :class:`MaintenanceVerbs`
are the supervise pass's: ``supervise``, ``get_queue_stats``, ``get_reindex_commands``,
``is_maintaining``. :class:`ScheduleVerbs` are cron's: ``schedule``, ``unschedule``,
``get_schedules``, ``is_timekeeping``, ``is_checking_skew``; :class:`FlowVerbs` the
flows': ``flow``, ``get_dependencies``, ``get_dependents``, ``resolve_flow``,
``is_resolving_flow``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from typing_extensions import Unpack

from qcore.arguments import verb
from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.events import Events
from qcore.job import CommandResult, EditResult, InstancePage, Job, JobState, Queue
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
from qcore.services.bam import BamWorker
from qcore.services.flows import FlowResolver
from qcore.services.maintenance import Maintenance
from qcore.services.monitor import Supervisor
from qcore.services.timekeeper import ClockSkew, Timekeeper
from qcore.verbs import bam as bam_ops
from qcore.verbs import flows as flow_ops
from qcore.verbs import instances as instance_ops
from qcore.verbs import jobs as job_ops
from qcore.verbs import pubsub, stats
from qcore.verbs import queues as queue_ops
from qcore.verbs import schedules as schedule_ops
from qcore.verbs.bam import BamEntry, BamStatus
from qcore.verbs.drift import DriftReport, detect_schema_drift
from qcore.verbs.jobs import Ids, LockedBatch
from qcore.verbs.jobs.shared import SharedStatements
from qcore.verbs.queues import missing_queue
from qcore.verbs.reindex import Reindex, reindex_commands
from qcore.verbs.reindex import thresholds as reindex_thresholds
from qcore.verbs.stats import QueueStats
from qcore.verbs.warnings import StoredWarning, read_warnings

__all__ = ["FlowVerbs", "MaintenanceVerbs", "QueueAndJobVerbs", "ScheduleVerbs"]


def _own(ctx: Context, db: Any) -> bool:
    """Whether a call runs on the Boss's own pool, outside any transaction (so it may
    share a statement with other calls)."""
    return db is None and not ctx.db.in_transaction


class QueueAndJobVerbs:
    """The verbs on queues and jobs (a part of ``Boss``)."""

    #: the statements concurrent calls share (``Boss`` gives it)
    _shared: SharedStatements

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

    # -- editing and moving jobs -----------------------------------------------------------

    @verb(EditOptions)
    async def update(
        self,
        name: str,
        data: Any = job_ops.KEEP,
        *,
        id: uuid.UUID | str | None = None,
        singleton_key: str | None = None,
        match: str | None = None,
        db: Any = None,
        **options: Unpack[EditOptions],
    ) -> EditResult:
        """Change queued jobs in place, by ``id`` or by ``singleton_key`` (``match``:
        ``newest``, ``oldest`` or ``all``); only what is given changes."""
        return await job_ops.update(
            self.context(db), name, data, id=id, singleton_key=singleton_key, match=match, **options
        )

    @verb(EditOptions)
    async def upsert(
        self,
        name: str,
        data: Any = None,
        *,
        id: uuid.UUID | str | None = None,
        singleton_key: str | None = None,
        match: str | None = None,
        db: Any = None,
        **options: Unpack[EditOptions],
    ) -> EditResult:
        """``update`` the job(s) addressed, else send one with that id or key (one
        transaction; concurrent upserts of a key agree on one job)."""
        return await job_ops.upsert(
            self.context(db), name, data, id=id, singleton_key=singleton_key, match=match, **options
        )

    @verb()
    async def redrive(
        self,
        name: str,
        *,
        destination: str | None = None,
        source_name: str | None = None,
        data: Mapping[str, Any] | None = None,
        created_before: dt.datetime | None = None,
        ids: Ids | None = None,
        limit: int = 1000,
        db: Any = None,
    ) -> int:
        """Send queued jobs of dead letter queue ``name`` back to where they came from
        (or to ``destination``), up to ``limit``, oldest first; how many moved."""
        return await job_ops.redrive(
            self.context(db),
            name,
            destination=destination,
            source_name=source_name,
            data=data,
            created_before=created_before,
            ids=ids,
            limit=limit,
        )

    # -- publish / subscribe ---------------------------------------------------------------

    @verb()
    async def subscribe(self, event: str, name: str, *, db: Any = None) -> None:
        """Subscribe queue ``name`` to ``event``: each ``publish(event)`` sends it a job."""
        await pubsub.subscribe(self.context(db), event, name)

    @verb()
    async def unsubscribe(self, event: str, name: str, *, db: Any = None) -> bool:
        """End queue ``name``'s subscription to ``event``; whether it had one."""
        return await pubsub.unsubscribe(self.context(db), event, name)

    @verb(SendOptions)
    async def publish(
        self, event: str, data: Any = None, *, db: Any = None, **options: Unpack[SendOptions]
    ) -> dict[str, uuid.UUID | None]:
        """Send a job to every queue subscribed to ``event``: the job id per queue (None
        where its policy dropped the job). One queue's failure does not stop the others:
        a ``PublishError`` then names the queues that failed and holds what was sent."""
        return await pubsub.publish(self.context(db), event, data, **options)

    @verb()
    async def insert(
        self, name: str, jobs: list[dict[str, Any]], *, return_id: bool = True, db: Any = None
    ) -> list[uuid.UUID] | None:
        """Queue a batch of jobs in one statement (each a dict of ``data`` and send options)."""
        return await job_ops.insert(self.context(db), name, jobs, return_id=return_id)

    @verb(FetchOptions)
    async def fetch(
        self, name: str, *, db: Any = None, **options: Unpack[FetchOptions]
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
        self,
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
        self, name: str, done: list[Job], *, db: Any = None, **options: Unpack[FetchOptions]
    ) -> list[Job]:
        """Complete the jobs ``done`` (no output; fenced on the attempts they were fetched
        in) and claim the next, as ``fetch`` does: a fetch loop's settle and next claim
        in one round trip and one commit. Both happen or neither. One statement where
        the backend takes two mutations of a table in one (MutationStrategy.CTE), else
        two in one transaction, pipelined where the adapter can (psycopg); with an
        ``execute_sql`` object on such a backend a ConfigError says to complete, then
        fetch."""
        return await job_ops.complete_and_fetch(self.context(db), name, done, **options)

    def locked_fetch(
        self, name: str, *, db: Any = None, **options: Unpack[FetchOptions]
    ) -> AbstractAsyncContextManager[LockedBatch]:
        """``async with boss.locked_fetch(name, batch_size=...) as batch:`` claims jobs in a
        transaction held for the block and settles them in it, one write per job
        instead of two (``fetch``'s options and order). Jobs left unsettled complete on
        a normal exit, fail with the exception otherwise; a block that dies with its
        connection gives them back, no attempt counted. While held they read as queued.
        Not on singleton/stately queues nor with ``group_concurrency`` (a
        ValidationError / ConfigError); needs a SKIP LOCKED backend and a pooled
        adapter (ConfigError). See the guide's "Locked claims"."""
        return job_ops.locked_fetch(self.context(db), name, **options)

    @verb()
    async def fail(self, name: str, ids: Ids, data: Any = None, *, db: Any = None) -> CommandResult:
        """Fail jobs: retry them while retries are left, else failed and dead-lettered."""
        return await job_ops.fail(self.context(db), name, ids, data)

    @verb()
    async def cancel(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Cancel jobs that have not finished."""
        return await job_ops.cancel(self.context(db), name, ids)

    @verb()
    async def restore(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Hand active jobs back unstarted (the next claim spends no attempt)."""
        return await job_ops.restore(self.context(db), name, ids)

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
        states: list[JobState | str] | None = None,
        limit: int | None = None,
        db: Any = None,
    ) -> list[Job]:
        """Jobs of a queue by id, singleton key or data containment (``queued``: waiting
        only; ``states``: in one of them), oldest first, at most ``limit`` (1 to 100,000)."""
        return await job_ops.find_jobs(
            self.context(db),
            name,
            id=id,
            key=key,
            data=data,
            queued=queued,
            states=states,
            limit=limit,
        )

    @verb()
    async def browse_jobs(
        self,
        name: str,
        *,
        states: list[JobState | str] | None = None,
        key: str | None = None,
        data: Any = None,
        before: tuple[dt.datetime, uuid.UUID | str] | None = None,
        limit: int = 50,
        db: Any = None,
    ) -> list[Job]:
        """A page of a queue's jobs, newest first (``states``: only those; ``key``: with
        that singleton key; ``data``: whose data contains this JSON value); the next page
        is ``before=(job.created_on, job.id)`` of this page's last job. At most ``limit``
        (1 to 1,000); a deep page costs what the first does (keyset, not offset)."""
        return await job_ops.browse_jobs(
            self.context(db),
            name,
            states=states,
            key=key,
            data=data,
            before=before,
            limit=limit,
        )


class MaintenanceVerbs:
    """The verbs of the supervise pass (a part of ``Boss``): run one now, the counts it
    caches and their history, the index rebuild statements, and whether a pass runs."""

    #: the supervise pass's settings (``Boss`` sets them from its options)
    maintenance: Maintenance
    events: Events
    supervise_interval_seconds: float
    monitor_interval_seconds: float
    _supervisor: Supervisor | None

    def context(self, db: Any = None) -> Context:
        """The operation context (``Boss`` gives it)."""
        raise NotImplementedError

    @verb()
    async def get_instances(
        self,
        *,
        limit: int = 1000,
        after: uuid.UUID | str | None = None,
        offset: int | None = None,
        db: Any = None,
    ) -> InstancePage:
        """The ``Boss`` and pg-boss objects registered in this database, oldest start
        first (at most ``limit``, 1 to 100,000; ``after``: the last id of the previous
        page, or ``offset``: rows to skip), each with ``live`` and, for a keyed server,
        its key, pause state and ``jobs_processed``; the list's ``total`` is the
        registry's row count."""
        return await instance_ops.get_instances(
            self.context(db), limit=limit, after=after, offset=offset
        )

    @verb()
    async def pause_instance(self, instance_key: str, *, db: Any = None) -> None:
        """Pause the server with ``instance_key`` (from any process): it keeps
        heartbeating and its workers claim nothing, from its next heartbeat, until
        resumed; persisted across its restarts. Emits ``instance_paused`` here."""
        await instance_ops.pause_instance(self.context(db), instance_key)
        self.events.emit("instance_paused", {"instance_key": instance_key})

    @verb()
    async def resume_instance(self, instance_key: str, *, db: Any = None) -> None:
        """Let a paused server claim again (from its next heartbeat). Emits
        ``instance_resumed`` here."""
        await instance_ops.resume_instance(self.context(db), instance_key)
        self.events.emit("instance_resumed", {"instance_key": instance_key})

    @verb()
    async def remove_instance(self, instance_key: str, *, db: Any = None) -> None:
        """Forget a server's key and pause state once it has been gone 30 minutes
        (``ValidationError`` before); jobs are never touched. Emits ``instance_removed``."""
        await instance_ops.remove_instance(self.context(db), instance_key)
        self.events.emit("instance_removed", {"instance_key": instance_key})

    def is_maintaining(self) -> bool:
        """Whether a supervise pass (background or :meth:`supervise`) is in flight."""
        return self._supervisor is not None and self._supervisor.maintaining

    @verb()
    async def get_queue_stats(
        self,
        name: str,
        *,
        from_: dt.datetime | None = None,
        to: dt.datetime | None = None,
        limit: int = 1000,
        bucket_seconds: int | None = None,
        max_data_points: int | None = None,
        aggregate: str = "max",
        force: bool = False,
        db: Any = None,
    ) -> list[QueueStats]:
        """Queue ``name``'s counts over time, newest first.

        With ``persist_queue_stats``: the snapshots captured between ``from_`` and ``to``
        (at most ``limit``, 1..100,000), raw or grouped in buckets of ``bucket_seconds``
        or as many as ``max_data_points`` (gauges collapsed by ``aggregate``: max, min or
        avg; counters summed). Without it: one snapshot, the counts cached on the queue
        row, counted again first when older than ``queue_cache_interval_seconds`` (and
        the supervise intervals) or, with ``force``, older than a minute.
        """
        ctx = self.context(db)
        queue_name(name)
        cached = None
        if not self.maintenance.persist_queue_stats:
            budget = max(
                self.maintenance.queue_cache_interval_seconds,
                self.monitor_interval_seconds,
                self.supervise_interval_seconds,
            )
            cached = await stats.cached_stats(ctx, name, max_age_seconds=budget, force=force)
        elif await queue_ops.get_queue(ctx, name) is not None:
            return await stats.read_stats(
                ctx,
                name,
                from_=from_,
                to=to,
                limit=limit,
                bucket_seconds=bucket_seconds,
                max_data_points=max_data_points,
                aggregate=aggregate,
            )
        if cached is None:
            raise missing_queue(name)
        return [cached]

    @verb()
    async def get_warnings(
        self,
        *,
        limit: int = 100,
        before: tuple[dt.datetime, uuid.UUID | str] | None = None,
        db: Any = None,
    ) -> list[StoredWarning]:
        """Warnings written with ``persist_warnings``, newest first: at most ``limit`` (1
        to 1,000); the next page is ``before=(w.created_on, w.id)`` of this page's last."""
        return await read_warnings(self.context(db), limit=limit, before=before)

    @verb()
    async def supervise(
        self, name: str | None = None, *, reindex: bool | Mapping[str, Any] | None = None
    ) -> None:
        """Run one supervise pass now, over every queue or the queue ``name``: cached
        counts and backlog warnings, expiry and heartbeat loss, retention, the pruning of
        warnings and snapshots, and the index bloat check.

        The monitor and retention steps are not gated by their intervals (unlike the
        background pass and unlike pg-boss): a pass you ask for runs. The index rebuild
        keeps its shared ``reindex_interval_seconds``; ``reindex`` overrides it for
        this pass: False (detection only), True, or thresholds (``min_pages``,
        ``max_entries_per_page``, ``min_size_ratio``, ``max_index_bytes``) with
        ``force=True`` to rebuild every job index now, bloated or not, whatever the
        interval. One pass runs at a time; a call waits for the one in flight, and
        ``stop()`` waits for the call. After ``stop()`` it returns without running.
        """
        limits: Reindex | bool = True
        force = False
        if isinstance(reindex, bool):
            limits = (self.maintenance.reindex or Reindex()) if reindex else False
        elif reindex is not None:
            if not isinstance(reindex, Mapping):
                raise ValidationError(
                    f"reindex must be True, False or a mapping of thresholds, got {reindex!r}"
                )
            limits, force = reindex_thresholds(reindex, self.maintenance.reindex)
        self.context()  # NotStartedError before start(), and after stop() closed the connection
        if self._supervisor is not None:  # None after stop(close=False): nothing runs
            await self._supervisor.run(name, reindex=limits, force=force)

    @verb()
    async def get_reindex_commands(
        self,
        *,
        force: bool = False,
        min_pages: int | None = None,
        max_entries_per_page: float | None = None,
        min_size_ratio: float | None = None,
        max_index_bytes: int | None = None,
    ) -> list[str]:
        """The statements that would rebuild the bloated job indexes now, in the order to
        run them (an invalid stub of an interrupted rebuild dropped first), each to run
        outside a transaction; empty when nothing is bloated, and on a backend without
        REINDEX. ``force=True`` lists every job index; ``min_pages``,
        ``max_entries_per_page``, ``min_size_ratio`` change the bloat rule, and
        ``max_index_bytes``, only when given, leaves out larger indexes."""
        given = {
            "min_pages": min_pages,
            "max_entries_per_page": max_entries_per_page,
            "min_size_ratio": min_size_ratio,
            "max_index_bytes": max_index_bytes,
        }
        limits, force = reindex_thresholds(
            {"force": force, **{k: v for k, v in given.items() if v is not None}}
        )
        capped = max_index_bytes is not None
        return await reindex_commands(self.context(), limits, force=force, capped=capped)


class ScheduleVerbs:
    """Cron schedules and the timekeeper's busy flags (a part of ``Boss``)."""

    _timekeeper: Timekeeper | None
    _clock_skew: ClockSkew | None

    def context(self, db: Any = None) -> Context:
        """The operation context (``Boss`` gives it)."""
        raise NotImplementedError

    @verb(SendOptions)
    async def schedule(
        self,
        name: str,
        cron: str,
        data: Any = None,
        *,
        tz: str = "UTC",
        key: str = "",
        missed: str | None = None,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> None:
        """Send a job of ``data`` to queue ``name`` at every occurrence of ``cron`` (5
        fields, or 6 with seconds first) in time zone ``tz``; ``key`` tells several
        schedules of one queue apart. Replaces the schedule (``name``, ``key``) if it
        exists. ``missed="once"``: after a time no instance ran the timekeeper, send one
        job for the latest occurrence missed (default ``skip``: none)."""
        await schedule_ops.schedule(
            self.context(db), name, cron, data, tz=tz, key=key, missed=missed, **options
        )

    @verb()
    async def unschedule(self, name: str, key: str = "", *, db: Any = None) -> bool:
        """Remove the schedule (``name``, ``key``); whether there was one."""
        return await schedule_ops.unschedule(self.context(db), name, key)

    @verb()
    async def get_schedules(
        self,
        name: str | None = None,
        key: str | None = None,
        *,
        limit: int = 1000,
        after: tuple[str, str] | schedule_ops.Schedule | None = None,
        db: Any = None,
    ) -> list[schedule_ops.Schedule]:
        """Schedules in (name, key) order: all, a queue's, or one (``name`` and ``key``);
        at most ``limit`` (1..100,000) after ``after`` (the previous page's last)."""
        return await schedule_ops.get_schedules(
            self.context(db), name, key, limit=limit, after=after
        )

    def is_timekeeping(self) -> bool:
        """Whether a cron pass is in flight."""
        return self._timekeeper is not None and self._timekeeper.busy

    def is_checking_skew(self) -> bool:
        """Whether the clock-skew check is running."""
        return self._clock_skew is not None and self._clock_skew.busy


class SchemaVerbs:
    """The schema's health and its async migrations (a part of ``Boss``)."""

    _bam: BamWorker | None

    def context(self, db: Any = None) -> Context:
        """The operation context (``Boss`` gives it)."""
        raise NotImplementedError

    @verb()
    async def detect_schema_drift(self, *, db: Any = None) -> DriftReport:
        """Compare the schema with what a v46 install of this backend makes (tables,
        indexes, functions, columns, constraints, the state enum), from the catalog alone;
        a :class:`~qcore.verbs.drift.DriftReport` whose entries each carry the statement
        that repairs them. Only reports: it changes nothing."""
        return await detect_schema_drift(self.context(db))

    @verb()
    async def get_bam_status(self, *, db: Any = None) -> list[BamStatus]:
        """The async migration commands per status (``pending``, ``in_progress``,
        ``completed``, ``failed``): how many, and when the newest was queued."""
        return await bam_ops.get_bam_status(self.context(db))

    @verb()
    async def get_bam_entries(
        self, *, limit: int = 1000, after: uuid.UUID | str | None = None, db: Any = None
    ) -> list[BamEntry]:
        """The async migration commands, oldest version first: at most ``limit`` (1 to
        100,000); ``after``, the last id of the previous page, reads the next one
        (``ValidationError`` when that entry has been deleted since)."""
        return await bam_ops.get_bam_entries(self.context(db), limit=limit, after=after)

    def is_bam_working(self) -> bool:
        """Whether this instance is processing an async migration command right now."""
        return self._bam is not None and self._bam.working


class FlowVerbs:
    """Flows (job dependencies) and their resolver (a part of ``Boss``)."""

    _flows: FlowResolver | None

    def context(self, db: Any = None) -> Context:
        """The operation context (``Boss`` gives it)."""
        raise NotImplementedError

    @verb()
    async def flow(self, jobs: list[dict[str, Any]], *, db: Any = None) -> dict[str, uuid.UUID]:
        """Insert a graph of jobs in one transaction: each a dict of ``ref``, ``name``
        (its queue), ``data``, ``options`` (send options) and ``depends_on`` (refs of
        its parents). A child waits until every parent has completed. Each ref's id."""
        return await flow_ops.flow(self.context(db), jobs)

    @verb()
    async def get_dependencies(
        self,
        name: str,
        id: uuid.UUID | str,
        *,
        limit: int = 1000,
        after: flow_ops.JobRef | None = None,
        db: Any = None,
    ) -> list[flow_ops.JobRef]:
        """The parents of a job, as (queue, id), at most ``limit`` after ``after``."""
        return await flow_ops.get_dependencies(self.context(db), name, id, limit=limit, after=after)

    @verb()
    async def get_dependents(
        self,
        name: str,
        id: uuid.UUID | str,
        *,
        limit: int = 1000,
        after: flow_ops.JobRef | None = None,
        db: Any = None,
    ) -> list[flow_ops.JobRef]:
        """The children of a job, as (queue, id), at most ``limit`` after ``after``."""
        return await flow_ops.get_dependents(self.context(db), name, id, limit=limit, after=after)

    @verb()
    async def resolve_flow(self) -> int:
        """Release now the children whose parents have all completed (the resolver's pass,
        ungated by its interval); how many parents it resolved."""
        self.context()  # NotStartedError before start()
        if self._flows is None:
            return 0
        return await self._flows.resolve_now()

    def is_resolving_flow(self) -> bool:
        """Whether a resolver pass (background or :meth:`resolve_flow`) is in flight."""
        return self._flows is not None and self._flows.busy

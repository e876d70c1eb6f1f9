"""Maintenance: the supervise pass's settings, retention, and pruning.

The settings of the supervise pass, the retention walk, and the pruning of warnings and
queue-stat snapshots.

**Retention** works queue by queue, as pg-boss 12.38 does, so qcore and pg-boss
instances on one schema share it: the queues of a chunk are claimed through
``maintain_on`` (due once per ``maintenance_interval_seconds`` between all
instances), and each claimed queue is walked one batch of 10,000 primary keys at a
time, each batch one transaction under pg-boss's ``<table>deletion`` advisory lock
(a lease backend relies on the claim: a batch only deletes rows still past
retention, so two walks never delete twice). A job goes once it finished
``deletion_seconds`` ago (``delete_after_seconds``; 0 keeps it), or once it was never
started and its ``keep_until`` has passed (``retention_seconds`` after
``start_after``). A walk that a stop or a failure ends early hands its claim back.
After each batch the walk pauses (:data:`RETENTION_DUTY`), so workers keep the server.

**Pruning**, after the queues: persisted warnings older than
``warning_retention_days``; snapshots older than ``queue_stat_retention_days`` (the
partitioned shape drops whole daily partitions and creates today's and tomorrow's
ahead; the single-table shape deletes in batches).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from qcore import locks, retry
from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.db import Database
from qcore.errors import ConfigError
from qcore.options import check_number
from qcore.sql import affinity as affinity_sql
from qcore.sql import instances as instance_sql
from qcore.sql import maintenance as sql
from qcore.sql._statement import Statement
from qcore.verbs import audit
from qcore.verbs import instances as instance_ops
from qcore.verbs.reindex import Reindex

__all__ = [
    "MAINTENANCE_OPTIONS",
    "Maintenance",
    "RetentionResult",
    "prune",
    "retain",
]

#: how long a retention batch waits for its advisory lock (pg-boss's lock_timeout)
LOCK_TIMEOUT_SECONDS = 30.0
DELETION_LOCK = "deletion"
#: the orphaned flow edges' walk (pg-boss's key, so the runtimes take turns on a table)
EDGES_LOCK = "cleanupDependencies"
#: attribution rows a maintenance pass checks for a job that is gone
PROCESSED_SWEEP_ROWS = 10_000
#: the share of its time a retention walk may spend in its batches: a pause after each
#: batch leaves the server to the workers (bench.retention: at 0.25, workers beside a
#: walk over a million jobs kept 0.90 of their throughput; flat out, 0.52)
RETENTION_DUTY = 0.25
DAY_SECONDS = 86_400


@dataclass(frozen=True)
class Maintenance:
    """What a supervise pass does besides expiry, as the ``Boss`` options set it.

    The seed's defaults and ranges apply; a bad value raises ``ConfigError`` naming it.
    """

    maintenance_interval_seconds: float = float(DAY_SECONDS)
    queue_cache_interval_seconds: float = 60.0
    warning_slow_query_seconds: float = 30.0
    warning_queue_size: int = 10_000
    #: a job with affinity ready this long that no live server's key matches is warned of
    warning_affinity_unmatched_seconds: float = 300.0
    persist_warnings: bool = False
    warning_retention_days: int | None = None
    persist_queue_stats: bool = False
    queue_stat_retention_days: int = 7
    #: the ``reindex`` option is True, False or thresholds (:meth:`Reindex.of`)
    reindex: Reindex | None = field(
        default_factory=Reindex, metadata={"option": (True, Reindex.of)}
    )
    reindex_interval_seconds: float = float(DAY_SECONDS)
    monitor_vacuum: bool = True

    def __post_init__(self) -> None:
        for option in (
            "maintenance_interval_seconds",
            "queue_cache_interval_seconds",
            "reindex_interval_seconds",
            "warning_slow_query_seconds",
            "warning_affinity_unmatched_seconds",
        ):
            check_number(option, getattr(self, option), 1, DAY_SECONDS, integer=False)
        check_number("warning_queue_size", self.warning_queue_size, 1, 2**31 - 1, integer=True)
        if self.warning_retention_days is not None:
            check_number(
                "warning_retention_days", self.warning_retention_days, 1, 365, integer=True
            )
        check_number(
            "queue_stat_retention_days", self.queue_stat_retention_days, 1, 365, integer=True
        )
        for option in ("persist_warnings", "persist_queue_stats", "monitor_vacuum"):
            if not isinstance(getattr(self, option), bool):
                raise ConfigError(f"{option} must be True or False, got {getattr(self, option)!r}")


#: the Boss options :class:`Maintenance` holds (``reindex`` as given: see :meth:`Reindex.of`)
MAINTENANCE_OPTIONS = tuple(f.name for f in fields(Maintenance))


@dataclass(frozen=True)
class RetentionResult:
    """What a retention step did: the queues it walked to the end, and the jobs deleted."""

    maintained: tuple[str, ...] = ()
    deleted: int = 0


async def retain(
    ctx: Context,
    table: str,
    names: list[str],
    *,
    interval_seconds: float | None,
    stopping: Callable[[], bool],
    batch_size: int = sql.RETENTION_BATCH_SIZE,
    duty: float = RETENTION_DUTY,
) -> RetentionResult:
    """Retention for the queues ``names`` of job table ``table``.

    Claim the due ones (all of them when ``interval_seconds`` is None), walk each, hand
    back the claim of those not walked to the end.
    """
    skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
    claim = sql.claim_maintenance(
        ctx.q, gated=interval_seconds is not None, skip_locked=skip_locked
    )
    rows = await retry.run(ctx, claim, names=names, seconds=interval_seconds)
    claimed = sorted(str(r["name"]) for r in rows)
    claimed_on = rows[0]["claimed_on"] if rows else None
    done: list[str] = []
    deleted = 0
    try:
        for name in claimed:
            if stopping():
                break
            finished, count = await _walk(ctx, table, name, batch_size, stopping, duty)
            deleted += count
            if not finished:
                break
            done.append(name)
    finally:
        left = [n for n in claimed if n not in done]
        if left:
            release = sql.release_maintenance(ctx.q, skip_locked=skip_locked)
            await retry.run(ctx, release, names=left, claimed_on=claimed_on)
    return RetentionResult(tuple(done), deleted)


async def _walk_batches(
    ctx: Context,
    lock: str,
    build: Callable[[bool], Statement],
    values: dict[str, Any],
    stopping: Callable[[], bool],
    duty: float,
    on_row: Callable[[dict[str, Any]], None],
) -> bool:
    """Run a walk's batches, each in its transaction under the advisory lock ``lock``.

    ``build(after)`` is the batch statement (``after``: past a cursor); each batch's row
    goes to ``on_row``, and its ``walk_cursor`` is the next batch's ``after`` (null: the
    end). Busy ``duty`` of the time at most (a batch that took t seconds is followed by a
    pause of t × (1 − duty) / duty). Returns whether it got to the end.
    """
    after: Any = None
    pause = 0.0
    while not stopping():
        if pause:
            await asyncio.sleep(pause)
        started = time.monotonic()
        statement = build(after is not None)

        async def batch(tx: Database, statement: Statement = statement, after: Any = after) -> Any:
            await locks.advisory_lock(ctx, tx, lock, timeout=LOCK_TIMEOUT_SECONDS)
            rows = await tx.execute(statement.sql, statement.bind(**values, after=after))
            return rows[0]

        row = await retry.transaction(ctx, batch)
        on_row(row)
        after = row["walk_cursor"]
        if after is None:
            return True
        pause = (time.monotonic() - started) * (1 - duty) / duty
    return False


async def _walk(
    ctx: Context,
    table: str,
    name: str,
    batch_size: int,
    stopping: Callable[[], bool],
    duty: float,
) -> tuple[bool, int]:
    """Walk queue ``name``: delete what retention lets go, then the flow edges left orphaned.

    A batch of keys at a time (see :func:`_walk_batches`). Returns whether it got to the
    end, and how many jobs it deleted (taken off the cached counts, even when cut short).
    """
    deleted = retained = 0

    def counted(row: dict[str, Any]) -> None:
        nonlocal deleted, retained
        deleted += int(row["deleted"])
        retained += int(row["deleted_retained"])

    values = {"name": name, "batch": batch_size}
    try:
        finished = await _walk_batches(
            ctx,
            table + DELETION_LOCK,
            lambda after: sql.retention_batch(ctx.q, table, after=after),
            values,
            stopping,
            duty,
            counted,
        )
    finally:
        if deleted:
            reduce = sql.reduce_counts(ctx.q)
            await retry.run(ctx, reduce, name=name, retained=retained, deleted=deleted)
    for side in sql.EDGE_SIDES:
        if not finished:
            break

        def edges(after: bool, side: str = side) -> Statement:
            return sql.orphan_edges_batch(ctx.q, table, side, after=after)

        finished = await _walk_batches(
            ctx, table + EDGES_LOCK, edges, values, stopping, duty, lambda row: None
        )
    return finished, deleted


async def prune(ctx: Context, settings: Maintenance, *, stopping: Callable[[], bool]) -> int:
    """Delete what is past its retention; the number of snapshot rows deleted.

    Instance rows quiet for the retention (and dead ones past the bound), instance
    notices past their day, warnings and queue-stat snapshots past their retention go.
    A partition dropped counts as none: its rows are not read.
    """
    await retry.run(ctx, instance_sql.delete_old_instances(ctx.q))
    skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
    await retry.run(ctx, instance_sql.trim_dead_instances(ctx.q, skip_locked=skip_locked))
    if ctx.affinity.installed:
        await prune_affinity(ctx, stopping=stopping)
    await audit.prune(ctx)
    await instance_ops.forget_notices(ctx)
    if settings.persist_warnings and settings.warning_retention_days:
        await retry.run(ctx, sql.prune_warnings(ctx.q), days=settings.warning_retention_days)
    if not settings.persist_queue_stats:
        return 0
    days = settings.queue_stat_retention_days
    if ctx.backend.schema.partitioned:
        await ctx.db.execute_script(sql.drop_old_queue_stats_partitions(ctx.q, ctx.schema, days))
        return 0
    deleted = 0
    statement = sql.prune_queue_stats(ctx.q)
    while not stopping():
        rows = await retry.run(ctx, statement, days=days, batch=sql.RETENTION_BATCH_SIZE)
        count = int(rows[0]["deleted"])
        deleted += count
        if count < sql.RETENTION_BATCH_SIZE:
            break
    return deleted


async def prune_affinity(ctx: Context, *, stopping: Callable[[], bool]) -> None:
    """Forget the affinity rows of jobs that are gone or can no longer be claimed.

    The patterns of jobs that can no longer be claimed go (all of them, in batches), and
    the walk goes one step (:data:`PROCESSED_SWEEP_ROWS`) further through the attribution
    table, deleting rows whose job is gone: the whole table is checked every few passes
    (its rows live as long as their jobs), and a pass costs the same however big it is.
    """
    statement = affinity_sql.prune_patterns(ctx.q)
    while not stopping():
        [row] = await retry.run(ctx, statement, limit=sql.RETENTION_BATCH_SIZE)
        if int(row["removed"]) < sql.RETENTION_BATCH_SIZE:
            break
    name, id = ctx.affinity.sweep_after or (None, None)
    [row] = await retry.run(
        ctx, affinity_sql.sweep_processed(ctx.q), name=name, id=id, limit=PROCESSED_SWEEP_ROWS
    )
    ended = int(row["scanned"]) < PROCESSED_SWEEP_ROWS
    ctx.affinity.sweep_after = None if ended else (row["last_name"], row["last_id"])


async def ensure_partitions(ctx: Context, settings: Maintenance) -> None:
    """Make today's and tomorrow's ``queue_stats`` partitions.

    They are made before a pass writes snapshots (the partitioned shape with
    ``persist_queue_stats`` only).
    """
    if settings.persist_queue_stats and ctx.backend.schema.partitioned:
        await ctx.db.execute_script(sql.ensure_queue_stats_partitions(ctx.q, ctx.schema))

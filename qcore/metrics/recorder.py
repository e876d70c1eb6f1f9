"""The recorder: every ``interval_seconds`` it counts each queue's completed and failed
jobs per closed minute and adds what is new to the store's minute, hour and day rows
and to the rollup across queues.

A queue's jobs are counted by the minute of ``completed_on`` on the database clock, up
to the last minute closed ``margin_seconds`` ago (a commit that lands late still falls
in a minute not yet counted). Each queue's snapshot is one transaction under a lock of
its own: the incoming minutes are diffed against the stored minute rows and only the
difference goes to every tier, so a second recorder, a restart, or the same minutes
counted again add nothing. A restarted recorder resumes from the newest minute stored
(jobs counted before may have been deleted since). Minutes with no finished job are
never written. Each tier is pruned past its retention once a day.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Collection
from typing import Any

from qcore import locks, retry
from qcore.context import Context
from qcore.db import Database
from qcore.errors import ValidationError
from qcore.metrics.store import PostgresMetricsStore, Retention
from qcore.sql import metrics as sql
from qcore.tasks import cancel_and_wait

__all__ = ["MetricsRecorder", "PgBossQueues"]

log = logging.getLogger("qcore.metrics")

_MINUTES_PER_DAY = 1440


class PgBossQueues:
    """The queues of a pg-boss/qcore schema as the recorder's sources, resolved on every
    tick (a queue created since records from its next tick); ``allow`` limits them to
    those names. Reads the job schema only."""

    def __init__(self, ctx: Context, *, allow: Collection[str] | None = None) -> None:
        self.ctx = ctx
        self.allow = frozenset(allow) if allow is not None else None

    async def names(self) -> list[str]:
        rows = await retry.run(self.ctx, sql.recorded_queues(self.ctx.q))
        names = [str(r["name"]) for r in rows]
        return [n for n in names if self.allow is None or n in self.allow]

    async def closed_minute(self, margin_seconds: float) -> int:
        rows = await retry.run(self.ctx, sql.closed_minute(self.ctx.q), margin=margin_seconds)
        return int(rows[0]["minute"])

    async def finished(self, queue: str, first: int, last: int) -> dict[int, tuple[int, int]]:
        """minute -> (completed, failed) for the minutes ``first`` to ``last - 1``."""
        rows = await retry.run(
            self.ctx, sql.finished_per_minute(self.ctx.q), queue=queue, first=first, last=last
        )
        return {int(r["minute"]): (int(r["completed"]), int(r["failed"])) for r in rows}


class MetricsRecorder:
    """Records ``sources`` into ``store``; :meth:`tick` once, or :meth:`start` to tick
    every ``interval_seconds`` until :meth:`stop`. ``on_snapshot_error(exc, queue)``
    hears about a queue whose tick failed (the next tick retries it)."""

    def __init__(
        self,
        store: PostgresMetricsStore,
        sources: PgBossQueues,
        *,
        interval_seconds: float = 60.0,
        retention: Retention | None = None,
        retention_days: int | None = None,
        margin_seconds: float = 5.0,
        on_snapshot_error: Callable[[BaseException, str], Any] | None = None,
    ) -> None:
        if retention is not None and retention_days is not None:
            raise ValidationError("give retention or retention_days, not both")
        if not isinstance(interval_seconds, int | float) or not 1 <= interval_seconds <= 3600:
            raise ValidationError(
                f"interval_seconds must be from 1 to 3600, got {interval_seconds!r}"
            )
        if not isinstance(margin_seconds, int | float) or not 0 <= margin_seconds <= 600:
            raise ValidationError(f"margin_seconds must be from 0 to 600, got {margin_seconds!r}")
        self.store = store
        self.sources = sources
        self.interval_seconds = float(interval_seconds)
        self.retention = (
            Retention.of_days(retention_days) if retention_days is not None else retention
        ) or Retention()
        self.margin_seconds = float(margin_seconds)
        self.on_snapshot_error = on_snapshot_error
        self._next: dict[str, int] = {}  # queue -> first minute not yet counted
        self._pruned_day: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> int:
        """Snapshot every queue once (and prune, once a day); how many minute rows of
        queues changed."""
        ctx = await self.store.context()
        last = await self.sources.closed_minute(self.margin_seconds)
        changed = 0
        for queue in await self.sources.names():
            try:
                changed += await self._snapshot(ctx, queue, last)
            except Exception as exc:
                if self.on_snapshot_error is None:
                    raise
                self.on_snapshot_error(exc, queue)
        if self._pruned_day != last // _MINUTES_PER_DAY:
            await self._prune(ctx, last)
            self._pruned_day = last // _MINUTES_PER_DAY
        return changed

    async def _first_minute(self, ctx: Context, queue: str, last: int) -> int:
        if queue in self._next:
            return self._next[queue]
        statement = sql.newest_minute(ctx.schema, self.store.prefix)
        rows = await retry.run(ctx, statement, namespace=self.store.namespace, queue=queue)
        newest = rows[0]["minute"]
        if newest is not None:
            return int(newest)  # counted again: the diff adds only what is new
        return last - self.retention.minutes * _MINUTES_PER_DAY

    async def _snapshot(self, ctx: Context, queue: str, last: int) -> int:
        first = await self._first_minute(ctx, queue, last)
        if first >= last:
            return 0
        incoming = await self.sources.finished(queue, first, last)
        changed = 0
        if incoming:
            store = self.store

            async def write(db: Database) -> int:
                return await _add_difference(db, store, queue, incoming)

            changed = await locks.run_locked(
                ctx, f"metrics:{store.namespace}:{store.prefix}:{queue}", write
            )
        self._next[queue] = last
        return changed

    async def _prune(self, ctx: Context, last: int) -> None:
        statement = sql.prune_tier(ctx.schema, self.store.prefix)
        for tier, minutes in sql.TIERS.items():
            oldest = last - self.retention.keeps(tier) * _MINUTES_PER_DAY
            await retry.run(ctx, statement, tier=tier, before=oldest // minutes)

    async def start(self) -> None:
        """Tick now and every ``interval_seconds`` in the background."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # the database is away: the next tick tries again
                if self.on_snapshot_error is not None:
                    self.on_snapshot_error(exc, "")
                else:
                    log.warning("a metrics tick failed: %s", exc)
            await asyncio.sleep(self.interval_seconds)

    async def stop(self) -> None:
        """Stop ticking (the store stays open: it is the caller's to close)."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)


async def _add_difference(
    db: Database, store: PostgresMetricsStore, queue: str, incoming: dict[int, tuple[int, int]]
) -> int:
    """Inside the snapshot's transaction: what ``incoming`` adds over the stored minute
    rows, added to every tier of the queue and of the rollup; rows changed."""
    read = sql.stored_minutes(store.schema, store.prefix)
    rows = await db.execute(
        read.sql, read.bind(namespace=store.namespace, queue=queue, buckets=list(incoming))
    )
    stored = {int(r["bucket"]): (int(r["completed"]), int(r["failed"])) for r in rows}
    sums: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    changed = 0
    for minute, (completed, failed) in incoming.items():
        had = stored.get(minute, (0, 0))
        add = (max(completed - had[0], 0), max(failed - had[1], 0))
        if add == (0, 0):
            continue
        changed += 1
        for who in (queue, sql.GLOBAL):
            for tier, minutes in sql.TIERS.items():
                total = sums[(who, tier, minute // minutes)]
                total[0] += add[0]
                total[1] += add[1]
    if sums:
        keys = list(sums)
        write = sql.add_counts(store.schema, store.prefix)
        await db.execute(
            write.sql,
            write.bind(
                namespace=store.namespace,
                queues=[k[0] for k in keys],
                tiers=[k[1] for k in keys],
                buckets=[k[2] for k in keys],
                completed=[sums[k][0] for k in keys],
                failed=[sums[k][1] for k in keys],
            ),
        )
    return changed

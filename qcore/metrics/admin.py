"""Inspecting and clearing history: :class:`MetricsHistoryAdmin`, the store's footprint
by tier and queue, and purges by queue and date that keep the rollup true.

``stats()`` counts rows and reads the tables' real size on disk
(``pg_total_relation_size``: indexes and TOAST included), then splits those bytes
between queues and tiers in proportion to the size of their rows, so the parts add up
to what the table occupies. Where the backend cannot say a table's size, the bytes are
the rows' own sizes (an estimate, flagged ``estimated``). ``purge()`` deletes history
under the admin's namespace only; a purge of one queue first subtracts its counts and
histograms from the rollup (the rollup's age gauge is a maximum and keeps its value).
Both are idempotent. A store of a newer layout is refused before anything is deleted.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from qcore import locks, retry
from qcore.db import Database
from qcore.errors import ValidationError
from qcore.metrics.sources import namespace_of
from qcore.metrics.store import PostgresMetricsStore
from qcore.options import queue_name
from qcore.sql import metrics as sql

__all__ = ["MetricsHistoryAdmin", "TierUsage", "Usage"]

_TIER_NAMES = {"m": "minute", "h": "hour", "d": "day"}


@dataclass(frozen=True)
class TierUsage:
    """Rows and bytes of one tier (of one queue, or of the whole store)."""

    rows: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Usage:
    """The footprint of a queue (``queue``) or of the whole namespace (``queue`` None):
    rows, bytes, minute rows, the oldest and newest day recorded, and the same by tier;
    ``queues`` (on the whole only) each queue's, largest first, the rollup as
    ``__global__``."""

    queue: str | None
    rows: int
    bytes: int
    minutes: int
    oldest_day: dt.date | None
    newest_day: dt.date | None
    tiers: dict[str, TierUsage]
    queues: list[Usage] = field(default_factory=list)
    estimated: bool = False


def _day(bucket: int, tier: str) -> dt.date:
    minutes = bucket * sql.TIERS[tier]
    return (dt.datetime(1970, 1, 1) + dt.timedelta(minutes=minutes)).date()


def _usage(queue: str | None, rows: list[dict[str, Any]], scale: float) -> Usage:
    tiers: dict[str, TierUsage] = {}
    days: list[dt.date] = []
    for r in rows:
        name = _TIER_NAMES[str(r["tier"])]
        had = tiers.get(name, TierUsage())
        tiers[name] = TierUsage(
            had.rows + int(r["rows"]), had.bytes + round(int(r["row_bytes"]) * scale)
        )
        days += [_day(int(r["oldest"]), str(r["tier"])), _day(int(r["newest"]), str(r["tier"]))]
    return Usage(
        queue=queue,
        rows=sum(t.rows for t in tiers.values()),
        bytes=sum(t.bytes for t in tiers.values()),
        minutes=tiers.get("minute", TierUsage()).rows,
        oldest_day=min(days, default=None),
        newest_day=max(days, default=None),
        tiers=tiers,
    )


class MetricsHistoryAdmin:
    """The maintenance surface of ``store`` for keys under ``namespace`` (default: the
    queues of the store's own schema; ``""``: every key)."""

    def __init__(self, store: PostgresMetricsStore, *, namespace: str | None = None) -> None:
        self.store = store
        self.namespace = namespace_of(store.schema) if namespace is None else namespace

    async def stats(self) -> Usage:
        """Rows and bytes by tier and by queue (an ops call: it reads every row's size)."""
        ctx = await self.store.context(writing=False)
        rows = [
            dict(r)
            for r in await retry.run(
                ctx, sql.series_usage(ctx.schema, self.store.prefix), namespace=self.namespace
            )
        ]
        row_bytes = sum(int(r["row_bytes"]) for r in rows)
        scale, estimated = 1.0, True
        if ctx.backend.capabilities.drift_catalog and row_bytes:
            [size] = await retry.run(ctx, sql.table_bytes(ctx.schema, self.store.prefix))
            everything = row_bytes if self.namespace == "" else await self._all_row_bytes()
            scale, estimated = int(size["bytes"]) / everything, False
        by_queue: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_queue.setdefault(str(r["queue"])[len(self.namespace) :], []).append(r)
        whole = _usage(None, rows, scale)
        queues = sorted(
            (_usage(q, rs, scale) for q, rs in by_queue.items()), key=lambda u: (-u.bytes, u.queue)
        )
        return Usage(**{**whole.__dict__, "queues": queues, "estimated": estimated})

    async def _all_row_bytes(self) -> int:
        """Every key's row bytes (the table's size is shared by every namespace in it)."""
        ctx = await self.store.context(writing=False)
        rows = await retry.run(ctx, sql.series_usage(ctx.schema, self.store.prefix), namespace="")
        return sum(int(r["row_bytes"]) for r in rows) or 1

    async def purge(
        self, queue: str | None = None, *, before: dt.date | dt.datetime | None = None
    ) -> None:
        """Delete history: everything, one ``queue``'s, or what ended before ``before``
        (a date: its midnight UTC; an aware datetime). One queue's is first subtracted
        from the rollup. Recording carries on from the next snapshot."""
        if queue is not None:
            queue_name(queue)
            if queue == sql.GLOBAL:
                raise ValidationError("purge the rollup with purge() (everything), not by name")
        cutoff = _minute(before)
        ctx = await self.store.context()
        prefix = self.store.prefix
        values = {"namespace": self.namespace, "before": cutoff}
        if queue is None:
            await retry.run(ctx, sql.purge_keys(ctx.schema, prefix), queue=None, **values)
            return
        key = self.namespace + queue

        async def purge_one(db: Database) -> None:
            subtract = sql.subtract_from_rollup(ctx.schema, prefix)
            rollup = self.namespace + sql.GLOBAL
            await db.execute(subtract.sql, subtract.bind(rollup=rollup, queue=key, before=cutoff))
            delete = sql.purge_keys(ctx.schema, prefix)
            await db.execute(delete.sql, delete.bind(queue=key, **values))

        await locks.run_locked(ctx, f"metrics:{prefix}:{key}", purge_one)


def _minute(before: dt.date | dt.datetime | None) -> int | None:
    """``before`` as a minute index (None: no cutoff)."""
    if before is None:
        return None
    if isinstance(before, dt.datetime):
        if before.tzinfo is None:
            raise ValidationError(f"before must be a date or an aware datetime, got {before!r}")
        return int(before.timestamp() // 60)
    if isinstance(before, dt.date):
        return int(dt.datetime(before.year, before.month, before.day, tzinfo=dt.timezone.utc)
                   .timestamp() // 60)  # fmt: skip
    raise ValidationError(f"before must be a date or an aware datetime, got {before!r}")

"""Inspecting and clearing history: :class:`MetricsHistoryAdmin`.

It gives the store's footprint by tier and queue, and purges by queue and date that keep the
rollup true.

``stats()`` counts buckets (rows) and bytes by key and tier as the store measures them:
a PostgreSQL store reads its table's real size on disk (``pg_total_relation_size``:
indexes and TOAST included) and splits it between queues and tiers in proportion to
the size of their rows, so the parts add up to what the table occupies (where the
backend cannot say a table's size, the rows' own sizes: an estimate, flagged
``estimated``); a Redis store sums ``MEMORY USAGE`` of its keys. ``purge()`` deletes history
under the admin's namespace only and answers how many buckets the store deleted (0:
nothing was there); a purge of one queue first subtracts its counts and histograms from
the rollup (the rollup's age gauge is a maximum and keeps its value). Both are
idempotent. A store of a newer layout is refused before anything is deleted.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from qcore.errors import ValidationError
from qcore.metrics.store import GLOBAL, TIERS, KeyUsage, MetricsStore
from qcore.options import queue_name

__all__ = ["MetricsHistoryAdmin", "TierUsage", "Usage"]

_TIER_NAMES = {"m": "minute", "h": "hour", "d": "day"}


@dataclass(frozen=True)
class TierUsage:
    """Rows and bytes of one tier (of one queue, or of the whole store)."""

    rows: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Usage:
    """The footprint of a queue (``queue``) or of the whole namespace (``queue`` None).

    Rows, bytes, minute rows, the oldest and newest day recorded, and the same by tier;
    ``queues`` (on the whole only) each queue's, largest first, the rollup as
    ``__global__``.
    """

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
    minutes = bucket * TIERS[tier]
    return (dt.datetime(1970, 1, 1) + dt.timedelta(minutes=minutes)).date()


def _usage(queue: str | None, rows: list[KeyUsage]) -> Usage:
    tiers: dict[str, TierUsage] = {}
    days: list[dt.date] = []
    for r in rows:
        name = _TIER_NAMES[r.tier]
        had = tiers.get(name, TierUsage())
        tiers[name] = TierUsage(had.rows + r.rows, had.bytes + r.bytes)
        days += [_day(r.oldest, r.tier), _day(r.newest, r.tier)]
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
    """The maintenance surface of ``store`` for keys under ``namespace``.

    The namespace defaults to the queues of the job schema the store serves (its
    ``default_namespace``: a PostgreSQL store's ``queue_schema``, which need not be the
    schema of its tables); ``""``: every key.
    """

    def __init__(self, store: MetricsStore, *, namespace: str | None = None) -> None:
        self.store = store
        self.namespace = store.default_namespace if namespace is None else namespace

    async def stats(self) -> Usage:
        """Rows and bytes by tier and by queue (an ops call: it measures every row)."""
        rows, estimated = await self.store.usage(self.namespace)
        by_queue: dict[str, list[KeyUsage]] = {}
        for r in rows:
            by_queue.setdefault(r.key[len(self.namespace) :], []).append(r)
        whole = _usage(None, rows)
        queues = sorted(
            (_usage(q, rs) for q, rs in by_queue.items()), key=lambda u: (-u.bytes, u.queue)
        )
        return Usage(**{**whole.__dict__, "queues": queues, "estimated": estimated})

    async def purge(
        self, queue: str | None = None, *, before: dt.date | dt.datetime | None = None
    ) -> int:
        """Delete history: everything, one ``queue``'s, or what ended before ``before``.

        ``before`` is a date (its midnight UTC) or an aware datetime. One queue's is
        first subtracted from the rollup. Recording carries on from the next snapshot.
        Returns the number of buckets (rows) the store deleted: 0 when there was nothing
        under the namespace to delete.
        """
        if queue is not None:
            queue_name(queue)
            if queue == GLOBAL:
                raise ValidationError("purge the rollup with purge() (everything), not by name")
        cutoff = _minute(before)
        await self.store.ready()
        key = None if queue is None else self.namespace + queue
        return await self.store.purge(self.namespace, key, cutoff)


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

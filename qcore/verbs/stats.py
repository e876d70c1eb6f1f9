"""The queue stats a verb reads.

A queue's cached counts (counted again when they are too old) and its persisted
snapshots.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from qcore import retry
from qcore.backend import LockStrategy
from qcore.context import Context
from qcore.db import Rows
from qcore.errors import ValidationError
from qcore.options import LIST_LIMIT_MAX, check_count
from qcore.sql import stats as sql
from qcore.sql.locks import lock_key_text

__all__ = [
    "MAX_LIMIT",
    "QueueStats",
    "cached_stats",
    "check_percentiles",
    "count_queues",
    "latency_percentile",
    "read_stats",
    "with_percentiles",
]

#: the most snapshots one read returns
MAX_LIMIT = LIST_LIMIT_MAX

#: a snapshot, or the cached counts of a queue, as ``get_queue_stats`` returns them
QueueStats = dict[str, Any]


async def count_queues(
    ctx: Context,
    table: str,
    names: list[str],
    *,
    throughput: bool = False,
    reset_seconds: int = sql.DELTA_RESET_MAX_SECONDS,
    sample: bool = True,
    must_count: bool = False,
) -> Rows:
    """Run the counting statement on the queues ``names`` of ``table``.

    On an advisory backend it runs under pg-boss's ``queue-stats`` try-lock (no rows:
    another instance holds it), unless ``must_count``; see
    :func:`qcore.sql.stats.cache_queue_stats`.
    """
    try_lock = ctx.backend.lock is LockStrategy.ADVISORY and not must_count
    statement = sql.cache_queue_stats(
        ctx.q, table, throughput=throughput, try_lock=try_lock, sample=sample
    )
    key = lock_key_text(ctx.schema_spec, sql.STATS_LOCK)
    return await retry.run(ctx, statement, names=names, key=key, reset_seconds=reset_seconds)


#: a forced read serves counts at most this old (pg-boss's): repeated forced reads do
#: not each scan the job table
FORCE_TTL_SECONDS = 60.0


async def cached_stats(
    ctx: Context, name: str, *, max_age_seconds: float, force: bool
) -> QueueStats | None:
    """Queue ``name``'s cached counts, counted again first when too old.

    None: no such queue. They are counted again when older than ``max_age_seconds``
    (``force``: older than :data:`FORCE_TTL_SECONDS`) or never counted. Another instance
    counting right now (the stats try-lock) is not waited for: the cache is served.
    """
    rows = await retry.run(ctx, sql.queue_stats_cache(ctx.q), name=name)
    if not rows:
        return None
    cached = rows[0]
    age = cached["age_seconds"]
    budget = min(FORCE_TTL_SECONDS, max_age_seconds) if force else max_age_seconds
    if age is None or age > budget:
        table = str(cached["table_name"])
        # never counted: nothing to serve instead, so this one count may not lose the lock
        if await count_queues(ctx, table, [name], sample=False, must_count=age is None):
            rows = await retry.run(ctx, sql.queue_stats_cache(ctx.q), name=name)
            cached = rows[0] if rows else cached
    snapshot = _snapshot(cached)
    for column in ("age_seconds", "table_name"):
        snapshot.pop(column, None)
    return snapshot


async def read_stats(
    ctx: Context,
    name: str,
    *,
    from_: dt.datetime | None,
    to: dt.datetime | None,
    limit: int,
    bucket_seconds: int | None,
    max_data_points: int | None,
    aggregate: str,
) -> list[QueueStats]:
    """Queue ``name``'s persisted snapshots, newest first.

    Raw, or grouped in buckets of ``bucket_seconds`` (or as wide as fits
    ``max_data_points`` between ``from_`` and ``to``, or the snapshots' own first and
    last).
    """
    for option, when in (("from_", from_), ("to", to)):
        if when is not None and (not isinstance(when, dt.datetime) or when.tzinfo is None):
            raise ValidationError(f"{option} must be an aware datetime, got {when!r}")
    if from_ is not None and to is not None and from_ > to:
        raise ValidationError(f"from_ ({from_.isoformat()}) is after to ({to.isoformat()})")
    check_count("limit", limit, MAX_LIMIT)
    if aggregate not in sql.AGGREGATES:
        raise ValidationError(
            f"aggregate must be one of {', '.join(sql.AGGREGATES)}, got {aggregate!r}"
        )
    if bucket_seconds is not None and max_data_points is not None:
        raise ValidationError("give bucket_seconds or max_data_points, not both")
    values: dict[str, Any] = {"name": name, "from_": from_, "to": to, "limit": limit}
    if max_data_points is not None:
        check_count("max_data_points", max_data_points, MAX_LIMIT)
        bucket_seconds = await _width(ctx, name, from_, to, max_data_points)
        values["limit"] = min(limit, max_data_points)
    if bucket_seconds is None:
        rows = await retry.run(ctx, sql.queue_stats_history(ctx.q), **values)
    else:
        check_count("bucket_seconds", bucket_seconds, 366 * 86_400)
        statement = sql.queue_stats_bucketed(ctx.q, aggregate)
        rows = await retry.run(ctx, statement, **values, seconds=bucket_seconds)
    return [_snapshot(r) for r in rows]


async def _width(
    ctx: Context, name: str, from_: dt.datetime | None, to: dt.datetime | None, points: int
) -> int:
    """The bucket width that fits the snapshots in ``points`` buckets.

    The snapshots are those between ``from_`` and ``to``, within the data's own extent.
    """
    rows = await retry.run(ctx, sql.queue_stats_extent(ctx.q), name=name)
    lo, hi = rows[0]["lo"], rows[0]["hi"]
    if lo is None:
        return 1
    lo = max(lo, from_) if from_ is not None else lo
    hi = min(hi, to) if to is not None else hi
    seconds = max((hi - lo).total_seconds(), 0.0)
    return max(1, int(-(-seconds // points)))


def _snapshot(row: Mapping[str, Any]) -> QueueStats:
    out = dict(row)
    for column in ("wait_bins", "run_bins"):  # a slot no job landed in reads 0
        if out.get(column) is not None:
            out[column] = [n or 0 for n in out[column]]
    return out


def check_percentiles(value: object) -> list[float]:
    """``percentiles``: a non-empty list of percents from 1 to 100 (such as ``[50, 95,
    99.9]``), each kept once, in the order given."""
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in value)
        or not all(1 <= p <= 100 for p in value)
    ):
        raise ValidationError(
            "percentiles must be a non-empty list of percents from 1 to 100, such as"
            f" [50, 95], got {value!r:.80}"
        )
    return list(dict.fromkeys(float(p) for p in value))


def latency_percentile(bins: Sequence[int] | None, p: float) -> float | None:
    """The ``p``-th percentile in seconds of a wait or run histogram, as pg-boss reads it.

    None for no histogram or an empty one. Slot 0 (under 10 ms) reads 10 ms, the open last
    slot its lower edge; in between, the value is interpolated within the slot on the
    histogram's own √2 scale.
    """
    if not bins:
        return None
    total = sum(bins)
    if total <= 0:
        return None
    target = p / 100 * total
    k, seen = 0, 0
    while k < len(bins) - 1 and not (bins[k] > 0 and seen + bins[k] >= target):
        seen += bins[k]
        k += 1
    if k == 0:
        return sql.LATENCY_MIN_SECONDS
    low = sql.LATENCY_MIN_SECONDS * math.sqrt(2) ** (k - 1)
    if k == len(bins) - 1:
        return low
    return float(low * math.sqrt(2) ** ((target - seen) / bins[k]))


def with_percentiles(snapshot: QueueStats, percentiles: Sequence[float]) -> QueueStats:
    """``snapshot`` with ``percentiles``: for each percent, ``p`` and the ``wait_seconds``
    and ``run_seconds`` read off its own histograms (None where it has none)."""
    return {
        **snapshot,
        "percentiles": [
            {
                "p": p,
                "wait_seconds": latency_percentile(snapshot.get("wait_bins"), p),
                "run_seconds": latency_percentile(snapshot.get("run_bins"), p),
            }
            for p in percentiles
        ],
    }

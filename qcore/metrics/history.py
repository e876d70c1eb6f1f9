"""What a board reads: :class:`MetricsHistoryProvider`, the history as series and totals.

Series for one queue or the rollup across queues, over a window of 60 minutes, 7, 30 or
90 days, by minute, hour or day: throughput (completed, failed), latency (p50, p95 and
p99 of wait and run time, estimated from the histograms) and the queue-age gauge; the
totals of a window, per queue for the breakdown table; and the queue-depth series
pg-boss's own snapshots (``queue_stats``) hold.

Every bucket of the range is returned, zero (or None) where nothing was recorded;
the newest is flagged ``filling`` while it still covers the present. Times are UTC on
the store's database clock. A provider reads a store of any layout version; it never
writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from qcore.context import Context
from qcore.errors import ValidationError
from qcore.metrics import histogram
from qcore.metrics.postgres_store import PostgresMetricsStore
from qcore.metrics.store import GLOBAL, TIERS, Bucket, MetricsStore, Retention
from qcore.verbs.stats import QueueStats, read_stats

__all__ = [
    "LatencyPoint",
    "MetricsHistoryProvider",
    "Percentiles",
    "QueueTotals",
    "ThroughputPoint",
    "WindowHistory",
]

#: window -> (minutes covered, the granularity drawn by default)
WINDOWS = {"60m": (60, "minute"), "7d": (7 * 1440, "hour"), "30d": (30 * 1440, "day"),
          "90d": (90 * 1440, "day")}  # fmt: skip
#: queue-depth range -> (seconds covered, bucket seconds), as pg-boss's board reads them
DEPTH_RANGES = {"1h": (3600, 60), "6h": (6 * 3600, 300), "24h": (86400, 900),
                "7d": (7 * 86400, 3600)}  # fmt: skip
_TIER = {"minute": "m", "hour": "h", "day": "d"}
_SLOTS = histogram.SLOTS


@dataclass(frozen=True)
class ThroughputPoint:
    """One throughput bucket.

    When it starts, the jobs completed and failed in it, and whether it still covers the
    present (so reads low).
    """

    start: dt.datetime
    completed: int
    failed: int
    filling: bool


@dataclass(frozen=True)
class Percentiles:
    """Estimated p50, p95 and p99 in milliseconds (None: no sample), and the samples."""

    p50: float | None
    p95: float | None
    p99: float | None
    samples: int

    @classmethod
    def of(cls, counts: list[int]) -> Percentiles:
        return cls(
            p50=histogram.percentile(counts, 50),
            p95=histogram.percentile(counts, 95),
            p99=histogram.percentile(counts, 99),
            samples=sum(counts),
        )


@dataclass(frozen=True)
class LatencyPoint:
    """One latency bucket.

    Its wait and run percentiles, the oldest waiting job's age in seconds (the bucket's
    maximum; None when nothing waited) and whether it is still filling.
    """

    start: dt.datetime
    wait: Percentiles
    run: Percentiles
    age: float | None
    filling: bool


@dataclass(frozen=True)
class QueueTotals:
    """A window's totals for one queue (or the rollup).

    Counts, wait and run percentiles, and the merged histograms they were read from
    (``BOUNDS_MS`` slots).
    """

    queue: str
    completed: int
    failed: int
    wait: Percentiles
    run: Percentiles
    wait_histogram: list[int] = field(default_factory=list, compare=False)
    run_histogram: list[int] = field(default_factory=list, compare=False)

    @property
    def failure_rate(self) -> float:
        runs = self.completed + self.failed
        return self.failed / runs if runs else 0.0


@dataclass(frozen=True)
class WindowHistory:
    """What a board shows of one window, at the window's own granularity.

    A queue's (or the rollup's) throughput and latency series and totals, and, when
    asked for, every queue's totals, busiest first.
    """

    throughput: list[ThroughputPoint]
    latency: list[LatencyPoint]
    totals: QueueTotals
    breakdown: list[QueueTotals] = field(default_factory=list)


@dataclass(frozen=True)
class _Rows:
    buckets: range
    width: int
    newest: int
    found: dict[int, Bucket]


def _split(row: Bucket | None) -> tuple[list[int], list[int]]:
    packed = (row.latency if row else None) or [0] * (2 * _SLOTS)
    return list(packed[:_SLOTS]), list(packed[_SLOTS:])


class MetricsHistoryProvider:
    """Reads ``store`` as a board's series and totals.

    ``retention`` bounds what a range can show (a minute series never reaches further
    back than minute rows are kept). ``namespace`` is the key prefix of the queues it
    shows (default: the store's ``default_namespace``, ``pgboss:<schema>:`` of the job
    schema the store serves, its ``queue_schema``, wherever its tables are; ``""`` reads
    keys as stored); :meth:`namespaced` gives the view of another.
    """

    def __init__(
        self,
        store: MetricsStore,
        *,
        retention: Retention | None = None,
        namespace: str | None = None,
    ) -> None:
        self.store = store
        self.retention = retention or Retention()
        self.namespace = store.default_namespace if namespace is None else namespace

    def namespaced(self, namespace: str) -> MetricsHistoryProvider:
        """The same store seen through another key prefix.

        Queue names are shown without it, and the rollup is the prefix's own.
        """
        if not isinstance(namespace, str):
            raise ValidationError(f"namespace must be a string, got {namespace!r}")
        return MetricsHistoryProvider(self.store, retention=self.retention, namespace=namespace)

    def _key(self, queue: str | None) -> str:
        return self.namespace + (queue if queue is not None else GLOBAL)

    async def _read(self, queue: str | None, window: str, granularity: str | None) -> _Rows:
        return (await self._read_each([queue], window, granularity))[0]

    async def _read_each(
        self, queues: Sequence[str | None], window: str, granularity: str | None
    ) -> list[_Rows]:
        """The window's buckets of each of ``queues`` (None: the rollup).

        All in one read of the store whatever their number.
        """
        minutes, tier = _span(window, granularity)
        width = TIERS[tier]
        if not queues:
            return []
        now = await self.store.now_minute()
        kept = self.retention.keeps(tier) * 1440
        first, newest = (now - min(minutes, kept) + 1) // width, now // width
        keys = [self._key(queue) for queue in queues]
        found = await self.store.read_series(keys, tier, first, newest)
        buckets = range(first, newest + 1)
        return [_Rows(buckets, width, newest, found.get(key, {})) for key in keys]

    async def throughput(
        self, queue: str | None = None, *, window: str = "60m", granularity: str | None = None
    ) -> list[ThroughputPoint]:
        """Completed and failed per bucket for ``queue`` (None: every queue together)."""
        return _throughput(await self._read(queue, window, granularity))

    async def latency(
        self, queue: str | None = None, *, window: str = "60m", granularity: str | None = None
    ) -> list[LatencyPoint]:
        """Wait and run percentiles and the queue age per bucket."""
        return _latency(await self._read(queue, window, granularity))

    async def totals(self, queue: str | None = None, *, window: str = "7d") -> QueueTotals:
        """A window's totals: counts summed, percentiles over its merged histograms."""
        rows = await self._read(queue, window, None)  # the window's own granularity
        return _totals(queue or GLOBAL, rows.found.values())

    async def totals_of(self, queues: Sequence[str], *, window: str = "7d") -> list[QueueTotals]:
        """The totals of each of ``queues`` over a window, in their order.

        From one read of the store: a board of many queues costs what a board of one
        does.
        """
        if isinstance(queues, str) or not all(isinstance(name, str) for name in queues):
            raise ValidationError(f"queues must be a list of queue names, got {queues!r}")
        names = list(queues)
        reads = await self._read_each(names, window, None)
        return [_totals(q, rows.found.values()) for q, rows in zip(names, reads, strict=True)]

    async def breakdown(self, *, window: str = "7d") -> list[QueueTotals]:
        """Every queue's totals over a window, busiest (most runs) first."""
        return _busiest(await self.totals_of(await self._names(), window=window))

    async def window_history(
        self, queue: str | None = None, *, window: str = "60m", breakdown: bool = False
    ) -> WindowHistory:
        """A window's series and totals for ``queue``, and the breakdown, from one read.

        What :meth:`throughput`, :meth:`latency` and :meth:`totals` give of ``queue``
        over a window at its own granularity and, with ``breakdown``, what
        :meth:`breakdown` gives, from one read of the store (and one of its queue names
        for the breakdown): a board's page costs the same whatever it shows.
        """
        _span(window, None)  # a wrong window is refused before anything is read
        names = await self._names() if breakdown else []
        rows, *each = await self._read_each([queue, *names], window, None)
        return WindowHistory(
            throughput=_throughput(rows),
            latency=_latency(rows),
            totals=_totals(queue or GLOBAL, rows.found.values()),
            breakdown=_busiest(
                [_totals(name, r.found.values()) for name, r in zip(names, each, strict=True)]
            ),
        )

    async def _names(self) -> list[str]:
        """The queues the store has series of under this namespace, by name."""
        keys = await self.store.keys(self.namespace)
        return sorted({key[len(self.namespace) :] for key in keys} - {GLOBAL})

    async def depth(
        self, queue: str, *, range: str = "24h", jobs: Context | None = None
    ) -> list[QueueStats]:
        """Queue ``queue``'s depth from pg-boss's persisted snapshots, oldest first.

        The snapshots are ``queue_stats`` (empty without ``persist_queue_stats``),
        bucketed as pg-boss's board reads them (1 h by minute, 6 h by 5 minutes, 24 h by
        15, 7 d by hour), gauges at their maximum. ``jobs`` is the job schema's context,
        needed when the store is not a PostgreSQL store in that schema.
        """
        if range not in DEPTH_RANGES:
            raise ValidationError(f"range must be one of {', '.join(DEPTH_RANGES)}, got {range!r}")
        seconds, bucket = DEPTH_RANGES[range]
        if jobs is not None:
            ctx = jobs
        elif isinstance(self.store, PostgresMetricsStore):
            ctx = await self.store.context(writing=False)
        else:
            raise ValidationError(
                "queue depth is read from the job schema's queue_stats: pass jobs=<its context>"
            )
        to = dt.datetime.now(dt.timezone.utc)
        snapshots = await read_stats(
            ctx,
            queue,
            from_=to - dt.timedelta(seconds=seconds),
            to=to,
            limit=seconds // bucket + 1,
            bucket_seconds=bucket,
            max_data_points=None,
            aggregate="max",
        )
        return snapshots[::-1]


def _span(window: str, granularity: str | None) -> tuple[int, str]:
    """The minutes ``window`` covers and the tier its buckets are read from.

    The tier is the window's own granularity when None; ``ValidationError`` for a window
    or granularity that does not exist or a bucket wider than the window.
    """
    if window not in WINDOWS:
        raise ValidationError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    minutes, default = WINDOWS[window]
    granularity = granularity or default
    if granularity not in _TIER:
        raise ValidationError(f"granularity must be minute, hour or day, got {granularity!r}")
    tier = _TIER[granularity]
    if minutes < TIERS[tier]:
        raise ValidationError(f"a {window} window is shorter than one {granularity}")
    return minutes, tier


def _start(rows: _Rows, bucket: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(bucket * rows.width * 60, dt.timezone.utc)


def _throughput(rows: _Rows) -> list[ThroughputPoint]:
    return [
        ThroughputPoint(
            start=_start(rows, b),
            completed=rows.found[b].completed if b in rows.found else 0,
            failed=rows.found[b].failed if b in rows.found else 0,
            filling=b == rows.newest,
        )
        for b in rows.buckets
    ]


def _latency(rows: _Rows) -> list[LatencyPoint]:
    points = []
    for b in rows.buckets:
        row = rows.found.get(b)
        wait, run = _split(row)
        points.append(
            LatencyPoint(
                start=_start(rows, b),
                wait=Percentiles.of(wait),
                run=Percentiles.of(run),
                age=row.age if row else None,
                filling=b == rows.newest,
            )
        )
    return points


def _busiest(totals: list[QueueTotals]) -> list[QueueTotals]:
    return sorted(totals, key=lambda t: (-(t.completed + t.failed), t.queue))


def _totals(queue: str, rows: Iterable[Bucket]) -> QueueTotals:
    completed = failed = 0
    waits, runs = [], []
    for row in rows:
        completed += row.completed
        failed += row.failed
        wait, run = _split(row)
        waits.append(wait)
        runs.append(run)
    wait, run = histogram.merge(waits), histogram.merge(runs)
    return QueueTotals(
        queue=queue,
        completed=completed,
        failed=failed,
        wait=Percentiles.of(wait),
        run=Percentiles.of(run),
        wait_histogram=wait,
        run_histogram=run,
    )

"""What a board reads: :class:`MetricsHistoryProvider`, throughput series for one queue
or the rollup across queues, over a window of 60 minutes, 7, 30 or 90 days, by minute, hour or day.

Every bucket of the range is returned, zero where nothing finished (zero minutes are
never stored); the newest is flagged ``filling`` while it still covers the present.
Times are UTC on the store's database clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from qcore import retry
from qcore.errors import ValidationError
from qcore.metrics.store import PostgresMetricsStore, Retention
from qcore.sql import metrics as sql

__all__ = ["MetricsHistoryProvider", "ThroughputPoint"]

#: window -> (minutes covered, the granularity drawn by default)
WINDOWS = {"60m": (60, "minute"), "7d": (7 * 1440, "hour"), "30d": (30 * 1440, "day"),
          "90d": (90 * 1440, "day")}  # fmt: skip
_TIER = {"minute": "m", "hour": "h", "day": "d"}


@dataclass(frozen=True)
class ThroughputPoint:
    """One bucket: when it starts, the jobs completed and failed in it, and whether it
    still covers the present (so reads low)."""

    start: dt.datetime
    completed: int
    failed: int
    filling: bool


class MetricsHistoryProvider:
    """Reads ``store``; ``retention`` bounds what a range can show (a minute series
    never reaches further back than minute rows are kept)."""

    def __init__(self, store: PostgresMetricsStore, *, retention: Retention | None = None) -> None:
        self.store = store
        self.retention = retention or Retention()

    async def throughput(
        self, queue: str | None = None, *, window: str = "60m", granularity: str | None = None
    ) -> list[ThroughputPoint]:
        """Completed and failed per bucket for ``queue`` (None: every queue together)."""
        if window not in WINDOWS:
            raise ValidationError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
        minutes, default = WINDOWS[window]
        granularity = granularity or default
        if granularity not in _TIER:
            raise ValidationError(f"granularity must be minute, hour or day, got {granularity!r}")
        tier = _TIER[granularity]
        width = sql.TIERS[tier]
        if minutes < width:
            raise ValidationError(f"a {window} window is shorter than one {granularity}")
        ctx = await self.store.context()
        [row] = await retry.run(ctx, sql.database_minute())
        now = int(row["minute"])
        kept = self.retention.keeps(tier) * 1440
        first_minute = now - min(minutes, kept) + 1
        first, newest = first_minute // width, now // width
        rows = await retry.run(
            ctx,
            sql.read_series(ctx.schema, self.store.prefix),
            namespace=self.store.namespace,
            queue=queue if queue is not None else sql.GLOBAL,
            tier=tier,
            first=first,
        )
        found = {int(r["bucket"]): (int(r["completed"]), int(r["failed"])) for r in rows}
        return [
            ThroughputPoint(
                start=dt.datetime.fromtimestamp(bucket * width * 60, dt.timezone.utc),
                completed=found.get(bucket, (0, 0))[0],
                failed=found.get(bucket, (0, 0))[1],
                filling=bucket == newest,
            )
            for bucket in range(first, newest + 1)
        ]

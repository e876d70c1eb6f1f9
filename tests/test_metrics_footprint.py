"""The metrics store's footprint, measured: a simulated week of one busy queue (every
minute active, every histogram slot of both histograms used) written through the real
recorder, then the store's own ``stats()``. The ratios are asserted (a day of minute
rows against a day of hour rows); the bytes are printed (``-s``) and quoted in
docs/guide/metrics.md. The same week in the Redis store, measured by its ``MEMORY
USAGE``. A footprint is the store's, not the backend's: measured once, on PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from qcore.conformance.suite.test_metrics import drop_prefix, redis_client
from qcore.context import Context
from qcore.metrics import (
    BOUNDS_MS,
    MetricsHistoryAdmin,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
    RedisMetricsStore,
)

pytestmark = pytest.mark.postgres

DAYS = 7
#: the minutes written, up to the one before last (closed past the recorder's margin
#: whenever the tick runs): a week, less half an hour at its old end, so that a slow
#: machine whose clock moves on never sees the oldest minute pass retention
MINUTES = DAYS * 1440 - 30


def _default_retention(per_day: dict[str, float]) -> float:
    return 7 * per_day["minute"] + 90 * (per_day["hour"] + per_day["day"])


async def _busy_week(ctx: Context) -> None:
    """A queue ``busy`` whose every minute of the week finished jobs in every slot."""
    await ctx.db.execute(f"SELECT {ctx.q}.create_queue('busy', '{{}}'::jsonb)")
    # per minute of the week, one job per slot: wait and run both in that slot
    samples = [b / 2 for b in BOUNDS_MS] + [BOUNDS_MS[-1] * 2.0]
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (name, state, created_on, started_on, completed_on)"
        " SELECT 'busy', 'completed', t - 2 * ms * interval '1 millisecond',"
        " t - ms * interval '1 millisecond', t FROM"
        f" (SELECT date_trunc('minute', {ctx.q}.job_now()) - m * interval '1 minute'"
        "  + interval '30 seconds' AS t FROM generate_series(2, $1::int + 1) AS m) AS minutes,"
        " unnest($2::float8[]) AS ms",
        [MINUTES, samples],
    )


async def test_a_busy_week_costs_what_the_docs_say(shared: Context) -> None:
    ctx = shared
    await _busy_week(ctx)
    store = PostgresMetricsStore(ctx.db, schema=ctx.schema, backend=ctx.backend)
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    await ctx.db.execute(f"VACUUM ANALYZE {ctx.q}.qcore_metrics_series")
    usage = await MetricsHistoryAdmin(store).stats()
    [busy] = [u for u in usage.queues if u.queue == "busy"]
    minute, hour = busy.tiers["minute"], busy.tiers["hour"]
    assert minute.rows == MINUTES
    per_day = {
        "minute": minute.bytes / DAYS,
        "hour": hour.bytes / DAYS,
        "day": busy.tiers["day"].bytes / busy.tiers["day"].rows,
    }
    print(
        f"\nmetrics footprint, one busy queue: {per_day['minute'] / 1024:.1f} KiB/day of"
        f" minute rows, {per_day['hour'] / 1024:.2f} KiB/day of hour rows,"
        f" {per_day['day']:.0f} B/day of day rows; at the default retention (7 d minutes,"
        f" 90 d hours and days): {_default_retention(per_day) / 2**20:.2f} MiB"
        f" per queue, and as much again once for the rollup; {usage.bytes / 2**20:.2f} MiB"
        " on disk for this queue and the rollup"
    )
    # 60 minute rows to an hour row of the same size: a day of minutes costs ~60 hours'
    assert 50 <= per_day["minute"] / per_day["hour"] <= 70


async def test_a_busy_week_in_redis_costs_what_the_docs_say(shared: Context) -> None:
    ctx = shared
    client = await redis_client()
    prefix = f"qcore-footprint:{uuid.uuid4().hex[:12]}"
    try:
        await _busy_week(ctx)
        store = RedisMetricsStore(client, prefix=prefix, schema=ctx.schema)
        await MetricsRecorder(store, PgBossQueues(ctx)).tick()
        usage = await MetricsHistoryAdmin(store).stats()
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()
    [busy] = [u for u in usage.queues if u.queue == "busy"]
    minute, hour = busy.tiers["minute"], busy.tiers["hour"]
    assert minute.rows == MINUTES
    per_day = {
        "minute": minute.bytes / DAYS,
        "hour": hour.bytes / DAYS,
        "day": busy.tiers["day"].bytes / busy.tiers["day"].rows,
    }
    print(
        f"\nmetrics footprint in Redis, one busy queue: {per_day['minute'] / 1024:.1f} KiB/day"
        f" of minute buckets, {per_day['hour'] / 1024:.2f} KiB/day of hour buckets,"
        f" {per_day['day']:.0f} B/day of day buckets (MEMORY USAGE); at the default"
        f" retention: {_default_retention(per_day) / 2**20:.2f} MiB per queue, and as much"
        " again once for the rollup"
    )
    # a minute hash holds an hour of minutes as an hour hash holds a day of hours
    assert 25 <= per_day["minute"] / per_day["hour"] <= 80

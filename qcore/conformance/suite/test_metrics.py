"""Metrics history on every backend: finished jobs counted per minute into the minute,
hour and day tiers and the rollup, idempotently (a second recorder, a restart, the same
minutes counted again add nothing), each tier pruned past its retention on the schema's
controllable clock, and a store of a newer layout refused before anything is written.
Jobs are written finished at chosen minutes, so nothing here waits on a worker."""

from __future__ import annotations

from typing import Any

import pytest

from qcore.conformance.helpers import set_clock
from qcore.context import Context
from qcore.errors import ConfigError, SchemaVersionError, ValidationError
from qcore.metrics import (
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
    Retention,
)

pytestmark = pytest.mark.feature("metrics")


async def _queue(ctx: Context, name: str) -> None:
    await ctx.db.execute(f"SELECT {ctx.q}.create_queue($1, $2)", [name, {"policy": "standard"}])


async def _finished(ctx: Context, queue: str, state: str, minutes_ago: float, n: int = 1) -> None:
    """``n`` jobs of ``queue`` that finished in ``state`` ``minutes_ago`` on the schema's
    clock."""
    for _ in range(n):
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.job (name, state, created_on, started_on, completed_on)"
            f" SELECT $1, $2::{ctx.q}.job_state, t - interval '1 minute', t, t FROM"
            f" (SELECT {ctx.q}.job_now() - $3 * interval '1 minute' AS t) AS at",
            [queue, state, minutes_ago],
        )


def _store(ctx: Context, **options: Any) -> PostgresMetricsStore:
    return PostgresMetricsStore(ctx.db, schema=ctx.schema, backend=ctx.backend, **options)


def _totals(points: list[Any]) -> tuple[int, int]:
    return sum(p.completed for p in points), sum(p.failed for p in points)


async def _tiers(ctx: Context, queue: str) -> dict[str, tuple[int, int]]:
    rows = await ctx.db.execute(
        f"SELECT tier, sum(completed) AS c, sum(failed) AS f FROM {ctx.q}.qcore_metrics_series"
        " WHERE queue = $1 GROUP BY tier",
        [queue],
    )
    return {r["tier"]: (int(r["c"]), int(r["f"])) for r in rows}


async def test_counts_land_in_every_tier_and_the_rollup_once(ctx: Context) -> None:
    for name in ("mail", "sms"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=3)
    await _finished(ctx, "mail", "failed", 10)
    await _finished(ctx, "mail", "completed", 30, n=2)
    await _finished(ctx, "sms", "completed", 20)
    store = _store(ctx)
    first = MetricsRecorder(store, PgBossQueues(ctx))

    assert await first.tick() == 3  # three queue-minutes held finished jobs

    provider = MetricsHistoryProvider(store)
    mail = await provider.throughput("mail", window="60m")
    assert len(mail) == 60 and mail[-1].filling and not mail[0].filling
    assert _totals(mail) == (5, 1)
    assert _totals(await provider.throughput(window="60m")) == (6, 1)  # the rollup
    expected = {"m": (5, 1), "h": (5, 1), "d": (5, 1)}
    assert await _tiers(ctx, "mail") == expected

    # a second recorder, and the first again: nothing more
    assert await MetricsRecorder(store, PgBossQueues(ctx)).tick() == 0
    assert await first.tick() == 0
    assert await _tiers(ctx, "mail") == expected
    assert await _tiers(ctx, "__global__") == {"m": (6, 1), "h": (6, 1), "d": (6, 1)}


async def test_a_restart_resumes_from_the_newest_minute_stored(ctx: Context) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 30)
    await _finished(ctx, "mail", "completed", 10)
    store = _store(ctx)
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    # the older minute's job is deleted (retention), a late one lands in the newest minute
    await ctx.db.execute(
        f"DELETE FROM {ctx.q}.job WHERE completed_on < {ctx.q}.job_now() - interval '20 minutes'"
    )
    await _finished(ctx, "mail", "failed", 10)

    assert await MetricsRecorder(store, PgBossQueues(ctx)).tick() == 1
    assert await _tiers(ctx, "mail") == {"m": (2, 1), "h": (2, 1), "d": (2, 1)}


async def test_each_tier_is_pruned_past_its_retention(ctx: Context) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 20 * 60)  # 20 hours ago
    store = _store(ctx)
    keep = Retention(minutes=1, hours=2, days=3)
    await MetricsRecorder(store, PgBossQueues(ctx), retention=keep).tick()
    assert await _tiers(ctx, "mail") == {"m": (1, 0), "h": (1, 0), "d": (1, 0)}
    try:
        await set_clock(ctx, 2 * 86400)  # the job is now 68 hours old
        await MetricsRecorder(store, PgBossQueues(ctx), retention=keep).tick()
    finally:
        await set_clock(ctx, 0)
    assert await _tiers(ctx, "mail") == {"d": (1, 0)}


async def test_the_allowlist_and_a_queue_created_later(ctx: Context) -> None:
    await _queue(ctx, "mail")
    await _queue(ctx, "secret")
    await _finished(ctx, "mail", "completed", 5)
    await _finished(ctx, "secret", "completed", 5)
    store = _store(ctx)
    recorder = MetricsRecorder(store, PgBossQueues(ctx, allow={"mail", "later"}))
    await recorder.tick()
    await _queue(ctx, "later")
    await _finished(ctx, "later", "completed", 3)
    await recorder.tick()
    provider = MetricsHistoryProvider(store)
    assert _totals(await provider.throughput("later")) == (1, 0)
    assert _totals(await provider.throughput("secret")) == (0, 0)
    assert _totals(await provider.throughput()) == (2, 0)


async def test_a_newer_layout_is_refused_and_migrate_false_says_what_to_run(
    ctx: Context,
) -> None:
    with pytest.raises(ConfigError, match="migrate_metrics"):
        await _store(ctx, migrate=False).context()
    await _store(ctx).context()
    await ctx.db.execute(
        f"UPDATE {ctx.q}.qcore_metrics_meta SET value = '99' WHERE key = 'schema_version'"
    )
    with pytest.raises(SchemaVersionError, match=r"layout version 99.*writes version 1"):
        await _store(ctx).context()


async def test_bad_options_are_refused(ctx: Context) -> None:
    with pytest.raises(ValidationError, match="table_prefix"):
        _store(ctx, table_prefix="Bad-Prefix")
    with pytest.raises(ValidationError, match=r"Retention\.minutes"):
        Retention(minutes=0)
    with pytest.raises(ValidationError, match="interval_seconds"):
        MetricsRecorder(_store(ctx), PgBossQueues(ctx), interval_seconds=0)
    with pytest.raises(ValidationError, match="window"):
        await MetricsHistoryProvider(_store(ctx)).throughput(window="1y")

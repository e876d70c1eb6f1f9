"""Cached queue counts and their history on every backend: one pass makes
``get_queue()`` agree with a count of the table; ``get_queue_stats`` serves the cache
or the persisted series; backlog and slow-query warnings fire on a constructed case
and not otherwise."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from qcore import Boss, retry
from qcore.backend import Backend
from qcore.conformance.helpers import running, set_clock
from qcore.context import Context
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.events import Events, WarningEvent
from qcore.services.maintenance import Maintenance
from qcore.services.monitor import supervise
from qcore.services.queue_stats import BACKLOG
from qcore.services.warnings import SLOW_QUERY, slow_query_watch
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("stats")


async def _a_busy_queue(ctx: Context, name: str) -> None:
    """Jobs of every kind the gauges tell apart: 3 ready, 2 deferred, 1 active, 1 failed,
    2 completed, 1 cancelled."""
    await queues.create_queue(ctx, name, retry_limit=0)
    await jobs.insert(ctx, name, [{"data": i} for i in range(3)])
    await jobs.insert(ctx, name, [{"data": i, "start_after": 3600} for i in range(2)])
    for _ in range(5):
        await jobs.send(ctx, name, priority=-1)  # claimed below, after the ready ones
    taken = await jobs.fetch(ctx, name, batch_size=8, ignore_start_after=False)
    mine = [j for j in taken if j.priority == -1]
    await jobs.fail(ctx, name, mine[0].id)
    await jobs.complete(ctx, name, [mine[1].id, mine[2].id])
    await jobs.cancel(ctx, name, mine[3].id)
    # mine[4] stays active; the three ready jobs were claimed too: give them back
    await ctx.db.execute(
        f"UPDATE {ctx.q}.job SET state = 'created', started_on = NULL"
        " WHERE name = $1 AND priority = 0 AND state = 'active'",
        [name],
    )


async def _table_counts(ctx: Context, name: str) -> dict[str, int]:
    waiting = "state < 'active' AND start_after"
    [row] = await ctx.db.execute(
        "SELECT"
        f" count(*) FILTER (WHERE {waiting} > {ctx.q}.job_now())::int AS deferred_count,"
        f" count(*) FILTER (WHERE {waiting} <= {ctx.q}.job_now())::int AS ready_count,"
        " count(*) FILTER (WHERE state < 'active')::int AS queued_count,"
        " count(*) FILTER (WHERE state = 'active')::int AS active_count,"
        " count(*) FILTER (WHERE state = 'failed')::int AS failed_count,"
        " count(*)::int AS total_count"
        f" FROM {ctx.q}.job WHERE name = $1",
        [name],
    )
    return dict(row)


async def test_one_pass_makes_the_cached_counts_true(ctx: Context) -> None:
    await _a_busy_queue(ctx, "q")
    before = await queues.get_queue(ctx, "q")
    assert before is not None and before.total_count == 0  # nothing counted yet
    result = await supervise(ctx)
    assert result.cached == ("q",)
    after = await queues.get_queue(ctx, "q")
    assert after is not None
    expected = await _table_counts(ctx, "q")
    assert expected == {
        "deferred_count": 2,
        "ready_count": 3,
        "queued_count": 5,
        "active_count": 1,
        "failed_count": 1,
        "total_count": 10,
    }
    assert {k: getattr(after, k) for k in expected} == expected
    # the finished jobs count as retained once they are past the 10 s watermark
    assert after.retained_count == 0
    await set_clock(ctx, 60)
    await supervise(ctx)
    later = await queues.get_queue(ctx, "q")
    assert later is not None and later.retained_count == 3 and later.total_count == 10


@pytest.mark.usefixtures("installed")
async def test_get_queue_stats_serves_the_cache_and_counts_a_new_queue(
    db: Any, backend: Backend, schema: str
) -> None:
    async with running(Boss(db=db, backend=backend, schema=schema, supervise=False)) as boss:
        ctx = boss.context()
        await _a_busy_queue(ctx, "q")
        [first] = await boss.get_queue_stats("q")  # never counted: counted now
        assert first["queued_count"] == 5 and first["total_count"] == 10
        assert first["captured_on"] is not None
        await jobs.send(ctx, "q")
        [cached] = await boss.get_queue_stats("q")  # a minute's cache is served
        assert cached["queued_count"] == 5
        await set_clock(ctx, 120)
        [forced] = await boss.get_queue_stats("q", force=True)  # older than a minute
        assert forced["queued_count"] == 6
        with pytest.raises(QueueNotFoundError):
            await boss.get_queue_stats("missing")


@pytest.mark.usefixtures("installed")
async def test_persisted_snapshots_make_a_series(db: Any, backend: Backend, schema: str) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, persist_queue_stats=True)
    async with running(boss):
        ctx = boss.context()
        await queues.create_queue(ctx, "q")
        for minute in range(4):
            await set_clock(ctx, minute * 60)
            await jobs.send(ctx, "q", {"minute": minute})
            await boss.supervise()
        series = await boss.get_queue_stats("q")
        assert [s["queued_count"] for s in series] == [4, 3, 2, 1]  # newest first
        assert sum(s["created_delta"] or 0 for s in series) >= 3  # windows lag by 10 s
        two = await boss.get_queue_stats("q", limit=2)
        assert [s["queued_count"] for s in two] == [4, 3]
        buckets = await boss.get_queue_stats("q", bucket_seconds=3600, aggregate="max")
        assert len(buckets) <= 2 and max(b["queued_count"] or 0 for b in buckets) == 4
        points = await boss.get_queue_stats("q", max_data_points=2, aggregate="min")
        assert 1 <= len(points) <= 2
        for bad in ({"limit": 0}, {"aggregate": "median", "bucket_seconds": 60}):
            with pytest.raises(ValidationError):
                await boss.get_queue_stats("q", **bad)
        naive = dt.datetime(2026, 1, 1)
        with pytest.raises(ValidationError, match="aware"):
            await boss.get_queue_stats("q", from_=naive)


@pytest.mark.feature("warnings")
async def test_backlog_warns_over_the_threshold_and_not_at_it(ctx: Context) -> None:
    events = Events()
    warnings: list[WarningEvent] = []
    events.on("warning", warnings.append)
    await queues.create_queue(ctx, "own", warning_queue_size=3)
    await queues.create_queue(ctx, "default")
    await jobs.insert(ctx, "own", [{"data": i} for i in range(3)])
    await jobs.insert(ctx, "default", [{"data": i} for i in range(5)])
    settings = Maintenance(warning_queue_size=5)
    await supervise(ctx, settings=settings, events=events)
    assert [w for w in warnings if w.type == BACKLOG] == []  # at the thresholds: quiet
    await jobs.send(ctx, "own")
    await supervise(ctx, settings=settings, events=events)
    [backlog] = [w for w in warnings if w.type == BACKLOG]
    assert backlog.data["name"] == "own" and backlog.data["queued_count"] == 4
    assert backlog.data["warning_queue_size"] == 3


@pytest.mark.feature("warnings")
async def test_a_slow_statement_warns_with_its_values_redacted(ctx: Context) -> None:
    events = Events()
    warnings: list[WarningEvent] = []
    events.on("warning", warnings.append)
    watched = Context(
        db=ctx.db,
        backend=ctx.backend,
        schema_spec=ctx.schema_spec,
        watch=slow_query_watch(events, 1),
    )
    await retry.execute(watched, "SELECT $1::text AS secret", ["hunter2"])
    assert warnings == []  # fast: nothing
    await retry.execute(watched, "SELECT pg_sleep(1.5), $1::text AS secret", ["hunter2"])
    [slow] = warnings
    assert slow.type == SLOW_QUERY and slow.data["elapsed"] > 1
    assert "pg_sleep" in slow.data["sql"] and slow.data["values"] == ["<str>"]
    assert "hunter2" not in repr(slow)

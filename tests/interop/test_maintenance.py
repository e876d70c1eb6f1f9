"""Maintenance shared with the real pg-boss 12.38 on one schema: pg-boss reads the
counts and snapshots qcore wrote, and the retention claim keeps a mixed fleet from
deleting a queue's jobs twice in an interval. Local PostgreSQL only."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from pytest import approx

from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.context import Context
from qcore.services.maintenance import Maintenance
from qcore.services.monitor import supervise
from qcore.verbs import jobs, queues
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = interop_marks()


def pgboss(dsn: str, ctx: Context, *actions: dict[str, Any], **options: Any) -> list[Any]:
    """Run pg-boss actions (after ``start``) on qcore's schema; each action's result."""
    results = run_ok(
        {
            "connectionString": dsn,
            "schema": ctx.schema_spec,
            "migrate": False,
            "options": {"supervise": False, **options},
            "actions": [{"op": "start"}, *actions, {"op": "stop"}],
        }
    )
    return [r.get("result") for r in results[1:-1]]


async def test_pgboss_reads_the_counts_and_snapshots_qcore_wrote(
    pg_dsn: str, shared: Context
) -> None:
    ctx = shared
    await queues.create_queue(ctx, "q")
    await jobs.insert(ctx, "q", [{"data": i} for i in range(3)])
    await jobs.send(ctx, "q", start_after=3600)
    settings = Maintenance(persist_queue_stats=True)
    await supervise(ctx, settings=settings)
    await set_clock(ctx, 60)
    await jobs.send(ctx, "q")
    await supervise(ctx, settings=settings)

    [queue, series] = await asyncio.to_thread(
        pgboss,
        pg_dsn,
        ctx,
        {"op": "getQueue", "args": ["q"]},
        {"op": "getQueueStats", "args": ["q"]},
        persistQueueStats=True,
    )
    assert queue["queuedCount"] == 5 and queue["deferredCount"] == 1
    assert queue["totalCount"] == 5
    assert [s["queuedCount"] for s in series] == [5, 4]  # newest first, as qcore wrote them
    assert [s["deferredCount"] for s in series] == [1, 1]


async def test_latency_percentiles_read_alike_on_both_sides(pg_dsn: str, shared: Context) -> None:
    """``get_queue_stats(percentiles=...)``: each snapshot's wait and run percentiles,
    read off its histograms, are the numbers pg-boss's ``getQueueStats`` gives for the
    same snapshot (slot 0, the open last slot and the interpolation between)."""
    ctx = shared
    await queues.create_queue(ctx, "q")
    settings = Maintenance(persist_queue_stats=True)
    await supervise(ctx, settings=settings)  # opens the throughput window
    await ctx.db.execute(  # 300 jobs, waits from 1 ms to hours, runs from 2 ms to minutes
        f"INSERT INTO {ctx.q}.job (name, state, created_on, start_after, started_on,"
        " completed_on) SELECT 'q', 'completed', t - (w + r) * interval '1 second',"
        " t - (w + r) * interval '1 second',"
        f" t - r * interval '1 second', t FROM (SELECT {ctx.q}.job_now() AS t,"
        " 0.001 * 1.06 ^ g AS w, 0.002 * 1.04 ^ g AS r FROM generate_series(1, 300) g) x"
    )
    await set_clock(ctx, 60)
    await supervise(ctx, settings=settings)
    wanted = [50, 95, 99.9, 1]
    boss = Boss(pg_dsn, schema=ctx.schema, migrate=False, supervise=False, schedule=False,
                persist_queue_stats=True)  # fmt: skip
    async with boss:
        ours = await boss.get_queue_stats("q", percentiles=wanted)
    [theirs] = await asyncio.to_thread(
        pgboss,
        pg_dsn,
        ctx,
        {"op": "getQueueStats", "args": ["q", {"percentiles": wanted}]},
        persistQueueStats=True,
    )
    assert len(ours) == len(theirs) == 2
    for mine, pgs in zip(ours, theirs, strict=True):  # the same to the last bit or two
        assert [(p["p"], p["wait_seconds"], p["run_seconds"]) for p in mine["percentiles"]] == [
            (float(p["p"]), approx(p["waitSeconds"]), approx(p["runSeconds"]))
            for p in pgs["percentiles"]
        ]
    counted = ours[0]["percentiles"]
    assert all(p["wait_seconds"] is not None for p in counted)  # the newest has its jobs
    assert ours[1]["percentiles"][0]["wait_seconds"] is None  # the first window: none


async def test_pgboss_waits_out_the_counting_qcore_deferred(pg_dsn: str, shared: Context) -> None:
    """qcore's pass, its counting slow enough to hold back vacuum, defers counting in the
    version row: pg-boss's pass within the deferral counts nothing (the queue's
    ``monitor_on`` stays), and counts again after it."""
    ctx = shared
    await queues.create_queue(ctx, "q")
    ticks = itertools.count(0, 3600)  # each reading of the pass's clock an hour on
    await supervise(ctx, clock=lambda: float(next(ticks)))
    [version] = await ctx.db.execute(f"SELECT monitor_backoff_on FROM {ctx.q}.version")
    assert version["monitor_backoff_on"] is not None

    async def counted_on() -> Any:
        [row] = await ctx.db.execute(f"SELECT monitor_on FROM {ctx.q}.queue WHERE name = 'q'")
        return row["monitor_on"]

    before = await counted_on()
    await set_clock(ctx, 65)  # the monitor interval has passed, the deferral has not
    passes = {"op": "supervise", "args": ["q"]}
    await asyncio.to_thread(pgboss, pg_dsn, ctx, passes, monitorIntervalSeconds=60)
    assert await counted_on() == before
    await set_clock(ctx, 3 * 3600)  # past any deferral
    await asyncio.to_thread(pgboss, pg_dsn, ctx, passes, monitorIntervalSeconds=60)
    assert await counted_on() != before


async def test_one_retention_pass_per_interval_across_qcore_and_pgboss(
    pg_dsn: str, shared: Context
) -> None:
    """qcore's background pass claims the queue for its maintenance interval: pg-boss's
    supervise() in the same interval deletes nothing more, and a second qcore instance
    neither; after the interval pg-boss takes its turn."""
    ctx = shared
    await queues.create_queue(ctx, "q", delete_after_seconds=60)

    async def finished_jobs(n: int) -> None:
        await jobs.insert(ctx, "q", [{"data": i} for i in range(n)])
        await ctx.db.execute(
            f"UPDATE {ctx.q}.job SET state = 'completed', completed_on = {ctx.q}.job_now()"
            " WHERE name = 'q' AND state = 'created'"
        )

    async def left() -> int:
        rows = await ctx.db.execute(f"SELECT count(*)::int AS n FROM {ctx.q}.job")
        return int(rows[0]["n"])

    await finished_jobs(4)
    await set_clock(ctx, 120)
    first = await supervise(ctx, monitor_interval_seconds=60, maintenance_interval_seconds=3600)
    assert first.deleted == 4 and await left() == 0

    await finished_jobs(3)
    await set_clock(ctx, 240)  # due by age, but within qcore's claimed interval
    await asyncio.to_thread(
        pgboss, pg_dsn, ctx, {"op": "supervise", "args": ["q"]}, maintenanceIntervalSeconds=3600
    )
    assert await left() == 3  # pg-boss honoured qcore's claim
    other = await supervise(ctx, monitor_interval_seconds=60, maintenance_interval_seconds=3600)
    assert other.deleted == 0 and await left() == 3  # so did the second qcore instance

    await set_clock(ctx, 3 * 3600)  # the interval has passed: pg-boss's turn
    await asyncio.to_thread(
        pgboss, pg_dsn, ctx, {"op": "supervise", "args": ["q"]}, maintenanceIntervalSeconds=3600
    )
    assert await left() == 0


async def test_two_qcore_and_one_pgboss_process_claim_each_step_once_per_interval(
    pg_dsn: str, shared: Context
) -> None:
    """Three instances on one schema (two qcore Boss objects on their own pools, one
    pg-boss process), every one running its supervise loop each second with a monitor
    and maintenance interval of 2 s: a trigger records every claim of a queue's
    monitor and maintenance steps, and no two claims of a step are closer than 2 s on
    the database clock, whoever made them."""
    ctx = shared
    await queues.create_queue(ctx, "q")
    await ctx.db.execute_script(
        f"CREATE TABLE {ctx.q}.claims (step text, at timestamptz, by text);"
        f" CREATE FUNCTION {ctx.q}.record_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN"
        " IF NEW.monitor_claim_on IS DISTINCT FROM OLD.monitor_claim_on"
        " AND NEW.monitor_claim_on IS NOT NULL THEN"
        f" INSERT INTO {ctx.q}.claims VALUES ('monitor', NEW.monitor_claim_on,"
        " current_setting('application_name')); END IF;"
        " IF NEW.maintain_on IS DISTINCT FROM OLD.maintain_on AND NEW.maintain_on IS NOT NULL"
        f" THEN INSERT INTO {ctx.q}.claims VALUES ('maintain', NEW.maintain_on,"
        " current_setting('application_name')); END IF;"
        " RETURN NEW; END $$;"
        f" CREATE TRIGGER record_claim AFTER UPDATE ON {ctx.q}.queue"
        # queue q's claims (the timekeeper's send-it queue is claimed beside it)
        f" FOR EACH ROW WHEN (NEW.name = 'q') EXECUTE FUNCTION {ctx.q}.record_claim()"
    )
    options: dict[str, Any] = dict(
        schema=ctx.schema_spec,
        supervise_interval_seconds=1,
        monitor_interval_seconds=2,
        maintenance_interval_seconds=2,
    )
    first, second = Boss(pg_dsn, **options), Boss(pg_dsn, **options)
    await first.start()
    await second.start()
    try:
        await asyncio.to_thread(
            pgboss,
            pg_dsn,
            ctx,
            {"op": "sleep", "args": [12_000]},
            supervise=True,
            superviseIntervalSeconds=1,
            monitorIntervalSeconds=2,
            maintenanceIntervalSeconds=2,
        )
    finally:
        await second.stop()
        await first.stop()
    rows = await ctx.db.execute(f"SELECT step, at, by FROM {ctx.q}.claims ORDER BY step, at")
    for step in ("monitor", "maintain"):
        times = [r["at"] for r in rows if r["step"] == step]
        assert len(times) >= 3, rows  # the steps ran, more than once, over 12 s
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 2.0, (step, gaps)  # never two claims within an interval

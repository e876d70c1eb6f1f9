"""The statistics step of the supervise pass: a job table that outgrew its planner
statistics is analyzed once, a partitioned queue's own table as well as the shared one,
and a table whose statistics still describe it is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from qcore.conformance.helpers import until
from qcore.context import Context
from qcore.services.statistics import MIN_CHANGED_ROWS, refresh_statistics
from qcore.verbs import jobs, queues

pytestmark = [pytest.mark.feature("maintenance"), pytest.mark.requires("vacuum_stats")]

#: statistics reach pg_stat_user_tables within a second or so; a busy machine gets more
STATS_DEADLINE = 60.0


async def _queue_table(ctx: Context, name: str, *, partition: bool = False) -> str:
    """Queue ``name``'s job table, autovacuum off (so only the step analyzes it)."""
    if partition:
        await queues.create_queue(ctx, name, partition=True)
    else:
        await queues.create_queue(ctx, name)
    [row] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = $1", [name])
    table = str(row["table_name"])
    await ctx.db.execute_script(f"ALTER TABLE {ctx.q}.{table} SET (autovacuum_enabled = false)")
    return table


async def _grow(ctx: Context, name: str, table: str, n: int) -> None:
    """``n`` jobs more in queue ``name``, seen by the statistics views."""
    [before] = await _stats(ctx, table)
    await jobs.insert(ctx, name, [{"data": i} for i in range(n)])

    async def counted() -> bool:
        [now] = await _stats(ctx, table)
        return bool(int(now["changed"]) >= int(before["changed"]) + n)

    await until(counted, STATS_DEADLINE, 0.2, f"{n} changed rows in {table}")


async def _stats(ctx: Context, table: str) -> list[dict[str, Any]]:
    return await ctx.db.execute(
        "SELECT n_mod_since_analyze AS changed, last_analyze FROM pg_stat_user_tables"
        " WHERE schemaname = $1 AND relname = $2",
        [ctx.schema, table],
    )


async def test_a_table_that_outgrew_its_statistics_is_analyzed_once(ctx: Context) -> None:
    table = await _queue_table(ctx, "q")
    await _grow(ctx, "q", table, MIN_CHANGED_ROWS // 2)
    assert await refresh_statistics(ctx) == []  # too few changes to matter
    await _grow(ctx, "q", table, MIN_CHANGED_ROWS)
    assert await refresh_statistics(ctx) == [table]  # never analyzed, 1,500 rows
    [row] = await _stats(ctx, table)
    assert row["last_analyze"] is not None
    assert await refresh_statistics(ctx) == []  # its statistics describe it now


async def test_a_table_is_analyzed_again_once_it_doubled(ctx: Context) -> None:
    table = await _queue_table(ctx, "q")
    await _grow(ctx, "q", table, 2 * MIN_CHANGED_ROWS)
    assert await refresh_statistics(ctx) == [table]
    await _grow(ctx, "q", table, MIN_CHANGED_ROWS)  # half again: autovacuum's business
    assert await refresh_statistics(ctx) == []
    await _grow(ctx, "q", table, MIN_CHANGED_ROWS)  # twice the rows its statistics count
    assert await refresh_statistics(ctx) == [table]


async def test_a_partitioned_queue_s_own_table_is_analyzed_beside_the_shared_one(
    ctx: Context,
) -> None:
    if not ctx.backend.schema.partitioned:
        pytest.skip("the backend's schema shape has no partitioned queues")
    shared = await _queue_table(ctx, "q")
    own = await _queue_table(ctx, "p", partition=True)
    assert own != shared
    await _grow(ctx, "p", own, MIN_CHANGED_ROWS)
    assert await refresh_statistics(ctx) == [own]
    await _grow(ctx, "q", shared, MIN_CHANGED_ROWS)
    await _grow(ctx, "p", own, 2 * MIN_CHANGED_ROWS)
    assert sorted(await refresh_statistics(ctx)) == sorted([own, shared])

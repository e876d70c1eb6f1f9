"""The vacuum checks: ``autovacuum_disabled`` when nothing vacuums a job table whose dead
rows keep growing, ``xmin_horizon`` when a vacuum ran and an open transaction kept it
from reclaiming anything; quiet on the first pass and when vacuum keeps up."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from qcore.conformance.helpers import until
from qcore.conformance.provisioners import Provisioner
from qcore.context import Context
from qcore.events import Events, WarningEvent
from qcore.services.vacuum import AUTOVACUUM_DISABLED, XMIN_HORIZON, VacuumWatch
from qcore.verbs import jobs, queues

pytestmark = [pytest.mark.feature("warnings"), pytest.mark.requires("vacuum_stats")]

#: statistics reach pg_stat_user_tables within a second or so; a busy machine gets more
STATS_DEADLINE = 60.0


async def _watched_queue(ctx: Context, *, autovacuum: bool, partition: bool = False) -> str:
    """Queue ``q``, its job table over PostgreSQL's vacuum line past 10 dead rows; the
    table's name (the queue's own with ``partition``, beside an unpartitioned queue)."""
    await queues.create_queue(ctx, "plain")
    await queues.create_queue(ctx, "q", partition=partition)
    [row] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'q'")
    table = str(row["table_name"])
    await ctx.db.execute_script(
        f"ALTER TABLE {ctx.q}.{table} SET (autovacuum_enabled = {str(autovacuum).lower()},"
        " autovacuum_vacuum_threshold = 10, autovacuum_vacuum_scale_factor = 0)"
    )
    return table


async def _dead_rows(ctx: Context, table: str, at_least: int) -> None:
    """Wait until the statistics show ``at_least`` dead rows in ``table``."""

    async def enough() -> bool:
        rows = await ctx.db.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
            [ctx.schema, table],
        )
        return bool(rows) and int(rows[0]["n_dead_tup"]) >= at_least

    await until(enough, STATS_DEADLINE, 0.2, f"{at_least} dead rows in {table}")


async def _churn(ctx: Context, n: int) -> None:
    await jobs.insert(ctx, "q", [{"data": i} for i in range(n)])
    await ctx.db.execute(f"DELETE FROM {ctx.q}.job WHERE name = 'q'")


def _watching() -> tuple[Events, list[WarningEvent]]:
    events, seen = Events(), list[WarningEvent]()
    events.on("warning", seen.append)
    return events, seen


@pytest.mark.parametrize("partition", [False, True], ids=["common-table", "partitioned"])
async def test_autovacuum_disabled_warns_on_the_second_pass_as_garbage_grows(
    ctx: Context, partition: bool
) -> None:
    table = await _watched_queue(ctx, autovacuum=False, partition=partition)
    events, seen = _watching()
    watch = VacuumWatch()
    await _churn(ctx, 50)
    await _dead_rows(ctx, table, 50)
    assert await watch.check(ctx, events) == []  # first observation: evidence only
    await _churn(ctx, 50)
    await _dead_rows(ctx, table, 100)
    assert await watch.check(ctx, events) == [AUTOVACUUM_DISABLED]
    [warning] = seen
    assert warning.data["table"] == table and warning.data["dead"] >= 100
    await _churn(ctx, 50)
    await _dead_rows(ctx, table, 150)
    assert await watch.check(ctx, events) == []  # once per episode


async def test_a_vacuum_kept_up_with_stays_quiet(ctx: Context) -> None:
    table = await _watched_queue(ctx, autovacuum=False)
    events, seen = _watching()
    watch = VacuumWatch()
    for _ in range(3):  # a manual schedule: vacuumed after each churn
        await _churn(ctx, 50)
        await _dead_rows(ctx, table, 50)
        await watch.check(ctx, events)
        await ctx.db.execute(f"VACUUM {ctx.q}.{table}")
    assert seen == []


async def test_xmin_horizon_names_the_open_transaction_that_pins_it(
    ctx: Context, provisioned: Provisioner, backend: Any
) -> None:
    if backend.capabilities.single_session:
        pytest.skip(f"{backend.name} has one session: no second transaction can hold the horizon")
    table = await _watched_queue(ctx, autovacuum=True)  # it may run, and fail, too
    events, seen = _watching()
    watch = VacuumWatch()
    with psycopg.connect(provisioned.url, application_name="report-tool") as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class")  # takes the snapshot: pins the horizon
        await _churn(ctx, 50)
        await _dead_rows(ctx, table, 50)
        assert await watch.check(ctx, events) == []
        await ctx.db.execute(f"VACUUM {ctx.q}.{table}")  # runs, reclaims nothing

        async def vacuumed() -> bool:
            rows = await ctx.db.execute(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1"
                " AND relname = $2",
                [ctx.schema, table],
            )
            return int(rows[0]["vacuum_count"]) >= 1

        await until(vacuumed, STATS_DEADLINE, 0.2, "the vacuum in the statistics")
        assert await watch.check(ctx, events) == [XMIN_HORIZON]
        holder.rollback()
    [warning] = seen
    assert warning.data["source"] == "backends" and warning.data["table"] == table
    assert warning.data["holder"]["application_name"] == "report-tool"
    assert "query" not in warning.data["holder"]  # never a query's text

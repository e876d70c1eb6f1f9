"""The vacuum check names a holder that can pin the job tables: a transaction open in
another database of the same server does not (the server computes a table's horizon
from the backends of its own database), however old it is."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from qcore.conformance.helpers import until
from qcore.conformance.provisioners import Provisioner
from qcore.conformance.suite.test_vacuum import (
    STATS_DEADLINE,
    _churn,
    _dead_rows,
    _watched_queue,
    _watching,
)
from qcore.context import Context
from qcore.services.vacuum import XMIN_HORIZON, VacuumWatch
from tests.conftest import ADMIN_DSN

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.feature("warnings"),
    pytest.mark.requires("vacuum_stats"),
]


async def test_a_transaction_in_another_database_is_not_named(
    ctx: Context, provisioned: Provisioner
) -> None:
    table = await _watched_queue(ctx, autovacuum=True)  # it may run, and fail, too
    events, seen = _watching()
    watch = VacuumWatch()
    with (
        psycopg.connect(ADMIN_DSN, application_name="elsewhere") as elsewhere,
        psycopg.connect(provisioned.url, application_name="report-tool") as holder,
    ):
        elsewhere.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        elsewhere.execute("SELECT count(*) FROM pg_class")  # older than the holder's
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class")
        await _churn(ctx, 50)
        await _dead_rows(ctx, table, 50)
        assert await watch.check(ctx, events) == []
        await ctx.db.execute(f"VACUUM {ctx.q}.{table}")

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
        elsewhere.rollback()
    [warning] = seen
    holder_row: dict[str, Any] = warning.data["holder"]
    assert holder_row["application_name"] == "report-tool"

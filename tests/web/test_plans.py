"""A page of a queue's jobs (``Boss.browse_jobs``, the dashboard's job list) costs the
same on the first page and a deep one: the page reads the ``(name, created_on)`` index
backwards and stops at the page's end (ties on ``created_on`` put in order as they
come), reading no row above it (no OFFSET).

On a table the planner has statistics for. Right after a bulk insert into a table
never analyzed, the planner believes it nearly empty and may read the whole range
below the cursor once (a bitmap scan, then a top-N sort) until autovacuum analyzes it;
the claim avoids that by ordering on the fetch index's own keys, a page needs the id to
break ties."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore import Boss
from qcore.sql import jobs as job_sql
from tests.plans import nodes, sorts_over_jobs

pytestmark = [pytest.mark.feature("dashboard"), pytest.mark.postgres]

BACKLOG = 20_000
SCHEMA = "qcore_browse_plan"


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False)
    async with instance:
        yield instance
        await instance.db.execute_script(f"DROP SCHEMA {SCHEMA} CASCADE")


@pytest.mark.parametrize("partition", [False, True], ids=["shared", "partition"])
async def test_a_deep_page_reads_the_index_in_order_and_stops(boss: Boss, partition: bool) -> None:
    await boss.create_queue("q", partition=partition)
    (queue,) = await boss.db.execute(f"SELECT table_name FROM {SCHEMA}.queue WHERE name = 'q'")
    table = str(queue["table_name"])
    for start in range(0, BACKLOG, 5_000):
        await boss.insert("q", [{"data": {"n": n}} for n in range(start, start + 5_000)])
    await boss.db.execute_script(f"ANALYZE {SCHEMA}.{table}")
    first = await boss.browse_jobs("q", limit=50)
    assert [j.data["n"] for j in first] == list(range(BACKLOG - 1, BACKLOG - 51, -1))
    # the page after the 10,000th newest job
    deep = (await boss.find_jobs("q", limit=BACKLOG))[BACKLOG - 10_000]
    assert deep.created_on is not None
    statement = job_sql.browse_jobs(boss.context().q, by_states=False, paged=True)
    params = statement.bind(queue="q", before_created=deep.created_on, before_id=deep.id, limit=50)
    (explained,) = await boss.db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql, params)
    plan: dict[str, Any] = explained["QUERY PLAN"][0]["Plan"]
    assert not [s for s in sorts_over_jobs(plan, {table, "job"}) if "Incremental" not in s]
    scans = [n for n in nodes(plan) if "Index" in n["Node Type"] and "Relation Name" in n]
    assert scans and all(n["Scan Direction"] == "Backward" for n in scans), scans
    # rows read from the job table: the page, never the 10,000 below the cursor
    assert sum(int(n["Actual Rows"]) for n in scans if n["Relation Name"] == table) <= 2 * 51
    page = await boss.browse_jobs("q", before=(deep.created_on, deep.id), limit=50)
    assert [j.data["n"] for j in page] == list(range(deep.data["n"] - 1, deep.data["n"] - 51, -1))

"""The claim's plan does not grow with the backlog: on a freshly filled queue whose
table was never analyzed (autovacuum off for it), the default claim reads the fetch
index in order and sorts nothing — for a queue in the shared table and in a partition
of its own, with rows of distinct and of shared ``created_on``, as a custom plan and
as the generic plan a prepared statement settles on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from qcore import Boss
from qcore.job import JobState
from qcore.sql import jobs as job_sql

pytestmark = [pytest.mark.feature("lifecycle"), pytest.mark.postgres]

BACKLOG = 20_000


def _nodes(plan: dict[str, Any], *, inputs_only: bool = False) -> Iterator[dict[str, Any]]:
    """The node and those beneath it; with ``inputs_only`` only the rows it reads (not
    the CTEs and subqueries attached to it as init plans)."""
    yield plan
    for child in plan.get("Plans", []):
        if inputs_only and child.get("Parent Relationship") in ("InitPlan", "SubPlan"):
            continue
        yield from _nodes(child, inputs_only=inputs_only)


def _sorts_over_jobs(plan: dict[str, Any], tables: set[str]) -> list[str]:
    """The sort nodes (Sort, Incremental Sort) that read rows of a job table."""
    found = []
    for node in _nodes(plan):
        if "Sort" in node["Node Type"]:
            scanned = {str(n.get("Relation Name")) for n in _nodes(node, inputs_only=True)}
            if scanned & tables:
                found.append(f"{node['Node Type']} over {sorted(scanned & tables)}")
    return found


def _literal(value: object) -> str:
    """A fixed test value as SQL text (ints, NULL, an empty array, and strings without
    quotes in them)."""
    if value is None or value == []:
        return "NULL" if value is None else "'{}'"
    text = str(value)
    assert isinstance(value, int) or "'" not in text
    return text if isinstance(value, int) else f"'{text}'"


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema="qcore_plan", supervise=False)
    async with instance:
        yield instance
        await instance.db.execute_script("DROP SCHEMA qcore_plan CASCADE")


@pytest.mark.parametrize("partition", [False, True], ids=["shared", "partition"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "tied"])
@pytest.mark.parametrize("settle", [False, True], ids=["fetch", "settle-and-claim"])
async def test_the_claim_sorts_nothing_on_a_never_analyzed_backlog(
    boss: Boss, partition: bool, ties: bool, settle: bool
) -> None:
    await boss.create_queue("q", partition=partition)
    (queue,) = await boss.db.execute("SELECT table_name FROM qcore_plan.queue WHERE name = 'q'")
    table = str(queue["table_name"])
    await boss.db.execute_script(f"ALTER TABLE qcore_plan.{table} SET (autovacuum_enabled = false)")
    if ties:  # as pg-boss inserts a batch: one created_on for all
        await boss.db.execute(
            "INSERT INTO qcore_plan.job (id, name, data, policy) SELECT gen_random_uuid(),"
            " 'q', to_jsonb(i), 'standard' FROM generate_series(1, $1::int) AS i",
            [BACKLOG],
        )
    else:
        for start in range(0, BACKLOG, 5_000):
            await boss.insert("q", [{"data": {"n": n}} for n in range(start, start + 5_000)])
    (stats,) = await boss.db.execute(
        "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
        " WHERE schemaname = 'qcore_plan' AND relname = $1",
        [table],
    )
    assert stats == {"last_analyze": None, "last_autoanalyze": None}
    statement = job_sql.fetch_jobs(boss.context().q, skip_locked=True, table=table, settle=settle)
    empty = ("ids", "plain_ids", "fence_ids", "fence_counts")  # the settling half's arrays
    settled: dict[str, list[Any]] = {k: [] for k in empty}
    params = statement.bind(
        queue="q", policy="standard", limit=1, table=table, output=None, matching=[], **settled
    )
    tables = {table, "job"}
    (custom,) = await boss.db.execute("EXPLAIN (FORMAT JSON) " + statement.sql, params)
    assert _sorts_over_jobs(custom["QUERY PLAN"][0]["Plan"], tables) == []
    async with boss.db.transaction() as tx:
        await tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await tx.execute("PREPARE qcore_claim_plan AS " + statement.sql)
        try:
            literals = ", ".join(_literal(v) for v in params)  # EXECUTE takes no binds
            (generic,) = await tx.execute(
                f"EXPLAIN (FORMAT JSON) EXECUTE qcore_claim_plan({literals})"
            )
        finally:
            await tx.execute("DEALLOCATE qcore_claim_plan")
    assert _sorts_over_jobs(generic["QUERY PLAN"][0]["Plan"], tables) == []
    (job,) = await boss.fetch("q")  # and the claim still works on it
    claimed = await boss.get_job_by_id("q", job.id)
    assert claimed is not None and claimed.state is JobState.ACTIVE

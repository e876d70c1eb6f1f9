"""The claim's plan does not grow with the backlog: on a freshly filled queue whose
table was never analyzed (autovacuum off for it), the default claim reads the fetch
index in order and sorts nothing — for a queue in the shared table and in a partition
of its own, with rows of distinct and of shared ``created_on``, as a custom plan and
as the generic plan a prepared statement settles on."""

from __future__ import annotations

import contextlib
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


#: psycopg prepares a statement at its 6th run, and the server then plans 5 runs afresh
#: before it weighs its generic plan against them
CLAIMS = 16


@pytest.mark.parametrize("batch_size", [1, 100])
@pytest.mark.parametrize("verb", ["fetch", "complete_and_fetch", "locked_fetch"])
async def test_a_claim_keeps_one_generic_plan_per_batch_size(
    pg_dsn: str, verb: str, batch_size: int
) -> None:
    """Run as a prepared statement, each claim settles on the server's generic plan
    instead of being planned afresh on every call (which it was while ``LIMIT`` was a
    parameter: the generic plan then counts on a tenth of the table and always loses)."""
    async with Boss(pg_dsn, schema="qcore_plan_cache", supervise=False, max=1) as boss:
        try:
            await boss.create_queue("q")
            # a backlog whose tenth outweighs a claim (what a generic plan counted on)
            for _ in range(BACKLOG // 5_000):
                await boss.insert("q", [{"data": {"n": n}} for n in range(5_000)])
            await boss.db.execute_script("ANALYZE qcore_plan_cache.job")  # as autovacuum would
            held: list[Any] = []
            for _ in range(CLAIMS):
                if verb == "fetch":
                    jobs = await boss.fetch("q", batch_size=batch_size)
                    await boss.complete("q", [j.id for j in jobs])
                elif verb == "complete_and_fetch":
                    held = await boss.complete_and_fetch("q", held, batch_size=batch_size)
                else:
                    async with boss.locked_fetch("q", batch_size=batch_size) as batch:
                        jobs = batch.jobs
                assert len(jobs if verb != "complete_and_fetch" else held) == batch_size
            # one pooled connection: the statements it prepared are all of this test's (a
            # first complete_and_fetch, with nothing to settle, is a plain fetch)
            rows = await boss.db.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%SKIP LOCKED%'"
            )
            assert len(rows) == 1, rows
            assert rows[0]["custom_plans"] <= 5 and rows[0]["generic_plans"] >= CLAIMS - 11, rows
        finally:
            await boss.db.execute_script("DROP SCHEMA qcore_plan_cache CASCADE")


class _Undo(Exception):
    """Raised to roll a test's transaction back."""


def _rows_read(plan: dict[str, Any], tables: set[str]) -> int:
    """Rows the plan's scans of a job table read (returned or filtered out), over all
    their loops: what a claim's cost grows with."""
    read = 0
    for node in _nodes(plan):
        if str(node.get("Relation Name")) in tables:
            rows = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            read += rows * node.get("Actual Loops", 1)
    return read


@pytest.mark.parametrize("backlog", [2_000, BACKLOG])
@pytest.mark.parametrize("skip_locked", [True, False], ids=["skip-locked", "atomic-update"])
async def test_a_claim_reads_what_it_takes_not_the_backlog(
    boss: Boss, skip_locked: bool, backlog: int
) -> None:
    """On a freshly filled, never analyzed queue, a claim of one job reads a handful of
    rows of the job table, whichever strategy builds it (the atomic-update claim, without
    SKIP LOCKED, once let the planner inline its candidates and read every waiting row
    per claim: 9 ms a claim at 2,000 waiting), as a custom and as a generic plan."""
    await boss.create_queue("q")
    (queue,) = await boss.db.execute("SELECT table_name FROM qcore_plan.queue WHERE name = 'q'")
    table = str(queue["table_name"])
    await boss.db.execute_script(f"ALTER TABLE qcore_plan.{table} SET (autovacuum_enabled = false)")
    for start in range(0, backlog, 5_000):
        await boss.insert(
            "q", [{"data": {"n": n}} for n in range(start, min(start + 5_000, backlog))]
        )
    await boss.fetch("q", batch_size=300)  # some rows already claimed: dead index entries
    statement = job_sql.fetch_jobs(boss.context().q, skip_locked=skip_locked, table=table)
    params = statement.bind(queue="q", policy="standard", limit=1, table=table, matching=[])
    tables = {table, "job"}
    plans: list[dict[str, Any]] = []
    with contextlib.suppress(_Undo):
        async with boss.db.transaction() as tx:
            plans += await tx.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.sql, params)
            await tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await tx.execute("PREPARE qcore_claim_read AS " + statement.sql)
            literals = ", ".join(_literal(v) for v in params)
            plans += await tx.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE qcore_claim_read({literals})"
            )
            raise _Undo  # the claims made by EXPLAIN ANALYZE, and the prepared statement
    assert len(plans) == 2
    for explained in plans:
        assert _rows_read(explained["QUERY PLAN"][0]["Plan"], tables) <= 20

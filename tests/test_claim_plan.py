"""The claim's plan does not grow with the backlog: on a freshly filled queue whose
table was never analyzed (autovacuum off for it), the default claim reads the fetch
index in order and sorts nothing — for a queue in the shared table and in a partition
of its own, with rows of distinct and of shared ``created_on``, as a custom plan and
as the generic plan a prepared statement settles on, and as the generic plan a pooled
connection made on a small queue and keeps once the queue grew."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from qcore import Boss
from qcore.conformance.helpers import until
from qcore.db import connect
from qcore.errors import DatabaseError
from qcore.job import JobState
from qcore.sql import jobs as job_sql
from qcore.verbs.jobs.claim import claim_plan_pins
from qcore.verbs.jobs.locked import HOLD_GRACE_SECONDS
from tests.plans import (
    Undo,
    cte_plan,
    custom_and_generic_plans,
    prepared_plan,
    rows_read,
    sorts_over_jobs,
)

pytestmark = [pytest.mark.feature("lifecycle"), pytest.mark.postgres]

BACKLOG = 20_000


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema="qcore_plan", supervise=False)
    async with instance:
        yield instance
        await instance.db.execute_script("DROP SCHEMA qcore_plan CASCADE")


@pytest.mark.parametrize("partition", [False, True], ids=["shared", "partition"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "tied"])
@pytest.mark.parametrize("settle", [False, True], ids=["fetch", "settle-and-claim"])
@pytest.mark.parametrize("limit", [1, 100])
async def test_the_claim_sorts_nothing_on_a_never_analyzed_backlog(
    boss: Boss, partition: bool, ties: bool, settle: bool, limit: int
) -> None:
    """Above the planner's estimate of a never analyzed queue (a handful of rows), a
    bitmap scan of every ready row and a sort of them looks cheaper than the index read
    in order; the claim's transaction switches bitmap scans off (``claim_plan_pins``),
    and batches of 100 read the index in order as batches of one do."""
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
    statement = job_sql.fetch_jobs(
        boss.context().q, skip_locked=True, table=table, settle=settle, limit=limit
    )
    empty = ("ids", "plain_ids", "fence_ids", "fence_counts")  # the settling half's arrays
    settled: dict[str, list[Any]] = {k: [] for k in empty}
    params = statement.bind(
        queue="q", policy="standard", table=table, output=None, matching=[], **settled
    )
    tables = {table, "job"}
    pins, _ = claim_plan_pins(boss.context(), priority=True, limit=limit)
    async with boss.db.transaction() as tx:
        for pin, _ in pins:
            await tx.execute(pin)
        plans = await custom_and_generic_plans(tx, statement.sql, params)
    for plan in plans:
        assert sorts_over_jobs(plan, tables) == []
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
    parameter: the generic plan then counts on a tenth of the table and always loses),
    and so do the completes, of one job or of a hundred, locked or not (see
    ``among_ids``)."""
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
            if verb != "complete_and_fetch":  # and the complete of each batch, however small
                rows = await boss.db.execute(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement LIKE '%state = ''completed''%'"
                )
                assert len(rows) == 1, rows
                assert rows[0]["custom_plans"] <= 5, rows
                assert rows[0]["generic_plans"] >= CLAIMS - 11, rows
        finally:
            await boss.db.execute_script("DROP SCHEMA qcore_plan_cache CASCADE")


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
    with contextlib.suppress(Undo):
        async with boss.db.transaction() as tx:
            plans += await custom_and_generic_plans(tx, statement.sql, params, analyze=True)
            raise Undo  # the claims made by EXPLAIN ANALYZE
    assert len(plans) == 2
    for plan in plans:
        assert rows_read(plan, tables) <= 20


#: the backlog a claim planned on a small one meets later
GROWN = 100_000
#: the queue it was planned on (a few pages of the job table: the generic plan of the
#: claim's update then reached its row by reading every job of the queue through i15)
SMALL = 100


async def _grown_plan(
    dsn: str, driver: str, verb: str, batch_size: int, *, supervised: bool = False
) -> tuple[set[str], dict[str, Any], dict[str, Any]]:
    """On one pooled connection of ``driver``: ``verb`` run :data:`CLAIMS` times on a
    small backlog (so its claim is prepared and settles on a generic plan), the queue
    grown to :data:`GROWN` waiting jobs without its table being analyzed (autovacuum
    off for it), then the claim's statement run once more as that connection runs it
    (``EXPLAIN ANALYZE``, undone). The job tables' names, the statement's plan counters
    on the connection, and the plan. ``supervised``: one supervise pass runs between the
    growth and the plan."""
    db = await connect(dsn, driver=driver, max=1)
    schema = "qcore_plan_growth"
    try:
        await db.execute_script(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        async with Boss(db=db, schema=schema, supervise=False) as boss:
            await boss.create_queue("q")
            (queue,) = await db.execute(f"SELECT table_name FROM {schema}.queue WHERE name = 'q'")
            table = str(queue["table_name"])
            await db.execute_script(
                f"ALTER TABLE {schema}.{table} SET (autovacuum_enabled = false)"
            )
            # a small backlog, left small by the claims made on it
            await boss.insert("q", [{"data": {"n": n}} for n in range(SMALL + CLAIMS * batch_size)])
            held: list[Any] = []
            for _ in range(CLAIMS):
                if verb == "fetch":
                    jobs = await boss.fetch("q", batch_size=batch_size)
                    await boss.complete("q", [j.id for j in jobs])
                elif verb == "complete_and_fetch":
                    held = jobs = await boss.complete_and_fetch("q", held, batch_size=batch_size)
                else:
                    async with boss.locked_fetch("q", batch_size=batch_size) as batch:
                        jobs = batch.jobs
                assert len(jobs) == batch_size
            await db.execute(
                f"INSERT INTO {schema}.job (id, name, data, policy) SELECT gen_random_uuid(),"
                " 'q', to_jsonb(i), 'standard' FROM generate_series(1, $1::int) AS i",
                [GROWN],
            )
            (stats,) = await db.execute(
                "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
                " WHERE schemaname = $1 AND relname = $2",
                [schema, table],
            )
            assert stats == {"last_analyze": None, "last_autoanalyze": None}
            if supervised:

                async def counted() -> bool:  # the growth reached the statistics views
                    (row,) = await db.execute(
                        "SELECT n_mod_since_analyze AS changed FROM pg_stat_user_tables"
                        " WHERE schemaname = $1 AND relname = $2",
                        [schema, table],
                    )
                    return int(row["changed"]) >= GROWN

                await until(counted, 60.0, 0.2, "the growth in pg_stat_user_tables")
                await boss.supervise()
                (stats,) = await db.execute(
                    "SELECT last_analyze IS NOT NULL AS analyzed FROM pg_stat_user_tables"
                    " WHERE schemaname = $1 AND relname = $2",
                    [schema, table],
                )
                assert stats["analyzed"], "the pass did not analyze the grown table"
            ctx = boss.context()
            values: dict[str, Any] = {"queue": "q", "policy": "standard", "table": table}
            values |= {"matching": ctx.affinity.matching("q"), "instance_key": None}
            if verb == "locked_fetch":
                statement = job_sql.claim_held(
                    ctx.q, table=table, affinity=ctx.affinity.installed, limit=batch_size
                )
                values["hold_grace"] = HOLD_GRACE_SECONDS
            else:
                statement = job_sql.fetch_jobs(
                    ctx.q,
                    skip_locked=True,
                    table=table,
                    settle=verb == "complete_and_fetch",
                    affinity=ctx.affinity.installed,
                    limit=batch_size,
                )
                # the settle of a complete_and_fetch: the jobs it holds, given by id
                ids = [job.id for job in held]
                values |= {"ids": ids, "plain_ids": ids, "fence_ids": [], "fence_counts": []}
                values["output"] = None
            pins, _ = claim_plan_pins(ctx, priority=True, limit=batch_size, restore=False)
            with contextlib.suppress(Undo):
                async with db.transaction() as tx:
                    for pin, _ in pins:
                        await tx.execute(pin)
                    counters, plan = await prepared_plan(
                        tx, statement.sql, statement.bind(**values)
                    )
                    raise Undo  # what EXPLAIN ANALYZE claimed
        await db.execute_script(f"DROP SCHEMA {schema} CASCADE")  # once the Boss stopped
    finally:
        await db.close()
    return {table, "job"}, counters, plan


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])  # the adapters that prepare
@pytest.mark.parametrize("batch_size", [1, 100])
@pytest.mark.parametrize("verb", ["fetch", "complete_and_fetch", "locked_fetch"])
async def test_a_claim_planned_on_a_small_backlog_reads_what_it_takes_once_it_grew(
    pg_dsn: str, driver: str, verb: str, batch_size: int
) -> None:
    """A prepared claim settles on a generic plan made against the backlog of the time
    and keeps it while the table is never analyzed again (as right after a burst). Made
    on a small queue, that plan must still read what it takes at 100,000 waiting jobs:
    the fetch index in order up to the batch, each claimed row reached by its key. The
    claim's update once joined its candidates back by ``name = $1 AND id = c.id``, and
    a generic plan made on a few pages reached the row through i15, every job of the
    queue (100,000 rows, 5-11 ms a claim); it now joins on both key columns of the
    candidate, which only the primary key serves."""
    tables, counters, plan = await _grown_plan(pg_dsn, driver, verb, batch_size)
    assert counters["generic_plans"] >= 1, counters  # settled on its small-backlog plan
    assert sorts_over_jobs(plan, tables) == []
    settle = cte_plan(plan, "done")  # the settling half of a settle-and-claim
    claim_rows = rows_read(plan, tables) - (rows_read(settle, tables) if settle else 0)
    # about three rows a job: the index entry, the row locked, the row updated
    assert claim_rows <= 3 * batch_size + 20


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
async def test_the_settle_of_a_settle_and_claim_planned_small_reads_what_it_takes(
    pg_dsn: str, driver: str
) -> None:
    """The settling half of the same settle-and-claim, 100 jobs completed, once a supervise
    pass ran after the growth: it reads the 100 rows it completes, not the queue. It shares
    the complete's predicate (``name = $1 AND id = ANY(...)``), whose generic plan made on
    a few pages of a never-analyzed table finds the ids among every job of the queue
    through i15, whatever the statement's shape; the pass analyzes a table that outgrew
    its statistics, and the server re-plans the prepared statement on the new ones."""
    tables, _, plan = await _grown_plan(pg_dsn, driver, "complete_and_fetch", 100, supervised=True)
    settle = cte_plan(plan, "done")
    assert settle is not None
    assert rows_read(settle, tables) <= 2 * 100 + 20


def _logged_claim_plans(messages: list[str]) -> list[dict[str, Any]]:
    """The plans auto_explain sent for claim statements (``candidates`` CTE)."""
    plans = []
    for message in messages:
        head, _, body = message.partition("plan:\n")
        if head.startswith("duration:") and body:
            logged = json.loads(body)
            if "candidates AS" in logged["Query Text"]:
                plans.append(logged["Plan"])
    return plans


@pytest.mark.parametrize(
    ("verb", "in_transaction"),
    [
        ("fetch", False),
        ("fetch", True),
        ("complete_and_fetch", False),
        ("complete_and_fetch", True),
        ("locked_fetch", False),  # a locked claim opens a transaction of its own
    ],
)
async def test_every_claim_verb_reads_the_index_in_order_above_the_estimate(
    pg_dsn: str, verb: str, in_transaction: bool
) -> None:
    """What the server actually plans for each claim verb at a batch of 100 on a never
    analyzed backlog (auto_explain, on the one connection the Boss uses): the index read
    in order, no sort of the backlog. In a caller's transaction the planner switch the
    claim turned off is theirs again after it."""
    messages: list[str] = []

    async def listen(conn: psycopg.AsyncConnection[Any]) -> None:
        conn.add_notice_handler(lambda diag: messages.append(diag.message_primary or ""))

    source: psycopg.AsyncConnection[Any] | AsyncConnectionPool[Any]
    if in_transaction:  # the caller's connection, its transaction left open for qcore
        source = await psycopg.AsyncConnection.connect(pg_dsn)
        await listen(source)
    else:  # a pool of one connection, so the session settings below hold for every claim
        source = AsyncConnectionPool(
            pg_dsn,
            min_size=1,
            max_size=1,
            kwargs={"autocommit": True},
            configure=listen,
            open=False,
        )
        await source.open(wait=True)
    boss = Boss(db=source, schema="qcore_plan_verbs", supervise=False)
    try:
        await boss.start()
        await boss.create_queue("q")
        await boss.db.execute_script(
            "ALTER TABLE qcore_plan_verbs.job_common SET (autovacuum_enabled = false)"
        )
        for start in range(0, BACKLOG, 5_000):
            await boss.insert("q", [{"data": {"n": n}} for n in range(start, start + 5_000)])
        try:
            await boss.db.execute_script("LOAD 'auto_explain'")
        except DatabaseError as exc:
            pytest.skip(f"the server has no auto_explain module to show its plans: {exc}")
        await boss.db.execute_script(
            "SET auto_explain.log_min_duration = 0; SET auto_explain.log_format = json;"
            " SET client_min_messages = log; SET enable_bitmapscan = on"
        )
        if verb == "fetch":
            jobs = await boss.fetch("q", batch_size=100)
        elif verb == "complete_and_fetch":
            jobs = await boss.complete_and_fetch(
                "q", await boss.fetch("q", batch_size=100), batch_size=100
            )
        else:
            async with boss.locked_fetch("q", batch_size=100) as batch:
                jobs = batch.jobs
        (setting,) = await boss.db.execute("SELECT current_setting('enable_bitmapscan') AS v")
        await boss.db.execute_script("SET client_min_messages = notice")
    finally:
        await boss.stop(timeout=10)
        if isinstance(source, psycopg.AsyncConnection):
            await source.rollback()
            await source.execute("DROP SCHEMA IF EXISTS qcore_plan_verbs CASCADE")
            await source.commit()
            await source.close()
        else:
            async with source.connection() as conn:
                await conn.execute("DROP SCHEMA IF EXISTS qcore_plan_verbs CASCADE")
            await source.close()
    assert len(jobs) == 100
    assert setting["v"] == "on"  # the caller's switch, as they left it
    plans = _logged_claim_plans(messages)
    assert plans, messages[:5]
    for plan in plans:
        assert sorts_over_jobs(plan, {"job_common", "job"}) == []

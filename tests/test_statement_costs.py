"""The catalog and BAM statements qcore runs on every pass are priced under the server's
``jit_above_cost``: above it PostgreSQL compiles the statement with LLVM at each run (a
third of a second of the server's CPU for the BAM claim on a table of a few rows,
half a second for the drift check's index listing), for a statement that reads a few
rows. Checked on a new install and on a ``bam`` table grown by many migrations, never
analyzed and analyzed, as the plan made for the values and as the generic plan a
prepared statement settles on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore import Boss
from qcore.sql import bam as bam_sql
from qcore.sql import drift as drift_sql
from qcore.verbs.bam import get_bam_entries
from tests.plans import Undo, custom_and_generic_plans

pytestmark = [pytest.mark.feature("bam"), pytest.mark.postgres]

SCHEMA = "qcore_statement_costs"
#: commands of past migrations (completed) and of the current one (pending)
COMPLETED, PENDING = 5_000, 300


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    """An install, then a ``Boss`` that does not migrate: no BAM worker claims a command
    the test writes."""
    async with Boss(pg_dsn, schema=SCHEMA, supervise=False, schedule=False):
        pass
    instance = Boss(pg_dsn, schema=SCHEMA, migrate=False, supervise=False, schedule=False)
    async with instance:
        yield instance
        await instance.db.execute_script(f"DROP SCHEMA {SCHEMA} CASCADE")


async def _grow_bam(boss: Boss, *, analyze: bool) -> None:
    await boss.db.execute_script(
        f"ALTER TABLE {SCHEMA}.bam SET (autovacuum_enabled = false);"
        f" INSERT INTO {SCHEMA}.bam (name, version, status, table_name, command,"
        " started_on, completed_on) SELECT 'old' || g, 40 + g % 6, 'completed', 'j' || g % 200,"
        f" 'SELECT 1', now(), now() FROM generate_series(1, {COMPLETED}) g;"
        f" INSERT INTO {SCHEMA}.bam (name, version, table_name, command)"
        f" SELECT 'new' || g, 46, 'j' || g % 200, 'SELECT 1' FROM generate_series(1, {PENDING}) g"
        + (f"; ANALYZE {SCHEMA}.bam" if analyze else "")
    )


async def _costs(boss: Boss, sql: str, params: list[Any]) -> list[float]:
    """The total cost of the plan for ``params`` and of the generic plan."""
    costs: list[float] = []
    try:
        async with boss.db.transaction() as tx:
            plans = await custom_and_generic_plans(tx, sql, params)
            costs = [float(plan["Total Cost"]) for plan in plans]
            raise Undo
    except Undo:
        pass
    return costs


async def _jit_above(boss: Boss) -> float:
    [row] = await boss.db.execute("SELECT current_setting('jit_above_cost')::float8 AS cost")
    return float(row["cost"])


@pytest.mark.parametrize("shape", ["new", "grown", "grown-analyzed"])
@pytest.mark.parametrize("pending_only", [True, False], ids=["pending", "any"])
async def test_the_bam_claim_is_never_compiled(boss: Boss, shape: str, pending_only: bool) -> None:
    if shape != "new":
        await _grow_bam(boss, analyze=shape == "grown-analyzed")
    statement = bam_sql.claim_bam_command(
        boss.context().q, pending_only=pending_only, liveness=True, skip_locked=True
    )
    limit = await _jit_above(boss)
    for cost in await _costs(boss, statement.sql, statement.bind()):
        assert cost < limit, f"{shape}: the claim is priced {cost:.0f}, JIT from {limit:.0f}"


async def test_the_drift_check_listing_indexes_is_never_compiled(boss: Boss) -> None:
    await boss.create_queue("own", partition=True)  # a table of its own: more indexes
    statement = drift_sql.schema_indexes(True)
    limit = await _jit_above(boss)
    for cost in await _costs(boss, statement.sql, statement.bind(schema=SCHEMA)):
        assert cost < limit, f"the index listing is priced {cost:.0f}, JIT from {limit:.0f}"


async def test_the_claim_still_takes_the_first_unfinished_command_of_each_table(
    boss: Boss,
) -> None:
    """What the claim's computed-once conditions keep: the first unfinished command of a
    migration and table goes first, its successors wait, a live command in progress holds
    every other, a stale one is taken again."""
    ctx = boss.context()
    await boss.db.execute_script(
        f"INSERT INTO {SCHEMA}.bam (name, version, status, table_name, command, created_on,"
        " started_on) VALUES"
        " ('done', 46, 'completed', 'a', 'SELECT 1', now() - interval '5 s', now()),"
        " ('a1', 46, 'pending', 'a', 'SELECT 1', now() - interval '4 s', NULL),"
        " ('a2', 46, 'pending', 'a', 'SELECT 1', now() - interval '3 s', NULL),"
        " ('b1', 46, 'pending', 'b', 'SELECT 1', now() - interval '2 s', NULL)"
    )
    claim = bam_sql.claim_bam_command(ctx.q, pending_only=False, liveness=True, skip_locked=True)

    async def take() -> str | None:
        rows = await boss.db.execute(claim.sql, claim.bind())
        return str(rows[0]["name"]) if rows else None

    assert await take() == "a1"
    assert await take() is None  # a1 runs (started now): nothing else is claimed
    await boss.db.execute(f"UPDATE {SCHEMA}.bam SET status = 'completed' WHERE name = 'a1'")
    assert await take() == "a2"  # the oldest pending one, now first of its table
    await boss.db.execute(  # a2's runner died a day ago
        f"UPDATE {SCHEMA}.bam SET started_on = now() - interval '25 hours' WHERE name = 'a2'"
    )
    assert await take() == "b1"  # pending ones before a stale one
    await boss.db.execute(f"UPDATE {SCHEMA}.bam SET status = 'completed' WHERE name = 'b1'")
    assert await take() == "a2"  # taken again
    entries = {e.name: e.status for e in await get_bam_entries(ctx)}
    assert entries == {
        "done": "completed",
        "a1": "completed",
        "a2": "in_progress",
        "b1": "completed",
    }

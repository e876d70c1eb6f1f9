"""pg-boss's schema migrations on every backend: a schema one version behind migrates to
46 with the index builds queued for BAM, one-step rollback takes 46 back to 45 and
only that far, and the single-table shape (which no older pg-boss release installed)
refuses an older version before changing anything. The upgrades from real pg-boss 11
schemas are proved against pg-boss itself in ``tests/interop/test_upgrades.py``."""

from __future__ import annotations

import pytest

from qcore.conformance.markers import requires
from qcore.context import Context
from qcore.errors import SchemaVersionError
from qcore.services.bam import run_commands
from qcore.sql.catalog import job_table_name
from qcore.verbs.drift import detect_schema_drift
from qcore.verbs.queues import create_queue
from qcore.verbs.schema import (
    SCHEMA_VERSION,
    get_migration_plans,
    get_rollback_plans,
    get_uninstall_plans,
    install_or_migrate,
    is_installed,
    rollback,
    schema_version,
)

pytestmark = pytest.mark.feature("migration")

#: the job indexes that schema 46 added, and the queue columns
_NEW_IN_46 = ("i14", "i15", "i16", "i17")


async def _indexes(ctx: Context, table: str) -> set[str]:
    rows = await ctx.db.execute(
        "SELECT c.relname AS name FROM pg_catalog.pg_index x"
        " JOIN pg_catalog.pg_class c ON c.oid = x.indexrelid"
        " JOIN pg_catalog.pg_class t ON t.oid = x.indrelid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = $1 AND t.relname = $2",
        [ctx.schema, table],
    )
    return {str(r["name"]).removeprefix(f"{table}_") for r in rows}


async def _queue_columns(ctx: Context) -> set[str]:
    rows = await ctx.db.execute(
        "SELECT column_name AS name FROM information_schema.columns"
        " WHERE table_schema = $1 AND table_name = 'queue'",
        [ctx.schema],
    )
    return {str(r["name"]) for r in rows}


async def _make_own_queue(ctx: Context, name: str) -> str:
    await ctx.db.execute(
        f"SELECT {ctx.q}.create_queue($1, $2)", [name, {"partition": True, "policy": "standard"}]
    )
    await ctx.db.execute(f"INSERT INTO {ctx.q}.job (name, data) VALUES ($1, $2)", [name, {"k": 1}])
    return job_table_name(ctx.backend, name, partition=True)


@requires("partitioning")
async def test_rollback_to_45_and_forward_again(ctx: Context) -> None:
    before = await _make_own_queue(ctx, "kept")

    assert await rollback(ctx) == SCHEMA_VERSION - 1
    assert await schema_version(ctx) == SCHEMA_VERSION - 1
    for table in ("job_common", before):
        assert not set(_NEW_IN_46) & await _indexes(ctx, table)
    assert not {"retained_count", "retained_on"} & await _queue_columns(ctx)
    # create_queue is 45's again: a queue made now gets no index of 46
    during = await _make_own_queue(ctx, "made_at_45")
    assert not set(_NEW_IN_46) & await _indexes(ctx, during)
    # one step only
    with pytest.raises(SchemaVersionError, match="from version 46 only"):
        await rollback(ctx)
    assert await schema_version(ctx) == SCHEMA_VERSION - 1

    await install_or_migrate(ctx)
    assert await schema_version(ctx) == SCHEMA_VERSION
    await run_commands(ctx)  # the builds 46 queued, on every job table
    for table in ("job_common", before, during):
        assert set(_NEW_IN_46) <= await _indexes(ctx, table)
    report = await detect_schema_drift(ctx)
    assert report.ok, report
    rows = await ctx.db.execute(f"SELECT name, data FROM {ctx.q}.job ORDER BY name")
    assert [(r["name"], r["data"]) for r in rows] == [("kept", {"k": 1}), ("made_at_45", {"k": 1})]


async def test_a_schema_one_version_behind_migrates_or_is_refused(ctx: Context) -> None:
    """At 45 (as pg-boss 12.37 left it), the partitioned shape migrates; the single-table
    shape has no upgrade path and says so before changing anything."""
    await ctx.db.execute(f"UPDATE {ctx.q}.version SET version = $1", [SCHEMA_VERSION - 1])
    if not ctx.backend.schema.partitioned:
        with pytest.raises(SchemaVersionError, match="partitioned backend"):
            await install_or_migrate(ctx)
        assert await schema_version(ctx) == SCHEMA_VERSION - 1
        with pytest.raises(SchemaVersionError, match="partitioned backend"):
            get_migration_plans(ctx.schema, SCHEMA_VERSION - 1, backend=ctx.backend)
        with pytest.raises(SchemaVersionError, match="partitioned backend"):
            get_rollback_plans(ctx.schema, backend=ctx.backend)
        return
    await install_or_migrate(ctx)
    assert await schema_version(ctx) == SCHEMA_VERSION
    await run_commands(ctx)
    rows = await ctx.db.execute(
        f"SELECT status, count(*) AS n FROM {ctx.q}.bam WHERE version = $1 GROUP BY status",
        [SCHEMA_VERSION],
    )
    assert {r["status"]: int(r["n"]) for r in rows} == {"completed": len(_NEW_IN_46)}
    report = await detect_schema_drift(ctx)
    assert report.ok, report


async def test_a_version_below_the_oldest_upgradable_is_refused(ctx: Context) -> None:
    await ctx.db.execute(f"UPDATE {ctx.q}.version SET version = 24")
    with pytest.raises(SchemaVersionError, match=r"oldest version qcore .* upgrades is 25"):
        await install_or_migrate(ctx)
    assert await schema_version(ctx) == 24


async def test_the_uninstall_plan_removes_qcore_and_leaves_the_rest(ctx: Context) -> None:
    """``get_uninstall_plans`` in a schema shared with another application: qcore's
    tables (a queue's own table and each day of ``queue_stats`` with them), functions
    and type go; the other table, the schema and its rows stay; a new install fits."""
    await create_queue(ctx, "shared-queue", partition=ctx.backend.has("partitioning"))
    await ctx.db.execute_script(
        f"CREATE TABLE {ctx.q}.app_users (id int PRIMARY KEY);"
        f" INSERT INTO {ctx.q}.app_users VALUES (1)"
    )
    await ctx.db.execute_script(get_uninstall_plans(ctx.schema, ctx.backend))
    tables = await ctx.db.execute(
        "SELECT c.relname AS name FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')",
        [ctx.schema],
    )
    assert [t["name"] for t in tables] == ["app_users"]
    functions = await ctx.db.execute(
        "SELECT p.proname FROM pg_catalog.pg_proc p"
        " JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
        [ctx.schema],
    )
    assert functions == []
    assert not await is_installed(ctx)
    await install_or_migrate(ctx)
    assert await is_installed(ctx)
    assert await ctx.db.execute(f"SELECT id FROM {ctx.q}.app_users") == [{"id": 1}]

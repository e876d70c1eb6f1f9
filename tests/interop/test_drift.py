"""pg-boss 12.38's own drift check on a schema qcore installed and runs on (a keyed
server registered, paused and resumed, so qcore's own tables hold rows): every table,
column, index, constraint and the state enum are as pg-boss expects, and qcore's own
tables are not flagged at all. The functions qcore installs behave as pg-boss's but
are qcore's own text, so pg-boss lists them under ``mismatchedFunctions``; that list
is pinned here so a change to it is seen. Local PostgreSQL only."""

from __future__ import annotations

import asyncio
import json
import uuid

from qcore import Boss, backends
from qcore.context import Context
from qcore.db import connect
from qcore.verbs.drift import detect_schema_drift
from tests.interop.pgboss import in_thread, interop_marks, run_ok

pytestmark = interop_marks()

#: the drift sections that describe tables, columns, indexes, constraints and the enum
STRUCTURE = (
    "missingTables",
    "missing",
    "building",
    "invalid",
    "extraIndexes",
    "mismatched",
    "missingFunctions",
    "columnDrift",
    "constraintDrift",
)
#: pg-boss's functions, which qcore writes itself (same signatures and behaviour)
OWN_BODIES = {
    "create_queue",
    "delete_queue",
    "job_now",
    "job_table_format",
    "job_table_run",
    "job_table_run_async",
}


async def test_pgboss_drift_check_on_a_qcore_schema(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    async with Boss(pg_dsn, schema=ctx.schema_spec, supervise=False, instance_key="k1") as b:
        await b.create_queue("q", partition=True)
        await b.pause_instance("k1")
        await b.resume_instance("k1")
        [report] = await in_thread(pg_dsn, ctx, {"op": "detectSchemaDrift"})
    for section in STRUCTURE:
        assert report[section] == [], (section, report[section])
    assert not report["enumDrift"]
    assert {f["name"] for f in report["mismatchedFunctions"]} == OWN_BODIES
    assert "qcore_" not in json.dumps(report)


async def test_qcore_finds_no_drift_on_a_schema_pgboss_installed(pg_dsn: str) -> None:
    schema = f"pgboss_made_{uuid.uuid4().hex[:8]}"
    actions = [
        {"op": "start"},
        {"op": "createQueue", "args": ["own", {"partition": True, "policy": "key_strict_fifo"}]},
        {"op": "createQueue", "args": ["short", {"policy": "short"}]},
    ]
    await asyncio.to_thread(
        run_ok, {"connectionString": pg_dsn, "schema": schema, "actions": actions}
    )
    db = await connect(pg_dsn, max=1)
    try:
        ctx = Context(db=db, backend=backends.get("postgres"), schema_spec=schema)
        report = await detect_schema_drift(ctx)
        assert report.ok, report
        assert report.extra_indexes == () and report.mismatched_functions == ()
    finally:
        await db.execute_script(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await db.close()


async def test_both_checks_flag_the_same_drift_and_qcore_s_repair_satisfies_pgboss(
    pg_dsn: str, shared: Context
) -> None:
    ctx = shared
    await ctx.db.execute_script(
        f"DROP INDEX {ctx.q}.job_common_i9;"
        f" CREATE INDEX job_common_i9 ON {ctx.q}.job_common (name, id) WHERE blocking"
        f"; ALTER TABLE {ctx.q}.queue ADD COLUMN legacy_flag integer"
    )
    ours = await detect_schema_drift(ctx)
    [theirs] = await in_thread(pg_dsn, ctx, {"op": "detectSchemaDrift"})
    assert [i.name for i in ours.mismatched] == [m["name"] for m in theirs["mismatched"]]
    assert [c.table for c in ours.column_drift] == [c["table"] for c in theirs["columnDrift"]]
    for statement in ours.repairs():
        await ctx.db.execute_script(statement)
    [after] = await in_thread(pg_dsn, ctx, {"op": "detectSchemaDrift"})
    for section in STRUCTURE:
        assert after[section] == [], (section, after[section])
    assert (await detect_schema_drift(ctx)).ok

"""pg-boss 12.38's own drift check on a schema qcore installed and runs on (a keyed
server registered, paused and resumed, so qcore's own tables hold rows): every table,
column, index, constraint and the state enum are as pg-boss expects, and qcore's own
tables are not flagged at all. The functions qcore installs behave as pg-boss's but
are qcore's own text, so pg-boss lists them under ``mismatchedFunctions``; that list
is pinned here so a change to it is seen. Local PostgreSQL only."""

from __future__ import annotations

import json

from qcore import Boss
from qcore.context import Context
from tests.interop.pgboss import interop_marks
from tests.test_interop_jobs import in_thread

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

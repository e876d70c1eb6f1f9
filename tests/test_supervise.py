"""The monitor pass shared with pg-boss: pg-boss and qcore honour one monitor claim. The
per-backend monitor tests are in the conformance suite
(``qcore/conformance/suite/test_supervise.py``)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from qcore import backends, jobs, queues
from qcore.conformance.helpers import row
from qcore.conformance.suite.test_supervise import _age, _started
from qcore.context import Context
from qcore.db import connect
from qcore.identifiers import quote
from qcore.schema import install_or_migrate
from qcore.supervisor import MonitorResult, supervise


@pytest.mark.feature("interop")
@pytest.mark.node
@pytest.mark.postgres
async def test_pgboss_and_qcore_share_the_monitor_claim(pg_dsn: str) -> None:
    """pg-boss's supervise() and qcore's background pass claim the same queue rows: a
    queue one of them monitored is not monitored again by the other within the
    interval, and both fail an expired job with the same output."""
    from tests.interop.pgboss import missing_tools, run_ok

    missing = missing_tools()
    if missing:
        pytest.skip(missing)
    db = await connect(pg_dsn, max=2)
    schema = f"interop_{uuid.uuid4().hex[:10]}"
    ctx = Context(db=db, backend=backends.get("postgres"), schema_spec=schema)

    def pgboss_supervise() -> None:
        run_ok(
            {
                "connectionString": pg_dsn,
                "schema": schema,
                "migrate": False,
                "actions": [{"op": "start"}, {"op": "supervise", "args": ["q"]}, {"op": "stop"}],
            }
        )

    try:
        await install_or_migrate(ctx)
        await queues.create_queue(ctx, "q", retry_limit=0)
        first, second = await _started(ctx, "q"), await _started(ctx, "q")
        await _age(ctx, first, "started_on", 3600)
        await asyncio.to_thread(pgboss_supervise)  # a new queue is due: pg-boss claims it
        r = await row(ctx, first)
        assert r["state"] == "failed" and r["output"] == jobs.TIMED_OUT

        await _age(ctx, second, "started_on", 3600)
        assert await supervise(ctx, monitor_interval_seconds=60) == MonitorResult()
        assert (await row(ctx, second))["state"] == "active"  # pg-boss's claim holds
        assert await supervise(ctx) == MonitorResult(("q",), 1, 0)  # explicit: runs

        third = await _started(ctx, "q")
        await _age(ctx, third, "started_on", 3600)
        await asyncio.to_thread(pgboss_supervise)
        assert (await row(ctx, third))["state"] == "active"  # qcore's claim holds
    finally:
        await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
        await db.close()

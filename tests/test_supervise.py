"""The monitor pass shared with pg-boss: pg-boss and qcore honour one monitor claim. The
per-backend monitor tests are in the conformance suite
(``qcore/conformance/suite/test_supervise.py``)."""

from __future__ import annotations

import asyncio

from qcore.conformance.helpers import row
from qcore.conformance.suite.test_supervise import _age, _started
from qcore.context import Context
from qcore.services.monitor import MonitorResult, supervise
from qcore.verbs import jobs, queues
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = interop_marks()


async def test_pgboss_and_qcore_share_the_monitor_claim(pg_dsn: str, shared: Context) -> None:
    """pg-boss's supervise() and qcore's background pass claim the same queue rows: a
    queue one of them monitored is not monitored again by the other within the
    interval, and both fail an expired job with the same output."""
    ctx = shared

    def pgboss_supervise() -> None:
        run_ok(
            {
                "connectionString": pg_dsn,
                "schema": ctx.schema_spec,
                "migrate": False,
                "actions": [{"op": "start"}, {"op": "supervise", "args": ["q"]}, {"op": "stop"}],
            }
        )

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

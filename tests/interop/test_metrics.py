"""Metrics history of a schema the real pg-boss 12.38 installed and filled: pg-boss
creates the schema and two queues (one partitioned), works and fails jobs; qcore's
recorder, which only reads that schema, counts them into a store beside it. The
finished jobs are then dated two minutes back (their minute must have closed to be
counted, and waiting for the clock would add a minute to the run). Local PostgreSQL
only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from qcore import backends
from qcore.context import Context
from qcore.db import connect
from qcore.identifiers import quote
from qcore.metrics import (
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
)
from qcore.verbs.drift import detect_schema_drift
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = interop_marks()


@pytest_asyncio.fixture
async def pgboss_schema(pg_dsn: str) -> AsyncIterator[Context]:
    db = await connect(pg_dsn, max=4)
    schema = f"pgbm_{uuid.uuid4().hex[:10]}"
    try:
        yield Context(db=db, backend=backends.get("postgres"), schema_spec=schema)
    finally:
        await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
        await db.close()


def _pgboss(dsn: str, schema: str, *actions: Any) -> list[Any]:
    results = run_ok(
        {
            "connectionString": dsn,
            "schema": schema,
            "migrate": True,
            "actions": [{"op": "start"}, *actions, {"op": "stop"}],
        }
    )
    return [r.get("result") for r in results[1:-1]]


async def test_a_pgboss_schema_is_recorded_without_writing_to_it(
    pg_dsn: str, pgboss_schema: Context
) -> None:
    ctx = pgboss_schema
    sent = await asyncio.to_thread(
        _pgboss,
        pg_dsn,
        ctx.schema,
        {"op": "createQueue", "args": ["mail"]},
        {"op": "createQueue", "args": ["part", {"partition": True}]},
        *({"op": "send", "args": ["mail", {"n": n}]} for n in range(3)),
        *({"op": "send", "args": ["part", {"n": n}]} for n in range(2)),
        {"op": "drain", "args": ["mail", {}, 3000]},
        {"op": "drain", "args": ["part", {}, 3000]},
        {"op": "send", "args": ["mail", {"n": "bad"}, {"retryLimit": 0}]},
    )
    bad = sent[-1]
    await asyncio.to_thread(
        _pgboss,
        pg_dsn,
        ctx.schema,
        {"op": "fetch", "args": ["mail"]},
        {"op": "fail", "args": ["mail", bad, {"reason": "no"}]},
    )
    for table in ("job_common", *await _partitions(ctx)):
        await ctx.db.execute(
            f"UPDATE {ctx.q}.{quote(table)} SET created_on = created_on - interval '2 minutes',"
            " started_on = started_on - interval '2 minutes',"
            " completed_on = completed_on - interval '2 minutes' WHERE completed_on IS NOT NULL"
        )
    before = await detect_schema_drift(ctx)

    store = PostgresMetricsStore(ctx.db, schema=f"{ctx.schema}_metrics")
    try:
        await MetricsRecorder(store, PgBossQueues(ctx)).tick()
        provider = MetricsHistoryProvider(store, namespace=PgBossQueues(ctx).namespace)
        mail = await provider.totals("mail", window="7d")
        part = await provider.totals("part", window="7d")
        assert (mail.completed, mail.failed, part.completed, part.failed) == (3, 1, 2, 0)
        assert mail.run.samples == 4 and part.wait.samples == 2
        assert (await provider.totals(window="7d")).completed == 5
        assert await detect_schema_drift(ctx) == before  # pg-boss's schema untouched
    finally:
        await ctx.db.execute_script(f"DROP SCHEMA IF EXISTS {quote(store.schema)} CASCADE")


async def _partitions(ctx: Context) -> list[str]:
    rows = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE partition")
    return [str(r["table_name"]) for r in rows]

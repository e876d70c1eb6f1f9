"""``stop()`` during a concurrent index build, as seed 001 says for PostgreSQL: a Boss
that owns its pool leaves the build to finish on the server, its row in_progress; the
next BAM run marks it completed once the build has ended. (A command on a connection
the application lent is cancelled instead: ``test_bam.py`` in the conformance suite.)
On the local PostgreSQL: the build is held in its first phase by a transaction that
locks the table, so it outlives the stop's timeout without any sleep."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from qcore import Boss, backends
from qcore.conformance.helpers import set_clock, until
from qcore.context import Context
from qcore.db import connect
from qcore.identifiers import quote
from qcore.services.bam import run_commands
from qcore.sql.bam import BAM_LIVENESS_GRACE_SECONDS
from qcore.verbs.schema import install_or_migrate

pytestmark = [pytest.mark.postgres, pytest.mark.feature("bam")]


@pytest.fixture
async def ctx(pg_dsn: str) -> AsyncIterator[Context]:
    db = await connect(pg_dsn, max=4)
    schema = f"bam_stop_{uuid.uuid4().hex[:8]}"
    context = Context(db=db, backend=backends.get("postgres"), schema_spec=schema)
    await install_or_migrate(context)
    try:
        yield context
    finally:
        await set_clock(context, 0)
        await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
        await db.close()


async def _status(ctx: Context) -> str:
    [row] = await ctx.db.execute(f"SELECT status FROM {ctx.q}.bam")
    return str(row["status"])


async def _index_valid(ctx: Context) -> bool | None:
    rows = await ctx.db.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
        [f"{ctx.q}.bam_left"],
    )
    return None if not rows else bool(rows[0]["indisvalid"])


async def _index_present(ctx: Context) -> bool:
    return await _index_valid(ctx) is not None


async def test_stop_leaves_a_concurrent_build_to_finish_on_the_server(
    pg_dsn: str, ctx: Context
) -> None:
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.bam (name, version, table_name, command)"
        " VALUES ('left', 50, 'job_common', $1)",
        [f"CREATE INDEX CONCURRENTLY IF NOT EXISTS bam_left ON {ctx.q}.job_common (name, id)"],
    )
    with psycopg.connect(pg_dsn) as blocker:  # the build waits for this lock's holder
        blocker.execute(f"LOCK TABLE {ctx.q}.job_common IN ROW EXCLUSIVE MODE")
        boss = Boss(pg_dsn, schema=ctx.schema, supervise=False, schedule=False)
        seen: list[dict[str, object]] = []
        boss.on("bam", seen.append)
        await boss.start()
        await until(boss.is_bam_working, timeout=60, what="the BAM worker takes the build")
        await until(lambda: _index_present(ctx), timeout=60, what="the build shows its index")
        started = time.monotonic()
        await boss.stop(timeout=1)
        assert time.monotonic() - started < 30  # the stop did not wait for the build
        assert await _status(ctx) == "in_progress"
        assert seen[-1]["status"] == "in_progress" and seen[-1]["detached"] is True
        assert await _index_valid(ctx) is False  # still building: not cancelled
        blocker.rollback()

    # the server finishes it on its own; the next run finds it built and marks it done
    assert await until(lambda: _index_valid(ctx), timeout=120, what="the build finishes")
    assert await run_commands(ctx) == 0  # within the liveness grace: not stale yet
    await set_clock(ctx, BAM_LIVENESS_GRACE_SECONDS + 60)
    assert await run_commands(ctx) == 1
    assert await _status(ctx) == "completed"

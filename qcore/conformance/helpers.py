"""Small reads the conformance tests share: row counts, the server clock, raw rows, and
waiting on a condition with a deadline.

Test plumbing, written against the installed schema directly so the
assertions do not depend on the code under test.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from qcore import retry
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.boss import Boss
from qcore.context import Context
from qcore.job import Job, JobState

B = TypeVar("B", bound=Boss)


async def count(ctx: Context, table: str = "job", where: str = "true", *params: Any) -> int:
    rows = await ctx.db.execute(
        f"SELECT count(*)::int AS n FROM {ctx.q}.{table} WHERE {where}", params
    )
    return int(rows[0]["n"])


async def totals(ctx: Context) -> tuple[int, int]:
    """(queues, jobs) in the schema: what "nothing was written" is checked against."""
    return await count(ctx, "queue"), await count(ctx, "job")


async def server_now(ctx: Context) -> dt.datetime:
    rows = await ctx.db.execute("SELECT clock_timestamp() AS now")
    value = rows[0]["now"]
    assert isinstance(value, dt.datetime)
    return value


async def row(ctx: Context, job_id: Any) -> dict[str, Any]:
    """A job's row, read through the retry policy (under SERIALIZABLE a read beside
    other instances' writes may be cancelled with 40001 and must be run again)."""
    sql = f"SELECT * FROM {ctx.q}.job WHERE id = $1::uuid"
    rows = await retry.execute(ctx, sql, [job_id])
    assert len(rows) == 1, f"expected one row for {job_id}, got {len(rows)}"
    return rows[0]


async def states(ctx: Context, queue: str) -> dict[str, int]:
    """A queue's jobs counted by state, read through the retry policy as ``row`` is."""
    rows = await retry.execute(
        ctx,
        f"SELECT state::text AS state, count(*)::int AS n FROM {ctx.q}.job WHERE name = $1"
        " GROUP BY state ORDER BY state",
        [queue],
    )
    return {r["state"]: r["n"] for r in rows}


async def until(
    check: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what or check}")
        await asyncio.sleep(interval)


async def job_state(boss: Boss, name: str, job_id: uuid.UUID) -> JobState | None:
    job = await boss.get_job_by_id(name, job_id)
    assert job is not None
    return job.state


async def settled(boss: Boss, name: str, job_id: uuid.UUID, timeout: float = 5.0) -> Job:
    """The job once it has left ``active`` and ``created`` (settled by the worker)."""

    async def check() -> Job | None:
        job = await boss.get_job_by_id(name, job_id)
        assert job is not None
        return job if job.state not in (JobState.CREATED, JobState.ACTIVE) else None

    result: Job = await until(check, timeout, what=f"job {job_id} settled")
    return result


async def send(boss: Boss, name: str, data: Any = None, **options: Any) -> uuid.UUID:
    job_id = await boss.send(name, data, **options)
    assert job_id is not None
    return job_id


def cut_connection(db: Any) -> None:
    """Break the single connection of a PGlite adapter (through the capability guard, if
    any) as a network failure would; the server stays up."""
    inner = getattr(db, "inner", db)
    conn = inner._conn
    assert conn is not None
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


@asynccontextmanager
async def running(boss: B, *, stop_timeout: float = 30.0) -> AsyncIterator[B]:
    """``boss`` started for the block and stopped after it (what a fixture yields)."""
    await boss.start()
    try:
        yield boss
    finally:
        await boss.stop(timeout=stop_timeout)


async def set_clock(ctx: Context, ahead_seconds: float) -> None:
    """Run the schema's clock ``ahead_seconds`` ahead of the server's (0: in step again):
    every qcore and pg-boss statement reads the time from it, so retention, stats and
    partitions see the future without a sleep."""
    from qcore.sql.functions import set_clock as clock_ddl

    await ctx.db.execute_script(clock_ddl(ctx.q, ahead_seconds))


def locks_claims(ctx: Context) -> bool:
    """Whether ``ctx``'s backend and adapter can hold a locked claim.

    FOR UPDATE SKIP LOCKED, several mutations in one statement, and a pool (a held
    transaction takes one connection of it).
    """
    return (
        ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
        and ctx.backend.mutation is MutationStrategy.CTE
        and not ctx.db.single_connection
    )


async def insert_dead_instances(ctx: Context, n: int) -> None:
    """``n`` stopped registry rows, an hour to a day old, in one statement.

    The dead rows maintenance may keep beside a fleet's live ones.
    """
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
        " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
        " persist_warnings, started_on, heartbeat_on, stopped_on)"
        " SELECT gen_random_uuid(), 'old-' || g, 'retired-host', g, 'x', 'x', 30, false,"
        " false, false, false, false, t, t, t FROM (SELECT g,"
        f" {ctx.q}.job_now() - (3600 + g * 60) * interval '1 second' AS t"
        " FROM generate_series(1, $1::int) g) s",
        [n],
    )

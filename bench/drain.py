"""Drain scenarios: ``fetch`` + ``complete`` loops, and ``work`` with a no-op handler.

Parent side: :func:`prepare` fills the queue with ``jobs`` jobs through
qcore's own ``insert``, then gives each raw side a plain table holding a
copy of exactly those rows (same ids, same ``created_on``, same payload),
and analyzes both. :func:`verify` checks every job ended completed, once.

Child side: :func:`batch_drain` (``concurrency`` loops of ``fetch`` then
``complete(ids)``), :func:`settled_drain` and :func:`locked_drain` (the same loops
by settle-and-claim, and by locked claims) and :func:`worker_drain` (``Boss.work``,
fetching or with locked claims). The clock
stops when the last job is completed in the database, not when its handler
was called. The process's peak RSS is the scenario's memory figure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from bench.common import (
    BATCH_INSERT,
    DrainCounter,
    Meter,
    open_boss,
    payload,
    quote_ident,
    warm_pool,
)
from bench.env import Env

__all__ = [
    "batch_drain",
    "locked_drain",
    "locked_worker_drain",
    "prepare",
    "settled_drain",
    "verify",
    "worker_drain",
]


# --------------------------------------------------------------------------- parent side


async def prepare(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    """``jobs`` ready jobs in the queue, and a copy of the same rows for each raw side."""
    for first in range(0, jobs, BATCH_INSERT):
        batch = [{"data": payload(i)} for i in range(first, min(first + BATCH_INSERT, jobs))]
        await env.boss.insert(env.queue, batch, return_id=False)
    extras: dict[str, Any] = {}
    for side in sides:
        table = await env.make_raw_table(f"raw_{side}")
        await env.admin.execute(
            f"INSERT INTO {env.table(table)} SELECT * FROM {env.table(env.physical)}"
            " WHERE name = %s",
            (env.queue,),
        )
        extras[side] = {"raw_table": table}
    await env.analyze(env.physical, *env.raw_tables)
    return extras


async def verify(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    """Every job of every side is completed (none left, none twice: ids are unique)."""
    problems: dict[str, list[str]] = {}
    tables = {"qcore": env.table(env.physical)}
    tables.update({side: env.table(f"raw_{side}") for side in sides})
    for side, table in tables.items():
        rows = await env.rows(
            f"SELECT state::text, count(*) FROM {table} WHERE name = %s GROUP BY 1",
            (env.queue,),
        )
        counts = {state: int(n) for state, n in rows}
        problems[side] = (
            []
            if counts == {"completed": jobs}
            else [f"expected {jobs} completed jobs, found {counts}"]
        )
    return {"problems": problems}


# --------------------------------------------------------------------------- child side


async def batch_drain(spec: dict[str, Any]) -> dict[str, Any]:
    """``concurrency`` loops of ``fetch(batch_size=batch)`` + ``complete(ids)``."""

    async def step(boss: Any, queue: str, batch: int, held: list[Any]) -> tuple[int, list[Any]]:
        claimed = await boss.fetch(queue, batch_size=batch)
        if claimed:
            await boss.complete(queue, [job.id for job in claimed])
        return len(claimed), []

    return await _drain_loops(spec, step)


async def settled_drain(spec: dict[str, Any]) -> dict[str, Any]:
    """``concurrency`` loops of ``complete_and_fetch``: each call completes the loop's
    last batch and claims the next (the first call only claims)."""

    async def step(boss: Any, queue: str, batch: int, held: list[Any]) -> tuple[int, list[Any]]:
        return len(held), await boss.complete_and_fetch(queue, held, batch_size=batch)

    return await _drain_loops(spec, step)


async def locked_drain(spec: dict[str, Any]) -> dict[str, Any]:
    """``concurrency`` loops of ``locked_fetch(batch_size=batch)`` blocks that complete
    what they claimed on leaving (one transaction and one write per job)."""

    async def step(boss: Any, queue: str, batch: int, held: list[Any]) -> tuple[int, list[Any]]:
        async with boss.locked_fetch(queue, batch_size=batch) as claimed:
            return len(claimed.jobs), []

    return await _drain_loops(spec, step)


Step = Callable[[Any, str, int, list[Any]], Awaitable[tuple[int, list[Any]]]]


async def _drain_loops(spec: dict[str, Any], step: Step) -> dict[str, Any]:
    """``concurrency`` loops running ``step(boss, queue, batch, held)`` (how many jobs it
    completed, and the jobs it leaves held) until every job is completed; a loop that
    completed and holds nothing while others still work waits a millisecond."""
    jobs, queue = int(spec["jobs"]), spec["queue"]
    batch, loops = int(spec["batch"]), int(spec["concurrency"])
    boss = await open_boss(spec)
    counter = DrainCounter(jobs)
    empty_polls = 0

    async def loop() -> None:
        nonlocal empty_polls
        held: list[Any] = []
        while not counter.finished or held:
            done, held = await step(boss, queue, batch, held)
            counter.add(done)
            if not done and not held and not counter.finished:
                empty_polls += 1
                await asyncio.sleep(0.001)

    meter = Meter(spec["dsn"])
    try:
        await warm_pool(boss, loops)
        await meter.start()
        await asyncio.gather(*(loop() for _ in range(loops)))
        cpu = await meter.stop()
    finally:
        await boss.stop()
    return {"jobs": counter.count, "empty_polls": empty_polls, **cpu}


async def locked_worker_drain(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`worker_drain` with ``work(locked_fetch=True)``."""
    return await worker_drain(spec, locked_fetch=True)


async def worker_drain(spec: dict[str, Any], **work_options: Any) -> dict[str, Any]:
    """``work(batch_size=batch, local_concurrency=concurrency)`` with a no-op handler,
    timed from the ``work`` call until the database shows every job completed."""
    jobs, queue = int(spec["jobs"]), spec["queue"]
    batch, concurrency = int(spec["batch"]), int(spec["concurrency"])
    boss = await open_boss(spec)
    counter = DrainCounter(jobs)

    async def handler(claimed: Any) -> None:
        counter.add(len(claimed) if isinstance(claimed, list) else 1)

    remaining = (
        f"SELECT count(*) FROM {quote_ident(spec['schema'])}.job"
        " WHERE name = %s AND state IN ('created', 'retry', 'active')"
    )
    watcher = await psycopg.AsyncConnection.connect(spec["dsn"], autocommit=True)
    timeout = max(120.0, jobs / 50)
    meter = Meter(spec["dsn"])
    try:
        await warm_pool(boss, min(10, concurrency + 2))
        await meter.start()
        await boss.work(
            queue, handler, batch_size=batch, local_concurrency=concurrency, **work_options
        )
        try:
            await asyncio.wait_for(counter.done.wait(), timeout)
        except asyncio.TimeoutError:
            raise RuntimeError(
                f"the worker handled {counter.count} of {jobs} jobs in {timeout:.0f} s"
            ) from None
        left = -1
        while left != 0:  # the handlers have run; wait for the last completes to land
            cur = await watcher.execute(remaining, (queue,))
            row = await cur.fetchone()
            left = int(row[0]) if row else 0
            if left:
                await asyncio.sleep(0.002)
        cpu = await meter.stop()
    finally:
        await watcher.close()
        await boss.stop(timeout=30)
    return {"jobs": counter.count, **cpu}

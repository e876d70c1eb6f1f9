"""Enqueue scenarios: bulk ``insert`` against COPY, single ``send`` against INSERT.

Parent side: :func:`prepare` (an empty plain table next to the empty queue)
and :func:`verify` (both sides wrote every row, with the same content).
Child side: :func:`bulk_enqueue` and :func:`single_enqueue`, the qcore
halves; the raw halves are in :mod:`bench.raw`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.common import BATCH_INSERT, Meter, open_boss, payload, spans, warm_pool
from bench.env import Env

__all__ = ["bulk_enqueue", "prepare", "single_enqueue", "verify"]

#: the columns whose values differ by construction between two rows of the same job
#: (the id and the clock); every other column, ``data`` included, must match
_VOLATILE = {"id", "created_on", "start_after", "keep_until"}


# --------------------------------------------------------------------------- parent side


async def prepare(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    """An empty plain table for each raw side (``raw_fk``'s with qcore's foreign keys)."""
    tables = {side: await env.make_raw_table(f"raw_{side}") for side in sides}
    if "raw_fk" in tables:
        await env.copy_foreign_keys(tables["raw_fk"])
    return {side: {"raw_table": table} for side, table in tables.items()}


async def verify(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    """Every side wrote ``jobs`` rows, and the rows are the same but for id and clock
    (so the baseline does the same work); the payload sizes are equal."""
    physical = env.table(env.physical)
    problems: dict[str, list[str]] = {side: [] for side in ("qcore", *sides)}
    n = await env.value(f"SELECT count(*) FROM {physical} WHERE name = %s", (env.queue,))
    if n != jobs:
        problems["qcore"].append(f"wrote {n} rows, expected {jobs}")
    columns = [
        c
        for (c,) in await env.rows(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (env.schema, env.physical),
        )
        if c not in _VOLATILE
    ]
    listed = ", ".join(f'"{c}"' for c in columns)
    size = f"SELECT avg(pg_column_size(data)) FROM {{}} WHERE name = '{env.queue}'"
    qcore_size = await env.value(size.format(physical))
    for side in sides:
        raw = env.table(f"raw_{side}")
        m = await env.value(f"SELECT count(*) FROM {raw}")
        if m != jobs:
            problems[side].append(f"wrote {m} rows, expected {jobs}")
        differing = await env.value(
            f"SELECT count(*) FROM ((SELECT {listed} FROM {physical} WHERE name = %s"
            f" EXCEPT SELECT {listed} FROM {raw})"
            f" UNION ALL (SELECT {listed} FROM {raw}"
            f" EXCEPT SELECT {listed} FROM {physical} WHERE name = %s)) d",
            (env.queue, env.queue),
        )
        if differing:
            problems[side].append(f"{differing} distinct rows differ from qcore's")
        raw_size = await env.value(size.format(raw))
        if raw_size != qcore_size:
            problems[side].append(f"payload {raw_size} bytes, qcore's {qcore_size}")
    return {"problems": problems, "payload_bytes": float(qcore_size or 0)}


# --------------------------------------------------------------------------- child side


async def bulk_enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    """``insert`` in batches of 1,000, one caller."""
    jobs, queue = int(spec["jobs"]), spec["queue"]
    batches = [
        [{"data": payload(i)} for i in range(first, min(first + BATCH_INSERT, jobs))]
        for first in range(0, jobs, BATCH_INSERT)
    ]
    boss = await open_boss(spec, max=2)
    meter = Meter(spec["dsn"])
    try:
        written = 0
        await meter.start()
        for batch in batches:
            ids = await boss.insert(queue, batch)
            written += len(ids or ())
        cpu = await meter.stop()
    finally:
        await boss.stop()
    return {"jobs": written, **cpu}


async def single_enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    """``send`` one job at a time from ``concurrency`` concurrent callers (a pool that
    size, opened before the clock starts)."""
    jobs, queue, callers = int(spec["jobs"]), spec["queue"], int(spec["concurrency"])
    boss = await open_boss(spec, max=callers)
    sent = 0

    async def caller(first: int, count: int) -> None:
        nonlocal sent
        for i in range(first, first + count):
            if await boss.send(queue, payload(i)) is not None:
                sent += 1

    starts = spans(jobs, callers)
    meter = Meter(spec["dsn"])
    try:
        await warm_pool(boss, callers)
        await meter.start()
        await asyncio.gather(*(caller(f, n) for f, n in starts))
        cpu = await meter.stop()
    finally:
        await boss.stop()
    return {"jobs": sent, **cpu}

"""``python -m bench.retention``: how fast retention deletes, and what it costs workers.

1. **Throughput.** A queue is filled with ``--jobs`` finished jobs (completed an hour
   ago, ``delete_after_seconds`` a minute) by one ``INSERT ... SELECT``; qcore's
   retention walk deletes them (``rows/s``), pausing between batches as it does in a
   pass (``--duty``, the share of its time spent in batches; 1 runs flat out). The
   same rows are made again and a raw batched ``DELETE`` (10,000 rows a statement, by
   primary key, until none is left) deletes them on the same server: the ratio is
   qcore / raw.
2. **Drain under retention.** ``--drain`` runnable jobs are drained by a worker
   (``batch_size=1``, ``local_concurrency=8``) alone, and again while a retention
   walk over ``--jobs`` finished jobs runs beside it (started once a tenth of the
   jobs are done; the report says how long each took, so the overlap is plain): the
   ratio is with / without (the target is at least 0.85).

    python -m bench.retention [--dsn DSN] [--jobs 1000000] [--drain 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from qcore import Boss
from qcore.services import maintenance

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_retention"
BATCH = 10_000


async def _finished(boss: Boss, count: int) -> str:
    """``count`` jobs of queue ``old`` completed an hour ago; its physical table."""
    ctx = boss.context()
    await boss.db.execute(
        f"INSERT INTO {SCHEMA}.job (id, name, data, policy, state, started_on, completed_on,"
        " deletion_seconds) SELECT gen_random_uuid(), 'old', to_jsonb(i), 'standard',"
        " 'completed', now() - interval '2 hours', now() - interval '1 hour', 60"
        " FROM generate_series(1, $1::int) AS i",
        [count],
    )
    (queue,) = await ctx.db.execute(f"SELECT table_name FROM {SCHEMA}.queue WHERE name = 'old'")
    await boss.db.execute(f"VACUUM ANALYZE {SCHEMA}.{queue['table_name']}")
    return str(queue["table_name"])


async def _qcore_retention(boss: Boss, table: str, duty: float = 1.0) -> tuple[int, float]:
    started = time.perf_counter()
    result = await maintenance.retain(
        boss.context(), table, ["old"], interval_seconds=None, stopping=lambda: False, duty=duty
    )
    return result.deleted, time.perf_counter() - started


async def _raw_retention(boss: Boss, table: str) -> tuple[int, float]:
    deleted = 0
    started = time.perf_counter()
    while True:
        rows = await boss.db.execute(
            f"WITH b AS (SELECT id FROM {SCHEMA}.{table} WHERE name = 'old'"
            " AND completed_on + deletion_seconds * interval '1s' < now()"
            f" ORDER BY id LIMIT {BATCH}), d AS (DELETE FROM {SCHEMA}.{table} t USING b"
            " WHERE t.name = 'old' AND t.id = b.id RETURNING 1)"
            " SELECT count(*)::int AS n FROM d"
        )
        deleted += int(rows[0]["n"])
        if rows[0]["n"] < BATCH:
            return deleted, time.perf_counter() - started


async def _drain(boss: Boss, count: int, beside: Any = None) -> float:
    """Seconds to work ``count`` jobs of queue ``live``; ``beside()`` (a coroutine
    function) starts once a tenth of them are done, so it runs while workers are busy."""
    await boss.insert("live", [{"data": i} for i in range(count)])
    done = asyncio.Event()
    handled = 0

    async def handler(_jobs: Any) -> None:
        nonlocal handled
        handled += 1
        if beside is not None and handled == count // 10:
            tasks.append(asyncio.ensure_future(beside()))
        if handled >= count:
            done.set()

    tasks: list[asyncio.Future[Any]] = []

    started = time.perf_counter()
    await boss.work(
        "live", handler, batch_size=1, local_concurrency=8, polling_interval_seconds=0.5
    )
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.perf_counter() - started
    await boss.off_work("live")
    await asyncio.gather(*tasks)
    return elapsed


async def run(dsn: str, jobs: int, drain: int, duty: float) -> dict[str, Any]:
    async with Boss(dsn, schema=SCHEMA, supervise=False) as boss:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    async with Boss(dsn, schema=SCHEMA, supervise=False) as boss:
        try:
            await boss.create_queue("old", delete_after_seconds=60)
            await boss.create_queue("live")
            table = await _finished(boss, jobs)
            q_deleted, q_seconds = await _qcore_retention(boss, table, duty)
            await _finished(boss, jobs)
            r_deleted, r_seconds = await _raw_retention(boss, table)
            alone = await _drain(boss, drain)
            await _finished(boss, jobs)
            walks: list[tuple[int, float]] = []

            async def walk() -> None:
                walks.append(await _qcore_retention(boss, table, duty))

            beside = await _drain(boss, drain, walk)
            [(walked, walk_seconds)] = walks
            return {
                "jobs": jobs,
                "duty": duty,
                "qcore_rows_per_second": round(q_deleted / q_seconds),
                "raw_rows_per_second": round(r_deleted / r_seconds),
                "retention_ratio": round((q_deleted / q_seconds) / (r_deleted / r_seconds), 2),
                "drain_jobs": drain,
                "drain_alone_per_second": round(drain / alone),
                "drain_during_retention_per_second": round(drain / beside),
                "drain_ratio": round(alone / beside, 2),
                "retention_during_drain_seconds": round(walk_seconds, 2),
                "drain_during_retention_seconds": round(beside, 2),
                "retention_deleted_during_drain": walked,
            }
        finally:
            await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=5_000)
    parser.add_argument(
        "--duty",
        type=float,
        default=maintenance.RETENTION_DUTY,
        help="the share of time the walk may spend in its batches (qcore's default; 1: flat out)",
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.dsn, args.jobs, args.drain, args.duty)), indent=2))


if __name__ == "__main__":
    main()

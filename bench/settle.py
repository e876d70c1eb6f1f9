"""``python -m bench.settle``: what one ``complete(ids)`` costs as a queue's active jobs grow.

For each size, a fresh queue holds that many active jobs — written in one statement,
as a burst of claims leaves them — with autovacuum off for its table, so its statistics
never learn of them; then completes of ``--batch`` of those jobs are timed one after
another. A complete names its jobs by id; its cost should not depend on how many other
jobs are active.

With ``--compare pgboss`` the real pg-boss completes jobs of a queue of its own, filled
the same way in the same schema, right after qcore (its ``complete()``, one at a time).

    python -m bench.settle [--dsn DSN] [--sizes 1000,20000,100000] [--settles 100]
                           [--batch 1] [--compare pgboss]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.common import drop_schema
from qcore import Boss

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_settle"


async def _fill(boss: Boss, size: int, name: str) -> list[Any]:
    """``size`` active jobs in queue ``name``, its table left unanalyzed; their ids."""
    (queue,) = await boss.db.execute(
        f"SELECT table_name FROM {SCHEMA}.queue WHERE name = $1", [name]
    )
    await boss.db.execute_script(
        f"ALTER TABLE {SCHEMA}.{queue['table_name']} SET (autovacuum_enabled = false)"
    )
    rows = await boss.db.execute(
        f"INSERT INTO {SCHEMA}.job (name, data, policy, state, started_on, heartbeat_on)"
        " SELECT $2, to_jsonb(i), 'standard', 'active', now(), now()"
        " FROM generate_series(1, $1::int) AS i RETURNING id",
        [size, name],
    )
    return [r["id"] for r in rows]


def _batches(ids: list[Any], settles: int, batch: int) -> list[list[Any]]:
    return [ids[i * batch : (i + 1) * batch] for i in range(settles)]


async def measure(
    dsn: str, size: int, settles: int, batch: int, pgboss: bool = False
) -> tuple[float, float | None]:
    """The median milliseconds of one complete of ``batch`` jobs among ``size`` active:
    qcore's, and with ``pgboss`` pg-boss's on a queue of its own filled the same way."""
    await drop_schema(dsn, SCHEMA)
    try:
        async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
            await boss.create_queue("q")
            ours = _batches(await _fill(boss, size, "q"), settles, batch)
            theirs: list[list[Any]] = []
            if pgboss:
                await boss.create_queue("pgboss")
                theirs = _batches(await _fill(boss, size, "pgboss"), settles, batch)
            await boss.db.execute_script("CHECKPOINT")
            times = []
            for ids in ours:
                started = time.perf_counter()
                result = await boss.complete("q", ids)
                times.append(time.perf_counter() - started)
                assert result.affected == len(ids), f"a complete settled {result.affected}"
            peer = await _pgboss_settles(dsn, theirs) if pgboss else None
            return statistics.median(times) * 1000, peer
    finally:
        await drop_schema(dsn, SCHEMA)  # once the Boss has stopped


async def _pgboss_settles(dsn: str, batches: list[list[Any]]) -> float:
    """pg-boss's median complete, in milliseconds, of each batch of queue ``pgboss``."""
    from bench import pgboss

    batches_given = [[str(i) for i in ids] for ids in batches]
    return await pgboss.median_ms(dsn, SCHEMA, "settle", batches=batches_given, jobs=len(batches))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.settle", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sizes", default="1000,20000,100000")
    parser.add_argument("--settles", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1, help="jobs per complete")
    parser.add_argument("--compare", default="none", help="pgboss: complete with pg-boss too")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.settles * args.batch > min(sizes):
        parser.error("--settles × --batch must not exceed the smallest size")
    peer = args.compare == "pgboss"
    header = f"{'active jobs':>12}  {'qcore (ms)':>11}"
    print(header + (f"  {'pg-boss (ms)':>13}" if peer else ""))
    for size in sizes:
        ours, theirs = asyncio.run(measure(args.dsn, size, args.settles, args.batch, peer))
        line = f"{size:>12,}  {ours:>11.2f}"
        print(line + (f"  {theirs:>13.2f}" if theirs is not None else ""), flush=True)


if __name__ == "__main__":
    main()

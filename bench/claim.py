"""``python -m bench.claim``: what one ``fetch(batch_size=n)`` costs as the backlog grows.

For each backlog size, a fresh queue is filled — by qcore's ``insert`` (every row its
own ``created_on``) or as pg-boss inserts a batch (one ``created_on`` for all) — with
autovacuum off for its table, so its statistics are never refreshed; then claims of
``--batch`` jobs (default 1) are timed one after another. The claim's cost should not
depend on the size.

With ``--compare pgboss`` the real pg-boss claims from a queue of its own filled the
same way, in the same schema, right after qcore (its ``fetch()``, one at a time).

With ``--grow`` one Boss and one queue go through the sizes in turn instead: at each,
the queue is topped up to the size (qcore's ``insert``, never analyzed) and
``--claims`` times ``fetch`` then ``complete``, the fetch timed. A claim's statement is
prepared on the first, smallest, backlog, so this is where a plan made on a small
queue and kept as it grew shows (pg-boss, with ``--compare pgboss``, claims from its
own queue, in a partition of its own, grown the same way, after qcore at each size).

    python -m bench.claim [--dsn DSN] [--sizes 1000,10000,100000] [--claims 200]
                          [--batch 1] [--compare pgboss] [--grow]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.common import drop_schema
from qcore import Boss

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_claim"


async def _fill(boss: Boss, size: int, tied: bool, name: str = "q") -> None:
    (queue,) = await boss.db.execute(
        f"SELECT table_name FROM {SCHEMA}.queue WHERE name = $1", [name]
    )
    await boss.db.execute_script(
        f"ALTER TABLE {SCHEMA}.{queue['table_name']} SET (autovacuum_enabled = false)"
    )
    if tied:
        await boss.db.execute(
            f"INSERT INTO {SCHEMA}.job (id, name, data, policy) SELECT gen_random_uuid(), $2,"
            " to_jsonb(i), 'standard' FROM generate_series(1, $1::int) AS i",
            [size, name],
        )
        return
    for start in range(0, size, 5_000):
        await boss.insert(
            name, [{"data": {"n": n}} for n in range(start, min(size, start + 5_000))]
        )


async def measure(
    dsn: str, size: int, tied: bool, claims: int, pgboss: bool = False, batch: int = 1
) -> tuple[float, float | None]:
    """The median milliseconds of one claim of ``batch`` jobs on a backlog of ``size``:
    qcore's, and with ``pgboss`` pg-boss's on a queue of its own filled the same way."""
    await drop_schema(dsn, SCHEMA)
    try:
        async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
            await boss.create_queue("q")
            await _fill(boss, size, tied)
            if pgboss:
                await boss.create_queue("pgboss")
                await _fill(boss, size, tied, "pgboss")
            await boss.db.execute_script("CHECKPOINT")
            times = []
            for _ in range(claims):
                started = time.perf_counter()
                jobs = await boss.fetch("q", batch_size=batch)
                times.append(time.perf_counter() - started)
                assert len(jobs) == batch, f"a claim got {len(jobs)} jobs of {batch}"
            theirs = await _pgboss_claims(dsn, claims, batch) if pgboss else None
            return statistics.median(times) * 1000, theirs
    finally:
        await drop_schema(dsn, SCHEMA)  # once the Boss has stopped


async def _pgboss_claims(dsn: str, claims: int, batch: int) -> float:
    """pg-boss's median claim, in milliseconds, on queue ``pgboss`` (Node, its fetch)."""
    from bench import pgboss

    return await pgboss.median_ms(dsn, SCHEMA, "claim", jobs=claims, batch=batch)


async def grow(
    dsn: str, sizes: list[int], claims: int, pgboss: bool = False, batch: int = 1
) -> list[tuple[float, float | None]]:
    """Per size, on one Boss and one queue grown through ``sizes``: the median
    milliseconds of ``fetch(batch_size=batch)`` (each followed by a ``complete``), and
    with ``pgboss`` pg-boss's median fetch on its own queue of the same size."""
    await drop_schema(dsn, SCHEMA)
    medians: list[tuple[float, float | None]] = []
    try:
        async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
            names = ["q", "pgboss"] if pgboss else ["q"]
            for name in names:  # pg-boss's queue in a table of its own: qcore's alone in its
                await boss.create_queue(name, partition=name == "pgboss")
            for table in await boss.db.execute(f"SELECT DISTINCT table_name FROM {SCHEMA}.queue"):
                await boss.db.execute_script(
                    f"ALTER TABLE {SCHEMA}.{table['table_name']} SET (autovacuum_enabled = false)"
                )
            for size in sizes:
                for name in names:
                    await _top_up(boss, name, size)
                await boss.db.execute_script("CHECKPOINT")
                times = []
                for _ in range(claims):
                    started = time.perf_counter()
                    jobs = await boss.fetch("q", batch_size=batch)
                    times.append(time.perf_counter() - started)
                    await boss.complete("q", [job.id for job in jobs])
                    assert len(jobs) == batch, f"a claim got {len(jobs)} jobs of {batch}"
                theirs = await _pgboss_claims(dsn, claims, batch) if pgboss else None
                medians.append((statistics.median(times) * 1000, theirs))
    finally:
        await drop_schema(dsn, SCHEMA)
    return medians


async def _top_up(boss: Boss, name: str, size: int) -> None:
    """Queue ``name`` filled with qcore's ``insert`` up to ``size`` waiting jobs."""
    (row,) = await boss.db.execute(
        f"SELECT count(*) AS n FROM {SCHEMA}.job WHERE name = $1 AND state = 'created'",
        [name],
    )
    for start in range(int(row["n"]), size, 5_000):
        count = min(size, start + 5_000) - start
        await boss.insert(name, [{"data": {"n": n}} for n in range(count)])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.claim", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1, help="jobs per claim")
    parser.add_argument("--compare", default="none", help="pgboss: claim with pg-boss too")
    parser.add_argument(
        "--grow", action="store_true", help="one queue grown through the sizes, one Boss"
    )
    args = parser.parse_args()
    if args.claims * args.batch > min(int(s) for s in args.sizes.split(",")):
        parser.error("--claims × --batch must not exceed the smallest size")
    sizes = [int(s) for s in args.sizes.split(",")]
    peer = args.compare == "pgboss"
    if args.grow:
        medians = asyncio.run(grow(args.dsn, sizes, args.claims, peer, args.batch))
        print(f"{'waiting jobs':>12}  {'qcore (ms)':>10}" + ("  pg-boss (ms)" if peer else ""))
        for size, (ours, theirs) in zip(sizes, medians, strict=True):
            line = f"{size:>12,}  {ours:>10.2f}"
            print(line + (f"  {theirs:>12.2f}" if theirs is not None else ""), flush=True)
        return
    header = f"{'waiting jobs':>12}  {'qcore insert (ms)':>18}  {'one created_on (ms)':>20}"
    print(header + (f"  {'pg-boss, one created_on (ms)':>29}" if peer else ""))
    for size in sizes:
        distinct, _ = asyncio.run(measure(args.dsn, size, False, args.claims, batch=args.batch))
        tied, theirs = asyncio.run(
            measure(args.dsn, size, True, args.claims, peer, batch=args.batch)
        )
        line = f"{size:>12,}  {distinct:>18.2f}  {tied:>20.2f}"
        print(line + (f"  {theirs:>29.2f}" if theirs is not None else ""), flush=True)


if __name__ == "__main__":
    main()

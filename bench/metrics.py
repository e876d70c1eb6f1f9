"""``python -m bench.metrics``: what a metrics-history tick costs, by queues and traffic.

For each (queues, jobs per minute): a fresh schema with that many queues, each given
that many finished jobs in one minute (varied wait and run times, one in twenty
failed), a first tick to record them, then the schema's clock moved on ten minutes and
another minute of jobs: the second tick is the one measured, a steady-state tick that
closes the minutes since (one of them holding jobs). Reported: its wall time, and its
database round trips (statements + BEGIN and COMMIT of each transaction, counted in the
process by :class:`CountingDatabase`); with ``--store redis`` the history goes to Redis and the
Redis commands the tick sent are reported too (the server's ``total_commands_processed``
before and after). The round trips should depend on the number of queues only, not on
the traffic (above ``max_samples_per_tick`` a minute is sampled).

    python -m bench.metrics [--dsn DSN] [--queues 1,50,200] [--rates 100,10000]
                            [--store postgres|redis] [--redis URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from bench.idle import CountingDatabase
from qcore import backends
from qcore.conformance.helpers import set_clock
from qcore.context import Context
from qcore.db import connect
from qcore.metrics import MetricsRecorder, MetricsStore, PgBossQueues, PostgresMetricsStore
from qcore.verbs.schema import install_or_migrate

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
SCHEMA = "qcore_bench_metrics"
REDIS_PREFIX = "qcore-bench:metrics"


async def _redis_commands(store: MetricsStore) -> int:
    """Commands the Redis server has processed (0 for a PostgreSQL store)."""
    client = getattr(store, "client", None)
    if client is None:
        return 0
    return int((await client.info("stats"))["total_commands_processed"])


async def _drop_redis(store: MetricsStore) -> None:
    client = getattr(store, "client", None)
    if client is not None:
        async for key in client.scan_iter(match=REDIS_PREFIX + ":*", count=1000):
            await client.delete(key)


async def _minute_of_jobs(ctx: Context, names: list[str], rate: int, minute_ago: int) -> None:
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (name, state, created_on, started_on, completed_on)"
        f" SELECT n, (CASE WHEN i % 20 = 0 THEN 'failed' ELSE 'completed' END)::{ctx.q}.job_state,"
        " t - ((i % 97) * 37 + (i % 89) * 53) * interval '1 millisecond',"
        " t - (i % 89) * 53 * interval '1 millisecond', t"
        " FROM unnest($1::text[]) AS n, generate_series(1, $2::int) AS i,"
        f" LATERAL (SELECT date_trunc('minute', {ctx.q}.job_now()) - $3 * interval '1 minute'"
        "  + (i % 60) * interval '1 second' AS t) AS at",
        [names, rate, minute_ago],
    )


def _store(db: CountingDatabase, kind: str, redis_url: str) -> MetricsStore:
    if kind == "redis":
        from qcore.metrics import RedisMetricsStore

        return RedisMetricsStore(redis_url, prefix=REDIS_PREFIX, schema=SCHEMA)
    return PostgresMetricsStore(db, schema=SCHEMA)


async def one(
    dsn: str, queues: int, rate: int, kind: str = "postgres", redis_url: str = DEFAULT_REDIS
) -> dict[str, Any]:
    inner = await connect(dsn, max=4)
    db = CountingDatabase(inner)
    ctx = Context(db=db, backend=backends.get("postgres"), schema_spec=SCHEMA)
    try:
        await db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await install_or_migrate(ctx)
        names = [f"q{k}" for k in range(queues)]
        for name in names:
            await db.execute(f"SELECT {ctx.q}.create_queue($1, '{{}}'::jsonb)", [name])
        await _minute_of_jobs(ctx, names, rate, 2)
        store = _store(db, kind, redis_url)
        await _drop_redis(store)
        try:
            recorder = MetricsRecorder(store, PgBossQueues(ctx))
            await recorder.tick()
            # the measured minute lies after everything the first tick closed, however long
            # that tick and this insert take: the schema's clock moves ten minutes on
            await set_clock(ctx, 600)
            await _minute_of_jobs(ctx, names, rate, 1)
            await db.execute(f"ANALYZE {ctx.q}.job_common")
            db.reset()
            before = await _redis_commands(store)
            started = time.perf_counter()
            await recorder.tick()
            seconds = time.perf_counter() - started
            redis_commands = max(await _redis_commands(store) - before - 1, 0)
        finally:
            await _drop_redis(store)
            await store.close()
        round_trips = db.statements + 2 * db.transactions
        return {
            "store": kind,
            "queues": queues,
            "jobs_per_minute": rate,
            "tick_ms": round(seconds * 1000, 1),
            "round_trips": round_trips,
            "round_trips_per_queue": round(round_trips / queues, 1),
            "redis_commands": redis_commands,
        }
    finally:
        await inner.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await inner.close()


async def run(
    dsn: str, queues: list[int], rates: list[int], kind: str = "postgres",
    redis_url: str = DEFAULT_REDIS,
) -> list[dict[str, Any]]:  # fmt: skip
    return [await one(dsn, q, r, kind, redis_url) for q in queues for r in rates]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--queues", default="1,50,200")
    parser.add_argument("--rates", default="100,10000")
    parser.add_argument("--store", choices=("postgres", "redis"), default="postgres")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="the Redis server (--store redis)")
    args = parser.parse_args()
    results = asyncio.run(
        run(args.dsn, [int(q) for q in args.queues.split(",")],
            [int(r) for r in args.rates.split(",")], args.store, args.redis)
    )  # fmt: skip
    print(
        f"{'store':>9} {'queues':>7} {'jobs/min':>9} {'tick ms':>9} {'round trips':>12}"
        f" {'per queue':>10} {'redis cmds':>11}"
    )
    for r in results:
        print(
            f"{r['store']:>9} {r['queues']:>7} {r['jobs_per_minute']:>9} {r['tick_ms']:>9}"
            f" {r['round_trips']:>12} {r['round_trips_per_queue']:>10} {r['redis_commands']:>11}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""``python -m bench.affinity``: what job affinity costs a claim.

``plain``: ``fetch`` on a queue where no job has a pattern (batches of 1 and of 10,
median of ``--claims``), on a fresh queue of ``--backlog`` jobs never analyzed, by an
anonymous server and by a keyed one (which also records its key on every job it
claims). It uses nothing affinity adds, so the same script measures the code before
affinity existed: run it from a checkout of that commit for the before figure.

``behind``: ten jobs this server's key matches wait behind ``--backlog`` jobs meant
for other servers (one pattern for all of them, or each its own with
``--distinct``); each round sends ten more matching jobs and times the ``fetch`` of
ten that takes them. The first round reads the queue's patterns (as a server does
every few seconds); the median is over the rounds after it. Next to it, the same
fetch with nothing in the way.

    python -m bench.affinity [--dsn DSN] [--backlog 10000] [--claims 200]
                             [--rounds 50] [--distinct] [--scenarios plain,behind]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from qcore import Boss

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_affinity"
KEY = "10.0.2.3:ram-2gb:cpu-1cor"


async def _fresh(dsn: str) -> None:
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


async def _unanalyzed_queue(boss: Boss, name: str) -> None:
    await boss.create_queue(name)
    (queue,) = await boss.db.execute(
        f"SELECT table_name FROM {SCHEMA}.queue WHERE name = $1", [name]
    )
    await boss.db.execute_script(
        f"ALTER TABLE {SCHEMA}.{queue['table_name']} SET (autovacuum_enabled = false)"
    )


async def _timed(boss: Boss, name: str, batch: int, expect: int) -> float:
    started = time.perf_counter()
    jobs = await boss.fetch(name, batch_size=batch)
    elapsed = time.perf_counter() - started
    assert len(jobs) == expect, (name, len(jobs), expect)
    return elapsed * 1000


async def plain(dsn: str, backlog: int, claims: int) -> dict[str, float]:
    """Median milliseconds of ``fetch`` on a queue without patterns, batch 1 and 10, by
    an anonymous server and a keyed one."""
    await _fresh(dsn)
    result = {}
    for key in (None, KEY):
        async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False, instance_key=key) as b:
            try:
                for batch in (1, 10):
                    name = f"plain{batch}"
                    await _unanalyzed_queue(b, name)
                    for start in range(0, backlog + claims * batch, 5_000):
                        await b.insert(
                            name, [{"data": {"n": n}} for n in range(start, start + 5_000)]
                        )
                    await b.db.execute_script("CHECKPOINT")
                    times = [await _timed(b, name, batch, batch) for _ in range(claims)]
                    server = "keyed" if key else "anonymous"
                    result[f"{server}, batch {batch}"] = statistics.median(times)
            finally:
                await b.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    return result


async def behind(dsn: str, backlog: int, rounds: int, distinct: bool) -> dict[str, float]:
    """The fetch of ten matching jobs behind ``backlog`` others: the first round, the
    median of the rest, and the same fetch on a queue with nothing else waiting."""
    await _fresh(dsn)
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False, instance_key=KEY) as b:
        try:
            await _unanalyzed_queue(b, "behind")
            await _unanalyzed_queue(b, "alone")
            others: list[dict[str, Any]] = [
                {
                    "data": {"n": n},
                    "priority": 1,
                    "preferred_instance_key_pattern": f"host-{n}:" if distinct else "ram-8gb",
                }
                for n in range(backlog)
            ]
            for start in range(0, backlog, 5_000):
                await b.insert("behind", others[start : start + 5_000])
            await b.db.execute_script("CHECKPOINT")
            mine = [{"data": n, "preferred_instance_key_pattern": "ram-2gb"} for n in range(10)]
            times: dict[str, list[float]] = {"behind": [], "alone": []}
            for _ in range(rounds):
                for name in times:
                    await b.insert(name, mine)
                    times[name].append(await _timed(b, name, 10, 10))
            return {
                "first round": times["behind"][0],
                "behind": statistics.median(times["behind"][1:]),
                "nothing in the way": statistics.median(times["alone"][1:]),
            }
        finally:
            await b.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.affinity", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--distinct", action="store_true", help="each other job its own pattern")
    parser.add_argument("--scenarios", default="plain,behind")
    args = parser.parse_args()
    scenarios = args.scenarios.split(",")
    if "plain" in scenarios:
        for label, ms in asyncio.run(plain(args.dsn, args.backlog, args.claims)).items():
            print(f"plain queue, {args.backlog:,} waiting, fetch {label}: {ms:.2f} ms", flush=True)
    if "behind" in scenarios:
        kind = "each its own pattern" if args.distinct else "one pattern"
        figures = asyncio.run(behind(args.dsn, args.backlog, args.rounds, args.distinct))
        for label, ms in figures.items():
            print(f"10 matching behind {args.backlog:,} ({kind}), {label}: {ms:.2f} ms")


if __name__ == "__main__":
    main()

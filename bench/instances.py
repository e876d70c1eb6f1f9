"""``python -m bench.instances``: what the instance registry costs a ``Boss``.

One instance with ``--workers`` workers registers in a fresh schema; then its heartbeat
(the row upserted with the pool, the workers and a metrics sample) is timed
``--beats`` times back to back, and the same for the sample alone (the client's share).
Median milliseconds. At the default heartbeat of 30 s, one beat per instance per 30 s
is the whole cost.

    python -m bench.instances [--dsn DSN] [--beats 200] [--workers 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from qcore import Boss
from qcore.job import Job
from qcore.services.instances import InstanceRegistry
from qcore.services.process_usage import ProcessUsage

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_instances"


async def measure(dsn: str, beats: int, workers: int) -> dict[str, float]:
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        try:

            async def handler(batch: list[Job]) -> None:
                return None

            for n in range(workers):
                await boss.create_queue(f"q{n}")
                await boss.work(f"q{n}", handler, polling_interval_seconds=600)
            registry = boss.services.get("registry", InstanceRegistry)
            assert registry is not None
            times = []
            for _ in range(beats):
                started = time.perf_counter()
                await registry.run_pass()
                times.append(time.perf_counter() - started)
            usage = ProcessUsage()
            samples = []
            for _ in range(beats):
                started = time.perf_counter()
                usage.sample()
                samples.append(time.perf_counter() - started)
            return {
                "beat_ms": statistics.median(times) * 1000,
                "sample_ms": statistics.median(samples) * 1000,
            }
        finally:
            await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instances", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--beats", type=int, default=200)
    parser.add_argument("--workers", type=int, default=10)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.dsn, args.beats, args.workers))
    print(
        f"one heartbeat with {args.workers} workers: {figures['beat_ms']:.2f} ms"
        f" (of which the metrics sample {figures['sample_ms']:.2f} ms), median of {args.beats}"
    )


if __name__ == "__main__":
    main()

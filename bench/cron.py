"""``python -m bench.cron``: what a cron pass and its forwarding cost with many schedules.

A fresh schema gets ``--schedules`` every-minute schedules (over 10 queues); then each
round moves the schema's clock a minute on (no sleep) and times, separately, one cron
pass (the claim, every row read and evaluated, one send-it job filed per schedule) and
the forwarding of what it filed (fetch 50, send each to its queue, record last_job_id)
until the send-it queue is empty. Median of ``--rounds``.

    python -m bench.cron [--dsn DSN] [--schedules 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.services.timekeeper import FORWARD_BATCH, SEND_IT, cron_pass, forward
from qcore.verbs import jobs

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_cron"
QUEUES = 10


async def measure(dsn: str, schedules: int, rounds: int) -> dict[str, float]:
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        try:
            await boss.create_queue(SEND_IT)
            for q in range(QUEUES):
                await boss.create_queue(f"q{q}")
            for n in range(schedules):
                await boss.schedule(f"q{n % QUEUES}", "* * * * *", {"n": n}, key=f"k{n}")
            ctx = boss.context()
            passes, forwards = [], []
            for round_ in range(1, rounds + 1):
                await set_clock(ctx, round_ * 60)
                started = time.perf_counter()
                result = await cron_pass(ctx, None, interval_seconds=30)
                passes.append(time.perf_counter() - started)
                assert result.claimed and len(result.filed) == schedules, result
                started = time.perf_counter()
                sent = 0
                while batch := await jobs.fetch(ctx, SEND_IT, batch_size=FORWARD_BATCH):
                    sent += await forward(ctx, None, batch)
                    await jobs.complete(ctx, SEND_IT, batch)
                forwards.append(time.perf_counter() - started)
                assert sent == schedules, sent
            pass_s, forward_s = statistics.median(passes), statistics.median(forwards)
            return {
                "pass_ms": pass_s * 1000,
                "pass_us_per_schedule": pass_s / schedules * 1e6,
                "forward_jobs_per_s": schedules / forward_s,
            }
        finally:
            await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cron", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.dsn, args.schedules, args.rounds))
    print(
        f"{args.schedules:,} every-minute schedules: a cron pass {figures['pass_ms']:.1f} ms"
        f" ({figures['pass_us_per_schedule']:.0f} µs per schedule); forwarding"
        f" {figures['forward_jobs_per_s']:,.0f} jobs/s"
    )


if __name__ == "__main__":
    main()

"""``python -m bench.groups``: what ``group_concurrency`` costs a claim.

A queue is filled with ``--jobs`` jobs spread over ``--groups`` groups (qcore's
``insert``), then drained by one caller, ``fetch(batch_size=100)`` + ``complete``, three
ways: plainly; with a ``group_concurrency`` no group reaches (the cost of counting the
active jobs of each group); and with ``group_concurrency=1`` (at most one job of a group
per claim: the limit doing its work). Each is set against the plain drain of the same
run. With ``--compare pgboss`` the real pg-boss drains the same way, on queues of its
own filled the same way in the same schema, and each qcore figure is set against
pg-boss's of the same kind.

    python -m bench.groups [--dsn DSN] [--jobs 20000] [--groups 500] [--repeat 3]
                           [--compare pgboss]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from statistics import median
from typing import Any

from qcore import Boss

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_groups"
BATCH = 100
#: (label, fetch options) of each drain
KINDS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("plain", {}),
    ("group_concurrency, never reached", {"group_concurrency": 1_000_000}),
    ("group_concurrency=1", {"group_concurrency": 1}),
)


async def _fill(boss: Boss, name: str, jobs: int, groups: int) -> None:
    await boss.create_queue(name)
    for start in range(0, jobs, 5_000):
        await boss.insert(
            name,
            [
                {"data": {"n": n}, "group_id": f"g{n % groups}"}
                for n in range(start, min(jobs, start + 5_000))
            ],
        )


async def _drain(boss: Boss, name: str, jobs: int, options: dict[str, Any]) -> float:
    """Seconds to claim and complete every job, ``BATCH`` at a time."""
    done = 0
    started = time.perf_counter()
    while done < jobs:
        claimed = await boss.fetch(name, batch_size=BATCH, **options)
        if not claimed:
            raise RuntimeError(f"{name}: nothing to claim after {done} of {jobs} jobs")
        await boss.complete(name, claimed)
        done += len(claimed)
    return time.perf_counter() - started


async def _pgboss_drain(dsn: str, name: str, jobs: int, options: dict[str, Any]) -> float:
    from bench import pgboss

    spec = {
        "dsn": dsn,
        "schema": SCHEMA,
        "queue": name,
        "scenario": "batch_drain",
        "jobs": jobs,
        "batch": BATCH,
        "concurrency": 1,
        "pool": 2,
        "pad": 0,
        "application_name": "bench-groups-pgboss",
        "fetch_options": {"groupConcurrency": options["group_concurrency"]} if options else {},
    }
    proc = await pgboss.start(spec)
    result = await pgboss.go(proc)
    await pgboss.ended(proc)
    return float(result["elapsed"])


async def measure(
    dsn: str, jobs: int, groups: int, peer: bool, repeat: int
) -> list[tuple[str, float, float | None]]:
    """Per kind of drain: its label, qcore's median jobs per second over ``repeat`` runs,
    pg-boss's (with ``peer``). Each run drains a queue of its own, kinds interleaved."""
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False) as boss:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    ours: dict[str, list[float]] = {label: [] for label, _ in KINDS}
    theirs: dict[str, list[float]] = {label: [] for label, _ in KINDS}
    async with Boss(dsn, schema=SCHEMA, supervise=False, schedule=False, max=2) as boss:
        try:
            for run in range(repeat):
                for i, (label, options) in enumerate(KINDS):
                    name = f"q{run}_{i}"
                    await _fill(boss, name, jobs, groups)
                    if peer:
                        await _fill(boss, f"pgboss_{name}", jobs, groups)
                    await boss.db.execute_script("CHECKPOINT")
                    ours[label].append(jobs / await _drain(boss, name, jobs, options))
                    if peer:
                        seconds = await _pgboss_drain(dsn, f"pgboss_{name}", jobs, options)
                        theirs[label].append(jobs / seconds)
        finally:
            await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    return [
        (label, median(ours[label]), median(theirs[label]) if peer else None) for label, _ in KINDS
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--compare", default="none", help="pgboss: drain with pg-boss too")
    args = parser.parse_args()
    peer = args.compare == "pgboss"
    rows = asyncio.run(measure(args.dsn, args.jobs, args.groups, peer, args.repeat))
    plain = rows[0][1]
    print(
        f"{args.jobs:,} jobs in {args.groups:,} groups, fetch({BATCH}) + complete, one caller,"
        f" median of {args.repeat}"
    )
    head = f"{'drain':<34} {'qcore jobs/s':>12} {'/ plain':>8}"
    print(head + (f" {'pg-boss jobs/s':>15} {'qcore / pg-boss':>16}" if peer else ""))
    for label, ours, theirs in rows:
        line = f"{label:<34} {ours:>12,.0f} {ours / plain:>8.2f}"
        if theirs is not None:
            line += f" {theirs:>15,.0f} {ours / theirs:>16.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

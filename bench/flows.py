"""``python -m bench.flows``: how fast the flow resolver releases children.

A fresh schema gets ``--flows`` flows of one parent and ``--children`` children each,
in one queue; every parent is claimed and completed; then one resolver pass
(``resolve_flows``) is timed: parents resolved and children released per second.
A second layout times a deep graph: ``--depth`` layers of 50, each job depending on two
of the layer before, resolved layer by layer (claim, complete, resolve) — the rate is
the resolver's time only. Median of ``--rounds``.

    python -m bench.flows [--dsn DSN] [--flows 1000] [--children 10] [--depth 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from qcore import Boss
from qcore.services.flows import resolve_flows

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "qcore_bench_flows"


async def _fresh(dsn: str) -> Boss:
    boss = Boss(dsn, schema=SCHEMA, supervise=False, schedule=False)
    await boss.start()
    await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    await boss.stop()
    boss = Boss(dsn, schema=SCHEMA, supervise=False, schedule=False)
    await boss.start()
    await boss.create_queue("q")
    return boss


async def _drain_ready(boss: Boss) -> int:
    done = 0
    while batch := await boss.fetch("q", batch_size=1000):
        await boss.complete("q", batch)
        done += len(batch)
    return done


async def wide(dsn: str, flows: int, children: int) -> float:
    """Seconds of one pass releasing ``flows`` × ``children`` children."""
    boss = await _fresh(dsn)
    try:
        for _ in range(flows):
            graph: list[dict[str, Any]] = [{"ref": "p", "name": "q"}]
            graph += [{"ref": f"c{c}", "name": "q", "depends_on": ["p"]} for c in range(children)]
            await boss.flow(graph)
        assert await _drain_ready(boss) == flows
        started = time.perf_counter()
        resolved = await resolve_flows(boss.context())
        elapsed = time.perf_counter() - started
        assert resolved == flows, resolved
        return elapsed
    finally:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await boss.stop()


async def deep(dsn: str, depth: int) -> tuple[float, int]:
    """Seconds the resolver spent releasing ``depth`` layers of 50; jobs released."""
    boss = await _fresh(dsn)
    rng = random.Random(1)
    layers = [[f"n{d}_{w}" for w in range(50)] for d in range(depth)]
    graph = [
        {"ref": ref, "name": "q", **({"depends_on": rng.sample(layers[d - 1], 2)} if d else {})}
        for d, layer in enumerate(layers)
        for ref in layer
    ]
    try:
        await boss.flow(graph)
        spent = 0.0
        for _ in range(depth):
            await _drain_ready(boss)
            started = time.perf_counter()
            await resolve_flows(boss.context())
            spent += time.perf_counter() - started
        return spent, 50 * (depth - 1)
    finally:
        await boss.db.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await boss.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.flows", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--flows", type=int, default=1000)
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    wides = [asyncio.run(wide(args.dsn, args.flows, args.children)) for _ in range(args.rounds)]
    w = statistics.median(wides)
    print(
        f"wide: {args.flows:,} parents x {args.children} children in one pass: {w * 1000:.0f} ms,"
        f" {args.flows / w:,.0f} parents/s, {args.flows * args.children / w:,.0f} children"
        " released/s"
    )
    deeps = [asyncio.run(deep(args.dsn, args.depth)) for _ in range(args.rounds)]
    spent = statistics.median(d[0] for d in deeps)
    released = deeps[0][1]
    print(
        f"deep: {args.depth} layers of 50: resolver {spent * 1000:.0f} ms in all,"
        f" {released / spent:,.0f} children released/s"
    )


if __name__ == "__main__":
    main()

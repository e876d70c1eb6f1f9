"""Wake-up latency: from ``send`` to the start of the handler, one job in flight.

The queue has ``notify=True`` and the Boss ``use_listen_notify=True``; the
worker keeps the default 2 s polling interval, so a wake-up that LISTEN/NOTIFY
missed shows up as a polling delay in the tail. Each sample waits for the
worker to go idle again (the handler, the complete and an empty fetch are
over) before the next ``send``. The clock is ``time.perf_counter`` of the
one process that both sends and handles. Each sample is also split in two:
``send`` returning (its INSERT and commit, which waits for the server's WAL
flush) and the wake after it (NOTIFY delivered, the worker's fetch and its
commit, the handler called), so a tail can be told apart.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.common import open_boss, payload
from bench.env import Env

__all__ = ["IDLE_GAP_SECONDS", "WARMUP_SAMPLES", "prepare", "summary", "wakeup_latency"]

#: pause after each handler start, so the next send finds the worker idle
IDLE_GAP_SECONDS = 0.05
WARMUP_SAMPLES = 5


async def prepare(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    return {}  # the runner creates the queue with notify=True


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def wakeup_latency(spec: dict[str, Any]) -> dict[str, Any]:
    queue, samples = spec["queue"], int(spec["samples"])
    boss = await open_boss(spec, use_listen_notify=True)
    started: dict[int, float] = {}
    arrived: dict[int, asyncio.Event] = {}

    async def handler(jobs: Any) -> None:
        now = time.perf_counter()
        for job in jobs if isinstance(jobs, list) else [jobs]:
            i = int(job.data["i"])
            started[i] = now
            arrived[i].set()

    latencies: list[float] = []
    send_times: list[float] = []
    wake_times: list[float] = []
    try:
        await boss.work(queue, handler)
        await asyncio.sleep(0.5)  # the first poll finds nothing; the worker now waits
        for i in range(-WARMUP_SAMPLES, samples):
            arrived[i] = asyncio.Event()
            t0 = time.perf_counter()
            await boss.send(queue, payload(i))
            t1 = time.perf_counter()
            try:
                await asyncio.wait_for(arrived[i].wait(), 15)
            except asyncio.TimeoutError:
                raise RuntimeError(f"job {i} was not handled within 15 s of its send") from None
            if i >= 0:
                latencies.append((started[i] - t0) * 1000)
                send_times.append((t1 - t0) * 1000)
                wake_times.append((started[i] - t1) * 1000)
            await asyncio.sleep(IDLE_GAP_SECONDS)
    finally:
        await boss.stop(timeout=10)
    return summary(latencies, send_times, wake_times)


def summary(
    latencies: list[float], send_times: list[float], wake_times: list[float]
) -> dict[str, Any]:
    """A side's figures from its samples (ms): send → handler start, and its two parts."""
    return {
        "samples": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "mean_ms": statistics.fmean(latencies),
        "send_p50_ms": percentile(send_times, 50),
        "send_p99_ms": percentile(send_times, 99),
        "wake_p50_ms": percentile(wake_times, 50),
        "wake_p99_ms": percentile(wake_times, 99),
    }

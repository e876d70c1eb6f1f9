"""The pg-boss peer: each throughput scenario run by the real pg-boss 12.38 (Node),
on the same server, in the same run, next to qcore and raw SQL
(``python -m bench run --compare pgboss``).

pg-boss works the schema qcore installed (the layout is the same, ``migrate: false``)
on a queue of its own, ``pgboss``, prepared with exactly the rows the qcore side
gets. Its timed half is ``bench/pgboss_bench.mjs``, started from the child process of
the side, whose meter reads the server CPU of pg-boss's connections (they carry the
child's ``application_name``) as for every other side.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from bench.common import APPLICATION, BATCH_INSERT, PAD, Meter, payload
from bench.env import Env
from bench.latency import IDLE_GAP_SECONDS, WARMUP_SAMPLES, summary

__all__ = ["QUEUE", "SCENARIOS", "median_ms", "prepare", "run", "verify"]

#: the queue the pg-boss side works
QUEUE = "pgboss"
#: the scenarios pg-boss has an equivalent of
SCENARIOS = (
    "bulk_enqueue",
    "single_enqueue",
    "batch_drain",
    "worker_drain",
    "worker_drain_batched",
    "wakeup_latency",
)
SCRIPT = Path(__file__).with_name("pgboss_bench.mjs")


async def prepare(env: Env, scenario: str, jobs: int) -> dict[str, Any]:
    """The pg-boss queue, holding the same ``jobs`` ready jobs as qcore's for a drain
    (empty, with ``notify`` on as qcore's, for the wake-up latency)."""
    await env.boss.create_queue(QUEUE, notify=scenario == "wakeup_latency")
    if scenario not in ("bulk_enqueue", "single_enqueue", "wakeup_latency"):
        for first in range(0, jobs, BATCH_INSERT):
            batch = [{"data": payload(i)} for i in range(first, min(first + BATCH_INSERT, jobs))]
            await env.boss.insert(QUEUE, batch, return_id=False)
        await env.analyze(env.physical)  # the statistics the other sides' claims get
        # pg-boss's worker fetches back to back only while its cached ready count says
        # there is work (burstWhenReadyExceeds): count the queue once, as its monitor would
        await env.boss.supervise(QUEUE)
    return {"queue": QUEUE}


async def verify(env: Env, scenario: str, jobs: int) -> list[str]:
    """What pg-boss left: ``jobs`` created jobs (enqueue) or completed ones (drain)."""
    want = "created" if scenario in ("bulk_enqueue", "single_enqueue") else "completed"
    rows = await env.rows(
        f"SELECT state::text, count(*) FROM {env.table('job')} WHERE name = %s GROUP BY 1",
        (QUEUE,),
    )
    counts = {state: int(n) for state, n in rows}
    return [] if counts == {want: jobs} else [f"expected {jobs} {want} jobs, found {counts}"]


async def start(command: dict[str, Any]) -> asyncio.subprocess.Process:
    """pg-boss's side started on ``command`` (the script beside the npm-installed
    pg-boss the interop tests use), once it says it is ready: :func:`go` runs it."""
    from tests.interop.pgboss import ensure_installed

    target = await asyncio.to_thread(ensure_installed)
    shutil.copyfile(SCRIPT, target / SCRIPT.name)
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(target / SCRIPT.name),
        cwd=str(target),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(command).encode() + b"\n")
    await proc.stdin.drain()
    if (await proc.stdout.readline()).strip() != b"ready":  # pg-boss started, pool open
        raise RuntimeError(f"pg-boss's {command['scenario']} side did not start")
    return proc


async def go(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """Tell a started side to go; the JSON line it prints when done (read before it
    exits, while its connections are still there to be measured)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    line = await proc.stdout.readline()
    if not line.strip():
        raise RuntimeError(f"pg-boss's side printed no result (exit {await proc.wait()})")
    result: dict[str, Any] = json.loads(line)
    return result


async def ended(proc: asyncio.subprocess.Process) -> None:
    """Wait for a side that has given its result to exit cleanly."""
    assert proc.stdin is not None
    proc.stdin.close()
    if await proc.wait() != 0:
        raise RuntimeError(f"pg-boss's side failed (exit {proc.returncode})")


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Child side: pg-boss's timed half of ``spec["scenario"]``."""
    # in the URL: node-postgres lets a connection string's parameters replace the options
    dsn = spec["dsn"] + ("&" if "?" in spec["dsn"] else "?") + f"application_name={APPLICATION}"
    command = {
        "dsn": dsn,
        "schema": spec["schema"],
        "queue": spec["queue"],
        "scenario": spec["scenario"],
        "jobs": int(spec["jobs"]),
        "batch": int(spec["batch"]),
        "concurrency": int(spec["concurrency"]),
        "pool": max(10, int(spec["concurrency"]) + 2),
        "pad": PAD,
        "application_name": APPLICATION,
        "samples": int(spec.get("samples", 0)),
        "warmup": WARMUP_SAMPLES,
        "idle_gap_ms": IDLE_GAP_SECONDS * 1000,
    }
    meter = Meter(spec["dsn"])
    proc = await start(command)
    await meter.start()
    result = await go(proc)
    cpu = await meter.stop()
    await ended(proc)
    if "latencies_ms" in result:  # the wake-up scenario: its samples, summed up as qcore's
        return summary(result["latencies_ms"], result["send_ms"], result["wake_ms"])
    return {
        "elapsed": result["elapsed"],
        "jobs": result["jobs"],
        "client_cpu_s": result["client_cpu_s"],
        # a reading of 0 means the meter did not find pg-boss's connections: say unknown
        "server_cpu_s": cpu["server_cpu_s"] or None,
    }


async def median_ms(dsn: str, schema: str, scenario: str, **spec: Any) -> float:
    """pg-boss's median milliseconds of one call in a one-at-a-time scenario (``claim``:
    its fetch; ``settle``: its complete) on queue ``pgboss`` of ``schema``."""
    command = {
        "dsn": dsn,
        "schema": schema,
        "queue": QUEUE,
        "scenario": scenario,
        "concurrency": 1,
        "pool": 2,
        "pad": 0,
        "application_name": f"bench-{scenario}-pgboss",
        **spec,
    }
    proc = await start(command)
    result = await go(proc)
    await ended(proc)
    return float(result["median_ms"])

"""A fleet of three worker processes with instance keys ``a:ram-8gb:cpu-4cor``,
``b:ram-2gb:cpu-1cor`` and ``c:ram-8gb:cpu-1cor`` (seed 003): ``ram-8gb`` jobs run only on
a and c, ``ram-8gb.*cpu-4cor`` only on a, unpatterned jobs anywhere; a burst of 10,000 jobs
for a leaves b's jobs to b at once; b paused from this process claims nothing from its
next heartbeat on, and stays paused across a restart until resumed. Who ran a job is read
from ``processed_on_instance_key``. Local PostgreSQL only (real processes)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import until
from tests.conftest import admin_execute

pytestmark = [pytest.mark.feature("affinity"), pytest.mark.postgres]

SCHEMA = "qcore_affinity_fleet"
A, B, C = "a:ram-8gb:cpu-4cor", "b:ram-2gb:cpu-1cor", "c:ram-8gb:cpu-1cor"
#: the workers' polling interval and their registry's heartbeat, seconds
POLL, BEAT = 2, 2

#: a keyed worker: batches of ten, a few milliseconds per job
SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from qcore import Boss

    async def main():
        dsn, schema, key, poll, beat = sys.argv[1:6]
        boss = Boss(dsn, schema=schema, supervise=False, schedule=False, instance_key=key,
                    instance_heartbeat_seconds=int(beat))
        await boss.start()

        async def handler(jobs):
            await asyncio.sleep(0.003 * len(jobs))

        await boss.work("q", handler, batch_size=10, polling_interval_seconds=float(poll))
        print("working", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _server(dsn: str, key: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, dsn, SCHEMA, key, str(POLL), str(BEAT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "working"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(60)


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)
    # this process adds jobs with patterns, so it has a key of its own (it runs no worker)
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False, schedule=False, instance_key="ops")
    await instance.start()
    await instance.create_queue("q")
    try:
        yield instance
    finally:
        await instance.stop()
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


@pytest.fixture
def fleet(pg_dsn: str, boss: Boss) -> Iterator[dict[str, subprocess.Popen[str]]]:
    servers = {key: _server(pg_dsn, key) for key in (A, B, C)}
    try:
        yield servers
    finally:
        for proc in servers.values():
            _stop(proc)


async def _ran_on(boss: Boss, ids: list[Any]) -> dict[Any, str | None]:
    """Who ran each job of ``ids``, once all of them completed."""

    async def done() -> dict[Any, str | None] | None:
        rows = await boss.db.execute(
            f"SELECT j.id, j.state::text AS state, r.instance_key FROM {SCHEMA}.job j"
            f" LEFT JOIN {SCHEMA}.qcore_job_processed r ON r.name = j.name AND r.id = j.id"
            " WHERE j.id = ANY($1::uuid[])",
            [ids],
        )
        if len(rows) == len(ids) and all(r["state"] == "completed" for r in rows):
            return {r["id"]: r["instance_key"] for r in rows}
        return None

    found: dict[Any, str | None] = await until(done, timeout=120, interval=0.2, what="jobs run")
    return found


async def _queued(boss: Boss, ids: list[Any]) -> int:
    [row] = await boss.db.execute(
        f"SELECT count(*)::int AS n FROM {SCHEMA}.job WHERE id = ANY($1::uuid[])"
        " AND state = 'created'",
        [ids],
    )
    return int(row["n"])


async def _send(boss: Boss, n: int, pattern: str | None = None) -> list[Any]:
    jobs = [
        {"data": k, **({"preferred_instance_key_pattern": pattern} if pattern else {})}
        for k in range(n)
    ]
    ids: list[Any] = []
    for start in range(0, n, 1000):
        added = await boss.insert("q", jobs[start : start + 1000])
        assert added is not None
        ids += added
    return ids


async def test_jobs_run_only_where_their_pattern_matches(
    boss: Boss, fleet: dict[str, subprocess.Popen[str]]
) -> None:
    big = await _send(boss, 40, "ram-8gb")
    four = await _send(boss, 20, "ram-8gb.*cpu-4cor")
    anywhere = await _send(boss, 60)
    ran = await _ran_on(boss, big + four + anywhere)
    assert {ran[i] for i in big} <= {A, C}
    assert {ran[i] for i in four} == {A}
    assert {ran[i] for i in anywhere} <= {A, B, C} and None not in ran.values()


async def test_a_burst_for_a_does_not_delay_b(
    boss: Boss, fleet: dict[str, subprocess.Popen[str]]
) -> None:
    burst = await _send(boss, 10_000, "^a:")
    started = time.monotonic()
    mine = await _send(boss, 10, "ram-2gb")
    ran = await _ran_on(boss, mine)
    waited = time.monotonic() - started
    assert set(ran.values()) == {B}
    # b claims them at its next poll; the burst would take a far longer than that
    assert waited < POLL + 10, f"b's jobs waited {waited:.1f} s"
    assert await _queued(boss, burst) > 0, "a drained the burst too fast to tell"


async def test_a_paused_server_claims_nothing_and_stays_paused_across_a_restart(
    pg_dsn: str, boss: Boss, fleet: dict[str, subprocess.Popen[str]]
) -> None:
    await boss.pause_instance(B)
    await asyncio.sleep(2 * BEAT + 1)  # b's next heartbeat reads the pause
    held = await _send(boss, 5, "ram-2gb")
    await asyncio.sleep(2 * POLL + 1)
    assert await _queued(boss, held) == 5
    _stop(fleet[B])
    fleet[B] = _server(pg_dsn, B)  # a new life with the same key: still paused
    await asyncio.sleep(2 * BEAT + 2 * POLL + 1)
    assert await _queued(boss, held) == 5
    [row] = [i for i in await boss.get_instances() if i.instance_key == B and i.live]
    assert row.paused
    await boss.resume_instance(B)
    ran = await _ran_on(boss, held)
    assert set(ran.values()) == {B}

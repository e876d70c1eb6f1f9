"""A process killed with SIGKILL while its worker holds a locked claim: the server
ends its transaction, the jobs are queued again exactly as they were (no attempt
counted, never started), and another worker completes each of them once. Local
PostgreSQL only (a real process, a real kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from qcore import Boss, Job
from qcore.conformance.helpers import until
from tests.conftest import admin_execute

pytestmark = [pytest.mark.feature("workers"), pytest.mark.postgres]

SCHEMA = "qcore_locked_crash"

#: a worker holding a locked batch of five, its handler waiting to be killed
HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from qcore import Boss

    async def main():
        boss = Boss(sys.argv[1], schema=sys.argv[2], supervise=False, schedule=False)
        await boss.start()

        async def handler(jobs):
            print("holding", len(jobs), flush=True)
            await asyncio.sleep(600)

        await boss.work("q", handler, batch_size=5, locked_fetch=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False, schedule=False)
    await instance.start()
    try:
        yield instance
    finally:
        await instance.stop()
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


def _holder(dsn: str) -> subprocess.Popen[str]:
    """The holding process, once its handler holds the batch."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, dsn, SCHEMA], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().split() == ["holding", "5"]
    return proc


async def test_a_killed_holder_gives_its_batch_back_uncounted(pg_dsn: str, boss: Boss) -> None:
    await boss.create_queue("q")
    sent = await boss.insert("q", [{"data": {"n": n}} for n in range(5)])
    assert sent is not None
    proc = _holder(pg_dsn)
    try:
        assert await boss.fetch("q") == []  # all five held by the other process
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
    handled: Counter[uuid.UUID] = Counter()

    async def handler(jobs: list[Job]) -> None:
        for job in jobs:
            assert job.retry_count == 0  # the killed attempt was never counted
            handled[job.id] += 1

    await boss.work("q", handler, batch_size=5, polling_interval_seconds=0.5)

    async def completed() -> bool:
        found = await boss.find_jobs("q")
        return sorted(str(j.id) for j in found if j.state == "completed") == sorted(
            str(i) for i in sent
        )

    await until(completed, timeout=120, what="the killed batch completed by the survivor")
    assert handled == Counter(sent)
    rows = await boss.find_jobs("q")
    assert all(j.retry_count == 0 for j in rows)

"""The system limiter: a server holds its own claiming while its process is short of
CPU or memory, says so in its row and on the board, and claims again under the lower
resume thresholds. The samples are fed by the test (a controllable reading, as a test
clock is); the queue, the claims and the row are real."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from qcore import Boss
from qcore.conformance.helpers import until
from qcore.errors import ConfigError
from qcore.job import Job
from qcore.services.limiter import SystemLimiter, SystemLimits, usage_shares
from qcore.web import create_app
from tests.conftest import admin_execute
from tests.web.test_web import client

pytestmark = [pytest.mark.feature("instances"), pytest.mark.postgres]


class Readings:
    """What the limiter reads: a process using ``cpu`` of 2 cores and ``rss`` bytes of 1 GiB."""

    def __init__(self) -> None:
        self.cpu: float | None = 0.2
        self.rss = 100 << 20

    def __call__(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "cpuLimit": 2, "rss": self.rss, "memoryLimit": 1 << 30}


@pytest_asyncio.fixture
async def server(pg_dsn: str) -> AsyncIterator[Boss]:
    schema = f"limiter_{uuid.uuid4().hex[:8]}"
    boss = Boss(
        pg_dsn,
        schema=schema,
        supervise=False,
        schedule=False,
        instance_key="limited:cpu-2cor",
        system_limiter={"cpu": 0.8, "memory": 0.5, "check_seconds": 1},
    )
    await boss.start()
    try:
        yield boss
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


def _limiter(boss: Boss) -> SystemLimiter:
    limiter = boss.services.get("limiter", SystemLimiter)
    assert limiter is not None
    return limiter


async def _row_metrics(boss: Boss) -> dict[str, Any]:
    [me] = [i for i in await boss.get_instances() if i.id == boss.instance_id]
    return me.metrics or {}


async def test_a_busy_process_claims_nothing_until_it_is_under_the_resume_line(
    server: Boss,
) -> None:
    readings = Readings()
    _limiter(server).usage = readings
    seen: list[tuple[str, Any]] = []
    server.on("instance_limited", lambda e: seen.append(("limited", e)))
    server.on("instance_unlimited", lambda e: seen.append(("unlimited", e)))
    await server.create_queue("q")
    handled: list[uuid.UUID] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.id for j in batch)

    await server.work("q", handler, polling_interval_seconds=0.5)
    readings.cpu = 1.8  # 90 % of 2 cores
    await until(lambda: server.limited is not None, timeout=30, what="the limit")
    assert server.limited == "CPU 90% of 2 cores"
    assert seen[0][0] == "limited" and seen[0][1]["cpu"] == pytest.approx(0.9)

    async def row_says(text: str | None) -> bool:
        return (await _row_metrics(server)).get("limitedBy") == text

    await until(lambda: row_says("CPU 90% of 2 cores"), timeout=30, what="the row")
    async with client(create_app(server)) as http:
        page = await http.get("/instances")
        assert ">limited</span>" in page.text and "CPU 90% of 2 cores" in page.text

    sent = await server.send("q")
    readings.cpu = 1.5  # 75 %: under the limit, not under the resume line (70 %)
    for _ in range(3):  # three readings at 75 %: still held, the job waits
        await _limiter(server).exclusive(_limiter(server).run_pass)
    assert server.limited is not None and handled == [] and len(seen) == 1

    readings.cpu = 0.4  # 20 %: claims again
    await until(lambda: server.limited is None, timeout=30, what="the resume")
    assert seen[-1][0] == "unlimited"
    await until(lambda: handled == [sent], timeout=30, what="the job, once resumed")
    await until(lambda: row_says(None), timeout=30, what="the row, cleared")


async def test_memory_over_its_share_limits_too(server: Boss) -> None:
    readings = Readings()
    _limiter(server).usage = readings
    readings.rss = 600 << 20  # 59 % of 1 GiB, over 50 %
    await _limiter(server).exclusive(_limiter(server).run_pass)
    assert server.limited == "memory 59% of its limit"
    readings.rss = 300 << 20  # 29 %: under the resume line (40 %)
    await _limiter(server).exclusive(_limiter(server).run_pass)
    assert server.limited is None


def test_the_shares_are_of_what_the_process_may_use() -> None:
    sample = {"cpu": 1.0, "cpuLimit": 4, "rss": 256 << 20, "memoryLimit": 1 << 30}
    assert usage_shares(sample) == (0.25, 0.25)
    assert usage_shares({"cpu": None, "cpuLimit": 4, "rss": None, "memoryLimit": 0}) == (
        None,
        None,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"cpu": 1.5}, "system_limiter cpu must be a share above 0 and at most 1"),
        ({"cpu": 0}, "system_limiter cpu must be a share"),
        ({"memory": True}, "system_limiter memory must be a share"),
        ({"cpu": 0.5, "resume_cpu": 0.7}, "resume_cpu must be at most cpu"),
        ({"cpu": None, "memory": None}, "watches nothing"),
        ({"check_seconds": 0.1}, "check_seconds must be a number of at least 1"),
        ({"gpu": 0.5}, "system_limiter takes cpu, memory"),
        ("90%", "system_limiter must be a mapping"),
    ],
)
def test_bad_limits_are_config_errors(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Boss("postgresql://localhost/x", system_limiter=value)


def test_the_limits_default_their_resume_lines() -> None:
    limits = SystemLimits(cpu=0.9, memory=0.8)
    assert limits.resume_cpu == pytest.approx(0.8)
    assert limits.resume_memory == pytest.approx(0.7)

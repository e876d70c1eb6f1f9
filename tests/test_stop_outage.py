"""A stop while the database has gone silent (its host stops answering: no refusal,
every read waits) ends within the stop timeout and a short last try, and says which
held jobs it could not settle; nothing waits on the database for ever."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from qcore import Boss
from qcore.job import Job
from tests.conftest import admin_execute
from tests.outage import SilentRelay

pytestmark = [pytest.mark.feature("workers"), pytest.mark.postgres]


async def test_a_stop_is_bounded_when_the_database_is_silent(pg_dsn: str) -> None:
    schema = f"qcore_silent_{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    with SilentRelay(pg_dsn) as relay:
        boss = Boss(relay.url(pg_dsn), schema=schema, supervise=False)
        boss.on("error", errors.append)
        await boss.start()
        try:
            await boss.create_queue("slow")
            started = asyncio.Event()

            async def slow(jobs: list[Job]) -> None:
                started.set()
                await asyncio.sleep(3)

            await boss.work("slow", slow)
            job_id = await boss.send("slow", {})
            await asyncio.wait_for(started.wait(), 60)
            relay.silence()
            began = time.monotonic()
            await asyncio.wait_for(boss.stop(timeout=5), 60)
            took = time.monotonic() - began
        finally:
            if boss.started:
                await boss.stop(graceful=False)
    try:
        # 5 s of timeout and a 2 s last try, with room for a busy machine: unbounded,
        # the handler's settle would wait on the silent connection for ever
        assert took < 30, took
        assert [job.id for job in boss.unsettled_jobs] == [job_id]
        assert any("did not stop in time" in str(e) for e in errors), errors
        [(state,)] = admin_execute(
            f"SELECT state::text FROM {schema}.job WHERE id = '{job_id}'", pg_dsn
        )
        assert state == "active"  # left to expire and retry
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


async def test_a_healthy_stop_leaves_nothing_unsettled(pg_dsn: str) -> None:
    schema = f"qcore_silent_{uuid.uuid4().hex[:8]}"
    boss = Boss(pg_dsn, schema=schema, supervise=False)
    await boss.start()
    try:
        await boss.create_queue("q")
        done = asyncio.Event()

        async def handler(jobs: list[Job]) -> None:
            done.set()

        await boss.work("q", handler)
        await boss.send("q", {})
        await asyncio.wait_for(done.wait(), 60)
        await boss.stop(timeout=5)
        assert boss.unsettled_jobs == []
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)

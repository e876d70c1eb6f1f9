"""``stop()`` and the workers, on every backend: graceful stops let handlers finish,
the timeout fails what is still held, ``graceful=False`` fails it at once, a job
being claimed as the stop begins either starts in time or is failed without
running, ``close=False`` keeps the connection until a later ``stop()``, and
``stopped`` fires once."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import running, send, settled, until
from qcore.db import Database
from qcore.errors import NotStartedError
from qcore.job import Job, JobState
from qcore.verbs import jobs

pytestmark = pytest.mark.feature("workers")

SHUT_DOWN = {"value": "qcore shut down while active"}


class CountingBoss(Boss):
    """A Boss that keeps its ``stopped`` events."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.stopped_events: list[Any] = []
        self.on("stopped", self.stopped_events.append)


@pytest_asyncio.fixture
async def sboss(db: Database, backend: Backend, schema: str) -> AsyncIterator[CountingBoss]:
    """A started Boss without the background monitor."""
    boss = CountingBoss(db=db, backend=backend, schema=schema, supervise=False)
    async with running(boss, stop_timeout=1):
        yield boss


def stopped_count(boss: Boss) -> int:
    assert isinstance(boss, CountingBoss)
    return len(boss.stopped_events)


async def test_graceful_stop_lets_handlers_finish_and_fires_stopped_once(sboss: Boss) -> None:
    await sboss.create_queue("slow")
    ids = [await send(sboss, "slow", i) for i in range(3)]
    running: set[int] = set()
    finished: list[int] = []

    async def handler(batch: list[Job]) -> str:
        running.add(batch[0].data)
        await asyncio.sleep(0.15)
        finished.append(batch[0].data)
        return "done"

    def sync_handler(batch: list[Job]) -> str:
        time.sleep(0.15)
        return "done"

    await sboss.create_queue("slow-sync")
    sync_id = await send(sboss, "slow-sync")
    await sboss.work("slow", handler, local_concurrency=3, polling_interval_seconds=0.5)
    await sboss.work("slow-sync", sync_handler, polling_interval_seconds=0.5)
    await until(lambda: len(running) == 3, 3.0, what="three handlers running")
    begun = time.monotonic()
    await sboss.stop(timeout=60, close=False)
    assert time.monotonic() - begun < 30  # waited for the handlers, not the timeout
    assert sorted(finished) == [0, 1, 2]
    for job_id in ids:
        job = await sboss.get_job_by_id("slow", job_id)
        assert job is not None and job.state is JobState.COMPLETED
    sync_job = await sboss.get_job_by_id("slow-sync", sync_id)
    assert sync_job is not None and sync_job.state is JobState.COMPLETED
    assert stopped_count(sboss) == 1
    await sboss.stop()
    assert stopped_count(sboss) == 1


async def test_the_timeout_fails_held_jobs_and_tells_their_handlers(sboss: Boss) -> None:
    await sboss.create_queue("stuck", retry_limit=1, retry_delay=60)
    await sboss.create_queue("stuck-sync", retry_limit=0)
    a = await send(sboss, "stuck")
    s = await send(sboss, "stuck-sync")
    told: dict[str, bool] = {}

    async def handler(batch: list[Job]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            told["async"] = batch[0].cancelled.is_set()
            raise

    def sync_handler(batch: list[Job]) -> None:
        told["sync"] = batch[0].cancelled.wait(10)

    await sboss.work("stuck", handler, polling_interval_seconds=0.5)
    await sboss.work("stuck-sync", sync_handler, polling_interval_seconds=0.5)
    await until(lambda: _active(sboss, "stuck", a), 3.0)
    await until(lambda: _active(sboss, "stuck-sync", s), 3.0)
    begun = time.monotonic()
    await sboss.stop(timeout=0.15, close=False)
    assert 0.1 < time.monotonic() - begun < 20  # the timeout, not the 30 s handlers
    retried = await sboss.get_job_by_id("stuck", a)
    assert retried is not None and retried.state is JobState.RETRY  # an attempt spent
    assert retried.output == SHUT_DOWN
    failed = await sboss.get_job_by_id("stuck-sync", s)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.output == SHUT_DOWN
    await until(lambda: len(told) == 2, 2.0, what="both handlers told")
    assert told == {"async": True, "sync": True}
    assert stopped_count(sboss) == 1


async def _active(boss: Boss, name: str, job_id: Any) -> bool:
    job = await boss.get_job_by_id(name, job_id)
    return job is not None and job.state is JobState.ACTIVE


async def test_a_job_claimed_as_the_stop_begins(
    sboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It runs if its claim lands within the timeout; otherwise it is failed without
    running, an attempt spent, and stop() waits for that."""
    await sboss.create_queue("late", retry_limit=1, retry_delay=60)
    await sboss.create_queue("in-time")
    claiming = asyncio.Event()
    release = asyncio.Event()
    real = jobs.claim
    ran: list[str] = []

    async def slow_claim(
        ctx: Any, name: str, spec: Any, done: list[Job] | None = None
    ) -> list[Job]:
        claiming.set()
        await release.wait()
        return await real(ctx, name, spec, done)

    async def handler(batch: list[Job]) -> None:
        ran.append(batch[0].name)

    # claimed within the timeout: runs
    in_time = await send(sboss, "in-time")
    monkeypatch.setattr(jobs, "claim", slow_claim)
    await sboss.work("in-time", handler, polling_interval_seconds=0.5)
    await asyncio.wait_for(claiming.wait(), 3)
    asyncio.get_running_loop().call_later(0.05, release.set)
    await sboss.off_work("in-time")  # graceful, no time limit
    assert ran == ["in-time"]
    assert (await settled(sboss, "in-time", in_time)).state is JobState.COMPLETED

    # claimed after the timeout: failed without running
    claiming.clear()
    release.clear()
    late = await send(sboss, "late")
    await sboss.work("late", handler, polling_interval_seconds=0.5)
    await asyncio.wait_for(claiming.wait(), 3)
    asyncio.get_running_loop().call_later(0.15, release.set)
    begun = time.monotonic()
    await sboss.stop(timeout=0.02, close=False)
    assert time.monotonic() - begun >= 0.12  # it waited for the claim to settle
    assert ran == ["in-time"]
    job = await sboss.get_job_by_id("late", late)
    assert job is not None and job.state is JobState.RETRY and job.output == SHUT_DOWN
    assert job.retry_count == 0 and job.started_on is not None  # claimed once, not run


async def test_a_hard_stop_fails_held_jobs_at_once_and_close_false_keeps_the_connection(
    sboss: Boss,
) -> None:
    job_id = await _a_job_running_for_30_seconds(sboss, "hard")
    begun = time.monotonic()
    await sboss.stop(graceful=False, timeout=60, close=False)
    assert time.monotonic() - begun < 20  # neither the timeout nor the 30 s handler
    job = await sboss.get_job_by_id("hard", job_id)
    assert job is not None and job.state is JobState.FAILED and job.output == SHUT_DOWN
    assert stopped_count(sboss) == 1
    assert sboss.worker_statuses() == []

    # the connection stays: send and fetch still work, and no worker takes the job
    later = await send(sboss, "hard", "after stop")
    await asyncio.sleep(0.1)
    [fetched] = await sboss.fetch("hard")
    assert fetched.id == later
    await sboss.complete("hard", fetched)
    await sboss.stop()  # now it closes
    assert stopped_count(sboss) == 1
    with pytest.raises(NotStartedError):
        await sboss.send("hard", "closed now")


async def test_stop_bounds_workers_still_finishing_after_off_work(sboss: Boss) -> None:
    job_id = await _a_job_running_for_30_seconds(sboss, "retiring")
    await sboss.off_work("retiring", wait=False)  # the handler goes on
    assert sboss.worker_statuses() == []
    await asyncio.sleep(0.05)
    held = await sboss.get_job_by_id("retiring", job_id)
    assert held is not None and held.state is JobState.ACTIVE
    begun = time.monotonic()
    await sboss.stop(timeout=0.1, close=False)
    assert time.monotonic() - begun < 20  # the timeout, not the 30 s handler
    job = await sboss.get_job_by_id("retiring", job_id)
    assert job is not None and job.state is JobState.FAILED and job.output == SHUT_DOWN


async def test_a_handler_may_stop_its_own_worker(sboss: Boss) -> None:
    await sboss.create_queue("self-stop")
    ids = [await send(sboss, "self-stop", i) for i in range(3)]
    seen: list[int] = []

    async def handler(batch: list[Job]) -> str:
        seen.append(batch[0].data)
        await sboss.off_work("self-stop")  # waits for the other loops, not for itself
        return "stopped myself"

    await sboss.work("self-stop", handler, local_concurrency=1, polling_interval_seconds=0.5)
    first = await settled(sboss, "self-stop", ids[0], timeout=3)
    assert first.state is JobState.COMPLETED and first.output == {"value": "stopped myself"}
    await asyncio.sleep(0.1)
    assert seen == [0] and sboss.worker_statuses() == []
    for job_id in ids[1:]:
        job = await sboss.get_job_by_id("self-stop", job_id)
        assert job is not None and job.state is JobState.CREATED


async def test_stop_without_start_ends_workers_registered_early(
    db: Database, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    stopped: list[Any] = []
    boss.on("stopped", stopped.append)

    async def handler(batch: list[Job]) -> None:
        return None

    await boss.work("never", handler, polling_interval_seconds=0.5)
    [status] = boss.worker_statuses()
    assert status.state == "active"
    await boss.stop()
    assert boss.worker_statuses() == [] and stopped == []  # nothing had started


async def _a_job_running_for_30_seconds(boss: Boss, queue: str) -> uuid.UUID:
    """Create ``queue`` (no retries), send a job and work it with a handler that sleeps
    30 s; return once the handler runs."""
    await boss.create_queue(queue, retry_limit=0)
    job_id = await send(boss, queue)
    running = asyncio.Event()

    async def handler(batch: list[Job]) -> None:
        running.set()
        await asyncio.sleep(30)

    await boss.work(queue, handler, polling_interval_seconds=0.5)
    await asyncio.wait_for(running.wait(), 30)
    return job_id

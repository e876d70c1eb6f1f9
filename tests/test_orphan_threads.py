"""Plain-function handlers that run on past their batch (they ignore ``job.cancelled``)
are counted as orphaned threads: a worker reports them in its status, and at one per
loop it claims nothing more, says why through an ``error`` event, and claims again
once one ends. The handlers here block on an event the test releases at the end, so
no thread outlives the test."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import job_state, running, send, until
from qcore.db import Database
from qcore.errors import OrphanedThreadsError
from qcore.job import Job, JobState
from qcore.worker import WorkerStatus
from qcore.worker.handlers import Orphans, Slot

#: how long a condition may take on a busy machine
DEADLINE = 30.0
#: a stuck handler's own bound: the test releases it long before
STUCK_SECONDS = 120.0


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """The event stuck handlers wait on, set when the test ends whatever its outcome."""
    event = threading.Event()
    yield event
    event.set()


@pytest_asyncio.fixture
async def boss(db: Database, backend: Backend, schema: str) -> AsyncIterator[Boss]:
    async with running(
        Boss(db=db, backend=backend, schema=schema, supervise=False), stop_timeout=2
    ) as started:
        yield started


def _status(boss: Boss, worker: str) -> WorkerStatus:
    [status] = [s for s in boss.worker_statuses() if s.id == worker]
    return status


async def test_a_slot_counts_its_abandoned_thread_until_it_ends(
    release: threading.Event,
) -> None:
    ended: list[int] = []
    orphans = Orphans(1, on_end=lambda: ended.append(orphans.count))
    slot = Slot("q")
    running = slot.submit(lambda jobs: release.wait(STUCK_SECONDS), [])
    assert orphans.count == 0 and not orphans.full
    slot.abandon(orphans)
    assert orphans.count == 1 and orphans.full
    running.cancel()
    release.set()
    await until(lambda: ended, DEADLINE, what="the orphan's end told on the loop")
    assert ended == [0] and not orphans.full
    # the slot's next call runs on a new thread, not counted
    again = slot.submit(lambda jobs: "done", [])
    assert await asyncio.wait_for(again, DEADLINE) == "done"
    slot.close()
    assert orphans.count == 0


async def test_at_the_cap_the_worker_claims_nothing_until_an_orphan_ends(
    boss: Boss, release: threading.Event
) -> None:
    await boss.create_queue("stuck", expire_in_seconds=1, retry_limit=5)
    errors: list[Any] = []
    boss.on("error", errors.append)
    entered: list[uuid.UUID] = []

    def handler(batch: list[Job]) -> None:
        entered.append(batch[0].id)
        release.wait(STUCK_SECONDS)  # ignores job.cancelled

    sent = await send(boss, "stuck")
    worker = await boss.work("stuck", handler, polling_interval_seconds=0.5)

    def capped() -> list[Any]:
        return [e for e in errors if isinstance(e, OrphanedThreadsError)]

    [error] = await until(capped, DEADLINE, what="the cap reported")
    assert "claims nothing" in str(error)
    status = _status(boss, worker)
    assert status.orphaned_threads == 1 and status.local_concurrency == 1
    assert status.last_error is not None and "OrphanedThreadsError" in status.last_error
    # the expired batch was failed: its retry is due at once, yet nobody claims it
    await until(lambda: _is(boss, "stuck", sent, JobState.RETRY), DEADLINE, what="the batch failed")
    await asyncio.sleep(5 * 0.5)  # five polling intervals
    assert entered == [sent] and await job_state(boss, "stuck", sent) is JobState.RETRY

    release.set()  # the orphan returns; the retry runs (and returns at once)
    await until(
        lambda: _is(boss, "stuck", sent, JobState.COMPLETED), DEADLINE, what="the retry ran"
    )
    assert entered == [sent, sent]
    await until(lambda: _status(boss, worker).orphaned_threads == 0, DEADLINE)


async def test_below_the_cap_the_worker_goes_on_claiming(
    boss: Boss, release: threading.Event
) -> None:
    await boss.create_queue("mixed", expire_in_seconds=1, retry_limit=0)
    errors: list[Any] = []
    boss.on("error", errors.append)

    def handler(batch: list[Job]) -> str:
        if batch[0].data == "stuck":
            release.wait(STUCK_SECONDS)
        return "ok"

    stuck = await send(boss, "mixed", "stuck")
    worker = await boss.work(
        "mixed", handler, local_concurrency=2, batch_size=1, polling_interval_seconds=0.5
    )
    await until(lambda: _status(boss, worker).orphaned_threads == 1, DEADLINE, what="one orphan")
    await until(lambda: _is(boss, "mixed", stuck, JobState.FAILED), DEADLINE)
    quick = await send(boss, "mixed", "quick")
    await until(
        lambda: _is(boss, "mixed", quick, JobState.COMPLETED), DEADLINE, what="claimed beside"
    )
    assert _status(boss, worker).orphaned_threads == 1
    assert not [e for e in errors if isinstance(e, OrphanedThreadsError)]
    release.set()
    await until(lambda: _status(boss, worker).orphaned_threads == 0, DEADLINE)


async def _is(boss: Boss, name: str, job_id: uuid.UUID, state: JobState) -> bool:
    return await job_state(boss, name, job_id) is state

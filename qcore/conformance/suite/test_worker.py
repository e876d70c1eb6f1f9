"""Workers on every backend: sync and async handlers, output and error serialisation,
batches, handler timeouts and cancellation, heartbeat refresh, burst drain, shared
idle polling and wake, off_work, workers registered before start, ``wip`` events.

Each test builds its own ``Boss`` on the matrix's ``db`` and ``schema`` with
``supervise=False`` (the monitor is driven with ``boss.supervise()`` where a test
needs it), and stops it at the end.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from qcore import Boss
from qcore import worker as worker_module
from qcore.backend import Backend
from qcore.conformance.helpers import job_state, running, send, settled, until
from qcore.context import Context
from qcore.db import Database
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    NotStartedError,
    QueueNotFoundError,
    SerializationError,
    ValidationError,
)
from qcore.job import Job, JobResult, JobState
from qcore.sql.jobs.spec import FetchSpec
from qcore.verbs import flows, jobs, queues
from qcore.worker import WorkerStatus

pytestmark = pytest.mark.feature("workers")


# --------------------------------------------------------------------------- helpers


@pytest_asyncio.fixture
async def wboss(db: Database, backend: Backend, schema: str) -> AsyncIterator[Boss]:
    """A started Boss on the test's adapter and schema, without the background monitor."""
    async with running(
        Boss(db=db, backend=backend, schema=schema, supervise=False), stop_timeout=2
    ) as boss:
        yield boss


@pytest_asyncio.fixture
async def listening_boss(db: Database, backend: Backend, schema: str) -> AsyncIterator[Boss]:
    """As ``wboss``, listening for NOTIFY (tests that use it need ``listen_notify``)."""
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, use_listen_notify=True)
    await boss.start()
    try:
        yield boss
    finally:
        await boss.stop(timeout=1)


def count_fetches(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the time of every fetch the workers make."""
    calls: list[float] = []
    real = jobs.claim

    async def counting(
        ctx: Context, name: str, spec: FetchSpec, done: list[Job] | None = None
    ) -> list[Job]:
        if done is None:  # a fetch, not a settle-and-claim
            calls.append(time.monotonic())
        return await real(ctx, name, spec, done)

    monkeypatch.setattr(jobs, "claim", counting)
    return calls


def count_claims_and_polls(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[str]]]:
    """Record the queue of every claim the workers make, and the queues every shared
    poll asks for."""
    claims: list[str] = []
    asked: list[list[str]] = []
    real_claim, real_ready = jobs.claim, jobs.ready_queues

    async def claim(
        ctx: Context, name: str, spec: FetchSpec, done: list[Job] | None = None
    ) -> list[Job]:
        if done is None:  # a fetch, not a settle-and-claim
            claims.append(name)
        return await real_claim(ctx, name, spec, done)

    async def ready(ctx: Context, queues: list[str], anytime: Any = ()) -> dict[str, bool]:
        asked.append(sorted(queues))
        return await real_ready(ctx, queues, anytime)

    monkeypatch.setattr(jobs, "claim", claim)
    monkeypatch.setattr(jobs, "ready_queues", ready)
    return claims, asked


# --------------------------------------------------------------------------- handlers


async def test_async_and_sync_handlers_complete_and_store_output(wboss: Boss) -> None:
    for name in ("async-q", "sync-q", "odd", "single"):
        await wboss.create_queue(name, retry_limit=0)
    a = await send(wboss, "async-q", {"n": 1})
    s = await send(wboss, "sync-q", {"n": 2})
    odd = await send(wboss, "odd")
    single = await send(wboss, "single")
    threads: list[str] = []

    async def async_handler(batch: list[Job]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"doubled": batch[0].data["n"] * 2}

    def sync_handler(batch: list[Job]) -> int:
        threads.append(threading.current_thread().name)
        return int(batch[0].data["n"]) * 10

    async def returns_a_set(batch: list[Job]) -> Any:
        return {1, 2}

    async def returns_a_list(batch: list[Job]) -> list[int]:
        return [len(batch)]

    await wboss.work("async-q", async_handler)
    await wboss.work("sync-q", sync_handler)
    await wboss.work("odd", returns_a_set)
    await wboss.work("single", returns_a_list, batch_size=10)
    done_a = await settled(wboss, "async-q", a)
    done_s = await settled(wboss, "sync-q", s)
    assert done_a.state is JobState.COMPLETED and done_a.output == {"doubled": 2}
    assert done_s.state is JobState.COMPLETED and done_s.output == {"value": 20}
    assert threads and threads[0] != threading.current_thread().name  # not on the loop
    # a batch of one job stores the return value, whatever batch_size allowed
    assert (await settled(wboss, "single", single)).output == {"value": [1]}
    # a return value that cannot be stored fails the job with why
    failed = await settled(wboss, "odd", odd)
    assert failed.state is JobState.FAILED
    assert failed.output["name"] == "ValidationError" and "JSON" in failed.output["message"]


async def test_a_raising_handler_fails_the_job_with_the_error(wboss: Boss) -> None:
    await wboss.create_queue("boom", retry_limit=1, retry_delay=0)
    await wboss.create_queue("batch")
    job_id = await send(wboss, "boom")
    await wboss.insert("batch", [{"data": {"i": i}} for i in range(12)])
    attempts: list[int] = []
    sizes: list[int] = []

    def explode(batch: list[Job]) -> None:
        attempts.append(batch[0].retry_count)
        raise ValueError(f"boom on attempt {batch[0].retry_count}")

    async def batch_handler(batch: list[Job]) -> str:
        sizes.append(len(batch))
        return "not stored for a batch of several"

    await wboss.work("boom", explode, polling_interval_seconds=0.5)
    # full batches fetch again at once: 12 jobs in well under one 5 s poll
    await wboss.work("batch", batch_handler, batch_size=5, polling_interval_seconds=5)

    async def is_failed() -> Job | None:
        job = await wboss.get_job_by_id("boom", job_id)
        return job if job is not None and job.state is JobState.FAILED else None

    # first attempt -> retry (retry_delay 0, taken on the next poll) -> failed
    job: Job = await until(is_failed, 5.0, what="job failed twice")
    assert attempts == [0, 1]
    assert job.output["name"] == "ValueError"
    assert job.output["message"] == "boom on attempt 1"
    assert "Traceback" in job.output["stack"] and "in explode" in job.output["stack"]

    await until(lambda: sum(sizes) == 12, 3.0, what="12 jobs handled")
    assert sizes == [5, 5, 2]
    await until(lambda: _count_state(wboss, "batch", JobState.COMPLETED, 12), 3.0)
    assert all(j.output is None for j in await wboss.find_jobs("batch"))


# --------------------------------------------------------------------------- timeouts


async def test_handler_timeout_fails_the_job_and_tells_the_handler(wboss: Boss) -> None:
    await wboss.create_queue("slow-async", expire_in_seconds=1, retry_limit=0)
    await wboss.create_queue("slow-sync", expire_in_seconds=1, retry_limit=0)
    a = await send(wboss, "slow-async")
    s = await send(wboss, "slow-sync")
    seen: dict[str, Any] = {}

    async def async_handler(batch: list[Job]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["async cancelled"] = True
            seen["async flag"] = batch[0].cancelled.is_set()
            raise

    def sync_handler(batch: list[Job]) -> None:
        seen["sync flag"] = batch[0].cancelled.wait(10)

    await wboss.work("slow-async", async_handler, polling_interval_seconds=0.5)
    await wboss.work("slow-sync", sync_handler, polling_interval_seconds=0.5)
    # settled well before the handlers' own 30 s and 10 s: by the 1 s handler timeout
    job_a = await settled(wboss, "slow-async", a, timeout=20)
    job_s = await settled(wboss, "slow-sync", s, timeout=9)
    for job in (job_a, job_s):
        assert job.state is JobState.FAILED
        assert job.output == {"name": "TimeoutError", "message": "handler timed out after 1 s"}
    await until(lambda: len(seen) == 3, 2.0, what="handlers told")
    assert seen == {"async cancelled": True, "async flag": True, "sync flag": True}


# --------------------------------------------------------------------------- heartbeats


async def _heartbeat_on(boss: Boss, name: str, job_id: uuid.UUID) -> Any:
    job = await boss.get_job_by_id(name, job_id)
    assert job is not None
    return job.heartbeat_on


async def _age_heartbeat(boss: Boss, job_id: uuid.UUID, seconds: int) -> None:
    """Move a job's heartbeat back, retried as any client retries a serialization failure.

    The worker's own refresh may write the row at the same moment (40001 on
    serializable engines).
    """
    for attempt in range(10):
        try:
            await boss.db.execute(
                f'UPDATE "{boss.schema}".job SET heartbeat_on = heartbeat_on - $2::int'
                " * interval '1 second' WHERE id = $1::uuid",
                [job_id, seconds],
            )
            return
        except SerializationError:
            if attempt == 9:
                raise
            await asyncio.sleep(0.05 * (attempt + 1))


async def _later(boss: Boss, name: str, job_id: uuid.UUID, than: Any) -> bool:
    now = await _heartbeat_on(boss, name, job_id)
    return bool(now is not None and now > than)


async def test_a_job_lost_while_running_is_signalled_to_the_handler(wboss: Boss) -> None:
    await wboss.create_queue("lost", heartbeat_seconds=10, retry_limit=0)
    job_id = await send(wboss, "lost")
    running = asyncio.Event()
    told: list[bool] = []

    def handler(batch: list[Job]) -> str:
        running_loop.call_soon_threadsafe(running.set)
        told.append(batch[0].cancelled.wait(10))
        return "finished anyway"

    running_loop = asyncio.get_running_loop()
    await wboss.work("lost", handler, polling_interval_seconds=0.5, heartbeat_refresh_seconds=0.1)
    await asyncio.wait_for(running.wait(), 5)
    await wboss.fail("lost", job_id, {"by": "someone else"})  # unfenced: the job leaves us
    await until(lambda: told, 3.0, what="handler told")
    assert told == [True]
    await asyncio.sleep(0.1)
    job = await wboss.get_job_by_id("lost", job_id)
    assert job is not None and job.state is JobState.FAILED
    assert job.output == {"by": "someone else"}  # the worker did not settle it over


async def test_heartbeats_are_refreshed_and_the_monitor_fails_a_silent_job(wboss: Boss) -> None:
    await wboss.create_queue("mon", heartbeat_seconds=10, retry_limit=0)
    kept = await send(wboss, "mon", {"kind": "kept"})
    release = asyncio.Event()
    running = asyncio.Event()

    async def handler(batch: list[Job]) -> str:
        running.set()
        await release.wait()
        return "done"

    await wboss.work("mon", handler, polling_interval_seconds=0.5, heartbeat_refresh_seconds=0.1)
    await asyncio.wait_for(running.wait(), 5)
    first = await _heartbeat_on(wboss, "mon", kept)
    await until(lambda: _later(wboss, "mon", kept, first), 3.0, what="heartbeat_on moves on")
    # a job held by no worker: its heartbeat has stopped
    dropped = await send(wboss, "mon", {"kind": "dropped"})
    [silent] = await wboss.fetch("mon")
    assert silent.id == dropped

    # both heartbeats aged past heartbeat_seconds: the refresh brings the worker's back
    await _age_heartbeat(wboss, kept, 60)
    await _age_heartbeat(wboss, dropped, 60)
    aged = await _heartbeat_on(wboss, "mon", kept)
    await until(lambda: _later(wboss, "mon", kept, aged), 3.0, what="kept job refreshed")
    await wboss.supervise("mon")
    assert await job_state(wboss, "mon", kept) is JobState.ACTIVE
    lost = await wboss.get_job_by_id("mon", dropped)
    assert lost is not None and lost.state is JobState.FAILED
    assert lost.output == {"value": {"message": "job heartbeat timeout"}}
    assert (await wboss.complete("mon", silent)).affected == 0  # a late completion: fenced
    release.set()
    assert (await settled(wboss, "mon", kept)).state is JobState.COMPLETED


# --------------------------------------------------------------------------- polling


async def test_a_backlog_drains_without_waiting_for_the_poll(wboss: Boss) -> None:
    await wboss.create_queue("burst")
    await wboss.insert("burst", [{"data": {"i": i}} for i in range(500)])
    handled = 0
    done = asyncio.Event()

    async def handler(batch: list[Job]) -> None:
        nonlocal handled
        handled += len(batch)
        if handled >= 500:
            done.set()

    # fifty batches within one polling interval: the loop fetches again at once after a
    # full batch (waiting out the interval between batches would take fifty minutes);
    # the deadline is generous for a busy machine
    await wboss.work("burst", handler, batch_size=10, polling_interval_seconds=60)
    await asyncio.wait_for(done.wait(), 45)
    assert handled == 500
    await until(
        lambda: _count_state(wboss, "burst", JobState.COMPLETED, 500), 3.0, what="all completed"
    )


async def _count_state(boss: Boss, name: str, state: JobState, expected: int) -> bool:
    found = await boss.find_jobs(name)
    return sum(1 for j in found if j.state is state) == expected


async def test_idle_loops_share_one_poll_and_a_wake_fetches_at_once(
    wboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    await wboss.create_queue("idle")
    fetches = count_fetches(monkeypatch)
    handled: list[float] = []

    async def handler(batch: list[Job]) -> None:
        handled.append(time.monotonic())

    await wboss.work("idle", handler, local_concurrency=8, polling_interval_seconds=2)
    # 8 idle loops share one poll: when the first poll (the second fetch) has come, there
    # were two fetches, not 8 of each; the next poll is 2 s away
    await until(lambda: len(fetches) >= 2, 30.0, what="the first poll")
    assert len(fetches) <= 3, fetches

    await wboss.off_work("idle")
    await wboss.work("idle", handler, local_concurrency=4, polling_interval_seconds=30)
    await asyncio.sleep(0.1)  # its first fetch found nothing; the next poll is 30 s away
    before = len(fetches)
    await send(wboss, "idle")
    woken = time.monotonic()
    wboss._wake("idle")  # what a NOTIFY for the queue does
    await until(lambda: handled, 20.0, what="woken worker handled the job")
    assert handled[0] - woken < 20  # the wake, not the poll 30 s away
    # one loop woke; it found a full batch (1) and woke one more, which found nothing
    assert len(fetches) - before <= 3


@pytest.mark.requires("listen_notify")
async def test_a_notify_wakes_the_worker_and_relaxes_its_poll(
    listening_boss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    boss = listening_boss
    await boss.create_queue("notified", notify=True)
    fetches = count_fetches(monkeypatch)
    handled: list[float] = []

    async def handler(batch: list[Job]) -> None:
        handled.append(time.monotonic())

    await boss.work(
        "notified", handler, polling_interval_seconds=0.5, notify_polling_interval_seconds=30
    )
    await until(lambda: fetches, 30.0, what="the first fetch")
    await asyncio.sleep(2.0)  # four of the 0.5 s polls it would make without NOTIFY
    assert len(fetches) == 1  # the first fetch; while listening, no 0.5 s polls
    sent = time.monotonic()
    await send(boss, "notified")
    await until(lambda: handled, 20.0, what="handled after the NOTIFY")
    assert handled[0] - sent < 20  # the NOTIFY, not the 30 s poll


@pytest.mark.requires("listen_notify")
async def test_a_listening_worker_learns_the_queues_notify_from_its_claims(
    listening_boss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle, a worker makes its polls and nothing else: whether a NOTIFY would wake it
    comes with each claim's row (no read of the queue row of its own), and a change of
    the queue's ``notify`` takes effect at its next poll."""
    boss = listening_boss
    await boss.create_queue("quiet", notify=False)
    fetches = count_fetches(monkeypatch)
    reads: list[str] = []
    real = queues.get_queue

    async def counting(ctx: Any, name: str) -> Any:
        reads.append(name)
        return await real(ctx, name)

    monkeypatch.setattr(queues, "get_queue", counting)

    async def handler(batch: list[Job]) -> None:
        pass

    await boss.work(
        "quiet", handler, polling_interval_seconds=0.5, notify_polling_interval_seconds=30
    )
    await until(lambda: len(fetches) >= 4, 30.0, what="four polls")
    assert reads == []  # notify off: it polls every 0.5 s, and reads nothing else
    await boss.update_queue("quiet", notify=True)
    polled = len(fetches)
    await until(lambda: len(fetches) > polled, 30.0, what="a poll after the change")
    await asyncio.sleep(2.0)  # four of the 0.5 s polls it made before
    assert len(fetches) <= polled + 2  # relaxed: the change came with a claim's row
    assert reads == []


async def test_off_work_by_name_and_by_id(wboss: Boss) -> None:
    await wboss.create_queue("q1")
    await wboss.create_queue("q2")
    seen: dict[str, list[Any]] = {"a": [], "b": [], "c": []}

    def handler_for(tag: str) -> Callable[[list[Job]], Awaitable[None]]:
        async def handler(batch: list[Job]) -> None:
            seen[tag].extend(j.data for j in batch)

        return handler

    a = await wboss.work("q1", handler_for("a"), polling_interval_seconds=0.5)
    b = await wboss.work("q1", handler_for("b"), polling_interval_seconds=0.5)
    c = await wboss.work("q2", handler_for("c"), polling_interval_seconds=0.5)
    assert len({a, b, c}) == 3
    await wboss.off_work(id=a)
    assert {s.id for s in wboss.worker_statuses()} == {b, c}
    await send(wboss, "q1", 1)
    wboss._wake("q1")
    await until(lambda: seen["b"] == [1], 3.0)
    await wboss.off_work("q1")
    assert {s.id for s in wboss.worker_statuses()} == {c}
    q1 = await send(wboss, "q1", 2)
    await send(wboss, "q2", 3)
    wboss._wake("q1")
    wboss._wake("q2")
    await until(lambda: seen["c"] == [3], 3.0)
    await asyncio.sleep(0.1)
    assert seen["a"] == [] and seen["b"] == [1]
    assert await job_state(wboss, "q1", q1) is JobState.CREATED
    with pytest.raises(ConfigError):
        await wboss.off_work()


async def test_workers_registered_before_start_poll_with_errors_then_work(
    db: Database, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    errors: list[BaseException] = []
    boss.on("error", errors.append)
    handled: list[Any] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.data for j in batch)

    try:
        await boss.work("early", handler, polling_interval_seconds=0.5)
        await until(lambda: len(errors) >= 2, 3.0, what="an error on each poll")
        await asyncio.sleep(1.5)  # three more polls; a loop that retried at once: thousands
        assert len(errors) <= 8, len(errors)
        assert all(isinstance(e, NotStartedError) for e in errors)
        await boss.start()
        await boss.create_queue("early")
        await send(boss, "early", "hello")
        boss._wake("early")
        await until(lambda: handled == ["hello"], 3.0, what="taken after start")
    finally:
        await boss.stop(timeout=1)


async def test_wip_reports_the_workers(wboss: Boss, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "WIP_INTERVAL_SECONDS", 0.05)
    await wboss.create_queue("wip")
    reports: list[list[WorkerStatus]] = []
    wboss.on("wip", reports.append)
    release = asyncio.Event()

    async def handler(batch: list[Job]) -> None:
        await release.wait()

    await send(wboss, "wip")
    worker_id = await wboss.work("wip", handler, local_concurrency=2, polling_interval_seconds=1)
    await until(lambda: any(s.active == 1 for r in reports for s in r), 4.0, what="active wip")
    [status] = reports[-1]
    assert status.id == worker_id and status.name == "wip" and status.state == "active"
    assert status.local_concurrency == 2 and status.last_fetched_on is not None
    entry = status.registry_entry()
    assert entry["queue"] == "wip" and entry["localConcurrency"] == 2
    assert entry["options"] == {}
    release.set()
    await until(lambda: reports[-1] and reports[-1][0].completed == 1, 4.0, what="completed")
    await wboss.stop(timeout=1, close=False)
    [final] = reports[-1]
    assert final.id == worker_id and final.state == "stopped" and final.active == 0


# --------------------------------------------------------------------------- the shared poll


async def test_ready_queues_says_which_queues_have_a_job_to_claim(
    ctx: Context, db: Database
) -> None:
    """The shared poll's statement: queued, unblocked and due; due or not for queues in
    ``anytime``; a missing queue counts (its worker's claim reports it); each existing
    queue's ``notify`` is noted as a claim notes it. Never a false no."""
    for name in ("waiting", "empty", "later", "taken", "held"):
        await queues.create_queue(ctx, name, notify=name == "waiting")
    await jobs.send(ctx, "waiting")
    await jobs.send(ctx, "later", start_after=3600)
    await jobs.send(ctx, "taken")
    assert len(await jobs.fetch(ctx, "taken")) == 1  # active: nothing left to claim
    ids = await flows.flow(
        ctx,
        [
            {"ref": "parent", "name": "held"},
            {"ref": "child", "name": "held", "depends_on": ["parent"]},
        ],
    )
    [parent] = await jobs.fetch(ctx, "held")  # the child stays blocked behind it
    assert parent.id == ids["parent"]
    names = ["waiting", "empty", "later", "taken", "held", "ghost"]
    ctx.notify_seen.clear()
    assert await jobs.ready_queues(ctx, names) == {
        "waiting": True,
        "empty": False,
        "later": False,
        "taken": False,
        "held": False,
        "ghost": True,
    }
    rows = [await queues.get_queue(ctx, name) for name in names[:-1]]
    assert ctx.notify_seen == {r.name: r.notify for r in rows if r is not None}
    assert len(ctx.notify_seen) == 5
    assert (await jobs.ready_queues(ctx, names, anytime=["later", "empty"]))["later"] is True
    assert await jobs.ready_queues(ctx, []) == {}
    # and each answer agrees with a claim made right after it
    for name in ("waiting", "later", "empty"):
        assert bool(await jobs.fetch(ctx, name)) is (name == "waiting")


async def test_idle_workers_share_one_poll_and_only_a_queue_with_a_job_claims(
    wboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker alone polls with its claim. Several idle workers of one Boss share one
    statement a polling interval, which asks for all of them; a job sent to one queue
    is claimed by that queue's worker alone, at its next poll (no NOTIFY here)."""
    names = ["s0", "s1", "s2", "s3"]
    for name in names:
        await wboss.create_queue(name)
    claims, asked = count_claims_and_polls(monkeypatch)
    handled: list[str] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.name for j in batch)

    await wboss.work("s0", handler, polling_interval_seconds=0.5)
    await until(lambda: len(claims) >= 3, 30.0, what="two polls of the lone worker")
    assert asked == [] and set(claims) == {"s0"}  # alone: its claim is its poll
    for name in names[1:]:
        await wboss.work(name, handler, polling_interval_seconds=0.5)
    await until(lambda: set(claims) == set(names), 30.0, what="each worker's first claim")
    await until(lambda: len(asked) >= 4, 30.0, what="four shared polls")
    settled_claims = len(claims)
    await until(lambda: len(asked) >= 8, 30.0, what="four more shared polls")
    assert len(claims) == settled_claims  # idle queues: the shared poll, no claims
    assert asked[-1] == names  # one statement answers for every idle worker
    before = len(claims)
    await send(wboss, "s2")
    await until(lambda: handled == ["s2"], 30.0, what="the job handled by its worker")
    assert set(claims[before:]) == {"s2"}


async def test_a_failed_shared_poll_lets_every_worker_it_asked_for_claim(
    wboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared poll's statement fails: every worker it answered for claims, as each
    would have polled on its own, so a ready job does not wait another interval."""
    names = ["f0", "f1", "f2"]
    for name in names:
        await wboss.create_queue(name)
    claims, asked = count_claims_and_polls(monkeypatch)
    polled = jobs.ready_queues
    failed: list[list[str]] = []

    async def failing(ctx: Context, queues: list[str], anytime: Any = ()) -> dict[str, bool]:
        if not failed:
            failed.append(sorted(queues))
            raise ConnectionLostError("the connection broke", retryable=True)
        return await polled(ctx, queues, anytime)

    handled: list[str] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.name for j in batch)

    for name in names:
        await wboss.work(name, handler, polling_interval_seconds=0.5)
    await until(lambda: len(asked) >= 2, 30.0, what="two shared polls")
    monkeypatch.setattr(jobs, "ready_queues", failing)
    before = len(claims)
    await send(wboss, "f1")
    await until(lambda: handled == ["f1"], 30.0, what="the job handled")
    await until(lambda: failed, 30.0, what="the failed shared poll")
    # Each worker it asked for claims (woken, in its own time). Without the wake the
    # empty queues would never claim: later shared polls succeed and answer "nothing".
    await until(
        lambda: set(failed[0]) <= set(claims[before:]),
        30.0,
        what="a claim by every worker the failed poll asked for",
    )


async def test_a_worker_whose_queue_was_deleted_reports_it_under_the_shared_poll(
    wboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared poll counts a missing queue as ready, so its worker claims and reports
    the missing queue as it did polling alone: once (a ``queue_missing`` warning, never an
    error per poll), then polling it less often."""
    for name in ("kept", "gone"):
        await wboss.create_queue(name)
    claims, asked = count_claims_and_polls(monkeypatch)
    errors: list[BaseException] = []
    wboss.on("error", errors.append)
    warned: list[Any] = []
    wboss.on("warning", warned.append)

    async def handler(batch: list[Job]) -> None:
        pass

    for name in ("kept", "gone"):
        await wboss.work(name, handler, polling_interval_seconds=0.5)
    await until(lambda: len(asked) >= 2, 30.0, what="two shared polls")
    await wboss.delete_queue("gone")
    await until(
        lambda: [w for w in warned if w.type == "queue_missing"],
        30.0,
        what="the missing queue reported",
    )
    (missing,) = [w for w in warned if w.type == "queue_missing"]
    assert missing.data["queue"] == "gone"
    assert not [e for e in errors if isinstance(e, QueueNotFoundError)]
    assert "kept" not in claims[2:]  # the other queue stayed idle: polled, never claimed


# --------------------------------------------------------------------------- options


# --------------------------------------------------------------------------- waking and bursts


async def test_notify_worker_wakes_an_idle_worker_now(wboss: Boss) -> None:
    await wboss.create_queue("woken")
    handled: list[uuid.UUID] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.id for j in batch)

    worker = await wboss.work("woken", handler, polling_interval_seconds=600)
    await until(lambda: _fetched(wboss, worker), timeout=30, what="the first (empty) poll")
    sent = await send(wboss, "woken")
    assert wboss.notify_worker(worker) is True
    await until(lambda: handled == [sent], timeout=60, what="the job handled before the poll")
    assert wboss.notify_worker(str(uuid.uuid4())) is False
    await wboss.off_work(id=worker)
    assert wboss.notify_worker(worker) is False


def _fetched(boss: Boss, worker: str) -> bool:
    return any(s.id == worker and s.last_fetched_on is not None for s in boss.worker_statuses())


async def test_without_bursts_a_full_batch_waits_for_the_next_poll(
    wboss: Boss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``burst_when_batch_full=False`` (and the ready count not over
    ``burst_when_ready_exceeds``): the poll after a full batch comes a polling interval
    later, not at once; the default fetches again at once."""
    await wboss.create_queue("paced")
    for _ in range(6):
        await send(wboss, "paced")
    fetches = count_fetches(monkeypatch)
    handled: list[uuid.UUID] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.id for j in batch)

    options: dict[str, Any] = {"batch_size": 2, "polling_interval_seconds": 600}
    paced = await wboss.work(
        "paced", handler, burst_when_batch_full=False, burst_when_ready_exceeds=100, **options
    )
    await until(lambda: len(handled) == 2, timeout=30, what="the first batch")
    await asyncio.sleep(2)  # the next poll is ten minutes away
    assert len(handled) == 2 and len(fetches) == 1
    await wboss.off_work(id=paced)
    await wboss.work("paced", handler, **options)  # bursting: drains without waiting
    await until(lambda: len(handled) == 6, timeout=60, what="the rest, in bursts")


async def test_burst_when_ready_exceeds_bursts_while_the_backlog_is_over_it(wboss: Boss) -> None:
    await wboss.create_queue("backlog")
    for _ in range(6):
        await send(wboss, "backlog")
    await wboss.get_queue_stats("backlog", force=True)  # the ready count the worker reads
    handled: list[uuid.UUID] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.id for j in batch)

    await wboss.work(
        "backlog",
        handler,
        batch_size=2,
        polling_interval_seconds=600,
        burst_when_batch_full=False,
        burst_when_ready_exceeds=1,
    )
    # 6 ready > 1: bursts past the first batches; the poll interval is ten minutes
    await until(lambda: len(handled) >= 4, timeout=60, what="batches past the first")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"burst_when_batch_full": 1}, "burst_when_batch_full must be True or False"),
        ({"burst_when_ready_exceeds": -1}, "burst_when_ready_exceeds must be an integer >= 0"),
        ({"burst_when_ready_exceeds": "5"}, "burst_when_ready_exceeds must be an integer"),
    ],
)
async def test_bad_burst_options_are_refused(
    wboss: Boss, options: dict[str, Any], message: str
) -> None:
    async def handler(batch: list[Job]) -> None:
        return None

    with pytest.raises(ValidationError, match=message):
        await wboss.work("q", handler, **options)


# --------------------------------------------------------------------------- per-job results


async def test_per_job_results_settle_each_job_as_the_handler_says(wboss: Boss) -> None:
    await wboss.create_queue("dlq-each")
    await wboss.create_queue("each", retry_limit=3, retry_delay=600, dead_letter="dlq-each")
    ids = [await send(wboss, "each", {"n": n}) for n in range(6)]
    batches: list[int] = []

    async def handler(batch: list[Job]) -> list[Any]:
        batches.append(len(batch))
        by_n = {j.data["n"]: j for j in batch}
        return [
            JobResult(by_n[0].id, "completed"),
            JobResult(by_n[1].id, "completed", {"rows": 1}),
            {"id": str(by_n[2].id), "status": "completed", "output": {"rows": 2}},
            JobResult(by_n[3].id, "failed", ValueError("bad row")),
            JobResult(by_n[4].id, "dead_letter", {"why": "poison"}),
            JobResult(uuid.uuid4(), "completed"),  # not of this batch: ignored
        ]  # n=5 left out: failed

    await wboss.work("each", handler, batch_size=6, per_job_results=True)
    done = [await settled(wboss, "each", i, timeout=30) for i in ids]
    assert batches == [6]
    assert [j.state for j in done] == [
        JobState.COMPLETED,
        JobState.COMPLETED,
        JobState.COMPLETED,
        JobState.RETRY,
        JobState.FAILED,
        JobState.RETRY,
    ]
    assert done[0].output is None
    assert done[1].output == {"rows": 1} and done[2].output == {"rows": 2}
    assert done[3].output["name"] == "ValueError" and done[3].output["message"] == "bad row"
    assert done[4].output == {"why": "poison"} and done[4].retry_count == 0  # retries left
    assert done[5].output["name"] == "MissingResult"
    [letter] = await wboss.find_jobs("dlq-each")
    assert letter.source_id == ids[4]


async def test_per_job_results_that_are_not_a_list_fail_the_batch(wboss: Boss) -> None:
    await wboss.create_queue("not-a-list", retry_limit=0)
    ids = [await send(wboss, "not-a-list") for _ in range(2)]

    async def handler(batch: list[Job]) -> Any:
        return {"done": True}

    await wboss.work("not-a-list", handler, batch_size=2, per_job_results=True)
    for job_id in ids:
        job = await settled(wboss, "not-a-list", job_id, timeout=30)
        assert job.state is JobState.FAILED
        assert "must return a list of JobResult" in job.output["message"]


async def test_per_job_results_with_an_unknown_status_fail_that_job(wboss: Boss) -> None:
    await wboss.create_queue("odd-status", retry_limit=0)
    ok, odd = await send(wboss, "odd-status", {"n": 0}), await send(wboss, "odd-status", {"n": 1})

    async def handler(batch: list[Job]) -> list[JobResult]:
        return [JobResult(j.id, "completed" if j.id == ok else "done") for j in batch]

    await wboss.work("odd-status", handler, batch_size=2, per_job_results=True)
    assert (await settled(wboss, "odd-status", ok, timeout=30)).state is JobState.COMPLETED
    failed = await settled(wboss, "odd-status", odd, timeout=30)
    assert failed.state is JobState.FAILED
    assert "unknown result status 'done'" in failed.output["message"]

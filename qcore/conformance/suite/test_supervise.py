"""The monitor pass: active jobs past their expiry or heartbeat are failed — retried,
failed, dead-lettered — on both mutation strategies; the per-queue monitor claim
lets one instance per interval do the work; ``supervise(name)`` keeps to one queue;
expiry batches run under pg-boss's advisory lock; the background loop reports errors
and goes on. Jobs are aged by moving their timestamps back, not by sleeping."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import row, server_now, set_clock, states
from qcore.context import Context
from qcore.errors import QueueNotFoundError
from qcore.events import Events
from qcore.services.monitor import MonitorResult, Supervisor, supervise
from qcore.sql.locks import advisory_xact_lock, lock_key_text
from qcore.verbs import jobs, queues
from qcore.verbs.schema import install_or_migrate

pytestmark = pytest.mark.feature("recovery")


async def _age(ctx: Context, ids: Any, column: str, seconds: int) -> None:
    """Move ``column`` of jobs ``seconds`` into the past (as if they had run that long)."""
    await ctx.db.execute(
        f"UPDATE {ctx.q}.job SET {column} = {column} - $2::int * interval '1 second'"
        " WHERE id = ANY($1::uuid[])",
        [list(ids) if isinstance(ids, list) else [ids], seconds],
    )


async def _started(ctx: Context, name: str, **send: Any) -> uuid.UUID:
    """A job of queue ``name``, sent and claimed: active."""
    sent = await jobs.send(ctx, name, **send)
    assert sent is not None
    [job] = await jobs.fetch(ctx, name, ignore_start_after=True)
    assert job.id == sent
    return sent


async def test_expired_job_is_retried_then_failed_and_dead_lettered(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "q", retry_limit=1, dead_letter="dlq", expire_in_seconds=60)
    sent = await _started(sctx, "q", data={"n": 1})
    fresh = await _started(sctx, "q")  # running, not past its expiry

    assert await supervise(sctx) == MonitorResult(("dlq", "q"), 0, 0)
    await _age(sctx, sent, "started_on", 61)
    result = await supervise(sctx)
    assert result.expired == 1 and result.heartbeat_lost == 0
    r = await row(sctx, sent)
    assert r["state"] == "retry" and r["output"] == jobs.TIMED_OUT
    assert r["retry_count"] == 0 and r["heartbeat_on"] is None and r["completed_on"] is None
    assert (await row(sctx, fresh))["state"] == "active"

    [again] = await jobs.fetch(sctx, "q", ignore_start_after=True)
    assert again.id == sent and again.retry_count == 1
    await _age(sctx, sent, "started_on", 61)
    before = await server_now(sctx)
    assert (await supervise(sctx, "q")).expired == 1
    failed = await row(sctx, sent)
    assert failed["state"] == "failed" and failed["output"] == jobs.TIMED_OUT
    assert failed["completed_on"] >= before - dt.timedelta(milliseconds=50)
    [copy] = await jobs.find_jobs(sctx, "dlq")
    c = await row(sctx, copy.id)
    assert c["state"] == "created" and c["data"] == {"n": 1}
    assert (c["source_name"], c["source_id"], c["source_retry_count"]) == ("q", sent, 1)
    assert c["source_output"] == jobs.TIMED_OUT
    assert await supervise(sctx) == MonitorResult(("dlq", "q"), 0, 0)  # nothing left to do


async def test_lost_heartbeat_is_retried_then_failed_and_dead_lettered(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "hb", retry_limit=1, dead_letter="dlq", heartbeat_seconds=10)
    sent = await _started(sctx, "hb")
    await queues.create_queue(sctx, "plain")
    plain = await _started(sctx, "plain")  # no heartbeat_seconds: never lost
    await _age(sctx, [plain], "heartbeat_on", 3600)
    await _age(sctx, sent, "heartbeat_on", 5)  # within heartbeat_seconds
    assert (await supervise(sctx)).heartbeat_lost == 0

    await _age(sctx, sent, "heartbeat_on", 6)
    assert await supervise(sctx) == MonitorResult(("dlq", "hb", "plain"), 0, 1)
    r = await row(sctx, sent)
    assert r["state"] == "retry" and r["output"] == jobs.HEARTBEAT_LOST
    assert (await row(sctx, plain))["state"] == "active"

    [again] = await jobs.fetch(sctx, "hb", ignore_start_after=True)
    assert again.retry_count == 1
    await jobs.touch(sctx, "hb", again)  # a live worker keeps it
    assert (await supervise(sctx, "hb")).heartbeat_lost == 0
    await _age(sctx, sent, "heartbeat_on", 11)
    assert (await supervise(sctx, "hb")).heartbeat_lost == 1
    r = await row(sctx, sent)
    assert r["state"] == "failed" and r["output"] == jobs.HEARTBEAT_LOST
    [copy] = await jobs.find_jobs(sctx, "dlq")
    assert (await row(sctx, copy.id))["source_output"] == jobs.HEARTBEAT_LOST


async def test_expiry_keeps_to_the_policy_and_to_settled_jobs(sctx: Context) -> None:
    # a job settled by its worker before the pass is left alone; so are queued jobs
    await queues.create_queue(sctx, "q", expire_in_seconds=1, retry_limit=0)
    done = await _started(sctx, "q")
    await jobs.complete(sctx, "q", done)
    queued = await jobs.send(sctx, "q")
    await _age(sctx, [done, queued], "started_on", 60)
    await sctx.db.execute(
        f"UPDATE {sctx.q}.job SET started_on = created_on - interval '1 hour' WHERE id = $1::uuid",
        [queued],
    )
    assert (await supervise(sctx)).expired == 0
    assert await states(sctx, "q") == {"completed": 1, "created": 1}


async def test_expiry_runs_in_batches(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=0)
    ids = await jobs.insert(sctx, "q", [{"data": i} for i in range(7)])
    assert ids is not None
    assert len(await jobs.fetch(sctx, "q", batch_size=7)) == 7
    await _age(sctx, ids, "started_on", 3600)
    result = await supervise(sctx, batch_size=3)
    assert result.expired == 7
    assert await states(sctx, "q") == {"failed": 7}


@pytest.mark.requires("partitioning")
async def test_expiry_on_a_queue_with_its_own_partition(sctx: Context) -> None:
    await queues.create_queue(sctx, "own", partition=True, retry_limit=0)
    await queues.create_queue(sctx, "shared", retry_limit=0)
    own, shared = await _started(sctx, "own"), await _started(sctx, "shared")
    await _age(sctx, [own, shared], "started_on", 3600)
    assert await supervise(sctx) == MonitorResult(("own", "shared"), 2, 0)
    assert await states(sctx, "own") == {"failed": 1}
    assert await states(sctx, "shared") == {"failed": 1}


async def test_supervise_name_keeps_to_that_queue(ctx: Context) -> None:
    await queues.create_queue(ctx, "a")
    await queues.create_queue(ctx, "b")
    a, b = await _started(ctx, "a"), await _started(ctx, "b")
    await _age(ctx, [a, b], "started_on", 3600)
    assert await supervise(ctx, "a") == MonitorResult(("a",), 1, 0)
    assert (await row(ctx, a))["state"] == "retry"
    assert (await row(ctx, b))["state"] == "active"
    with pytest.raises(QueueNotFoundError):
        await supervise(ctx, "nowhere")
    assert await supervise(ctx) == MonitorResult(("a", "b"), 1, 0)
    assert (await row(ctx, b))["state"] == "retry"


async def test_monitor_claim_gates_instances_sharing_a_schema(ctx: Context) -> None:
    """Two instances (contexts) on one schema: within the monitor interval only the
    first background pass claims the queue and works on it; an explicit pass is not
    gated."""
    other = Context(db=ctx.db, backend=ctx.backend, schema_spec=ctx.schema_spec)
    await queues.create_queue(ctx, "q")
    first = await _started(ctx, "q")
    await _age(ctx, first, "started_on", 3600)

    mine = await supervise(ctx, monitor_interval_seconds=60)
    assert mine == MonitorResult(("q",), 1, 0)  # a new queue is due at once
    claimed = (await ctx.db.execute(f"SELECT monitor_claim_on, monitor_on FROM {ctx.q}.queue"))[0]
    assert claimed["monitor_claim_on"] is not None and claimed["monitor_on"] is not None

    [job] = await jobs.fetch(ctx, "q")
    await _age(ctx, job.id, "started_on", 3600)
    assert await supervise(other, monitor_interval_seconds=60) == MonitorResult()
    assert await supervise(ctx, monitor_interval_seconds=60) == MonitorResult()
    assert (await row(ctx, job.id))["state"] == "active"
    after = (await ctx.db.execute(f"SELECT monitor_claim_on FROM {ctx.q}.queue"))[0]
    assert after["monitor_claim_on"] == claimed["monitor_claim_on"]  # nobody claimed again

    # an interval later (moved back instead of waited for) the next pass is due
    await ctx.db.execute(
        f"UPDATE {ctx.q}.queue SET monitor_claim_on = monitor_claim_on - interval '61 seconds'"
    )
    assert await supervise(other, monitor_interval_seconds=60) == MonitorResult(("q",), 1, 0)
    # explicit passes ignore the interval but still claim
    [again] = await jobs.fetch(ctx, "q", ignore_start_after=True)
    await _age(ctx, again.id, "started_on", 3600)
    assert await supervise(ctx) == MonitorResult(("q",), 1, 0)


async def test_two_booted_instances_share_the_background_pass(
    db: Any, backend: Backend, schema: str
) -> None:
    """Two Boss instances with fast background loops (every second, the shortest
    interval allowed) on one schema: each expired job is failed once, and within the
    monitor interval neither works on the queue again, nor does an explicit pass."""
    options: dict[str, Any] = dict(
        db=db,
        backend=backend,
        schema=schema,
        supervise_interval_seconds=1,
        monitor_interval_seconds=3600,
    )
    # the expired job exists before either loop runs: a pass that claimed the queue
    # earlier would, rightly, leave it alone for the whole monitor interval
    ctx = Context(db=db, backend=backend, schema_spec=schema)
    await install_or_migrate(ctx)
    await queues.create_queue(ctx, "q", retry_limit=3)
    sent = await _started(ctx, "q")
    await _age(ctx, sent, "started_on", 3600)
    first, second = Boss(**options), Boss(**options)
    await first.start()
    await second.start()
    try:
        await _until(lambda: _state(ctx, sent), "retry")
        claims = (await ctx.db.execute(f"SELECT monitor_claim_on FROM {ctx.q}.queue"))[0]

        [job] = await jobs.fetch(ctx, "q")
        await _age(ctx, job.id, "started_on", 3600)
        await asyncio.sleep(3.5)  # several ticks of both loops
        assert (await row(ctx, job.id))["state"] == "active"
        now = (await ctx.db.execute(f"SELECT monitor_claim_on FROM {ctx.q}.queue"))[0]
        assert now == claims
        # an explicit pass keeps the shared monitor interval too (pg-boss's supervise()):
        # a fleet that calls it in a loop does not rerun the monitor on every call
        await second.supervise("q")
        assert (await row(ctx, job.id))["state"] == "active"
        assert (await ctx.db.execute(f"SELECT monitor_claim_on FROM {ctx.q}.queue"))[0] == claims
    finally:
        await second.stop()
        await first.stop()


@pytest.mark.requires("advisory_locks")
async def test_expiry_waits_for_the_pgboss_lock_and_passes_run_one_at_a_time(
    boss: Boss,
) -> None:
    ctx = boss.context()
    await queues.create_queue(ctx, "q")
    sent = await _started(ctx, "q")
    await _age(ctx, sent, "started_on", 3600)
    [queue] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'q'")
    suffix = f"{queue['table_name']}failJobsByTimeout"
    statement, params = advisory_xact_lock.sql, [lock_key_text(ctx.schema_spec, suffix)]

    held = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with ctx.db.transaction() as tx:
            await tx.execute(statement, params)
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    passes = [asyncio.create_task(boss.supervise()) for _ in range(2)]
    await asyncio.sleep(0.3)
    assert not any(p.done() for p in passes)  # the first waits for the lock, the second for it
    release.set()
    await holder
    await asyncio.wait_for(asyncio.gather(*passes), 10)
    r = await row(ctx, sent)
    assert r["state"] == "retry" and r["output"] == jobs.TIMED_OUT


async def test_loop_reports_errors_and_goes_on(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    sent = await _started(ctx, "q")
    await _age(ctx, sent, "started_on", 3600)
    events = Events()
    errors: list[Any] = []
    events.on("error", errors.append)
    calls = 0

    def context() -> Context:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the database is away")
        return ctx

    supervisor = Supervisor(context, events, interval_seconds=0.02, monitor_interval_seconds=3600)
    await supervisor.start()
    try:
        await _until(lambda: _state(ctx, sent), "retry")
    finally:
        await supervisor.stop()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert calls >= 2
    assert await supervisor.run() is None  # stopped: returns without running


@pytest.mark.usefixtures("installed")
async def test_stopped_boss_runs_no_pass(db: Any, backend: Backend, schema: str) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    await boss.start()
    ctx = boss.context()
    await queues.create_queue(ctx, "q")
    sent = await _started(ctx, "q")
    await _age(ctx, sent, "started_on", 3600)
    await boss.stop(close=False)
    await boss.supervise()
    assert (await row(ctx, sent))["state"] == "active"
    await boss.start()
    await boss.supervise("q")  # supervise=False: explicit passes still run
    assert (await row(ctx, sent))["state"] == "retry"
    await boss.stop()


async def _state(ctx: Context, job_id: uuid.UUID) -> str:
    return str((await row(ctx, job_id))["state"])


async def _until(read: Any, expected: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (value := await read()) != expected:
        if loop.time() > deadline:
            raise AssertionError(f"still {value!r}, expected {expected!r}")
        await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- interop


@pytest.mark.usefixtures("installed")
async def test_explicit_passes_keep_the_shared_intervals_and_return_after_stop(
    db: Any, backend: Backend, schema: str
) -> None:
    """A fleet driving maintenance itself (``supervise=False`` and a loop): an explicit
    pass runs the monitor once per interval between the instances, as pg-boss's
    ``supervise()``; after ``stop()`` it returns without running."""
    options: dict[str, Any] = dict(
        db=db, backend=backend, schema=schema, supervise=False, monitor_interval_seconds=3600
    )
    one, two = Boss(**options), Boss(**options)
    await one.start()
    await two.start()
    try:
        ctx = one.context()
        await queues.create_queue(ctx, "q", retry_limit=5, expire_in_seconds=60)
        sent = await _started(ctx, "q")
        await _age(ctx, sent, "started_on", 61)
        await one.supervise()  # the interval's first pass: expired, retried
        assert (await row(ctx, sent))["state"] == "retry"
        [again] = await jobs.fetch(ctx, "q", ignore_start_after=True)
        await _age(ctx, again.id, "started_on", 61)
        for boss in (one, two, one):  # within the interval, on either instance: nothing
            await boss.supervise()
        assert (await row(ctx, sent))["state"] == "active"
    finally:
        await two.stop()
        await one.stop()
    await one.supervise()  # stopped: returns without running (no NotStartedError)


@pytest.mark.requires("vacuum_stats")
async def test_counting_that_holds_back_vacuum_is_deferred_and_expiry_goes_on(
    sctx: Context,
) -> None:
    """A pass whose counting took (on the pass's clock) more than a tenth of the server's
    ``autovacuum_naptime`` warns ``monitor_backoff`` and defers the next counting, every
    instance's, by twice the naptime; a deferred pass still expires jobs; once the
    deadline passes, counting resumes. A pass under the budget defers nothing."""
    await queues.create_queue(sctx, "q", expire_in_seconds=60, retry_limit=0)
    [row_] = await sctx.db.execute(
        "SELECT EXTRACT(EPOCH FROM current_setting('autovacuum_naptime')::interval)::float8"
        " AS naptime"
    )
    naptime = float(row_["naptime"])
    ticks = iter(range(0, 10**6, int(naptime)))  # each reading of the clock a naptime on

    def slow() -> float:
        return float(next(ticks))

    events = Events()
    seen: list[Any] = []
    events.on("warning", seen.append)
    quick = await supervise(sctx, events=events)  # the real clock: well under the budget
    assert quick.cached == ("q",) and not seen
    first = await supervise(sctx, events=events, clock=slow)
    assert first.cached == ("q",)
    [warning] = seen
    assert warning.type == "monitor_backoff"
    assert warning.data["naptime_seconds"] == naptime
    assert warning.data["backoff_seconds"] == pytest.approx(2 * naptime, abs=5)

    sent = await _started(sctx, "q")
    await _age(sctx, sent, "started_on", 61)
    deferred = await supervise(sctx, events=events)
    assert deferred.cached == () and deferred.expired == 1  # no counting; expiry all the same
    await set_clock(sctx, 2 * naptime + 5)
    try:
        assert (await supervise(sctx, events=events)).cached == ("q",)
    finally:
        await set_clock(sctx, 0)
    assert len(seen) == 1

"""Concurrent claimers: 16 fetchers drain 5,000 jobs and every job is claimed exactly
once, with either fetch strategy (SKIP LOCKED, or an atomic UPDATE that rechecks the
state), each fetcher on its own connection where the engine has more than one
session; and, on emulated CockroachDB, with injected serialization failures (40001)
that the retry path absorbs."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from typing import Any

import pytest

from qcore.backend import Backend, FetchStrategy, MutationStrategy
from qcore.conformance.helpers import count, row, states
from qcore.context import Context
from qcore.errors import SerializationError, ValidationError
from qcore.job import CommandResult
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("concurrency")

JOBS = 5_000
FETCHERS = 16
BATCH = 10


@pytest.fixture(params=["native", "distributed"])
def strategies(request: pytest.FixtureRequest, backend: Backend) -> Backend:
    """The backend as it is, and with CockroachDB's strategies on the same engine."""
    if request.param == "native":
        return backend
    return dataclasses.replace(
        backend, fetch=FetchStrategy.ATOMIC_UPDATE, mutation=MutationStrategy.SPLIT
    )


async def _drain(
    ctx: Context, name: str, claimed: list[uuid.UUID], watch: Context | None = None
) -> int:
    """Fetch until the queue has nothing queued (as seen through ``watch``); how many
    fetches lost the race on every attempt."""
    gave_up = 0
    while True:
        try:
            got = await jobs.fetch(ctx, name, batch_size=BATCH)
        except SerializationError:  # lost the race six times: others are claiming
            gave_up += 1
            continue
        if got:
            claimed.extend(j.id for j in got)
            continue
        if await count(watch or ctx, "job", "name = $1 AND state < 'active'", name) == 0:
            return gave_up
        await asyncio.sleep(0.001)


async def _settle(call: Any) -> None:
    """Run a settling call again while it loses serialization races, as a worker would."""
    while True:
        try:
            await call()
            return
        except SerializationError:
            await asyncio.sleep(random.uniform(0.001, 0.02))


async def _fill(ctx: Context, name: str, n: int) -> set[uuid.UUID]:
    await queues.create_queue(ctx, name)
    ids = await jobs.insert(ctx, name, [{"data": {"i": i}} for i in range(n)])
    assert ids is not None and len(ids) == n
    return set(ids)


async def _check_exactly_once(
    ctx: Context, name: str, sent: set[uuid.UUID], claimed: list[uuid.UUID]
) -> None:
    assert len(claimed) == len(sent), f"{len(claimed) - len(sent)} claims too many"
    assert set(claimed) == sent
    assert await states(ctx, name) == {"active": len(sent)}
    assert await count(ctx, "job", "name = $1 AND retry_count <> 0", name) == 0


async def test_each_job_is_claimed_exactly_once(
    strategies: Backend, ctx: Context, pool: Any
) -> None:
    sent = await _fill(ctx, "burst", JOBS)
    shared = Context(db=pool, backend=strategies, schema_spec=ctx.schema_spec)
    claimed: list[uuid.UUID] = []
    await asyncio.gather(*(_drain(shared, "burst", claimed) for _ in range(FETCHERS)))
    await _check_exactly_once(ctx, "burst", sent, claimed)
    result = await jobs.complete(shared, "burst", claimed)
    assert result.affected == JOBS
    assert await states(ctx, "burst") == {"completed": JOBS}


async def test_concurrent_fail_and_complete(strategies: Backend, ctx: Context, pool: Any) -> None:
    """Workers settling their batches concurrently (half fail, half complete) lose nothing."""
    n = 600
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "work", retry_limit=1, dead_letter="dlq")
    ids = await jobs.insert(ctx, "work", [{"data": {"i": i}} for i in range(n)])
    assert ids is not None
    shared = Context(db=pool, backend=strategies, schema_spec=ctx.schema_spec)

    async def worker() -> None:
        while True:
            try:
                got = await jobs.fetch(shared, "work", batch_size=5, ignore_start_after=True)
            except SerializationError:
                continue
            if not got:
                if await count(ctx, "job", "name = 'work' AND state < 'active'") == 0:
                    return
                await asyncio.sleep(0.001)
                continue
            for job in got:
                if job.data["i"] % 2:
                    await _settle(lambda job=job: jobs.complete(shared, "work", job))
                else:
                    await _settle(lambda job=job: jobs.fail(shared, "work", job, "even"))

    await asyncio.gather(*(worker() for _ in range(8)))
    # even jobs: failed twice (retry_limit 1), then dead-lettered; odd jobs: completed
    assert await states(ctx, "work") == {"completed": n // 2, "failed": n // 2}
    assert await count(ctx, "job", "name = 'dlq'") == n // 2
    sources = await ctx.db.execute(
        f"SELECT count(DISTINCT source_id)::int AS n FROM {ctx.q}.job WHERE name = 'dlq'"
    )
    assert sources[0]["n"] == n // 2
    assert await count(ctx, "job", "name = 'work' AND state = 'failed' AND retry_count = 1") == (
        n // 2
    )


# --------------------------------------------------------------------------- 40001


@pytest.fixture
def emulated(backend: Backend, db: Any) -> Backend:
    if not hasattr(db, "inject_serialization_failure"):
        pytest.skip("injecting 40001 needs the capability guard (emulated backends)")
    return backend


def _guarded(db: Any) -> Any:
    from qcore.conformance.guard import GuardedDatabase

    if not isinstance(db, GuardedDatabase):
        pytest.skip("fault injection needs the capability guard (an emulated backend)")
    return db


async def test_concurrent_completes_of_one_boss_count_each_job_once(
    strategies: Backend, ctx: Context, pool: Any, schema: str
) -> None:
    """32 calls of one Boss complete at once (sharing statements while one is in flight),
    every call's ids overlapping its neighbour's, some given as fenced Jobs: each job
    is completed by exactly one call, each call counts only its own, a stale fence
    completes nothing, and a call with a bad id fails alone before anything is sent."""
    from qcore import Boss
    from qcore.conformance.helpers import running

    calls, each = 32, 10
    sent = await _fill(ctx, "shared", calls * each)
    claimed = await jobs.fetch(ctx, "shared", batch_size=calls * each)
    assert len(claimed) == len(sent)
    stale = dataclasses.replace(claimed[0], retry_count=claimed[0].retry_count + 1)
    slices: list[list[Any]] = [claimed[k * each : (k + 1) * each] for k in range(calls)]
    asked: list[list[Any]] = [
        [*(j if k % 2 else j.id for j in part), slices[(k + 1) % calls][0].id]
        for k, part in enumerate(slices)
    ]
    async with running(Boss(db=pool, backend=strategies, schema=schema)) as boss:
        outcomes = await asyncio.gather(
            *(boss.complete("shared", ids) for ids in asked),
            boss.complete("shared", [claimed[1].id, "not-a-uuid"]),
            boss.complete("shared", [stale]),
            return_exceptions=True,
        )
    *answers, bad, fenced_out = outcomes
    assert isinstance(bad, ValidationError) and "not-a-uuid" in str(bad)
    results = [r for r in answers if isinstance(r, CommandResult)]
    assert len(results) == calls and isinstance(fenced_out, CommandResult)
    assert fenced_out.affected == 0  # a newer attempt's fence: not this job's attempt
    done = [i for r in results for i in r.ids]
    assert len(done) == len(sent) and set(done) == sent  # each job once, by one call
    for result, ids in zip(results, asked, strict=True):
        assert result.requested == each + 1
        assert set(result.ids) <= {getattr(i, "id", i) for i in ids}
    assert await states(ctx, "shared") == {"completed": len(sent)}


async def test_claims_survive_injected_serialization_failures(
    emulated: Backend, ctx: Context, pool: Any
) -> None:
    backend = emulated
    guard = _guarded(pool)
    n = 1_000
    sent = await _fill(ctx, "flaky", n)
    shared = Context(db=guard, backend=backend, schema_spec=ctx.schema_spec)
    claimed: list[uuid.UUID] = []
    stop = asyncio.Event()

    async def chaos() -> None:
        while not stop.is_set():
            # the next statement outside a transaction fails, and so does its first retry
            guard.inject_serialization_failure(random.randint(1, 3), 2, in_transaction=False)
            await asyncio.sleep(0.005)

    saboteur = asyncio.ensure_future(chaos())
    try:
        await asyncio.gather(
            *(_drain(shared, "flaky", claimed, watch=ctx) for _ in range(FETCHERS))
        )
    finally:
        stop.set()
        await saboteur
        guard.cancel_injections()
    assert guard.injected > 0
    await _check_exactly_once(ctx, "flaky", sent, claimed)


async def test_split_fail_is_retried_whole(emulated: Backend, ctx: Context) -> None:
    """A 40001 in the middle of the split fail rolls the transaction back and runs it
    again: the job is retried exactly once, never lost or doubled."""
    split = dataclasses.replace(ctx.backend, mutation=MutationStrategy.SPLIT)
    ctx = Context(db=ctx.db, backend=split, schema_spec=ctx.schema_spec)
    guard = _guarded(ctx.db)
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "q", retry_limit=1, dead_letter="dlq")
    sent = await jobs.send(ctx, "q")
    [job] = await jobs.fetch(ctx, "q")
    before = guard.injected
    guard.inject_serialization_failure(2, 2)  # the re-insert, in two transactions running
    result = await jobs.fail(ctx, "q", job, "flaky")
    assert guard.injected == before + 2
    assert result.ids == [sent]
    assert (await row(ctx, sent))["state"] == "retry"
    [job] = await jobs.fetch(ctx, "q", ignore_start_after=True)
    guard.inject_serialization_failure(2, 1)  # the failed + dead letter insert
    await jobs.fail(ctx, "q", job, "flaky again")
    assert guard.injected == before + 3
    assert await states(ctx, "q") == {"failed": 1}
    assert await count(ctx, "job", "name = 'dlq'") == 1

"""Settle and claim in one round trip (``jobs.complete_and_fetch``, the worker's protocol
for a full batch that completes): both or neither, in one statement on every backend
that takes several mutations of the job table in one, in one transaction (pipelined with
psycopg) on those that split them; a clear error where neither can be atomic (an
``execute_sql`` object on a splitting backend), where the worker settles and claims in
two statements as before."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter
from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import running, states, until
from qcore.context import Context
from qcore.db import Database
from qcore.errors import ConfigError, DatabaseError, ValidationError
from qcore.job import Job, JobState
from qcore.sql.jobs.spec import FetchSpec
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("workers")


def needs_settle_and_claim(ctx: Context) -> None:
    if not jobs.settles_and_claims(ctx):
        pytest.skip(
            "settle-and-claim needs MutationStrategy.CTE (two mutations in one statement)"
            " or an adapter with atomic transactions"
        )


def count_settle_and_claims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each settle-and-claim statement the workers run completes."""
    sizes: list[int] = []
    real = jobs.claim

    async def counting(
        ctx: Context, name: str, spec: FetchSpec, done: list[Job] | None = None
    ) -> list[Job]:
        if done is not None:  # a settle-and-claim, not a fetch
            sizes.append(len(done))
        return await real(ctx, name, spec, done)

    monkeypatch.setattr(jobs, "claim", counting)
    return sizes


async def _boom_on_complete(ctx: Context, queue: str, when: str) -> None:
    """A trigger on the queue's job table that fails the completion of a job ``when``
    (a condition on ``NEW``) holds: a database failure inside the settling half."""
    rows = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = $1", [queue])
    table = f'{ctx.q}."{rows[0]["table_name"]}"'
    await ctx.db.execute_script(
        f"CREATE SEQUENCE IF NOT EXISTS {ctx.q}.boom_seq;"
        f" CREATE FUNCTION {ctx.q}.boom() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN IF NEW.state = 'completed' AND ({when}) THEN"
        " RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;"
        f" CREATE TRIGGER boom BEFORE UPDATE ON {table}"
        f" FOR EACH ROW EXECUTE FUNCTION {ctx.q}.boom()"
    )


async def test_settles_and_claims_in_one_statement(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    sent = [await jobs.send(ctx, "q", {"n": n}) for n in range(3)]
    [first] = await jobs.fetch(ctx, "q")
    with pytest.raises(ValidationError, match="Job objects"):  # a bare id has no attempt
        await jobs.complete_and_fetch(ctx, "q", [first.id])  # type: ignore[list-item]
    if not jobs.settles_and_claims(ctx):
        with pytest.raises(ConfigError, match="complete, then fetch"):
            await jobs.complete_and_fetch(ctx, "q", [first])
        assert await states(ctx, "q") == {"created": 2, "active": 1}  # nothing written
        return
    [second] = await jobs.complete_and_fetch(ctx, "q", [first], batch_size=1)
    assert (first.id, second.id) == (sent[0], sent[1]) and second.data == {"n": 1}
    done = await jobs.get_job_by_id(ctx, "q", first.id)
    assert done is not None and done.state is JobState.COMPLETED and done.output is None
    # a newer attempt's fence completes nothing; the claim is made all the same
    stale = dataclasses.replace(second, retry_count=second.retry_count + 1)
    [third] = await jobs.complete_and_fetch(ctx, "q", [stale], batch_size=5)
    assert third.id == sent[2]
    assert await states(ctx, "q") == {"completed": 1, "active": 2}
    # nothing left to claim: the settle still lands
    assert await jobs.complete_and_fetch(ctx, "q", [second, third], batch_size=5) == []
    assert await states(ctx, "q") == {"completed": 3}


async def test_a_failed_settle_claims_nothing(ctx: Context) -> None:
    needs_settle_and_claim(ctx)
    await queues.create_queue(ctx, "q")
    await jobs.send(ctx, "q", {"boom": True})
    waiting = [await jobs.send(ctx, "q", {"n": n}) for n in range(3)]
    [doomed] = await jobs.fetch(ctx, "q")
    await _boom_on_complete(ctx, "q", "NEW.data ? 'boom'")
    with pytest.raises(DatabaseError, match="refused by the test"):
        await jobs.complete_and_fetch(ctx, "q", [doomed], batch_size=3)
    assert await states(ctx, "q") == {"created": 3, "active": 1}
    again = await jobs.fetch(ctx, "q", batch_size=3)  # the claim was undone with the settle
    assert [j.id for j in again] == waiting


async def test_a_worker_whose_settle_and_claim_fails_settles_alone(
    db: Database, backend: Backend, schema: str, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first settle-and-claim fails (a database error in its settling half): the
    worker reports it, completes that batch on its own and goes on; every job is
    handled and completed exactly once."""
    needs_settle_and_claim(ctx)
    merged = count_settle_and_claims(monkeypatch)
    await queues.create_queue(ctx, "q")
    await _boom_on_complete(ctx, "q", f"nextval('{ctx.q}.boom_seq') = 1")
    sent = await jobs.insert(ctx, "q", [{"data": {"n": n}} for n in range(20)])
    assert sent is not None
    handled: Counter[uuid.UUID] = Counter()
    errors: list[BaseException] = []

    async def handler(batch: list[Job]) -> None:
        handled.update(j.id for j in batch)

    async with running(Boss(db=db, backend=backend, schema=schema, supervise=False)) as boss:
        boss.on("error", errors.append)
        await boss.work("q", handler, batch_size=1, local_concurrency=2)

        async def drained() -> bool:
            return await states(ctx, "q") == {"completed": 20}

        await until(drained, timeout=60, what="every job completed")
    assert set(handled) == set(sent) and set(handled.values()) == {1}
    assert any("refused by the test" in str(e) for e in errors)
    assert merged and merged[0] >= 1  # the first settle was a settle-and-claim


@pytest.mark.parametrize("batch", [1, 5])
async def test_32_loops_settle_and_claim_each_job_once(
    pool: Any,
    backend: Backend,
    schema: str,
    ctx: Context,
    batch: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    merged = count_settle_and_claims(monkeypatch)
    await queues.create_queue(ctx, "q")
    sent = await jobs.insert(ctx, "q", [{"data": {"n": n}} for n in range(600)])
    assert sent is not None
    handled: Counter[uuid.UUID] = Counter()

    async def handler(claimed: list[Job]) -> None:
        handled.update(j.id for j in claimed)
        await asyncio.sleep(0)

    async with running(Boss(db=pool, backend=backend, schema=schema, supervise=False)) as boss:
        await boss.work("q", handler, batch_size=batch, local_concurrency=32)

        async def drained() -> bool:
            return await states(ctx, "q") == {"completed": 600}

        await until(drained, timeout=120, what="every job completed")
    assert set(handled) == set(sent) and set(handled.values()) == {1}
    if jobs.settles_and_claims(ctx):  # elsewhere each batch settles alone
        assert sum(merged) > 0
    else:
        assert merged == []

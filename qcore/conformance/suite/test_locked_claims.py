"""Locked claims (``locked_fetch``, ``work(locked_fetch=True)``): jobs claimed with
``FOR UPDATE SKIP LOCKED`` in a transaction held while they run and settled in it,
each written once. What they must keep: a settle as a fetched job's (retries, dead
letters, outputs), every job once under contention, and a batch that dies with its
transaction (cancelled, connection killed, a client frozen past the server's limit)
back in the queue as it was, no attempt counted. Refused, before anything is
written, where their jobs' queued state would break a rule or the engine or adapter
cannot hold a transaction open."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from qcore import Boss, JobResult
from qcore.backend import Backend
from qcore.conformance.helpers import count, locks_claims, row, running, states, until
from qcore.context import Context
from qcore.errors import ConfigError, DatabaseError, ValidationError
from qcore.job import Job, JobState
from qcore.verbs import jobs, queues
from qcore.verbs.jobs import locked as locked_module

pytestmark = pytest.mark.feature("workers")


def needs_locked_claims(ctx: Context) -> None:
    if not locks_claims(ctx):
        pytest.skip(
            "locked claims need FOR UPDATE SKIP LOCKED, one-statement mutations and a"
            " pooled adapter (refusal tested in test_refused_where_a_transaction_cannot_be_held)"
        )


@pytest.fixture
def pctx(ctx: Context, pool: Any) -> Context:
    """``ctx`` on the pool (a held transaction takes one connection of it)."""
    return ctx.with_db(pool)


async def test_refused_where_a_transaction_cannot_be_held(ctx: Context, pool: Any) -> None:
    if locks_claims(ctx.with_db(pool)):
        pytest.skip("this backend and adapter hold locked claims (tested below)")
    await queues.create_queue(ctx, "q")
    await jobs.send(ctx, "q", {"n": 1})
    with pytest.raises(ConfigError, match="locked claims"):
        async with jobs.locked_fetch(ctx.with_db(pool), "q"):
            pass
    async with running(Boss(db=pool, backend=ctx.backend, schema=ctx.schema_spec)) as boss:
        with pytest.raises(ConfigError, match="locked claims"):
            await boss.work("q", lambda batch: None, locked_fetch=True)
    assert await states(ctx, "q") == {"created": 1}


async def test_held_jobs_read_as_queued_and_are_written_once_when_settled(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    sent = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(4)])
    assert sent is not None
    async with jobs.locked_fetch(pctx, "q", batch_size=3) as batch:
        assert [j.id for j in batch.jobs] == sent[:3]  # fetch's order
        assert [j.data for j in batch.jobs] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert all(j.retry_count == 0 for j in batch.jobs)
        assert await states(pctx, "q") == {"created": 4}  # seen from outside: queued
        # another claimer skips the held rows, locked or not
        [other] = await jobs.fetch(pctx, "q", batch_size=5)
        assert other.id == sent[3]
        await jobs.complete(pctx, "q", other)
        await batch.complete(batch.jobs[:1], {"kept": True})
    done = [await row(pctx, i) for i in sent[:3]]
    assert [d["state"] for d in done] == ["completed"] * 3
    assert done[0]["output"] == {"kept": True} and done[1]["output"] is None
    for d in done:
        assert d["retry_count"] == 0
        assert d["started_on"] is not None and d["completed_on"] >= d["started_on"]
        assert d["heartbeat_on"] == d["started_on"]


async def test_an_exception_fails_what_is_left_and_propagates(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q", retry_limit=2)
    sent = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(3)])
    assert sent is not None
    with pytest.raises(RuntimeError, match="handler broke"):
        async with jobs.locked_fetch(pctx, "q", batch_size=3) as batch:
            await batch.complete(batch.jobs[:1])
            raise RuntimeError("handler broke")
    first, *rest = [await row(pctx, i) for i in sent]
    assert first["state"] == "completed"
    for failed in rest:
        assert failed["state"] == "retry" and failed["retry_count"] == 0
        assert failed["output"]["name"] == "RuntimeError"
        assert failed["output"]["message"] == "handler broke"


async def test_a_locked_failure_retries_and_dead_letters_as_a_fetched_one(pctx: Context) -> None:
    """The same job failed through locked claims and through fetch + fail, attempt by
    attempt, ends the same: retry counts, states, the dead letter's copy."""
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "dlq")
    for name in ("locked", "fetched"):
        await queues.create_queue(pctx, name, retry_limit=2, dead_letter="dlq")
    ids = {name: await jobs.send(pctx, name, {"same": True}) for name in ("locked", "fetched")}
    seen: dict[str, list[tuple[int, str]]] = {"locked": [], "fetched": []}
    for attempt in range(3):
        async with jobs.locked_fetch(pctx, "locked") as batch:
            [job] = batch.jobs
            assert job.retry_count == attempt
            await batch.fail([job], {"attempt": attempt})
        [fetched] = await jobs.fetch(pctx, "fetched")
        assert fetched.retry_count == attempt
        await jobs.fail(pctx, "fetched", fetched, {"attempt": attempt})
        for name in seen:
            r = await row(pctx, ids[name])
            seen[name].append((r["retry_count"], r["state"]))
    assert seen["locked"] == seen["fetched"]
    assert seen["locked"][-1] == (2, "failed")
    letters = await pctx.db.execute(
        f"SELECT source_name, source_retry_count, source_output FROM {pctx.q}.job"
        " WHERE name = 'dlq' ORDER BY source_name"
    )
    assert [r["source_name"] for r in letters] == ["fetched", "locked"]
    assert {r["source_retry_count"] for r in letters} == {2}
    assert all(r["source_output"] == {"attempt": 2} for r in letters)


async def test_terminal_fails_at_once(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q", retry_limit=5)
    job_id = await jobs.send(pctx, "q", {"n": 1})
    async with jobs.locked_fetch(pctx, "q") as batch:
        await batch.fail(data="poison", terminal=True)
    r = await row(pctx, job_id)
    assert (r["state"], r["output"]) == ("failed", {"value": "poison"})


async def test_a_cancelled_block_gives_its_jobs_back_uncounted(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    job_id = await jobs.send(pctx, "q", {"n": 1})
    inside = asyncio.Event()

    async def hold() -> None:
        async with jobs.locked_fetch(pctx, "q") as batch:
            assert len(batch.jobs) == 1
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(hold())
    await asyncio.wait_for(inside.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await row(pctx, job_id)
    assert (r["state"], r["retry_count"], r["started_on"]) == ("created", 0, None)
    [again] = await jobs.fetch(pctx, "q")
    assert again.id == job_id and again.retry_count == 0


async def test_a_killed_connection_gives_the_jobs_back_uncounted(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    sent = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(2)])
    assert sent is not None
    with pytest.raises(DatabaseError):
        async with jobs.locked_fetch(pctx, "q", batch_size=2) as batch:
            held = batch._ctx.db  # the transaction's own connection
            [pid] = await held.execute("SELECT pg_backend_pid() AS pid")
            await pctx.db.execute("SELECT pg_terminate_backend($1::int)", [pid["pid"]])
            await batch.complete()
    for job_id in sent:
        r = await row(pctx, job_id)
        assert (r["state"], r["retry_count"], r["started_on"]) == ("created", 0, None)


async def test_the_server_frees_the_jobs_of_a_client_that_froze(
    pctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block idle past its jobs' expiry (plus the grace, 0 here) is ended by the
    server (``idle_in_transaction_session_timeout``): the jobs come back with nobody
    watching, and the frozen block's next statement fails."""
    needs_locked_claims(pctx)
    monkeypatch.setattr(locked_module, "HOLD_GRACE_SECONDS", 0)
    await queues.create_queue(pctx, "q", expire_in_seconds=1)
    job_id = await jobs.send(pctx, "q", {"n": 1})
    with pytest.raises(DatabaseError):
        async with jobs.locked_fetch(pctx, "q") as batch:
            assert len(batch.jobs) == 1

            async def freed() -> bool:
                return bool(await jobs.fetch(pctx, "q", batch_size=1))

            await until(freed, timeout=60, what="the server ended the idle transaction")
            await batch.complete()
    r = await row(pctx, job_id)
    assert r["state"] == "active"  # the claim after the server freed it


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"group_concurrency": 2}, ValidationError, "group_concurrency counts active jobs"),
        ({"batch_size": 0}, ValidationError, "batch_size"),
        ({"bogus": 1}, ValidationError, "bogus"),
    ],
)
async def test_bad_options_are_refused_before_anything_is_written(
    pctx: Context, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    await queues.create_queue(pctx, "q")
    await jobs.send(pctx, "q", {"n": 1})
    with pytest.raises(error, match=match):
        async with jobs.locked_fetch(pctx, "q", **options):
            pass
    assert await states(pctx, "q") == {"created": 1}


@pytest.mark.parametrize("policy", ["singleton", "stately"])
async def test_policies_that_count_active_jobs_are_refused(pctx: Context, policy: str) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q", policy=policy)
    await jobs.send(pctx, "q", {"n": 1})
    with pytest.raises(ConfigError, match=f"{policy} policy"):
        async with jobs.locked_fetch(pctx, "q"):
            pass
    assert await states(pctx, "q") == {"created": 1}


async def test_a_batch_settles_only_its_own_unsettled_jobs(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    sent = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(2)])
    assert sent is not None
    async with jobs.locked_fetch(pctx, "q", batch_size=1) as batch:
        [job] = batch.jobs
        stranger = Job(id=sent[1], name="q", data=None, retry_count=0, expire_in_seconds=60)
        with pytest.raises(ValidationError, match="not an unsettled job"):
            await batch.complete([stranger])
        await batch.complete([job])
        with pytest.raises(ValidationError, match="not an unsettled job"):
            await batch.fail([job])
        assert batch.unsettled == []
    assert await states(pctx, "q") == {"completed": 1, "created": 1}


async def test_refused_inside_a_transaction(pctx: Context) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    await jobs.send(pctx, "q", {"n": 1})
    async with pctx.db.transaction():
        with pytest.raises(ConfigError, match="outside a transaction"):
            async with jobs.locked_fetch(pctx, "q"):
                pass
    assert await states(pctx, "q") == {"created": 1}


async def test_a_missing_queue_is_named(pctx: Context) -> None:
    needs_locked_claims(pctx)
    with pytest.raises(ValidationError, match="nope"):
        async with jobs.locked_fetch(pctx, "nope"):
            pass


# --------------------------------------------------------------------------- the worker


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("batch", [1, 5])
async def test_32_locked_loops_handle_each_job_once(
    pool: Any, backend: Backend, schema: str, pctx: Context, batch: int
) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    sent = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(400)])
    assert sent is not None
    handled: Counter[uuid.UUID] = Counter()

    async def handler(claimed: list[Job]) -> None:
        handled.update(j.id for j in claimed)
        await asyncio.sleep(0)

    async with running(Boss(db=pool, backend=backend, schema=schema, supervise=False)) as boss:
        await boss.work("q", handler, batch_size=batch, local_concurrency=32, locked_fetch=True)

        async def drained() -> bool:
            return await states(pctx, "q") == {"completed": 400}

        await until(drained, timeout=120, what="every job completed")
    assert set(handled) == set(sent) and set(handled.values()) == {1}


@pytest.mark.usefixtures("installed")
async def test_a_locked_worker_settles_as_a_fetching_one(
    pool: Any, backend: Backend, schema: str, pctx: Context
) -> None:
    """Outputs, failures with retries, per-job results and an expired handler, through
    a locked worker."""
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "one", retry_limit=1)
    await queues.create_queue(pctx, "each")
    ok = await jobs.send(pctx, "one", {"do": "ok"})
    bad = await jobs.send(pctx, "one", {"do": "fail"})
    slow = await jobs.send(pctx, "one", {"do": "hang"}, expire_in_seconds=2, retry_limit=0)
    pair = await jobs.insert(pctx, "each", [{"data": {"n": n}} for n in range(2)])
    assert pair is not None

    async def one(batch: list[Job]) -> Any:
        [job] = batch
        if job.data["do"] == "fail":
            raise ValueError("no")
        if job.data["do"] == "hang":
            await asyncio.sleep(3600)
        return {"done": job.data["do"]}

    async def each(batch: list[Job]) -> list[JobResult]:
        return [
            JobResult(j.id, "completed" if j.data["n"] == 0 else "dead_letter", {"n": j.data["n"]})
            for j in batch
        ]

    async with running(Boss(db=pool, backend=backend, schema=schema, supervise=False)) as boss:
        await boss.work("one", one, local_concurrency=3, locked_fetch=True)
        await boss.work("each", each, batch_size=2, per_job_results=True, locked_fetch=True)

        async def settled() -> bool:
            one_states = await states(pctx, "one")
            return one_states == {"completed": 1, "failed": 2} and await states(pctx, "each") == {
                "completed": 1,
                "failed": 1,
            }

        await until(settled, timeout=120, what="every job settled")
    assert (await row(pctx, ok))["output"] == {"done": "ok"}
    failed = await row(pctx, bad)
    assert failed["retry_count"] == 1 and failed["output"]["message"] == "no"
    hung = await row(pctx, slow)
    assert hung["state"] == "failed" and "2" in hung["output"]["message"]
    first, second = [await row(pctx, i) for i in pair]
    assert (first["state"], first["output"]) == ("completed", {"n": 0})
    assert (second["state"], second["output"]) == ("failed", {"n": 1})


@pytest.mark.usefixtures("installed")
async def test_a_stop_fails_a_held_batch_past_the_deadline(
    pool: Any, backend: Backend, schema: str, pctx: Context
) -> None:
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q", retry_limit=0)
    job_id = await jobs.send(pctx, "q", {"n": 1})
    started = asyncio.Event()

    async def handler(batch: list[Job]) -> None:
        started.set()
        await asyncio.sleep(3600)

    boss = Boss(db=pool, backend=backend, schema=schema, supervise=False)
    await boss.start()
    await boss.work("q", handler, locked_fetch=True)
    await asyncio.wait_for(started.wait(), 60)
    await boss.stop(timeout=0.5)
    r = await row(pctx, job_id)
    assert r["state"] == "failed" and r["output"] == {"value": "qcore shut down while active"}


def test_work_refuses_group_limits() -> None:
    from qcore.worker.options import WorkOptions

    for option in ({"group_concurrency": 2}, {"local_group_concurrency": 1}):
        with pytest.raises(ValidationError, match="locked_fetch cannot be combined"):
            WorkOptions(locked_fetch=True, **option)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="locked_fetch must be True or False"):
        WorkOptions(locked_fetch=1)  # type: ignore[arg-type]


async def test_a_job_state_while_held(pctx: Context) -> None:
    """What others read of a held job: queued (pg-boss's state), the attempt not yet
    counted; the holder's copy reads as running."""
    needs_locked_claims(pctx)
    await queues.create_queue(pctx, "q")
    job_id = await jobs.send(pctx, "q", {"n": 1})
    assert job_id is not None
    async with jobs.locked_fetch(pctx, "q", include_metadata=True) as batch:
        [mine] = batch.jobs
        assert mine.state is JobState.ACTIVE and mine.started_on is not None
        theirs = await jobs.get_job_by_id(pctx, "q", job_id)
        assert theirs is not None and theirs.state is JobState.CREATED


async def test_the_idle_limit_covers_the_longest_expiry_in_the_batch(pctx: Context) -> None:
    needs_locked_claims(pctx)
    grace = locked_module.HOLD_GRACE_SECONDS
    await queues.create_queue(pctx, "q", expire_in_seconds=60)
    await jobs.send(pctx, "q", {"n": 1})
    await jobs.send(pctx, "q", {"n": 2}, expire_in_seconds=600)

    async def limit(batch: Any) -> str:
        [shown] = await batch._ctx.db.execute("SHOW idle_in_transaction_session_timeout")
        return str(shown["idle_in_transaction_session_timeout"])

    async with jobs.locked_fetch(pctx, "q") as batch:  # the queue's expiry
        assert await limit(batch) == f"{60 + grace}s"
    async with jobs.locked_fetch(pctx, "q") as batch:  # the job's own, longer
        assert await limit(batch) == f"{600 + grace}s"
    [outside] = await pctx.db.execute("SHOW idle_in_transaction_session_timeout")
    assert outside["idle_in_transaction_session_timeout"] == "0"  # local to the claims


#: an error message as a file name that is not UTF-8 gives it: a lone surrogate, which
#: no database text can hold
UNDECODABLE = "cannot open " + os.fsdecode(b"caf\xe9.txt")


async def _drain_with_poison(
    pool: Any,
    backend: Backend,
    schema: str,
    pctx: Context,
    *,
    locked: bool,
    batch_size: int,
    handler: Callable[[list[Job]], Any],
) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """Queue ``q`` (one retry, dead letters to ``dlq``) with one poison job among
    ``2 * batch_size`` others, worked by ``handler`` until every job has ended: the
    poison job's id and the others'."""
    await queues.create_queue(pctx, "dlq")
    await queues.create_queue(pctx, "q", retry_limit=1, retry_delay=0, dead_letter="dlq")
    poison = await jobs.send(pctx, "q", {"poison": True})
    others = await jobs.insert(pctx, "q", [{"data": {"n": n}} for n in range(2 * batch_size)])
    assert poison is not None and others is not None
    boss = Boss(db=pool, backend=backend, schema=schema, supervise=False)
    async with running(boss):
        await boss.work("q", handler, batch_size=batch_size, locked_fetch=locked)

        async def ended() -> bool:
            return set(await states(pctx, "q")) <= {"completed", "failed"}

        await until(ended, timeout=120, what="every job of q completed or failed")
    return poison, others


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("batch_size", [1, 10])
@pytest.mark.parametrize("locked", [True, False], ids=["locked", "fetched"])
async def test_an_error_the_database_cannot_hold_retries_fails_and_dead_letters(
    pool: Any, backend: Backend, schema: str, pctx: Context, locked: bool, batch_size: int
) -> None:
    """A handler's error with a lone surrogate in its message: the job fails with it
    (escaped), retries once, fails and is dead-lettered, locked or fetched alike, run
    twice in all; it holds up nobody (once, such a locked batch came back uncounted
    and ran again for ever)."""
    if locked:
        needs_locked_claims(pctx)
    runs: Counter[uuid.UUID] = Counter()

    async def handler(batch: list[Job]) -> None:
        runs.update(j.id for j in batch)
        if any(j.data.get("poison") for j in batch):
            raise RuntimeError(UNDECODABLE)

    poison, others = await _drain_with_poison(
        pool, backend, schema, pctx, locked=locked, batch_size=batch_size, handler=handler
    )
    failed = await row(pctx, poison)
    assert (failed["state"], failed["retry_count"]) == ("failed", 1)
    assert failed["output"]["name"] == "RuntimeError"
    assert failed["output"]["message"] == "cannot open caf\\udce9.txt"
    assert runs[poison] == 2
    lost = [{"poison": True}]
    for other in others:  # a batch-mate of the poison job fails with it, as a batch does
        assert runs[other] <= 2
        mate = await row(pctx, other)
        assert mate["state"] in ("completed", "failed")
        if mate["state"] == "failed":
            lost.append(mate["data"])
    letters = await pctx.db.execute(
        f"SELECT data, source_retry_count FROM {pctx.q}.job WHERE name = 'dlq'"
    )
    assert sorted(map(str, lost)) == sorted(str(r["data"]) for r in letters)
    assert {r["source_retry_count"] for r in letters} == {1}


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("locked", [True, False], ids=["locked", "fetched"])
async def test_an_output_the_database_refuses_fails_the_job_not_the_queue(
    pool: Any, backend: Backend, schema: str, pctx: Context, locked: bool
) -> None:
    """Whatever the database refuses of how a job ended (here an output a constraint
    of the test's own forbids, checked only by the server), the job fails with why
    (or a plain message when why is refused too), retries, fails and is dead-lettered,
    through a locked claim as through fetch; the other jobs are completed."""
    needs_locked_claims(pctx)  # both ways on one backend, that of the locked claims
    await pctx.db.execute(
        f"ALTER TABLE {pctx.q}.job ADD CONSTRAINT refuse_marked_outputs"
        " CHECK (output IS NULL OR strpos(output::text, 'refuse-me') = 0)"
    )
    runs: Counter[uuid.UUID] = Counter()

    async def handler(batch: list[Job]) -> Any:
        [job] = batch
        runs[job.id] += 1
        return {"note": "refuse-me" if job.data.get("poison") else "fine"}

    poison, others = await _drain_with_poison(
        pool, backend, schema, pctx, locked=locked, batch_size=1, handler=handler
    )
    failed = await row(pctx, poison)
    assert (failed["state"], failed["retry_count"]) == ("failed", 1)
    assert "refuse-me" not in str(failed["output"])
    assert runs[poison] == 2
    assert await count(pctx, "job", "name = 'dlq'") == 1
    for other in others:
        completed = await row(pctx, other)
        assert (completed["state"], completed["output"]) == ("completed", {"note": "fine"})

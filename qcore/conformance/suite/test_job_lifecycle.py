"""A job's life through the verbs of qcore.verbs.jobs and qcore.verbs.queues, on every backend:
send/insert, fetch, complete, cancel/resume, retry, delete, touch, reads, ordering,
transactions, queue management, and bad input that must write nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from qcore.backend import Backend
from qcore.conformance.helpers import count, row, server_now, states, totals
from qcore.context import Context
from qcore.db import Database
from qcore.errors import ConfigError, QueueNotFoundError, ValidationError
from qcore.job import JobState
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("lifecycle")


class Rollback(Exception):
    pass


# --------------------------------------------------------------------------- the basic life


async def test_send_fetch_complete(ctx: Context) -> None:
    await queues.create_queue(ctx, "email")
    sent = await jobs.send(ctx, "email", {"to": "a@example.com"})
    assert isinstance(sent, uuid.UUID)
    stored = await jobs.get_job_by_id(ctx, "email", sent)
    assert stored is not None and stored.state is JobState.CREATED
    assert stored.retry_limit == 2 and stored.expire_in_seconds == 900
    assert stored.policy == "standard" and stored.priority == 0

    [job] = await jobs.fetch(ctx, "email")
    assert (job.id, job.name, job.data, job.retry_count) == (
        sent,
        "email",
        {"to": "a@example.com"},
        0,
    )
    assert job.expire_in_seconds == 900 and job.state is None  # no metadata asked for
    assert await jobs.fetch(ctx, "email") == []

    active = await row(ctx, sent)
    assert active["state"] == "active" and active["started_on"] is not None
    assert active["heartbeat_on"] == active["started_on"]

    result = await jobs.complete(ctx, "email", job, {"sent": True})
    assert (result.requested, result.affected, result.ids) == (1, 1, [sent])
    done = await row(ctx, sent)
    assert done["state"] == "completed" and done["output"] == {"sent": True}
    assert done["completed_on"] >= done["started_on"]
    # completing again does nothing: the job is no longer active
    assert (await jobs.complete(ctx, "email", sent)).affected == 0


async def test_output_is_normalised(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    cases: list[tuple[Any, Any]] = [
        (None, None),
        ({"a": 1}, {"a": 1}),
        ([1, 2], {"value": [1, 2]}),
        ("text", {"value": "text"}),
        (0, {"value": 0}),
        (False, {"value": False}),
    ]
    ids = await jobs.insert(ctx, "q", [{} for _ in cases])
    assert ids is not None
    await jobs.fetch(ctx, "q", batch_size=len(cases))
    for job_id, (output, _) in zip(ids, cases, strict=True):
        await jobs.complete(ctx, "q", job_id, output)
    for job_id, (_, stored) in zip(ids, cases, strict=True):
        assert (await row(ctx, job_id))["output"] == stored


async def test_an_exception_as_output(ctx: Context) -> None:
    await queues.create_queue(ctx, "q", retry_limit=0)
    sent = await jobs.send(ctx, "q")
    assert sent is not None
    await jobs.fetch(ctx, "q")
    try:
        raise RuntimeError("handler broke")
    except RuntimeError as exc:
        await jobs.fail(ctx, "q", sent, exc)
    output = (await row(ctx, sent))["output"]
    assert output["name"] == "RuntimeError" and output["message"] == "handler broke"
    assert "Traceback" in output["stack"]


async def test_complete_include_queued(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    sent = await jobs.send(ctx, "q")
    assert sent is not None
    assert (await jobs.complete(ctx, "q", sent)).affected == 0  # still queued
    assert (await jobs.complete(ctx, "q", sent, include_queued=True)).affected == 1
    assert (await row(ctx, sent))["state"] == "completed"


async def test_ids_as_strings_lists_and_jobs(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    ids = await jobs.insert(ctx, "q", [{"data": i} for i in range(3)])
    assert ids is not None and len(ids) == 3
    fetched = await jobs.fetch(ctx, "q", batch_size=3)
    third = next(j for j in fetched if j.id == ids[2])
    result = await jobs.complete(ctx, "q", [str(ids[0]), ids[1], third, ids[1]])
    assert result.requested == 3 and result.affected == 3
    assert sorted(result.ids) == sorted(ids)
    with pytest.raises(ValidationError, match="UUID"):
        await jobs.complete(ctx, "q", "not-a-uuid")
    with pytest.raises(ValidationError, match="no job ids"):
        await jobs.complete(ctx, "q", [])


async def test_attempt_fence(ctx: Context) -> None:
    """A Job settles only the attempt it was fetched in."""
    await queues.create_queue(ctx, "q", retry_limit=3)
    await jobs.send(ctx, "q")
    [first] = await jobs.fetch(ctx, "q")
    await jobs.fail(ctx, "q", first.id)  # e.g. expired and failed by the monitor
    [second] = await jobs.fetch(ctx, "q", ignore_start_after=True)
    assert second.retry_count == first.retry_count + 1
    assert (await jobs.complete(ctx, "q", first)).affected == 0  # the lapsed attempt
    assert (await jobs.touch(ctx, "q", first)).affected == 0
    assert (await jobs.touch(ctx, "q", second)).affected == 1
    other = await jobs.send(ctx, "q")
    [third] = await jobs.fetch(ctx, "q")
    assert third.id == other
    # one call, mixed: a lapsed attempt, a current one, and a plain id
    mixed = await jobs.touch(ctx, "q", [first, third, second.id])
    assert (mixed.requested, sorted(mixed.ids)) == (2, sorted([second.id, third.id]))
    assert (await jobs.complete(ctx, "q", [first, second, third])).affected == 2


async def test_cancel_resume(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    a = await jobs.send(ctx, "q", start_after=3600)
    b = await jobs.send(ctx, "q")
    assert a is not None and b is not None
    result = await jobs.cancel(ctx, "q", [a, b])
    assert result.affected == 2
    assert (await row(ctx, a))["state"] == "cancelled"
    assert (await row(ctx, a))["completed_on"] is not None
    assert await jobs.fetch(ctx, "q") == []
    before = await server_now(ctx)
    assert (await jobs.resume(ctx, "q", [a, b])).affected == 2
    ra, rb = await row(ctx, a), await row(ctx, b)
    assert ra["state"] == rb["state"] == "created" and ra["completed_on"] is None
    assert ra["start_after"] > before + dt.timedelta(minutes=59)  # a later start is kept
    assert rb["start_after"] >= before - dt.timedelta(seconds=1)  # moved up to now
    [job] = await jobs.fetch(ctx, "q")
    assert job.id == b
    assert (await jobs.resume(ctx, "q", b)).affected == 0  # only cancelled jobs
    assert (await jobs.cancel(ctx, "q", job)).affected == 1  # active jobs can be cancelled


async def test_retry_a_failed_job(ctx: Context) -> None:
    await queues.create_queue(ctx, "q", retry_limit=0)
    sent = await jobs.send(ctx, "q")
    assert sent is not None
    await jobs.fetch(ctx, "q")
    await jobs.fail(ctx, "q", sent, "no")
    failed = await row(ctx, sent)
    assert failed["state"] == "failed" and failed["retry_limit"] == 0
    assert (await jobs.retry(ctx, "q", sent)).affected == 1
    again = await row(ctx, sent)
    assert again["state"] == "retry" and again["retry_limit"] == 1
    assert again["completed_on"] is None
    [job] = await jobs.fetch(ctx, "q")
    assert job.retry_count == 1  # a second attempt
    assert (await jobs.retry(ctx, "q", sent)).affected == 0  # only failed jobs


async def test_delete_job(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    a, b = await jobs.send(ctx, "q"), await jobs.send(ctx, "q")
    assert a is not None and b is not None
    result = await jobs.delete_job(ctx, "q", a)
    assert result.ids == [a]
    assert await count(ctx, "job", "name = $1", "q") == 1
    assert await jobs.get_job_by_id(ctx, "q", a) is None
    assert await jobs.get_job_by_id(ctx, "q", b) is not None


async def test_touch_refreshes_the_heartbeat(ctx: Context) -> None:
    await queues.create_queue(ctx, "q", heartbeat_seconds=30)
    sent = await jobs.send(ctx, "q")
    assert sent is not None
    assert (await jobs.touch(ctx, "q", sent)).affected == 0  # not active yet
    [job] = await jobs.fetch(ctx, "q")
    assert job.heartbeat_seconds == 30
    first = (await row(ctx, sent))["heartbeat_on"]
    await asyncio.sleep(0.01)
    assert (await jobs.touch(ctx, "q", job)).ids == [sent]
    assert (await row(ctx, sent))["heartbeat_on"] > first


# --------------------------------------------------------------------------- inserts


async def test_insert_batch_inherits_from_the_queue(ctx: Context) -> None:
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(
        ctx,
        "q",
        retry_limit=5,
        retry_delay=7,
        retry_backoff=True,
        retry_delay_max=60,
        expire_in_seconds=30,
        retention_seconds=100,
        delete_after_seconds=50,
        heartbeat_seconds=20,
        dead_letter="dlq",
    )
    own = uuid.uuid4()
    ids = await jobs.insert(
        ctx,
        "q",
        [
            {"data": {"n": 1}},
            {
                "data": {"n": 2},
                "id": own,
                "priority": 3,
                "retry_limit": 1,
                "retry_delay": 2,
                "retry_backoff": False,
                "expire_in_seconds": 10,
                "retention_seconds": 200,
                "delete_after_seconds": 0,
                "heartbeat_seconds": 10,
                "singleton_key": "k",
                "group_id": "g",
                "group_tier": "gold",
            },
        ],
    )
    assert ids is not None and len(ids) == 2 and ids[1] == own
    inherited, explicit = await row(ctx, ids[0]), await row(ctx, own)
    assert (
        inherited["retry_limit"],
        inherited["retry_delay"],
        inherited["retry_backoff"],
        inherited["retry_delay_max"],
        inherited["expire_seconds"],
        inherited["deletion_seconds"],
        inherited["heartbeat_seconds"],
        inherited["dead_letter"],
        inherited["priority"],
    ) == (5, 7, True, 60, 30, 50, 20, "dlq", 0)
    assert inherited["keep_until"] - inherited["start_after"] == dt.timedelta(seconds=100)
    assert (
        explicit["retry_limit"],
        explicit["retry_delay"],
        explicit["retry_backoff"],
        explicit["expire_seconds"],
        explicit["deletion_seconds"],
        explicit["heartbeat_seconds"],
        explicit["priority"],
        explicit["singleton_key"],
        explicit["group_id"],
        explicit["group_tier"],
    ) == (1, 2, False, 10, 0, 10, 3, "k", "g", "gold")
    assert explicit["keep_until"] - explicit["start_after"] == dt.timedelta(seconds=200)
    # one statement: its rows are created a microsecond apart, in input order
    assert explicit["created_on"] - inherited["created_on"] == dt.timedelta(microseconds=1)
    assert await jobs.insert(ctx, "q", [{"data": 3}], return_id=False) is None
    assert await count(ctx, "job", "name = $1", "q") == 3


async def test_a_batch_of_payloads_alone_gets_the_rows_options_would(ctx: Context) -> None:
    """Jobs given by ``data`` alone travel as bare payloads (the bulk path); their rows
    are those of the same jobs with an option that changes nothing."""
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(
        ctx, "q", retry_limit=5, retry_backoff=True, retry_delay_max=60, dead_letter="dlq"
    )
    payloads: list[Any] = [{"n": 1}, None, [1, "two"], "text", 0]
    bare = await jobs.insert(ctx, "q", [{"data": p} for p in payloads])
    optioned = await jobs.insert(ctx, "q", [{"data": p, "priority": 0} for p in payloads])
    assert bare is not None and optioned is not None and len(bare) == len(optioned) == 5
    volatile = {"id", "created_on", "start_after", "keep_until"}
    for a, b in zip(bare, optioned, strict=True):
        one, other = await row(ctx, a), await row(ctx, b)
        assert {k: v for k, v in one.items() if k not in volatile} == {
            k: v for k, v in other.items() if k not in volatile
        }
        assert one["keep_until"] - one["start_after"] == other["keep_until"] - other["start_after"]
    # a null payload is SQL NULL on both paths (not the jsonb value null)
    assert await count(ctx, "job", "name = $1 AND data IS NULL", "q") == 2
    created = [(await row(ctx, i))["created_on"] for i in bare]
    assert created == sorted(created) and len(set(created)) == 5


async def test_insert_skips_duplicates_and_keeps_order(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    first = uuid.uuid4()
    await jobs.send(ctx, "q", id=first)
    second = uuid.uuid4()
    ids = await jobs.insert(ctx, "q", [{"id": second}, {"id": first}, {}])
    assert ids is not None and len(ids) == 2 and ids[0] == second
    assert await jobs.send(ctx, "q", id=first) is None  # a duplicate id is dropped


async def test_start_after_forms(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    now = await server_now(ctx)
    later = now + dt.timedelta(hours=1)
    a = await jobs.send(ctx, "q", start_after=later)
    b = await jobs.send(ctx, "q", start_after=120)
    c = await jobs.send(ctx, "q", start_after=dt.timedelta(minutes=3))
    d = await jobs.send(ctx, "q", start_after="2031-02-03T04:05:06Z")
    e = await jobs.send(ctx, "q", start_after="2031-02-03T04:05:06")  # zone-less: UTC
    f = await jobs.send(ctx, "q", start_after="2031-02-03T04:05:06+02:00")
    assert (await row(ctx, a))["start_after"] == later
    for job, seconds in ((b, 120), (c, 180)):
        delay = (await row(ctx, job))["start_after"] - now
        assert dt.timedelta(seconds=seconds - 5) < delay < dt.timedelta(seconds=seconds + 5)
    utc = dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
    assert (await row(ctx, d))["start_after"] == utc
    assert (await row(ctx, e))["start_after"] == utc
    assert (await row(ctx, f))["start_after"] == utc - dt.timedelta(hours=2)
    assert await jobs.fetch(ctx, "q") == []  # nothing is due yet
    got = await jobs.fetch(ctx, "q", batch_size=10, ignore_start_after=True)
    assert len(got) == 6


async def test_send_after_defers_like_start_after(boss: Any) -> None:
    """``send_after(name, data, when, **options)``: each form of ``when`` sets the
    job's start as ``start_after`` would, options still apply, and a bad ``when`` or a
    ``start_after`` option as well is refused before anything is written."""
    ctx = boss.context()
    await boss.create_queue("q")
    now = await server_now(ctx)
    at = now + dt.timedelta(hours=2)
    a = await boss.send_after("q", {"n": 1}, at, priority=3)
    b = await boss.send_after("q", {"n": 2}, 90)
    c = await boss.send_after("q", {"n": 3}, dt.timedelta(minutes=10))
    d = await boss.send_after("q", None, "2031-02-03T04:05:06Z", singleton_key="k")
    first = await row(ctx, a)
    assert first["start_after"] == at and first["priority"] == 3
    for job, seconds in ((b, 90), (c, 600)):
        delay = (await row(ctx, job))["start_after"] - now
        assert dt.timedelta(seconds=seconds - 5) < delay < dt.timedelta(seconds=seconds + 5)
    fourth = await row(ctx, d)
    assert fourth["start_after"] == dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
    assert fourth["singleton_key"] == "k"
    assert await boss.fetch("q") == []  # nothing is due yet
    before = await totals(ctx)
    with pytest.raises(ValidationError, match="ISO 8601"):
        await boss.send_after("q", {}, "next tuesday")
    with pytest.raises(ValidationError, match="naive datetime"):
        await boss.send_after("q", {}, dt.datetime(2031, 1, 1))
    with pytest.raises(ValidationError, match="start_after"):
        await boss.send_after("q", {}, 60, start_after=120)
    assert await totals(ctx) == before


# --------------------------------------------------------------------------- order


async def test_priority_then_age_then_id(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    sent = []
    for priority in (0, 5, 1, 5, -2):
        sent.append(await jobs.send(ctx, "q", {"p": priority}, priority=priority))
    fetched = await jobs.fetch(ctx, "q", batch_size=10)
    assert [j.id for j in fetched] == [sent[1], sent[3], sent[2], sent[0], sent[4]]
    await jobs.cancel(ctx, "q", fetched)
    await jobs.resume(ctx, "q", fetched)
    by_age = await jobs.fetch(ctx, "q", batch_size=10, priority=False)
    assert [j.id for j in by_age] == sent


async def test_an_insert_is_claimed_in_input_order(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    ids = await jobs.insert(ctx, "q", [{"data": i} for i in range(20)])
    assert ids is not None
    claimed = []
    for _ in range(4):
        claimed += [j.id for j in await jobs.fetch(ctx, "q", batch_size=5)]
    assert claimed == ids


async def test_ties_on_created_on_are_claimed_once_each_in_index_order(ctx: Context) -> None:
    """pg-boss's own batch insert gives every row one created_on: the claim then takes
    them as the fetch index holds them (as pg-boss does, so no sort over the tie group),
    each exactly once across fetches, every batch returned sorted by id; a higher
    priority sent later still comes first."""
    await queues.create_queue(ctx, "q")
    rows = await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (id, name, data, policy) SELECT gen_random_uuid(), 'q',"
        " to_jsonb(i), 'standard' FROM generate_series(1, 20) AS i RETURNING id, created_on"
    )
    assert len({r["created_on"] for r in rows}) == 1
    urgent = await jobs.send(ctx, "q", {"urgent": True}, priority=5)
    (first,) = await jobs.fetch(ctx, "q")
    assert first.id == urgent
    claimed: list[uuid.UUID] = []
    for _ in range(4):
        batch = [j.id for j in await jobs.fetch(ctx, "q", batch_size=5)]
        assert batch == sorted(batch)
        claimed += batch
    assert sorted(claimed) == sorted(uuid.UUID(str(r["id"])) for r in rows)
    assert await jobs.fetch(ctx, "q") == []


async def test_order_by_created_on_false_takes_the_highest_priority(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    high = {await jobs.send(ctx, "q", priority=9) for _ in range(3)}
    for _ in range(3):
        await jobs.send(ctx, "q", priority=1)
    got = await jobs.fetch(ctx, "q", batch_size=3, order_by_created_on=False)
    assert {j.id for j in got} == high
    rest = await jobs.fetch(ctx, "q", batch_size=10, priority=False, order_by_created_on=False)
    assert len(rest) == 3 and {j.priority for j in rest} == {1}
    with pytest.raises(ValidationError, match="order_by_created_on must be True or False"):
        await jobs.fetch(ctx, "q", order_by_created_on="yes")  # type: ignore[arg-type]


async def test_fetch_notices_a_queue_recreated_with_another_policy(ctx: Context) -> None:
    """The fetch statement is built for the policy last read; a queue deleted and created
    again elsewhere (another process: no shared memory) is read again."""
    await queues.create_queue(ctx, "q")
    assert await jobs.fetch(ctx, "q") == []  # remembers "standard"
    elsewhere = Context(db=ctx.db, backend=ctx.backend, schema_spec=ctx.schema_spec)
    await queues.delete_queue(elsewhere, "q")
    await queues.create_queue(elsewhere, "q", policy="singleton")
    for _ in range(2):
        await jobs.send(elsewhere, "q", singleton_key="k")
    assert len(await jobs.fetch(ctx, "q", batch_size=10)) == 1  # one per key: singleton
    await queues.delete_queue(elsewhere, "q")
    with pytest.raises(QueueNotFoundError):
        await jobs.fetch(ctx, "q")


@pytest.fixture
def partitioned(backend: Backend) -> Backend:
    if not backend.schema.partitioned:
        pytest.skip(f"{backend.name} keeps every queue in one shared job table")
    return backend


async def test_verbs_follow_a_queue_moved_to_another_table(
    partitioned: Backend, ctx: Context
) -> None:
    """send, insert, fetch and complete go straight to the queue's physical job table,
    as last read. Recreated elsewhere with its own partition, its partition dropped,
    then recreated again: each verb notices, reads the queue again and acts on the
    right table, or says the queue does not exist."""
    await queues.create_queue(ctx, "q")
    await jobs.send(ctx, "q")
    [job] = await jobs.fetch(ctx, "q")
    await jobs.complete(ctx, "q", job)  # every route is now read: job_common
    elsewhere = Context(db=ctx.db, backend=ctx.backend, schema_spec=ctx.schema_spec)
    await queues.delete_queue(elsewhere, "q")
    await queues.create_queue(elsewhere, "q", partition=True)

    sent = await jobs.send(ctx, "q")
    assert sent is not None
    assert await jobs.insert(ctx, "q", [{"data": 1}, {"data": 2}]) is not None
    table = (await queues.get_queue(ctx, "q")).table_name  # type: ignore[union-attr]
    assert table != "job_common"
    assert await count(ctx, table, "name = $1", "q") == 3
    claimed = await jobs.fetch(ctx, "q", batch_size=10)
    assert claimed[0].id == sent and len(claimed) == 3
    assert (await jobs.complete(ctx, "q", claimed)).affected == 3

    await queues.delete_queue(elsewhere, "q")  # its partition is dropped
    for verb in (
        lambda: jobs.send(ctx, "q"),
        lambda: jobs.insert(ctx, "q", [{"data": 1}, {"data": 2}]),
        lambda: jobs.fetch(ctx, "q"),
        lambda: jobs.complete(ctx, "q", claimed),
        lambda: jobs.cancel(ctx, "q", claimed),
        lambda: jobs.touch(ctx, "q", claimed),
        lambda: jobs.delete_job(ctx, "q", sent),
    ):
        with pytest.raises(QueueNotFoundError):
            await verb()
    await queues.create_queue(elsewhere, "q", partition=True)  # the same table name again
    await jobs.fetch(ctx, "q")
    await queues.delete_queue(elsewhere, "q")
    await queues.create_queue(elsewhere, "q", partition=True)
    again = await jobs.send(ctx, "q")  # a table of that name, made anew
    assert again is not None
    assert (await jobs.cancel(ctx, "q", again)).affected == 1
    assert (await jobs.resume(ctx, "q", again)).affected == 1
    assert len(await jobs.fetch(ctx, "q")) == 1
    assert (await jobs.delete_job(ctx, "q", again)).affected == 1


async def test_send_drops_a_policy_conflict_whatever_policy_it_last_saw(ctx: Context) -> None:
    """A send into a queue last seen as standard skips ON CONFLICT; when the queue was
    recreated elsewhere as short (one queued job per key) the conflict still drops the
    job instead of raising, and a duplicate id too."""
    await queues.create_queue(ctx, "q")
    first = await jobs.send(ctx, "q")  # remembers "standard"
    assert first is not None and await jobs.send(ctx, "q", id=first) is None
    elsewhere = Context(db=ctx.db, backend=ctx.backend, schema_spec=ctx.schema_spec)
    await queues.delete_queue(elsewhere, "q")
    await queues.create_queue(elsewhere, "q", policy="short")
    assert await jobs.send(elsewhere, "q", singleton_key="k") is not None
    assert await jobs.send(ctx, "q", singleton_key="k") is None
    assert await count(ctx, "job", "name = $1", "q") == 1


async def test_priority_bounds(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    for p in range(5):
        await jobs.send(ctx, "q", priority=p)
    mid = await jobs.fetch(ctx, "q", batch_size=10, min_priority=1, max_priority=3)
    assert sorted(j.priority or 0 for j in mid) == [1, 2, 3]
    assert [j.priority for j in await jobs.fetch(ctx, "q", batch_size=10, max_priority=0)] == [0]
    with pytest.raises(ValidationError, match="min_priority"):
        await jobs.fetch(ctx, "q", min_priority=3, max_priority=1)


async def test_fetch_with_metadata(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    sent = await jobs.send(ctx, "q", {"a": 1}, singleton_key="k", priority=2)
    [job] = await jobs.fetch(ctx, "q", include_metadata=True)
    assert job.id == sent and job.state is JobState.ACTIVE and job.singleton_key == "k"
    assert job.started_on is not None and job.keep_until is not None and job.priority == 2
    assert job.policy == "standard" and job.retry_limit == 2


@pytest.mark.parametrize("metadata", [False, True])
async def test_fetched_data_is_decoded_when_read(ctx: Context, metadata: bool) -> None:
    """A claim sends each payload as JSON text; the job decodes it on first read, to the
    value a read by id gives (JSON null and SQL NULL alike), and then keeps it."""
    await queues.create_queue(ctx, "q")
    payloads: list[Any] = [{"a": [1, 2.5, "é"], "b": None}, [1, "x"], "text", 7, None]
    ids = [await jobs.send(ctx, "q", p) for p in payloads]
    await ctx.db.execute(f"UPDATE {ctx.q}.job SET data = NULL WHERE id = $1", [ids[-1]])
    claimed = await jobs.fetch(ctx, "q", batch_size=10, include_metadata=metadata)
    assert [j.id for j in claimed] == ids
    assert all("data" not in vars(j) for j in claimed)  # nothing decoded yet
    for job, payload in zip(claimed, payloads, strict=True):
        assert job.data == payload and job.data is job.data
        stored = await jobs.get_job_by_id(ctx, "q", job.id)
        assert stored is not None and stored.data == job.data
    later = dataclasses.replace(claimed[0], retry_count=5)
    assert later.data == payloads[0] and dataclasses.asdict(later)["data"] == payloads[0]
    with pytest.raises(AttributeError):
        _ = claimed[0].no_such_field


# --------------------------------------------------------------------------- reads


async def test_find_jobs(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    a = await jobs.send(ctx, "q", {"kind": "x", "n": 1}, singleton_key="k1")
    b = await jobs.send(ctx, "q", {"kind": "y", "n": 2}, singleton_key="k2")
    c = await jobs.send(ctx, "q", {"kind": "x", "n": 3})
    assert [j.id for j in await jobs.find_jobs(ctx, "q")] == [a, b, c]
    assert [j.id for j in await jobs.find_jobs(ctx, "q", id=b)] == [b]
    assert [j.id for j in await jobs.find_jobs(ctx, "q", key="k1")] == [a]
    assert [j.id for j in await jobs.find_jobs(ctx, "q", data={"kind": "x"})] == [a, c]
    await jobs.fetch(ctx, "q")
    assert [j.id for j in await jobs.find_jobs(ctx, "q", queued=True)] == [b, c]
    found = (await jobs.find_jobs(ctx, "q", id=a))[0]
    assert found.state is JobState.ACTIVE and found.data == {"kind": "x", "n": 1}
    assert await jobs.find_jobs(ctx, "q", key="nope") == []


# --------------------------------------------------------------------------- transactions


async def test_send_in_a_transaction_that_rolls_back(ctx: Context, db: Database) -> None:
    await queues.create_queue(ctx, "q")
    with pytest.raises(Rollback):
        async with db.transaction() as tx:
            inner = ctx.with_db(tx)
            sent = await jobs.send(inner, "q", {"n": 1})
            assert sent is not None
            assert await jobs.get_job_by_id(inner, "q", sent) is not None  # visible inside
            raise Rollback
    assert await count(ctx, "job") == 0


async def test_send_in_a_transaction_that_commits(ctx: Context, db: Database) -> None:
    await queues.create_queue(ctx, "q")
    async with db.transaction() as tx:
        inner = ctx.with_db(tx)
        sent = await jobs.send(inner, "q", {"n": 1})
        await jobs.insert(inner, "q", [{"data": 2}, {"data": 3}])
        await tx.execute(f"CREATE TABLE {ctx.q}.side (n int)")  # the caller's own work
    assert await count(ctx, "job") == 3
    assert sent is not None and await jobs.get_job_by_id(ctx, "q", sent) is not None


async def test_fetch_and_complete_in_a_transaction(ctx: Context, db: Database) -> None:
    await queues.create_queue(ctx, "q")
    sent = await jobs.send(ctx, "q")
    with pytest.raises(Rollback):
        async with db.transaction() as tx:
            inner = ctx.with_db(tx)
            [job] = await jobs.fetch(inner, "q")
            await jobs.complete(inner, "q", job)
            raise Rollback
    assert (await row(ctx, sent))["state"] == "created"  # the claim was rolled back too


# --------------------------------------------------------------------------- queues


async def test_queue_settings_and_defaults(ctx: Context) -> None:
    await queues.create_queue(ctx, "plain")
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(
        ctx,
        "custom",
        policy="short",
        retry_limit=4,
        retry_delay=3,
        retry_backoff=True,
        retry_delay_max=30,
        expire_in_seconds=60,
        retention_seconds=600,
        delete_after_seconds=0,
        warning_queue_size=50,
        dead_letter="dlq",
        heartbeat_seconds=15,
    )
    plain = await queues.get_queue(ctx, "plain")
    assert plain is not None
    assert (plain.policy, plain.retry_limit, plain.retry_delay, plain.retry_backoff) == (
        "standard",
        2,
        0,
        False,
    )
    assert (plain.expire_in_seconds, plain.retention_seconds, plain.delete_after_seconds) == (
        900,
        1_209_600,
        604_800,
    )
    assert plain.dead_letter is None and plain.heartbeat_seconds is None
    custom = await queues.get_queue(ctx, "custom")
    assert custom is not None
    assert (custom.policy, custom.retry_limit, custom.retry_delay_max, custom.dead_letter) == (
        "short",
        4,
        30,
        "dlq",
    )
    assert (custom.delete_after_seconds, custom.warning_queue_size, custom.heartbeat_seconds) == (
        0,
        50,
        15,
    )
    expected_table = "job_common" if ctx.backend.schema.partitioned else "job"
    assert custom.table_name == expected_table and custom.partition is False
    assert [q.name for q in await queues.get_queues(ctx)] == ["custom", "dlq", "plain"]
    assert [q.name for q in await queues.get_queues(ctx, ["plain", "nope"])] == ["plain"]
    assert await queues.get_queue(ctx, "nope") is None
    # creating again changes nothing
    await queues.create_queue(ctx, "plain", retry_limit=9)
    assert (await queues.get_queue(ctx, "plain")).retry_limit == 2  # type: ignore[union-attr]


async def test_update_queue(ctx: Context) -> None:
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "q", retry_backoff=True, retry_delay_max=10, dead_letter="dlq")
    old = await jobs.send(ctx, "q")
    await queues.update_queue(ctx, "q", retry_limit=7, expire_in_seconds=45, notify=True)
    q = await queues.get_queue(ctx, "q")
    assert q is not None and (q.retry_limit, q.expire_in_seconds, q.notify) == (7, 45, True)
    assert q.retry_delay_max == 10 and q.dead_letter == "dlq"  # untouched
    assert q.updated_on >= q.created_on
    await queues.update_queue(ctx, "q", retry_delay_max=None, dead_letter=None, policy="standard")
    q = await queues.get_queue(ctx, "q")
    assert q is not None and q.retry_delay_max is None and q.dead_letter is None
    assert (await row(ctx, old))["retry_limit"] == 2  # existing jobs keep their settings
    new = await jobs.send(ctx, "q")
    assert (await row(ctx, new))["retry_limit"] == 7


async def test_partitioned_queue(ctx: Context) -> None:
    if not ctx.backend.schema.partitioned:
        with pytest.raises(ConfigError, match=ctx.backend.name):
            await queues.create_queue(ctx, "own", partition=True)
        assert await count(ctx, "queue") == 0
        return
    await queues.create_queue(ctx, "own", partition=True, policy="singleton")
    own = await queues.get_queue(ctx, "own")
    assert own is not None and own.partition and own.table_name.startswith("j")
    sent = await jobs.send(ctx, "own", {"a": 1})
    [job] = await jobs.fetch(ctx, "own")
    assert job.id == sent
    rows = await ctx.db.execute(f"SELECT count(*)::int AS n FROM {ctx.q}.{own.table_name}")
    assert rows[0]["n"] == 1
    await jobs.complete(ctx, "own", job)
    await queues.delete_queue(ctx, "own")
    assert await queues.get_queue(ctx, "own") is None
    gone = await ctx.db.execute(
        "SELECT to_regclass($1::text) IS NULL AS gone", [f"{ctx.q}.{own.table_name}"]
    )
    assert gone[0]["gone"]


async def test_delete_queue(ctx: Context) -> None:
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "q", dead_letter="dlq")
    await queues.create_queue(ctx, "other")
    await jobs.insert(ctx, "q", [{"data": i} for i in range(5)])
    await jobs.send(ctx, "other")
    with pytest.raises(ValidationError, match="dead letter queue of 'q'"):
        await queues.delete_queue(ctx, "dlq")
    await queues.delete_queue(ctx, "q")
    assert await queues.get_queue(ctx, "q") is None
    assert await count(ctx, "job", "name = $1", "q") == 0
    assert await count(ctx, "job", "name = $1", "other") == 1
    await queues.delete_queue(ctx, "dlq")  # no longer used
    await queues.delete_queue(ctx, "never-existed")  # a no-op
    with pytest.raises(QueueNotFoundError):
        await jobs.send(ctx, "q")


async def test_bulk_deletes(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    await queues.create_queue(ctx, "other")
    await jobs.insert(ctx, "q", [{"data": i} for i in range(6)])
    await jobs.send(ctx, "other")
    fetched = await jobs.fetch(ctx, "q", batch_size=4)
    await jobs.complete(ctx, "q", fetched[:2])
    await jobs.cancel(ctx, "q", fetched[2])
    # now: 2 completed, 1 cancelled, 1 active, 2 created
    assert await queues.delete_queued_jobs(ctx, "q") == 2
    assert await states(ctx, "q") == {"active": 1, "cancelled": 1, "completed": 2}
    assert await queues.delete_stored_jobs(ctx, "q") == 3
    assert await states(ctx, "q") == {"active": 1}
    assert await queues.delete_all_jobs(ctx, "q") == 1
    assert await count(ctx, "job", "name = $1", "q") == 0
    assert await count(ctx, "job", "name = $1", "other") == 1
    assert await queues.delete_all_jobs(ctx) is None
    assert await count(ctx, "job") == 0
    with pytest.raises(QueueNotFoundError):
        await queues.delete_queued_jobs(ctx, "nope")


# --------------------------------------------------------------------------- notify


@pytest.mark.requires("listen_notify")
async def test_send_notifies_a_ready_job(ctx: Context, db: Database) -> None:
    from qcore.sql.locks import notify_channel

    await queues.create_queue(ctx, "loud", notify=True)
    await queues.create_queue(ctx, "quiet")
    got: asyncio.Queue[str] = asyncio.Queue()
    listener = await db.listen(notify_channel(ctx.schema_spec), lambda _c, p: got.put_nowait(p))
    try:
        await jobs.send(ctx, "quiet")
        await jobs.send(ctx, "loud", start_after=600)  # not ready now: no notification
        await jobs.send(ctx, "loud")
        assert await asyncio.wait_for(got.get(), 10) == "loud"
        await asyncio.sleep(0.2)
        assert got.empty()
    finally:
        await listener.close()


# --------------------------------------------------------------------------- bad input


async def test_unknown_queue_writes_nothing(ctx: Context) -> None:
    await queues.create_queue(ctx, "real")
    sent = await jobs.send(ctx, "real")
    assert sent is not None
    before = await totals(ctx)
    some = uuid.uuid4()
    calls = [
        jobs.send(ctx, "ghost", {"a": 1}),
        jobs.insert(ctx, "ghost", [{"data": 1}]),
        jobs.insert(ctx, "ghost", [{"data": 1}, {"data": 2}]),
        jobs.fetch(ctx, "ghost"),
        jobs.complete(ctx, "ghost", sent),
        jobs.fail(ctx, "ghost", sent),
        jobs.cancel(ctx, "ghost", sent),
        jobs.resume(ctx, "ghost", sent),
        jobs.retry(ctx, "ghost", sent),
        jobs.delete_job(ctx, "ghost", sent),
        jobs.touch(ctx, "ghost", some),
        jobs.get_job_by_id(ctx, "ghost", some),
        jobs.find_jobs(ctx, "ghost"),
        queues.get_blocked_keys(ctx, "ghost"),
        queues.delete_all_jobs(ctx, "ghost"),
        queues.update_queue(ctx, "ghost", retry_limit=1),
        jobs.send(ctx, "real", dead_letter="ghost"),
        queues.create_queue(ctx, "new", dead_letter="ghost"),
    ]
    for call in calls:
        with pytest.raises(QueueNotFoundError, match="ghost"):
            await call
    assert await totals(ctx) == before
    assert (await row(ctx, sent))["state"] == "created"


async def test_bad_input_writes_nothing(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    await queues.create_queue(ctx, "fifo", policy="key_strict_fifo")
    before = await totals(ctx)
    bad: list[tuple[Any, str]] = [
        (queues.create_queue(ctx, "bad name!"), "contains ' '"),
        (queues.create_queue(ctx, ""), "empty"),
        (queues.create_queue(ctx, "x" * 300), "limit is 255"),
        (queues.create_queue(ctx, "p", policy="fifo"), "policy must be one of"),
        (queues.create_queue(ctx, "n", retry_limit=-1), "retry_limit"),
        (queues.create_queue(ctx, "n", expire_in_seconds=0), "expire_in_seconds"),
        (queues.create_queue(ctx, "n", expire_in_seconds=86_401), "expire_in_seconds"),
        (queues.create_queue(ctx, "n", heartbeat_seconds=5), "heartbeat_seconds"),
        (queues.create_queue(ctx, "n", retention_seconds=0), "retention_seconds"),
        (queues.create_queue(ctx, "n", retry_delay_max=5), "retry_backoff=True"),
        (queues.create_queue(ctx, "n", dead_letter="n"), "its own dead letter"),
        (jobs.send(ctx, "a b"), "contains ' '"),
        (jobs.send(ctx, "q", {"x": float("nan")}), "JSON"),
        (jobs.send(ctx, "q", {"x": object()}), "JSON"),
        (jobs.send(ctx, "q", {1: {2, 3}}), "JSON"),
        (jobs.send(ctx, "q", priority=1.5), "priority"),  # type: ignore[arg-type]
        (jobs.send(ctx, "q", priority=2**31), "priority"),
        (jobs.send(ctx, "q", retry_delay=-1), "retry_delay"),
        (jobs.send(ctx, "q", retry_limit=True), "retry_limit"),
        (jobs.send(ctx, "q", start_after=-5), "start_after"),
        (jobs.send(ctx, "q", start_after=dt.datetime(2030, 1, 1)), "naive"),
        (jobs.send(ctx, "q", start_after="tomorrow"), "ISO 8601"),
        (jobs.send(ctx, "q", singleton_seconds=0), "singleton_seconds"),
        (jobs.send(ctx, "q", group_tier="gold"), "group_id"),
        (jobs.send(ctx, "fifo", {"no": "key"}), "key_strict_fifo"),
        (jobs.insert(ctx, "q", [{"data": 1}, {"bogus": 1}]), "jobs\\[1\\]: unknown job option"),
        (jobs.insert(ctx, "fifo", [{"singleton_key": "k"}, {}]), "key_strict_fifo"),
        (jobs.insert(ctx, "fifo", [{"data": 1}, {"data": 2}]), "key_strict_fifo"),
        (jobs.insert(ctx, "q", [{"data": 1}, {"data": float("nan")}]), "jobs\\[1\\]: data must"),
        (jobs.insert(ctx, "q", [{"data": "a"}, {"data": {"k": "\x00"}}]), "jobs\\[1\\]: data con"),
        (jobs.fetch(ctx, "q", batch_size=0), "batch_size"),
        (queues.update_queue(ctx, "q", policy="short"), "cannot change"),
        (queues.update_queue(ctx, "q", partition=True), "cannot change"),
        (queues.update_queue(ctx, "q", retry_limit=None), "cannot be cleared"),  # type: ignore[arg-type]
    ]
    for call, message in bad:
        with pytest.raises(ValidationError, match=message):
            await call
    assert await totals(ctx) == before
    q = await queues.get_queue(ctx, "q")
    assert q is not None and q.policy == "standard"


async def test_the_context_is_a_value(ctx: Context) -> None:
    """with_db keeps the backend and schema (the transactional tests rely on it)."""
    other = ctx.with_db(ctx.db)
    assert (other.backend, other.schema, other.q) == (ctx.backend, ctx.schema, ctx.q)

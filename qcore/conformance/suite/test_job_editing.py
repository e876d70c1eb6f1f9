"""Editing queued jobs (update, upsert) and moving jobs out of a dead letter queue
(redrive): what changes and what is kept, what is refused before anything is written,
concurrent upserts of one key agreeing on one job, and redrive's conflicts. Every test
runs on the backend's own strategies and again with CockroachDB's split statements."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from qcore.conformance.helpers import count, row, server_now, totals
from qcore.context import Context
from qcore.db import Json
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.job import RedrivePreview
from qcore.sql import jobs as sql
from qcore.sql.locks import notify_channel
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("editing")

SLACK = dt.timedelta(seconds=5)


async def _dead(ctx: Context, source: str, dlq: str, data: Any, **options: Any) -> uuid.UUID:
    """A job of ``source`` failed for good: its copy's id in ``dlq``."""
    sent = await jobs.send(ctx, source, data, retry_limit=0, **options)
    [job] = await jobs.fetch(ctx, source)
    assert job.id == sent
    await jobs.fail(ctx, source, job, {"why": "broken"})
    [copy] = [j for j in await jobs.find_jobs(ctx, dlq) if j.source_id == sent]
    return copy.id


# -- update --------------------------------------------------------------------------------


async def test_update_by_id_changes_only_what_is_given(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=3)
    sent = await jobs.send(sctx, "q", {"v": 1}, priority=2, start_after=3600)
    before = await row(sctx, sent)
    result = await jobs.update(sctx, "q", {"v": 2}, id=sent, retry_limit=7)
    assert (result.ids, result.updated, result.inserted) == ([sent], 1, 0)
    after = await row(sctx, sent)
    assert after["data"] == {"v": 2} and after["retry_limit"] == 7
    for kept in ("priority", "start_after", "keep_until", "expire_seconds", "state"):
        assert after[kept] == before[kept], kept
    # data left out is kept
    await jobs.update(sctx, "q", id=sent, priority=9)
    after = await row(sctx, sent)
    assert after["data"] == {"v": 2} and after["priority"] == 9


async def test_update_start_after_moves_the_retention_with_it(sctx: Context) -> None:
    await queues.create_queue(sctx, "q")
    sent = await jobs.send(sctx, "q", start_after=3600, retention_seconds=600)
    before = await row(sctx, sent)
    window = before["keep_until"] - before["start_after"]
    await jobs.update(sctx, "q", id=sent, start_after=0)  # pulled forward to now
    now = await server_now(sctx)
    after = await row(sctx, sent)
    assert abs(after["start_after"] - now) < SLACK
    assert after["keep_until"] - after["start_after"] == window
    [job] = await jobs.fetch(sctx, "q")  # ready now
    assert job.id == sent
    # a new retention counts from the (new) start
    other = await jobs.send(sctx, "q", start_after=60)
    when = dt.datetime(2031, 5, 1, 12, tzinfo=dt.timezone.utc)
    await jobs.update(sctx, "q", id=other, start_after=when, retention_seconds=120)
    edited = await row(sctx, other)
    assert edited["start_after"] == when
    assert edited["keep_until"] == when + dt.timedelta(seconds=120)


async def test_update_by_key_newest_oldest_all(sctx: Context) -> None:
    await queues.create_queue(sctx, "q")
    first = await jobs.send(sctx, "q", {"n": 1}, singleton_key="k")
    second = await jobs.send(sctx, "q", {"n": 2}, singleton_key="k")
    other = await jobs.send(sctx, "q", {"n": 3}, singleton_key="other")
    assert (await jobs.update(sctx, "q", {"n": 20}, singleton_key="k")).ids == [second]
    assert (await jobs.update(sctx, "q", {"n": 10}, singleton_key="k", match="oldest")).ids == [
        first
    ]
    assert (await row(sctx, first))["data"] == {"n": 10}
    assert (await row(sctx, second))["data"] == {"n": 20}
    result = await jobs.update(sctx, "q", {"n": 0}, singleton_key="k", match="all")
    assert set(result.ids) == {first, second} and result.updated == 2
    assert (await row(sctx, other))["data"] == {"n": 3}


async def test_update_leaves_active_and_finished_jobs_alone(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=1)
    active = await jobs.send(sctx, "q", {"v": "active"})
    [job] = await jobs.fetch(sctx, "q")
    assert (await jobs.update(sctx, "q", {"v": "x"}, id=active)).updated == 0
    await jobs.fail(sctx, "q", job)  # a retry job is queued, and may be edited
    assert (await jobs.update(sctx, "q", {"v": "retry"}, id=active)).ids == [active]
    assert (await row(sctx, active))["state"] == "retry"
    done = await jobs.send(sctx, "q")
    assert done is not None
    await jobs.complete(sctx, "q", done, include_queued=True)
    assert (await jobs.update(sctx, "q", {"v": "x"}, id=done)).ids == []
    assert (await row(sctx, done))["data"] is None
    assert (await jobs.update(sctx, "q", {"v": "x"}, id=uuid.uuid4())).ids == []


async def test_update_refuses_bad_input_before_writing(sctx: Context) -> None:
    await queues.create_queue(sctx, "q")
    sent = await jobs.send(sctx, "q", {"v": 1}, singleton_key="k")
    before = await totals(sctx), await row(sctx, sent)
    bad: list[tuple[dict[str, Any], str]] = [
        ({}, "exactly one of id or singleton_key"),
        ({"id": sent, "singleton_key": "k"}, "exactly one of id or singleton_key"),
        ({"id": sent, "match": "all"}, "match is for a singleton_key"),
        ({"singleton_key": "k", "match": "latest"}, "match must be one of newest, oldest, all"),
        ({"singleton_key": ""}, "singleton_key must be a non-empty string"),
        ({"id": "nope"}, "not a job id|UUID|uuid"),
        ({"id": sent, "priority": "high"}, "priority"),
        ({"id": sent, "retry_limit": -1}, "retry_limit"),
        ({"id": sent, "start_after": "tomorrow"}, "ISO 8601"),
        ({"id": sent, "singleton_seconds": 60}, "unknown update option singleton_seconds"),
        ({"id": sent, "group_tier": "gold"}, "group_tier needs group_id"),
    ]
    for options, message in bad:
        with pytest.raises(ValidationError, match=message):
            await jobs.update(sctx, "q", {"v": 2}, **options)
    with pytest.raises(ValidationError, match="nothing to change"):
        await jobs.update(sctx, "q", id=sent)
    with pytest.raises(ValidationError, match="queue name"):
        await jobs.update(sctx, "bad name!", {"v": 2}, id=sent)
    with pytest.raises(QueueNotFoundError):
        await jobs.update(sctx, "nosuch", {"v": 2}, id=sent)
    with pytest.raises(QueueNotFoundError, match="dead letter queue 'nosuch'"):
        await jobs.update(sctx, "q", id=sent, dead_letter="nosuch")
    assert (await totals(sctx), await row(sctx, sent)) == before


async def test_update_wakes_workers_of_a_notify_queue(sctx: Context) -> None:
    if not sctx.backend.capabilities.listen_notify:
        pytest.skip(f"{sctx.backend.name} has no LISTEN/NOTIFY")
    await queues.create_queue(sctx, "q", notify=True)
    sent = await jobs.send(sctx, "q", start_after=3600)
    # the statement update() runs for a job pulled forward: it reports that it notified
    statement = sql.update_jobs(
        sctx.q, frozenset({"start_after_seconds"}), by_key=False, notify=True
    )
    [result] = await sctx.db.execute(
        statement.sql,
        statement.bind(
            queue="q",
            id=sent,
            job=Json({"start_after_seconds": 0}),
            channel=notify_channel(sctx.schema_spec),
        ),
    )
    assert result["id"] == sent and result["notified"] == 1
    # and one for a job pushed further back does not
    later = await jobs.send(sctx, "q", start_after=3600)
    [result] = await sctx.db.execute(
        statement.sql,
        statement.bind(
            queue="q",
            id=later,
            job=Json({"start_after_seconds": 7200}),
            channel=notify_channel(sctx.schema_spec),
        ),
    )
    assert result["id"] == later and result["notified"] == 0


# -- upsert --------------------------------------------------------------------------------


async def test_upsert_inserts_then_updates(sctx: Context) -> None:
    await queues.create_queue(sctx, "q")
    made = await jobs.upsert(sctx, "q", {"v": 1}, singleton_key="k", priority=3)
    assert made.inserted == 1 and made.updated == 0
    [new] = made.ids
    fresh = await row(sctx, new)
    assert fresh["singleton_key"] == "k" and fresh["priority"] == 3 and fresh["upsert_by_key"]
    again = await jobs.upsert(sctx, "q", {"v": 2}, singleton_key="k")
    assert (again.ids, again.updated, again.inserted) == ([new], 1, 0)
    assert (await row(sctx, new))["data"] == {"v": 2}
    assert await count(sctx, "job", "name = 'q'") == 1
    # once that job is taken, the next upsert queues a new one
    await jobs.fetch(sctx, "q")
    third = await jobs.upsert(sctx, "q", {"v": 3}, singleton_key="k")
    assert third.inserted == 1 and third.ids != [new]
    # by id: the job is created with that id
    chosen = uuid.uuid4()
    by_id = await jobs.upsert(sctx, "q", {"v": 4}, id=chosen)
    assert by_id.ids == [chosen] and by_id.inserted == 1
    assert (await jobs.upsert(sctx, "q", {"v": 5}, id=chosen)).updated == 1
    assert (await row(sctx, chosen))["data"] == {"v": 5}


async def test_upsert_on_key_strict_fifo_needs_a_key(sctx: Context) -> None:
    await queues.create_queue(sctx, "fifo", policy="key_strict_fifo")
    before = await totals(sctx)
    with pytest.raises(ValidationError, match="key_strict_fifo"):
        await jobs.upsert(sctx, "fifo", {"v": 1}, id=uuid.uuid4())
    assert await totals(sctx) == before
    made = await jobs.upsert(sctx, "fifo", {"v": 1}, singleton_key="a")
    assert made.inserted == 1


async def test_concurrent_upserts_of_one_key_agree_on_one_job(ctx: Context, pool: Any) -> None:
    """Sixteen callers upsert one key at once, each on its own connection where the
    engine has more than one session: one job is created, every other call edits it."""
    from qcore.context import Context as Ctx

    await queues.create_queue(ctx, "q")
    shared = Ctx(db=pool, backend=ctx.backend, schema_spec=ctx.schema_spec)
    results = await asyncio.gather(
        *(jobs.upsert(shared, "q", {"caller": i}, singleton_key="k") for i in range(16))
    )
    assert sum(r.inserted for r in results) == 1
    assert sum(r.updated for r in results) == 15
    assert len({r.ids[0] for r in results}) == 1
    assert await count(ctx, "job", "name = 'q'") == 1


# -- redrive -------------------------------------------------------------------------------


async def test_redrive_sends_dead_letters_home(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "orders", dead_letter="dlq", retry_limit=4)
    await queues.create_queue(sctx, "other", dead_letter="dlq")
    first = await _dead(sctx, "orders", "dlq", {"n": 1}, priority=5, singleton_key="a")
    second = await _dead(sctx, "orders", "dlq", {"n": 2})
    stranger = await _dead(sctx, "other", "dlq", {"n": 3})
    dead = await row(sctx, first)
    assert await jobs.redrive(sctx, "dlq", source_name="orders") == 2
    assert await count(sctx, "job", "id = ANY($1::uuid[])", [first, second]) == 0
    assert (await row(sctx, stranger))["state"] == "created"  # another source: stays
    back = {j.data["n"]: j for j in await jobs.find_jobs(sctx, "orders", queued=True)}
    assert set(back) == {1, 2}
    moved = await row(sctx, back[1].id)
    assert moved["state"] == "created" and moved["retry_count"] == 0
    assert moved["priority"] == 5 and moved["singleton_key"] == "a"
    assert moved["retry_limit"] == 4 and moved["dead_letter"] == "dlq"  # the queue's, now
    assert moved["source_root_id"] == dead["source_root_id"]  # the chain's first job
    assert moved["output"] is None
    # nothing more to move from orders
    assert await jobs.redrive(sctx, "dlq", source_name="orders") == 0


async def test_redrive_filters_destination_and_limit(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "src", dead_letter="dlq")
    await queues.create_queue(sctx, "elsewhere")
    ids = [
        await _dead(sctx, "src", "dlq", {"n": n, "colour": "red" if n % 2 else "blue"})
        for n in range(5)
    ]
    assert await jobs.redrive(sctx, "dlq", data={"colour": "red"}, destination="elsewhere") == 2
    assert sorted(j.data["n"] for j in await jobs.find_jobs(sctx, "elsewhere")) == [1, 3]
    assert await jobs.redrive(sctx, "dlq", ids=[ids[4]]) == 1
    assert await jobs.redrive(sctx, "dlq", limit=1) == 1  # oldest first: n=0
    assert sorted(j.data["n"] for j in await jobs.find_jobs(sctx, "src", queued=True)) == [0, 4]
    past = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    assert await jobs.redrive(sctx, "dlq", created_before=past) == 0
    assert await jobs.redrive(sctx, "dlq") == 1  # n=2, the last
    assert await count(sctx, "job", "name = 'dlq'") == 0


async def test_redrive_fails_in_place_what_the_destination_refuses(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "single", policy="short", dead_letter="dlq")
    dead = await _dead(sctx, "single", "dlq", {"n": 1}, singleton_key="k")
    waiting = await jobs.send(sctx, "single", {"n": 2}, singleton_key="k")  # holds the key
    assert await jobs.redrive(sctx, "dlq") == 0
    refused = await row(sctx, dead)
    assert refused["state"] == "failed"
    assert refused["output"]["reason"] == "redrive_conflict"
    assert refused["output"]["destination"] == "single"
    assert refused["output"]["singletonKey"] == "k"
    assert (await row(sctx, waiting))["data"] == {"n": 2}
    assert await jobs.redrive(sctx, "dlq") == 0  # failed: no longer a candidate


async def test_redrive_leaves_what_has_nowhere_to_go(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    orphan = await jobs.send(sctx, "dlq", {"n": 1})  # sent straight to it: no source
    assert await jobs.redrive(sctx, "dlq") == 0
    assert (await row(sctx, orphan))["state"] == "created"
    await queues.create_queue(sctx, "home")
    assert await jobs.redrive(sctx, "dlq", destination="home") == 1


async def test_redrive_refuses_bad_input_before_writing(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "src", dead_letter="dlq")
    await _dead(sctx, "src", "dlq", {"n": 1})
    before = await totals(sctx)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"limit": 0}, "limit must be an integer from 1"),
        ({"limit": True}, "limit must be an integer from 1"),
        ({"destination": "bad name!"}, "destination"),
        ({"source_name": ""}, "source_name"),
        ({"data": [1]}, "data must be a mapping"),
        ({"created_before": dt.datetime(2030, 1, 1)}, "aware datetime"),
        ({"ids": []}, "no job ids given"),
        ({"ids": ["nope"]}, "UUID|uuid|job id"),
    ]
    for options, message in bad:
        for verb in (jobs.redrive, jobs.preview_redrive):  # the same mistake, the same error
            with pytest.raises(ValidationError, match=message):
                await verb(sctx, "dlq", **options)
    for verb in (jobs.redrive, jobs.preview_redrive):
        with pytest.raises(QueueNotFoundError):
            await verb(sctx, "nosuch")
    assert await totals(sctx) == before


async def test_a_redrive_preview_tells_what_a_redrive_would_do(sctx: Context) -> None:
    """``preview_redrive`` moves nothing and counts what ``redrive`` with the same
    filters then moves, by destination, and what it leaves (no queue to go to); its
    ``limit`` caps each kind."""
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "a", dead_letter="dlq")
    await queues.create_queue(sctx, "b", dead_letter="dlq")
    await queues.create_queue(sctx, "gone", dead_letter="dlq")
    for n in range(3):
        await _dead(sctx, "a", "dlq", {"n": n, "colour": "red"})
    await _dead(sctx, "b", "dlq", {"n": 3, "colour": "blue"})
    await _dead(sctx, "gone", "dlq", {"n": 4, "colour": "red"})
    await jobs.send(sctx, "dlq", {"n": 5})  # sent straight to it: no source
    await queues.update_queue(sctx, "gone", dead_letter=None)
    await queues.delete_queue(sctx, "gone")  # its dead letters have nowhere to go
    before = await totals(sctx)

    preview = await jobs.preview_redrive(sctx, "dlq")
    assert preview == RedrivePreview(total=6, destinations=[("a", 3), ("b", 1)], unroutable=2)
    assert await totals(sctx) == before  # nothing moved
    red = await jobs.preview_redrive(sctx, "dlq", data={"colour": "red"})
    assert red == RedrivePreview(total=4, destinations=[("a", 3)], unroutable=1)
    capped = await jobs.preview_redrive(sctx, "dlq", limit=1)
    assert capped == RedrivePreview(total=2, destinations=[("a", 1)], unroutable=1)
    into = await jobs.preview_redrive(sctx, "dlq", destination="b")
    assert into == RedrivePreview(total=6, destinations=[("b", 6)], unroutable=0)
    assert await jobs.redrive(sctx, "dlq") == sum(n for _, n in preview.destinations)
    assert await jobs.preview_redrive(sctx, "dlq") == RedrivePreview(2, [], 2)

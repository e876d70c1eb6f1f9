"""fail(): retries with a fixed delay or exponential backoff, the cap, running out of
retries, and the dead letter copy. Every test runs on each backend's own strategies
and, where the backend has the one-statement (CTE) fail, again with the split
statements CockroachDB needs, on the same server."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from qcore.backend import Backend, MutationStrategy
from qcore.conformance.helpers import row, server_now
from qcore.context import Context
from qcore.job import JobState
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("retries")

SLACK = dt.timedelta(milliseconds=50)


async def _fail_timed(
    ctx: Context, name: str, job: Any, output: Any = None
) -> tuple[dt.datetime, dt.datetime]:
    before = await server_now(ctx)
    result = await jobs.fail(ctx, name, job, output)
    after = await server_now(ctx)
    assert result.affected == 1
    return before - SLACK, after + SLACK


async def test_fixed_retry_delay(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=2, retry_delay=5)
    sent = await jobs.send(sctx, "q", {"a": 1})
    [job] = await jobs.fetch(sctx, "q")
    started = (await row(sctx, sent))["started_on"]
    low, high = await _fail_timed(sctx, "q", job, {"why": "first"})
    r = await row(sctx, sent)
    assert r["state"] == "retry" and r["retry_count"] == 0  # counted at the next claim
    assert low + dt.timedelta(seconds=5) <= r["start_after"] <= high + dt.timedelta(seconds=5)
    assert r["completed_on"] is None and r["heartbeat_on"] is None
    assert r["started_on"] == started and r["output"] == {"why": "first"}
    assert r["data"] == {"a": 1} and r["policy"] == "standard"
    assert await jobs.fetch(sctx, "q") == []  # not due for 5 s
    [again] = await jobs.fetch(sctx, "q", ignore_start_after=True)
    assert again.id == sent and again.retry_count == 1


async def test_exponential_backoff(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=10, retry_delay=2, retry_backoff=True)
    sent = await jobs.send(sctx, "q")
    for attempt in range(5):
        [job] = await jobs.fetch(sctx, "q", ignore_start_after=True)
        assert job.retry_count == attempt
        low, high = await _fail_timed(sctx, "q", job)
        start = (await row(sctx, sent))["start_after"]
        shortest = dt.timedelta(seconds=2 * 2**attempt)
        longest = dt.timedelta(seconds=2 * 2 ** (attempt + 1))
        assert low + shortest <= start <= high + longest, (attempt, start - low)


async def test_backoff_cap_and_minimum_delay(sctx: Context) -> None:
    await queues.create_queue(
        sctx, "capped", retry_limit=10, retry_delay=2, retry_backoff=True, retry_delay_max=3
    )
    await queues.create_queue(sctx, "zero", retry_limit=10, retry_backoff=True)
    capped = await jobs.send(sctx, "capped")
    zero = await jobs.send(sctx, "zero")
    for attempt in range(3):
        [job] = await jobs.fetch(sctx, "capped", ignore_start_after=True)
        low, high = await _fail_timed(sctx, "capped", job)
        start = (await row(sctx, capped))["start_after"]
        shortest = min(3, 2 * 2**attempt)
        assert low + dt.timedelta(seconds=shortest) <= start <= high + dt.timedelta(seconds=3)
    # retry_delay 0 with backoff still waits: the base delay is at least one second
    [job] = await jobs.fetch(sctx, "zero")
    low, high = await _fail_timed(sctx, "zero", job)
    start = (await row(sctx, zero))["start_after"]
    assert low + dt.timedelta(seconds=1) <= start <= high + dt.timedelta(seconds=2)
    # a job-level cap of 0 retries at once
    quick = await jobs.send(sctx, "zero", retry_backoff=True, retry_delay=5, retry_delay_max=0)
    [job] = await jobs.fetch(sctx, "zero")
    assert job.id == quick
    low, high = await _fail_timed(sctx, "zero", job)
    assert low <= (await row(sctx, quick))["start_after"] <= high


async def test_out_of_retries_goes_to_the_dead_letter_queue(sctx: Context) -> None:
    await queues.create_queue(
        sctx,
        "dlq",
        retry_limit=7,
        retry_delay=3,
        retry_backoff=True,
        expire_in_seconds=99,
        retention_seconds=55,
        delete_after_seconds=77,
        heartbeat_seconds=12,
    )
    await queues.create_queue(sctx, "q", retry_limit=1, dead_letter="dlq")
    sent = await jobs.send(
        sctx,
        "q",
        {"order": 42},
        priority=4,
        singleton_key="key",
        group_id="g",
        group_tier="t",
        retry_backoff=True,
        retry_delay_max=30,
    )
    assert sent is not None
    [job] = await jobs.fetch(sctx, "q")
    await jobs.fail(sctx, "q", job, "first")
    [job] = await jobs.fetch(sctx, "q", ignore_start_after=True)
    retry_start = (await row(sctx, sent))["start_after"]
    low, high = await _fail_timed(sctx, "q", job, {"final": True})

    failed = await row(sctx, sent)
    assert failed["state"] == "failed" and low <= failed["completed_on"] <= high
    assert failed["retry_count"] == 1 and failed["output"] == {"final": True}
    assert failed["start_after"] == retry_start  # count reached the limit: kept
    assert failed["dead_letter"] == "dlq" and failed["heartbeat_on"] is None
    assert await jobs.fetch(sctx, "q", ignore_start_after=True) == []

    [copy] = await jobs.find_jobs(sctx, "dlq")
    c = await row(sctx, copy.id)
    assert c["id"] != sent and c["state"] == "created" and c["retry_count"] == 0
    assert (c["data"], c["priority"], c["singleton_key"], c["group_id"], c["group_tier"]) == (
        {"order": 42},
        4,
        "key",
        "g",
        "t",
    )
    # the dead letter queue's settings, not the failed job's
    assert (c["retry_limit"], c["retry_delay"], c["retry_backoff"], c["expire_seconds"]) == (
        7,
        3,
        True,
        99,
    )
    assert (c["deletion_seconds"], c["heartbeat_seconds"]) == (77, 12)
    assert c["keep_until"] - c["created_on"] == dt.timedelta(seconds=55)
    assert low <= c["start_after"] == c["created_on"] <= high
    # what pg-boss leaves unset on a copy
    assert c["policy"] is None and c["dead_letter"] is None and c["retry_delay_max"] is None
    assert c["output"] is None and c["singleton_on"] is None
    # provenance
    assert (c["source_name"], c["source_id"], c["source_retry_count"]) == ("q", sent, 1)
    assert c["source_created_on"] == failed["created_on"]
    assert c["source_output"] == {"final": True} and c["source_root_id"] == sent
    # the copy is an ordinary job of the dead letter queue
    [dead] = await jobs.fetch(sctx, "dlq")
    assert dead.id == copy.id and dead.data == {"order": 42}


async def test_dead_letter_of_a_dead_letter_keeps_the_root(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq2")
    await queues.create_queue(sctx, "dlq", retry_limit=0)
    await queues.create_queue(sctx, "q", retry_limit=0, dead_letter="dlq")
    sent = await jobs.send(sctx, "q")
    [job] = await jobs.fetch(sctx, "q")
    await jobs.fail(sctx, "q", job)
    # a redrive of the copy that names its own dead letter queue
    [copy] = await jobs.fetch(sctx, "dlq", include_metadata=True)
    assert copy.source_root_id == sent
    await sctx.db.execute(
        f"UPDATE {sctx.q}.job SET dead_letter = 'dlq2' WHERE id = $1::uuid", [copy.id]
    )
    await jobs.fail(sctx, "dlq", copy)
    [second] = await jobs.find_jobs(sctx, "dlq2")
    assert second.source_id == copy.id and second.source_root_id == sent
    assert second.source_name == "dlq"


async def test_fail_a_mixed_batch(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(sctx, "q", retry_limit=1, dead_letter="dlq")
    ids = await jobs.insert(
        sctx, "q", [{"data": 0}, {"data": 1, "retry_limit": 0}, {"data": 2}, {"data": 3}]
    )
    assert ids is not None
    done = await jobs.fetch(sctx, "q", batch_size=4)
    await jobs.complete(sctx, "q", [j for j in done if j.id == ids[3]])
    result = await jobs.fail(sctx, "q", [*ids, uuid.uuid4()], "all of them")
    assert result.requested == 5 and result.affected == 3  # completed / unknown untouched
    assert sorted(result.ids) == sorted(ids[:3])
    assert (await row(sctx, ids[0]))["state"] == "retry"
    assert (await row(sctx, ids[1]))["state"] == "failed"
    assert (await row(sctx, ids[2]))["state"] == "retry"
    assert (await row(sctx, ids[3]))["state"] == "completed"
    [copy] = await jobs.find_jobs(sctx, "dlq")
    assert copy.source_id == ids[1]


async def test_fail_a_queued_job_and_upsert_flag(sctx: Context) -> None:
    await queues.create_queue(sctx, "q", retry_limit=1, retry_delay=60)
    sent = await jobs.send(sctx, "q")
    assert sent is not None
    await sctx.db.execute(f"UPDATE {sctx.q}.job SET upsert_by_key = true WHERE id = $1", [sent])
    assert (await jobs.fail(sctx, "q", sent)).affected == 1  # queued jobs can fail too
    r = await row(sctx, sent)
    assert r["state"] == "retry" and r["started_on"] is None
    assert r["upsert_by_key"] is None  # not carried over by the re-insert
    [job] = await jobs.fetch(sctx, "q", ignore_start_after=True)
    assert job.retry_count == 0  # never started before: not a retry of a run


async def test_fail_with_a_stately_collision_on_both_paths(sctx: Context) -> None:
    await queues.create_queue(sctx, "dlq")
    await queues.create_queue(
        sctx, "q", policy="stately", retry_limit=3, retry_delay=60, dead_letter="dlq"
    )
    a = await jobs.send(sctx, "q", singleton_key="k")
    [job] = await jobs.fetch(sctx, "q")
    await jobs.fail(sctx, "q", job)
    b = await jobs.send(sctx, "q", singleton_key="k")
    [job] = await jobs.fetch(sctx, "q")
    assert job.id == b
    result = await jobs.fail(sctx, "q", job)
    assert result.ids == [b]
    assert (await row(sctx, a))["state"] == "retry"
    assert (await row(sctx, b))["state"] == "failed"
    assert [j.source_id for j in await jobs.find_jobs(sctx, "dlq")] == [b]


@pytest.fixture
def cte_backend(backend: Backend) -> Backend:
    if backend.mutation is not MutationStrategy.CTE:
        pytest.skip(f"{backend.name} has only the split fail")
    return backend


async def test_both_fail_paths_write_the_same_rows(cte_backend: Backend, ctx: Context) -> None:
    """The split statements store exactly what the one-statement fail stores."""
    split = Context(
        db=ctx.db,
        backend=dataclasses.replace(ctx.backend, mutation=MutationStrategy.SPLIT),
        schema_spec=ctx.schema_spec,
    )
    await queues.create_queue(ctx, "dlq", retry_limit=5, retention_seconds=60)
    await queues.create_queue(ctx, "q", retry_limit=1, retry_delay=30, dead_letter="dlq")
    shapes: dict[str, list[dict[str, Any]]] = {}
    for label, context in (("cte", ctx), ("split", split)):
        sent = await jobs.send(context, "q", {"n": label}, priority=2, singleton_key=label)
        [job] = await jobs.fetch(context, "q")
        await jobs.fail(context, "q", job, {"out": 1})
        retry_row = await row(context, sent)
        [job] = await jobs.fetch(context, "q", ignore_start_after=True)
        await jobs.fail(context, "q", job, {"out": 2})
        failed_row = await row(context, sent)
        [copy] = await jobs.find_jobs(context, "dlq", key=label)
        shapes[label] = [retry_row, failed_row, await row(context, copy.id)]
    volatile = {"id", "data", "singleton_key", "source_id", "source_root_id"}
    times = {c for c in shapes["cte"][0] if c.endswith("_on") or c in ("start_after", "keep_until")}
    for cte_row, split_row in zip(shapes["cte"], shapes["split"], strict=True):
        for column in cte_row:
            if column in volatile or column in times:
                assert (cte_row[column] is None) == (split_row[column] is None), column
            else:
                assert cte_row[column] == split_row[column], column
    assert shapes["split"][1]["state"] == JobState.FAILED.value

"""Queue policies (unique indexes + fetch rules), throttling and debouncing, on every
backend; the policy tests also run on a queue with its own partition where the
backend's schema has partitions."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from qcore.backend import Backend
from qcore.conformance.helpers import count, row, totals
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("policies")


@pytest.fixture(params=[False, True], ids=["shared", "partition"])
def partition(request: pytest.FixtureRequest, backend: Backend) -> bool:
    """Whether the test's queue gets its own partition (listed before ``ctx`` in a test's
    arguments, so the skip comes before the schema is installed)."""
    if request.param and not backend.schema.partitioned:
        pytest.skip(f"{backend.name} keeps every queue in one shared job table")
    return bool(request.param)


async def test_short(partition: bool, ctx: Context) -> None:
    await queues.create_queue(ctx, "q", policy="short", partition=partition)
    first = await jobs.send(ctx, "q", singleton_key="k")
    assert first is not None
    assert await jobs.send(ctx, "q", singleton_key="k") is None  # one queued per key
    assert await jobs.send(ctx, "q", singleton_key="other") is not None
    assert await jobs.send(ctx, "q") is not None
    assert await jobs.send(ctx, "q") is None  # no key counts as the key ''
    [job] = await jobs.fetch(ctx, "q", batch_size=1)
    assert job.id == first
    assert await jobs.send(ctx, "q", singleton_key="k") is not None  # k is active now


async def test_singleton(partition: bool, ctx: Context) -> None:
    await queues.create_queue(ctx, "q", policy="singleton", partition=partition)
    a1 = await jobs.send(ctx, "q", {"n": 1}, singleton_key="a")
    a2 = await jobs.send(ctx, "q", {"n": 2}, singleton_key="a")
    b1 = await jobs.send(ctx, "q", {"n": 3}, singleton_key="b")
    assert None not in (a1, a2, b1)  # any number may wait
    first = await jobs.fetch(ctx, "q", batch_size=10)
    assert sorted(j.data["n"] for j in first) == [1, 3]  # one per key per batch
    assert await jobs.fetch(ctx, "q", batch_size=10) == []  # a's job is active
    await jobs.complete(ctx, "q", [j for j in first if j.id == a1])
    [second] = await jobs.fetch(ctx, "q", batch_size=10)
    assert second.id == a2


async def test_stately(partition: bool, ctx: Context) -> None:
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(
        ctx,
        "q",
        policy="stately",
        retry_limit=2,
        retry_delay=60,
        dead_letter="dlq",
        partition=partition,
    )
    a = await jobs.send(ctx, "q", singleton_key="k")
    assert a is not None
    assert await jobs.send(ctx, "q", singleton_key="k") is None  # one created per key
    [job_a] = await jobs.fetch(ctx, "q")
    b = await jobs.send(ctx, "q", singleton_key="k")  # created again: a is active
    assert b is not None
    assert await jobs.fetch(ctx, "q") == []  # b waits while a is active
    await jobs.fail(ctx, "q", job_a, "a broke")
    assert (await row(ctx, a))["state"] == "retry"  # not due for 60 s
    [job_b] = await jobs.fetch(ctx, "q")
    assert job_b.id == b
    before = await row(ctx, b)
    result = await jobs.fail(ctx, "q", job_b, "b broke")
    assert result.ids == [b]
    # a retry of k exists already, so b's retry is diverted to failed
    failed = await row(ctx, b)
    assert failed["state"] == "failed" and failed["completed_on"] is not None
    assert failed["start_after"] == before["start_after"]  # kept as it was
    assert failed["output"] == {"value": "b broke"} and failed["retry_count"] == 0
    [copy] = await jobs.find_jobs(ctx, "dlq")
    assert copy.source_id == b and copy.source_output == {"value": "b broke"}


async def test_exclusive(partition: bool, ctx: Context) -> None:
    await queues.create_queue(
        ctx, "q", policy="exclusive", retry_limit=1, retry_delay=60, partition=partition
    )
    first = await jobs.send(ctx, "q", singleton_key="k")
    assert first is not None
    assert await jobs.send(ctx, "q", singleton_key="k") is None
    [job] = await jobs.fetch(ctx, "q")
    assert await jobs.send(ctx, "q", singleton_key="k") is None  # active counts
    await jobs.fail(ctx, "q", job)
    assert (await row(ctx, first))["state"] == "retry"
    assert await jobs.send(ctx, "q", singleton_key="k") is None  # retry counts
    await jobs.cancel(ctx, "q", first)
    assert await jobs.send(ctx, "q", singleton_key="k") is not None


async def test_key_strict_fifo(partition: bool, ctx: Context) -> None:
    await queues.create_queue(
        ctx, "q", policy="key_strict_fifo", retry_limit=1, retry_delay=60, partition=partition
    )
    before = await totals(ctx)
    with pytest.raises(ValidationError, match="singleton_key"):
        await jobs.send(ctx, "q", {"no": "key"})
    assert await totals(ctx) == before
    k1 = [await jobs.send(ctx, "q", {"k1": i}, singleton_key="k1") for i in range(3)]
    k2 = await jobs.send(ctx, "q", {"k2": 0}, singleton_key="k2", priority=-1)
    heads = await jobs.fetch(ctx, "q", batch_size=10)
    assert [j.id for j in heads] == [k1[0], k2]  # the head of each key only
    assert await jobs.fetch(ctx, "q", batch_size=10) == []  # both keys have one active
    await jobs.complete(ctx, "q", heads)
    [second] = await jobs.fetch(ctx, "q", batch_size=10)
    assert second.id == k1[1]
    # a retry that is not due yet holds its key: k1[2] waits
    await jobs.fail(ctx, "q", second, "first try")
    assert (await row(ctx, k1[1]))["state"] == "retry"
    assert await jobs.fetch(ctx, "q", batch_size=10) == []
    assert await queues.get_blocked_keys(ctx, "q") == []
    [retried] = await jobs.fetch(ctx, "q", batch_size=10, ignore_start_after=True)
    assert retried.id == k1[1] and retried.retry_count == 1  # the retry heads its key
    # out of retries: failed, and the key is blocked until it is retried or deleted
    await jobs.fail(ctx, "q", retried, "second try")
    assert (await row(ctx, k1[1]))["state"] == "failed"
    assert await queues.get_blocked_keys(ctx, "q") == ["k1"]
    k3 = await jobs.send(ctx, "q", singleton_key="k3")
    assert [j.id for j in await jobs.fetch(ctx, "q", batch_size=10)] == [k3]
    await jobs.delete_job(ctx, "q", k1[1])
    assert await queues.get_blocked_keys(ctx, "q") == []
    [last] = await jobs.fetch(ctx, "q", batch_size=10)
    assert last.id == k1[2]


async def test_key_strict_fifo_retry_unblocks(ctx: Context) -> None:
    await queues.create_queue(ctx, "q", policy="key_strict_fifo", retry_limit=0)
    a = await jobs.send(ctx, "q", singleton_key="k")
    b = await jobs.send(ctx, "q", singleton_key="k")
    assert a is not None and b is not None
    [job] = await jobs.fetch(ctx, "q")
    await jobs.fail(ctx, "q", job)
    assert await jobs.fetch(ctx, "q") == []
    await jobs.retry(ctx, "q", a)
    assert [j.id for j in await jobs.fetch(ctx, "q", batch_size=5)] == [a]  # before b


# --------------------------------------------------------------------------- throttle


async def _slot_time(ctx: Context, seconds: int, margin: float = 3.0) -> float:
    """The server's epoch seconds, after waiting out the end of the current slot if it is
    less than ``margin`` seconds away (so two sends land in one slot)."""
    rows = await ctx.db.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t")
    now = float(rows[0]["t"])
    left = seconds - now % seconds
    if left < margin:
        await asyncio.sleep(left + 0.05)
        now += left + 0.05
    return now


def _slot_start(epoch: float, seconds: int) -> dt.datetime:
    start = seconds * (epoch // seconds)
    return dt.datetime.fromtimestamp(start, dt.timezone.utc).replace(tzinfo=None)


async def test_throttle(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    epoch = await _slot_time(ctx, 3600)
    first = await jobs.send_throttled(ctx, "q", {"n": 1}, seconds=3600, key="k")
    assert first is not None
    assert await jobs.send_throttled(ctx, "q", {"n": 2}, seconds=3600, key="k") is None
    other = await jobs.send_throttled(ctx, "q", {"n": 3}, seconds=3600, key="k2")
    assert other is not None
    no_key = await jobs.send_throttled(ctx, "q", seconds=3600)
    assert no_key is not None and await jobs.send_throttled(ctx, "q", seconds=3600) is None
    stored = await row(ctx, first)
    assert stored["singleton_on"] == _slot_start(epoch, 3600)
    assert stored["singleton_key"] == "k"
    # the slot stays taken after the job ran; a cancelled job frees it
    [job] = await jobs.fetch(ctx, "q")
    await jobs.complete(ctx, "q", job)
    assert await jobs.send_throttled(ctx, "q", seconds=3600, key="k") is None
    await jobs.cancel(ctx, "q", other)
    assert await jobs.send_throttled(ctx, "q", seconds=3600, key="k2") is not None


async def test_debounce(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    epoch = await _slot_time(ctx, 60)
    first = await jobs.send_debounced(ctx, "q", {"n": 1}, seconds=60, key="k")
    second = await jobs.send_debounced(ctx, "q", {"n": 2}, seconds=60, key="k")
    third = await jobs.send_debounced(ctx, "q", {"n": 3}, seconds=60, key="k")
    assert first is not None and second is not None and third is None
    slot = _slot_start(epoch, 60)
    a, b = await row(ctx, first), await row(ctx, second)
    assert a["singleton_on"] == slot
    assert b["singleton_on"] == slot + dt.timedelta(seconds=60)
    # the next slot's job starts a second or so after that slot begins
    next_slot = (slot + dt.timedelta(seconds=60)).replace(tzinfo=dt.timezone.utc)
    assert next_slot + dt.timedelta(seconds=1) <= b["start_after"]
    assert b["start_after"] < next_slot + dt.timedelta(seconds=2)
    assert [j.id for j in await jobs.fetch(ctx, "q", batch_size=5)] == [first]


async def test_singleton_next_slot_on_send(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    await _slot_time(ctx, 3600)
    options: dict[str, Any] = {"singleton_seconds": 3600, "singleton_key": "k"}
    assert await jobs.send(ctx, "q", **options) is not None
    assert await jobs.send(ctx, "q", **options) is None
    assert await jobs.send(ctx, "q", singleton_next_slot=True, **options) is not None
    assert await count(ctx, "job", "name = $1", "q") == 2
    with pytest.raises(ValidationError, match="singleton_seconds"):
        await jobs.send(ctx, "q", singleton_next_slot=True)
    with pytest.raises(ValidationError, match="cannot be given here"):
        await jobs.send_throttled(ctx, "q", seconds=5, singleton_key="x")

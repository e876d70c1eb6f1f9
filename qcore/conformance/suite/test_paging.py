"""Paging the list reads as pg-boss 12.38 pages them: ``limit`` (1 to 100,000) and
``after`` (the last name, key or job id of the previous page) on ``get_queues``,
``get_blocked_keys`` and ``find_jobs``; a bad page is a ``ValidationError`` before any
read, and a page after a job deleted since is refused rather than ending early."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from qcore.context import Context
from qcore.errors import ValidationError
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("lifecycle")

BAD_PAGES: list[dict[str, Any]] = [
    {"limit": 0},
    {"limit": 100_001},
    {"limit": "2"},
    {"limit": True},
    {"after": ""},
    {"after": 7},
]


async def test_queues_page_by_name(ctx: Context) -> None:
    for name in ("e", "a", "d", "c", "b"):
        await queues.create_queue(ctx, name)

    async def names(**page: Any) -> list[str]:
        return [q.name for q in await queues.get_queues(ctx, **page)]

    assert await names() == ["a", "b", "c", "d", "e"]
    assert await names(limit=2) == ["a", "b"]
    assert await names(limit=2, after="b") == ["c", "d"]
    assert await names(limit=2, after="d") == ["e"]
    assert await names(after="e") == []
    assert await names(after="bb") == ["c", "d", "e"]  # a name between two: no error
    assert await names(names=["e", "b", "a"], limit=1, after="a") == ["b"]
    assert [q.name for q in await queues.get_queues(ctx, live=True, limit=2, after="c")] == [
        "d",
        "e",
    ]
    for bad in BAD_PAGES:
        with pytest.raises(ValidationError, match=f"^{next(iter(bad))} must"):
            await queues.get_queues(ctx, **bad)


async def test_blocked_keys_page_by_key(ctx: Context) -> None:
    await queues.create_queue(ctx, "q", policy="key_strict_fifo", retry_limit=0)
    for key in ("k3", "k1", "k5", "k2", "k4"):
        await jobs.send(ctx, "q", singleton_key=key)
    for job in await jobs.fetch(ctx, "q", batch_size=10):
        await jobs.fail(ctx, "q", job, "no retries: its key is blocked")
    assert await queues.get_blocked_keys(ctx, "q") == ["k1", "k2", "k3", "k4", "k5"]
    assert await queues.get_blocked_keys(ctx, "q", limit=2) == ["k1", "k2"]
    assert await queues.get_blocked_keys(ctx, "q", limit=2, after="k2") == ["k3", "k4"]
    assert await queues.get_blocked_keys(ctx, "q", after="k4") == ["k5"]
    assert await queues.get_blocked_keys(ctx, "q", after="k5") == []
    for bad in BAD_PAGES:
        with pytest.raises(ValidationError, match=f"^{next(iter(bad))} must"):
            await queues.get_blocked_keys(ctx, "q", **bad)


async def test_jobs_page_by_id_and_a_deleted_cursor_is_refused(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    # one call: one created_on for all, so the pages turn on the id as pg-boss's do
    sent = await jobs.insert(ctx, "q", [{"data": {"n": n}} for n in range(5)])
    assert sent is not None
    order = [j.id for j in await jobs.find_jobs(ctx, "q")]
    assert sorted(order, key=str) == sorted(sent, key=str)

    async def page(**options: Any) -> list[uuid.UUID]:
        return [j.id for j in await jobs.find_jobs(ctx, "q", **options)]

    assert await page(limit=2) == order[:2]
    assert await page(limit=2, after=order[1]) == order[2:4]
    assert await page(limit=2, after=str(order[3])) == order[4:]
    assert await page(after=order[4]) == []
    [third] = await page(data={"n": 3})  # a filter and a page together
    assert await page(after=order[0], data={"n": 3}) == ([third] if third != order[0] else [])

    await jobs.delete_job(ctx, "q", order[3])
    with pytest.raises(ValidationError, match="no longer exists"):
        await jobs.find_jobs(ctx, "q", after=order[3])
    for bad in ({"after": "not-a-uuid"}, {"after": 7}, {"limit": 0}):
        with pytest.raises(ValidationError, match=f"^{next(iter(bad))} must"):
            await jobs.find_jobs(ctx, "q", **bad)
    with pytest.raises(ValidationError, match="no longer exists"):
        await jobs.find_jobs(ctx, "q", after=uuid.uuid4())  # never a job of this queue


async def test_jobs_and_blocked_keys_read_a_thousand_unless_told(ctx: Context) -> None:
    """pg-boss's default page: 1,000 jobs, 1,000 keys; a larger ``limit`` reads more."""
    await queues.create_queue(ctx, "q", policy="key_strict_fifo")
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (name, state, singleton_key, policy)"
        " SELECT 'q', 'failed', 'k' || lpad(g::text, 4, '0'), 'key_strict_fifo'"
        " FROM generate_series(1, 1001) AS g"
    )
    assert len(await jobs.find_jobs(ctx, "q")) == 1000
    assert len(await jobs.find_jobs(ctx, "q", limit=1001)) == 1001
    keys = await queues.get_blocked_keys(ctx, "q")
    assert len(keys) == 1000 and keys[-1] == "k1000"
    assert await queues.get_blocked_keys(ctx, "q", after="k1000") == ["k1001"]

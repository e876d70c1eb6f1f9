"""Groups: ``fetch(group_concurrency=...)`` limiting the active jobs of each group in the
database (with tiers, on every policy, in a settle-and-claim), ``ignore_groups``,
``restore``, and a worker's ``local_group_concurrency`` handing a group's surplus back
without spending an attempt. Claims run on the backend's own strategies and again with
CockroachDB's (atomic-update fetch, split mutations)."""

from __future__ import annotations

import asyncio
import collections
import re
import uuid
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import row, running, until
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.job import Job
from qcore.options import GroupConcurrency
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("groups")

TIERED: GroupConcurrency = {"default": 1, "tiers": {"gold": 3}}


async def _send_groups(
    ctx: Context, name: str, groups: dict[str | None, int], **extra: Any
) -> None:
    """``groups[g]`` jobs of each group ``g`` (None: no group), interleaved in time so
    every group has a job near the head of the queue."""
    left = dict(groups)
    while any(left.values()):
        for group, n in left.items():
            if n:
                options: dict[str, Any] = {} if group is None else {"group_id": group}
                if group is not None and group.startswith("gold"):
                    options["group_tier"] = "gold"
                await jobs.send(ctx, name, {"g": group}, **options, **extra)
                left[group] = n - 1


def _by_group(batch: list[Job]) -> collections.Counter[str | None]:
    return collections.Counter(j.group_id for j in batch)


async def _active_by_group(ctx: Context, name: str) -> collections.Counter[str | None]:
    rows = await ctx.db.execute(
        f"SELECT group_id FROM {ctx.q}.job WHERE name = $1 AND state = 'active'", [name]
    )
    return collections.Counter(r["group_id"] for r in rows)


async def test_group_concurrency_counts_the_active_jobs_of_each_group(sctx: Context) -> None:
    await queues.create_queue(sctx, "g")
    await _send_groups(sctx, "g", {"a": 4, "b": 4, None: 4})
    first = await jobs.fetch(sctx, "g", batch_size=50, group_concurrency=2)
    assert _by_group(first) == {"a": 2, "b": 2, None: 4}
    # the groups are full: a second claim takes nothing of theirs
    assert await jobs.fetch(sctx, "g", batch_size=50, group_concurrency=2) == []
    # one of a's jobs ends: one place in a
    [done] = [j for j in first if j.group_id == "a"][:1]
    await jobs.complete(sctx, "g", done)
    again = await jobs.fetch(sctx, "g", batch_size=50, group_concurrency=2)
    assert _by_group(again) == {"a": 1}
    # without the option, the rest comes
    rest = await jobs.fetch(sctx, "g", batch_size=50)
    assert _by_group(rest) == {"a": 1, "b": 2}


async def test_tiers_give_a_group_the_limit_of_its_jobs_tier(sctx: Context) -> None:
    await queues.create_queue(sctx, "g")
    await _send_groups(sctx, "g", {"gold-1": 5, "plain": 5})
    first = await jobs.fetch(sctx, "g", batch_size=50, group_concurrency=TIERED)
    assert _by_group(first) == {"gold-1": 3, "plain": 1}
    assert await jobs.fetch(sctx, "g", batch_size=50, group_concurrency=TIERED) == []
    assert await _active_by_group(sctx, "g") == {"gold-1": 3, "plain": 1}


async def test_a_claim_keeps_the_first_jobs_of_a_group_in_claim_order(sctx: Context) -> None:
    await queues.create_queue(sctx, "g")
    low = await jobs.send(sctx, "g", {"n": "low"}, group_id="a", priority=0)
    high = await jobs.send(sctx, "g", {"n": "high"}, group_id="a", priority=5)
    [claimed] = await jobs.fetch(sctx, "g", batch_size=10, group_concurrency=1)
    assert claimed.id == high and (await row(sctx, low))["state"] == "created"


@pytest.mark.parametrize("policy", ["singleton", "stately", "key_strict_fifo"])
async def test_group_concurrency_on_every_policy(sctx: Context, policy: str) -> None:
    await queues.create_queue(sctx, "g", policy=policy)
    for key in ("k1", "k2", "k3"):
        await jobs.send(sctx, "g", {"k": key}, singleton_key=key, group_id="a")
    await jobs.send(sctx, "g", {"k": "k4"}, singleton_key="k4", group_id="b")
    claimed = await jobs.fetch(sctx, "g", batch_size=10, group_concurrency=2)
    assert _by_group(claimed) == {"a": 2, "b": 1}
    assert len({j.data["k"] for j in claimed}) == 3  # the policy's one per key still holds


async def test_settle_and_claim_frees_the_places_it_completes(ctx: Context) -> None:
    if not jobs.settles_and_claims(ctx):
        pytest.skip("settle-and-claim needs one statement or an atomic transaction")
    await queues.create_queue(ctx, "g")
    await _send_groups(ctx, "g", {"a": 4})
    first = await jobs.fetch(ctx, "g", batch_size=10, group_concurrency=2)
    assert len(first) == 2
    # completing both with the claim (one statement, or one transaction): they count as gone
    second = await jobs.complete_and_fetch(ctx, "g", first, batch_size=10, group_concurrency=2)
    assert _by_group(second) == {"a": 2}
    assert await _active_by_group(ctx, "g") == {"a": 2}


async def test_ignore_groups_leaves_those_groups_alone(sctx: Context) -> None:
    await queues.create_queue(sctx, "g")
    await _send_groups(sctx, "g", {"a": 2, "b": 2, None: 1})
    claimed = await jobs.fetch(sctx, "g", batch_size=10, ignore_groups=["a"])
    assert _by_group(claimed) == {"b": 2, None: 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_concurrency": 0}, "group_concurrency must be an integer >= 1"),
        ({"group_concurrency": True}, "group_concurrency must be an integer"),
        ({"group_concurrency": {"tiers": {"gold": 2}}}, "group_concurrency needs a default"),
        ({"group_concurrency": {"default": 1, "cap": 2}}, "unknown group_concurrency option cap"),
        ({"group_concurrency": {"default": 1, "tiers": {"gold": 0}}}, "['tiers']['gold']"),
        ({"group_concurrency": {"default": 1, "tiers": {"": 2}}}, "tier name"),
        ({"group_concurrency": {"default": 1, "tiers": [2]}}, "must map tier names"),
        ({"ignore_groups": "a"}, "ignore_groups must be a list"),
        ({"ignore_groups": ["a", 3]}, "an ignored group id must be a non-empty string"),
    ],
)
async def test_bad_group_options_are_refused_before_anything_is_claimed(
    ctx: Context, options: dict[str, Any], message: str
) -> None:
    await queues.create_queue(ctx, "g")
    sent = await jobs.send(ctx, "g", group_id="a")
    with pytest.raises(ValidationError, match=re.escape(message)):
        await jobs.fetch(ctx, "g", **options)
    assert (await row(ctx, sent))["state"] == "created"


async def _all_completed(ctx: Context) -> bool:
    rows = await ctx.db.execute(
        f"SELECT count(*) FILTER (WHERE state <> 'completed') AS left FROM {ctx.q}.job"
        " WHERE name = 'g'",
        [],
    )
    return bool(rows[0]["left"] == 0)


# -- restore ---------------------------------------------------------------------------------


async def test_restore_hands_jobs_back_without_spending_an_attempt(sctx: Context) -> None:
    await queues.create_queue(sctx, "g", retry_limit=2)
    sent = await jobs.send(sctx, "g")
    [job] = await jobs.fetch(sctx, "g")
    await jobs.fail(sctx, "g", job)  # a retry: retry_count 1 from the next claim on
    [retried] = await jobs.fetch(sctx, "g", ignore_start_after=True)
    assert retried.retry_count == 1
    result = await jobs.restore(sctx, "g", retried)
    assert result.ids == [sent]
    restored = await row(sctx, sent)
    assert restored["state"] == "created" and restored["started_on"] is None
    [again] = await jobs.fetch(sctx, "g", ignore_start_after=True)
    assert again.retry_count == 1  # the restored claim cost nothing


async def test_restore_is_fenced_and_only_for_active_jobs(sctx: Context) -> None:
    await queues.create_queue(sctx, "g", retry_limit=3, retry_delay=0)
    queued = await jobs.send(sctx, "g", priority=-1)
    sent = await jobs.send(sctx, "g")
    assert queued is not None
    [first] = await jobs.fetch(sctx, "g")
    assert first.id == sent
    assert (await jobs.restore(sctx, "g", queued)).ids == []  # not active: left alone
    # the first claim lapses (failed, then claimed again): it cannot hand back the new one
    await jobs.fail(sctx, "g", first)
    [second] = await jobs.fetch(sctx, "g")
    assert second.id == sent and second.retry_count == first.retry_count + 1
    assert (await jobs.restore(sctx, "g", first)).ids == []
    assert (await row(sctx, sent))["state"] == "active"
    assert (await jobs.restore(sctx, "g", second)).ids == [sent]
    [third] = await jobs.fetch(sctx, "g")
    await jobs.complete(sctx, "g", third)
    assert (await jobs.restore(sctx, "g", third)).ids == []  # completed: left alone


# -- local_group_concurrency -----------------------------------------------------------------


@pytest.mark.usefixtures("installed")
async def test_local_group_concurrency_runs_one_job_of_a_group_at_a_time(
    db: Any, backend: Any, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    async with running(boss, stop_timeout=5) as b:
        await b.create_queue("g", retry_limit=0)
        ctx = b.context()
        await _send_groups(ctx, "g", {"a": 4, "b": 4, None: 2})
        running_now: collections.Counter[str | None] = collections.Counter()
        most: collections.Counter[str | None] = collections.Counter()
        done: list[uuid.UUID] = []

        async def handler(batch: list[Job]) -> None:
            for job in batch:
                running_now[job.group_id] += 1
                most[job.group_id] = max(most[job.group_id], running_now[job.group_id])
            await asyncio.sleep(0.05)
            for job in batch:
                running_now[job.group_id] -= 1
                done.append(job.id)

        await b.work(
            "g",
            handler,
            batch_size=2,
            local_concurrency=4,
            local_group_concurrency=1,
            polling_interval_seconds=0.5,
        )
        await until(lambda: _all_completed(ctx), timeout=60, what="every job completed")
        assert len(done) == 10 and most["a"] == 1 and most["b"] == 1
        rows = await ctx.db.execute(f"SELECT retry_count FROM {ctx.q}.job WHERE name = 'g'", [])
        assert {r["retry_count"] for r in rows} == {0}  # a surplus hand-back spends nothing


@pytest.mark.usefixtures("installed")
async def test_local_group_concurrency_is_checked_when_the_worker_is_made(
    db: Any, backend: Any, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)

    async def handler(batch: list[Job]) -> None:
        return None

    with pytest.raises(ValidationError, match="cannot both be given"):
        await boss.work("g", handler, group_concurrency=1, local_group_concurrency=1)
    with pytest.raises(ValidationError, match=r"more than local_concurrency \(2\)"):
        await boss.work(
            "g",
            handler,
            local_concurrency=2,
            local_group_concurrency={"default": 1, "tiers": {"x": 3}},
        )
    with pytest.raises(ValidationError, match="local_group_concurrency must be an integer >= 1"):
        await boss.work("g", handler, local_group_concurrency=0)
    assert boss.worker_statuses() == []


@pytest.mark.usefixtures("installed")
async def test_a_worker_with_group_concurrency_never_exceeds_it(
    db: Any, backend: Any, schema: str
) -> None:
    """One worker's loops claim one after another (its claims share one statement at a
    time), so the database's count is exact for it."""
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    async with running(boss, stop_timeout=5) as b:
        await b.create_queue("g", retry_limit=0)
        ctx = b.context()
        await _send_groups(ctx, "g", {"gold-1": 6, "a": 4})
        most: collections.Counter[str | None] = collections.Counter()
        handled: list[uuid.UUID] = []

        async def handler(batch: list[Job]) -> None:
            active = await _active_by_group(ctx, "g")
            for group, n in active.items():
                most[group] = max(most[group], n)
            await asyncio.sleep(0.05)
            handled.extend(j.id for j in batch)

        await b.work(
            "g",
            handler,
            local_concurrency=6,
            group_concurrency=TIERED,
            polling_interval_seconds=0.5,
        )
        await until(lambda: _all_completed(ctx), timeout=60, what="every job completed")
        assert len(handled) == 10 and most["gold-1"] <= 3 and most["a"] == 1

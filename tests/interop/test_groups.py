"""Group concurrency shared with the real pg-boss 12.38 on one schema: each runtime's
``groupConcurrency`` claim counts the group's jobs the other holds active, with tiers,
and a job pg-boss claimed can be handed back by qcore's ``restore`` without an attempt
spent. Local PostgreSQL only."""

from __future__ import annotations

import collections

from qcore.context import Context
from qcore.options import GroupConcurrency
from qcore.verbs import jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_each_runtime_counts_the_others_active_jobs(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "g")
    for _ in range(4):
        await jobs.send(ctx, "g", group_id="a")
        await jobs.send(ctx, "g", group_id="gold-1", group_tier="gold")
    limits: GroupConcurrency = {"default": 2, "tiers": {"gold": 3}}
    mine = await jobs.fetch(ctx, "g", batch_size=2)  # one of each, no limit asked
    assert collections.Counter(j.group_id for j in mine) == {"a": 1, "gold-1": 1}
    [theirs] = await in_thread(
        pg_dsn, ctx, {"op": "fetch", "args": ["g", {"batchSize": 10, "groupConcurrency": limits}]}
    )
    # pg-boss saw qcore's active jobs: one more of a, two more of gold-1
    assert collections.Counter(j["groupId"] for j in theirs) == {"a": 1, "gold-1": 2}
    assert await jobs.fetch(ctx, "g", batch_size=10, group_concurrency=limits) == []
    # qcore hands a pg-boss claim back: a place in a, and the next claim spends nothing
    [of_a] = [j for j in theirs if j["groupId"] == "a"]
    assert (await jobs.restore(ctx, "g", of_a["id"])).ids != []
    [again] = await jobs.fetch(ctx, "g", batch_size=10, group_concurrency=limits)
    assert again.group_id == "a" and again.retry_count == 0
    [more] = await in_thread(
        pg_dsn, ctx, {"op": "fetch", "args": ["g", {"batchSize": 10, "groupConcurrency": limits}]}
    )
    assert more == []

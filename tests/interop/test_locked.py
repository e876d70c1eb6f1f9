"""Locked claims beside the real pg-boss 12.38 on one schema: a job qcore holds in a
locked claim is skipped by pg-boss's fetch (its row is locked, its state still
queued), pg-boss takes the rest, and once qcore's block commits pg-boss reads the
held jobs as completed by qcore. Local PostgreSQL only."""

from __future__ import annotations

from qcore.context import Context
from qcore.verbs import jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_pgboss_skips_what_qcore_holds_and_sees_it_completed(
    pg_dsn: str, shared: Context
) -> None:
    ctx = shared
    await queues.create_queue(ctx, "shared")
    sent = await jobs.insert(ctx, "shared", [{"data": {"n": n}} for n in range(5)])
    assert sent is not None
    async with jobs.locked_fetch(ctx, "shared", batch_size=3) as batch:
        assert [j.id for j in batch.jobs] == sent[:3]
        [theirs] = await in_thread(
            pg_dsn, ctx, {"op": "fetch", "args": ["shared", {"batchSize": 10}]}
        )
        assert sorted(j["id"] for j in theirs) == sorted(str(i) for i in sent[3:])
    [got] = await in_thread(pg_dsn, ctx, {"op": "getJobById", "args": ["shared", str(sent[0])]})
    assert got["state"] == "completed" and got["startedOn"] is not None

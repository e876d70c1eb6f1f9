"""Publish/subscribe shared with the real pg-boss 12.38 on one schema: a subscription
either runtime makes is honoured by the other's publish. Local PostgreSQL only."""

from __future__ import annotations

import uuid

from qcore.context import Context
from qcore.verbs import jobs, pubsub, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_pgboss_subscribes_qcore_publishes(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "node-side")
    await queues.create_queue(ctx, "python-side")
    await in_thread(pg_dsn, ctx, {"op": "subscribe", "args": ["order.paid", "node-side"]})
    await pubsub.subscribe(ctx, "order.paid", "python-side")
    sent = await pubsub.publish(ctx, "order.paid", {"order": 9})
    assert sorted(sent) == ["node-side", "python-side"]
    [fetched] = await in_thread(pg_dsn, ctx, {"op": "fetch", "args": ["node-side"]})
    assert [j["id"] for j in fetched] == [str(sent["node-side"])]
    assert fetched[0]["data"] == {"order": 9}


async def test_qcore_subscribes_pgboss_publishes(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "a")
    await queues.create_queue(ctx, "b")
    await pubsub.subscribe(ctx, "e", "a")
    await pubsub.subscribe(ctx, "e", "b")
    assert await pubsub.unsubscribe(ctx, "e", "b")
    await in_thread(pg_dsn, ctx, {"op": "publish", "args": ["e", {"from": "node"}]})
    [job] = await jobs.fetch(ctx, "a", batch_size=5)
    assert job.data == {"from": "node"} and isinstance(job.id, uuid.UUID)
    assert await jobs.fetch(ctx, "b", batch_size=5) == []

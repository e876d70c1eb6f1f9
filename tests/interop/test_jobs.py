"""Jobs cross between qcore and the real pg-boss 12.38 on one schema.

qcore installs the schema and creates the queues; pg-boss (``migrate: false``,
from npm through ``tests/interop``) sends, fetches, completes, fails and
retries on it, and each side works what the other wrote. Local PostgreSQL only.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from qcore.context import Context
from qcore.job import JobState
from qcore.sql.locks import notify_channel
from qcore.verbs import jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_pgboss_sends_qcore_works(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "from-node", retry_limit=1, dead_letter="dlq")
    await queues.create_queue(ctx, "own", partition=True, policy="key_strict_fifo")
    sent = await in_thread(
        pg_dsn,
        ctx,
        {"op": "send", "args": ["from-node", {"n": 1}, {"priority": 5}]},
        {"op": "send", "args": ["from-node", {"n": 2}, {"retryLimit": 0}]},
        {"op": "send", "args": ["own", {"k": 1}, {"singletonKey": "a"}]},
        {"op": "send", "args": ["own", {"k": 2}, {"singletonKey": "a"}]},
    )
    first, second, head, tail = (uuid.UUID(s) for s in sent)

    fetched = await jobs.fetch(ctx, "from-node", batch_size=5, include_metadata=True)
    assert [j.id for j in fetched] == [first, second]  # priority 5 first
    assert fetched[0].data == {"n": 1} and fetched[0].priority == 5
    assert fetched[1].retry_limit == 0 and fetched[0].retry_limit == 1  # inherited
    await jobs.complete(ctx, "from-node", fetched[0], {"done": True})
    await jobs.fail(ctx, "from-node", fetched[1], "no")
    assert [j.id for j in await jobs.fetch(ctx, "own", batch_size=5)] == [head]
    await jobs.complete(ctx, "own", head)

    seen = await in_thread(
        pg_dsn,
        ctx,
        {"op": "getJobById", "args": ["from-node", str(first)]},
        {"op": "getJobById", "args": ["from-node", str(second)]},
        {"op": "findJobs", "args": ["dlq"]},
        {"op": "fetch", "args": ["own"]},
    )
    done, failed, letters, next_head = seen
    assert done["state"] == "completed" and done["output"] == {"done": True}
    assert failed["state"] == "failed" and failed["output"] == {"value": "no"}
    assert len(letters) == 1 and letters[0]["data"] == {"n": 2}
    assert [j["id"] for j in next_head] == [str(tail)]


async def test_qcore_sends_pgboss_fails_and_retries(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "to-node", retry_limit=1, retry_delay=60, dead_letter="dlq")
    sent = await jobs.send(ctx, "to-node", {"order": 7}, singleton_key="k", priority=2)
    assert sent is not None
    results = await in_thread(
        pg_dsn,
        ctx,
        {"op": "fetch", "args": ["to-node"]},
        {"op": "fail", "args": ["to-node", str(sent), {"attempt": 1}]},
        {"op": "fetch", "args": ["to-node"]},  # not due: retry_delay 60
        {"op": "fetch", "args": ["to-node", {"ignoreStartAfter": True}]},
        {"op": "fail", "args": ["to-node", str(sent), {"attempt": 2}]},
    )
    claimed, _, nothing, again, _ = results
    assert [j["id"] for j in claimed] == [str(sent)] and claimed[0]["data"] == {"order": 7}
    assert nothing == []
    assert again[0]["retryCount"] == 1
    job = await jobs.get_job_by_id(ctx, "to-node", sent)
    assert job is not None and job.state is JobState.FAILED and job.retry_count == 1
    assert job.output == {"attempt": 2}
    [letter] = await jobs.find_jobs(ctx, "dlq")
    assert letter.source_id == sent and letter.source_name == "to-node"
    assert letter.source_output == {"attempt": 2} and letter.singleton_key == "k"

    # qcore gives it another attempt (still deferred by the 60 s retry delay, which
    # retry() keeps); pg-boss claims and completes it
    await jobs.retry(ctx, "to-node", sent)
    results = await in_thread(
        pg_dsn,
        ctx,
        {"op": "fetch", "args": ["to-node", {"ignoreStartAfter": True}]},
        {"op": "complete", "args": ["to-node", str(sent), {"ok": 1}]},
    )
    assert results[0][0]["retryCount"] == 2
    job = await jobs.get_job_by_id(ctx, "to-node", sent)
    assert job is not None and job.state is JobState.COMPLETED and job.output == {"ok": 1}


async def test_qcore_fail_then_pgboss_completes_the_retry(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "q", retry_limit=2, retry_backoff=True, retry_delay_max=1)
    ids = await jobs.insert(ctx, "q", [{"data": {"i": i}} for i in range(3)])
    assert ids is not None
    got = await jobs.fetch(ctx, "q", batch_size=3)
    await jobs.fail(ctx, "q", got, "first try")
    await asyncio.sleep(1.1)  # the capped backoff
    results = await in_thread(
        pg_dsn,
        ctx,
        {"op": "fetch", "args": ["q", {"batchSize": 10}]},
    )
    assert sorted(j["id"] for j in results[0]) == sorted(str(i) for i in ids)
    assert {j["retryCount"] for j in results[0]} == {1}


async def test_throttle_and_debounce_slots_agree(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "t")
    rows = await ctx.db.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t")
    if 60 - float(rows[0]["t"]) % 60 < 15:  # both sides must land in one minute
        await asyncio.sleep(60 - float(rows[0]["t"]) % 60 + 0.1)
    ours = await jobs.send_throttled(ctx, "t", {"by": "qcore"}, seconds=60, key="thr")
    assert ours is not None
    theirs = await in_thread(
        pg_dsn,
        ctx,
        {"op": "sendThrottled", "args": ["t", {"by": "pg-boss"}, {}, 60, "thr"]},
        {"op": "sendDebounced", "args": ["t", {"by": "pg-boss"}, {}, 60, "deb"]},
    )
    assert theirs[0] is None  # the same slot: pg-boss computed the same singleton_on
    assert theirs[1] is not None
    # qcore's debounce finds pg-boss's job in this slot and goes to the next one
    ours_next = await jobs.send_debounced(ctx, "t", {"by": "qcore"}, seconds=60, key="deb")
    assert ours_next is not None
    mine = await jobs.get_job_by_id(ctx, "t", ours_next)
    node = await jobs.get_job_by_id(ctx, "t", theirs[1])
    assert mine is not None and node is not None
    assert mine.singleton_on is not None and node.singleton_on is not None
    assert (mine.singleton_on - node.singleton_on).total_seconds() == 60


async def test_pgboss_send_notifies_a_qcore_listener(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "loud", notify=True)
    got: asyncio.Queue[str] = asyncio.Queue()
    listener = await ctx.db.listen(notify_channel(ctx.schema_spec), lambda _c, p: got.put_nowait(p))
    try:
        await in_thread(pg_dsn, ctx, {"op": "send", "args": ["loud", {"x": 1}]})
        assert await asyncio.wait_for(got.get(), 15) == "loud"
    finally:
        await listener.close()


async def test_pgboss_and_qcore_workers_drain_one_queue_together(
    pg_dsn: str, shared: Context
) -> None:
    """Jobs sent by both runtimes, worked by both at once: each handled exactly once."""
    from qcore import Boss

    ctx = shared
    await queues.create_queue(ctx, "shared")
    ours = await jobs.insert(ctx, "shared", [{"data": {"n": i}} for i in range(800)])
    assert ours is not None and len(ours) == 800
    await in_thread(
        pg_dsn,
        ctx,
        {"op": "insert", "args": ["shared", [{"data": {"node": i}} for i in range(200)]]},
    )
    sent = [r["id"] for r in await ctx.db.execute(f"SELECT id FROM {ctx.q}.job")]
    assert len(sent) == 1000
    boss = Boss(db=ctx.db, schema=ctx.schema_spec, supervise=False)
    await boss.start()
    handled_by_qcore: list[uuid.UUID] = []

    async def handler(batch: list[Any]) -> None:
        handled_by_qcore.extend(job.id for job in batch)
        await asyncio.sleep(0.005)  # leave some of the queue to the other side

    node = asyncio.ensure_future(
        in_thread(pg_dsn, ctx, {"op": "drain", "args": ["shared", {"batchSize": 5}, 6000]})
    )
    await asyncio.sleep(1.0)  # pg-boss is up and polling before qcore starts
    await boss.work(
        "shared", handler, batch_size=5, local_concurrency=2, polling_interval_seconds=0.5
    )
    [handled_by_node] = await node
    await boss.stop()
    by_node = [uuid.UUID(i) for i in handled_by_node]
    assert handled_by_qcore and by_node, "both runtimes should have taken a share"
    assert not set(handled_by_qcore) & set(by_node)
    assert sorted(handled_by_qcore + by_node) == sorted(sent)  # each exactly once
    rows = await ctx.db.execute(
        f"SELECT state, count(*) AS n, max(retry_count) AS retries FROM {ctx.q}.job"
        " WHERE name = 'shared' GROUP BY state"
    )
    assert rows == [{"state": "completed", "n": 1000, "retries": 0}]

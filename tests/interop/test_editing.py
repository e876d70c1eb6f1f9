"""Editing and redriving jobs shared with the real pg-boss 12.38 on one schema: an upsert
by either runtime finds the other's job by its key (pg-boss's upsert index), an update
by either edits the other's job, and a redrive by either moves the other's dead
letters. Local PostgreSQL only."""

from __future__ import annotations

import uuid

from qcore.conformance.helpers import count, row
from qcore.context import Context
from qcore.verbs import jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_upserts_of_both_runtimes_agree_on_one_job(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "q")
    made = await jobs.upsert(ctx, "q", {"from": "python"}, singleton_key="k")
    [result] = await in_thread(
        pg_dsn,
        ctx,
        {"op": "upsert", "args": ["q", {"from": "node"}, {"singletonKey": "k", "priority": 4}]},
    )
    assert result["jobs"] == [str(made.ids[0])] and result["updated"] == 1
    edited = await row(ctx, made.ids[0])
    assert edited["data"] == {"from": "node"} and edited["priority"] == 4
    # and the other way round: pg-boss inserts, qcore's upsert edits it
    [node] = await in_thread(
        pg_dsn, ctx, {"op": "upsert", "args": ["q", {"n": 1}, {"singletonKey": "other"}]}
    )
    assert node["inserted"] == 1
    again = await jobs.upsert(ctx, "q", {"n": 2}, singleton_key="other")
    assert again.updated == 1 and [str(i) for i in again.ids] == node["jobs"]
    assert await count(ctx, "job", "name = 'q'") == 2


async def test_update_of_either_edits_the_others_job(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "q")
    [node_id] = await in_thread(pg_dsn, ctx, {"op": "send", "args": ["q", {"v": 1}]})
    result = await jobs.update(ctx, "q", {"v": 2}, id=node_id, start_after=3600)
    assert result.updated == 1
    python_id = await jobs.send(ctx, "q", {"v": 1}, start_after=3600)
    [edit] = await in_thread(
        pg_dsn, ctx, {"op": "update", "args": ["q", {"v": 3}, {"id": str(python_id)}]}
    )
    assert edit["updated"] == 1
    assert (await row(ctx, python_id))["data"] == {"v": 3}
    assert (await row(ctx, uuid.UUID(node_id)))["data"] == {"v": 2}


async def test_redrive_of_either_moves_the_others_dead_letters(
    pg_dsn: str, shared: Context
) -> None:
    ctx = shared
    await queues.create_queue(ctx, "dlq")
    await queues.create_queue(ctx, "src", retry_limit=0, dead_letter="dlq")
    # pg-boss fails a job into the dead letter queue; qcore redrives it
    [sent, fetched] = await in_thread(
        pg_dsn, ctx, {"op": "send", "args": ["src", {"n": 1}]}, {"op": "fetch", "args": ["src"]}
    )
    await in_thread(pg_dsn, ctx, {"op": "fail", "args": ["src", fetched[0]["id"]]})
    assert await jobs.redrive(ctx, "dlq") == 1
    [back] = await jobs.find_jobs(ctx, "src", queued=True)
    assert back.data == {"n": 1} and back.id != uuid.UUID(sent)
    # qcore fails it again; pg-boss redrives the copy
    [job] = await jobs.fetch(ctx, "src")
    await jobs.fail(ctx, "src", job)
    [moved] = await in_thread(pg_dsn, ctx, {"op": "redrive", "args": ["dlq"]})
    assert moved == 1
    [home] = await jobs.find_jobs(ctx, "src", queued=True)
    assert home.data == {"n": 1}
    assert (await row(ctx, home.id))["source_root_id"] == uuid.UUID(sent)

"""Flows shared with the real pg-boss 12.38 on one schema: a flow either runtime writes
is resolved by the other's resolver. Local PostgreSQL only."""

from __future__ import annotations

import uuid

from qcore.context import Context
from qcore.services.flows import resolve_flows
from qcore.verbs import flows, jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_pgboss_flow_resolved_by_qcore(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "first")
    await queues.create_queue(ctx, "then")
    [refs] = await in_thread(
        pg_dsn,
        ctx,
        {
            "op": "flow",
            "args": [
                [
                    {"ref": "a", "name": "first", "data": {"n": 1}},
                    {"ref": "b", "name": "then", "data": {"n": 2}, "dependsOn": ["a"]},
                ]
            ],
        },
    )
    a, b = uuid.UUID(refs["a"]), uuid.UUID(refs["b"])
    assert await flows.get_dependencies(ctx, "then", b) == [("first", a)]
    assert await jobs.fetch(ctx, "then", batch_size=5) == []  # blocked
    [parent] = await jobs.fetch(ctx, "first", batch_size=5)
    await jobs.complete(ctx, "first", parent)
    assert await resolve_flows(ctx) == 1
    [child] = await jobs.fetch(ctx, "then", batch_size=5)
    assert child.id == b and child.data == {"n": 2}


async def test_qcore_flow_resolved_by_pgboss(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "q")
    ids = await flows.flow(
        ctx,
        [
            {"ref": "p1", "name": "q"},
            {"ref": "p2", "name": "q"},
            {"ref": "c", "name": "q", "depends_on": ["p1", "p2"]},
        ],
    )
    for parent in await jobs.fetch(ctx, "q", batch_size=5):
        await jobs.complete(ctx, "q", parent)
    deps, _, fetched = await in_thread(
        pg_dsn,
        ctx,
        {"op": "getDependencies", "args": ["q", str(ids["c"])]},
        {"op": "resolveFlow"},
        {"op": "fetch", "args": ["q"]},
    )
    assert sorted(d["id"] for d in deps) == sorted(str(ids[p]) for p in ("p1", "p2"))
    assert [j["id"] for j in fetched] == [str(ids["c"])]

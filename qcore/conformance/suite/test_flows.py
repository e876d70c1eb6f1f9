"""Flows on every backend (both fetch and mutation strategies through the matrix):
children wait for their parents, the resolver releases them once every parent has
completed, and a bad graph is refused whole before anything is written."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from qcore.conformance.helpers import count, row, totals
from qcore.context import Context
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.events import Events
from qcore.services.flows import FlowResolver, resolve_flows
from qcore.verbs import flows, jobs, queues

pytestmark = pytest.mark.feature("flows")


async def _claim_all(ctx: Context, names: list[str]) -> list[Any]:
    claimed = []
    for name in names:
        claimed += await jobs.fetch(ctx, name, batch_size=1000)
    return claimed


async def test_a_chain_runs_in_order(ctx: Context) -> None:
    await queues.create_queue(ctx, "extract")
    await queues.create_queue(ctx, "load")
    ids = await flows.flow(
        ctx,
        [
            {"ref": "a", "name": "extract", "data": {"step": 1}},
            {"ref": "b", "name": "load", "data": {"step": 2}, "depends_on": ["a"]},
            {
                "ref": "c",
                "name": "load",
                "data": {"step": 3},
                "depends_on": ["b"],
                "options": {"priority": 3},
            },
        ],
    )
    b = await row(ctx, ids["b"])
    assert (b["blocked"], b["pending_dependencies"], b["blocking"]) == (True, 1, True)
    a = await row(ctx, ids["a"])
    assert (a["blocked"], a["blocking"]) == (False, True)
    assert [j.id for j in await _claim_all(ctx, ["extract", "load"])] == [ids["a"]]
    assert await resolve_flows(ctx) == 0  # a is active, not completed
    await jobs.complete(ctx, "extract", ids["a"])
    assert await resolve_flows(ctx) == 1
    assert await resolve_flows(ctx) == 0  # a is resolved once
    [second] = await _claim_all(ctx, ["extract", "load"])
    assert second.id == ids["b"] and second.data == {"step": 2}
    await jobs.complete(ctx, "load", second)
    await resolve_flows(ctx)
    [third] = await jobs.fetch(ctx, "load", batch_size=10, include_metadata=True)
    assert third.id == ids["c"] and third.priority == 3
    assert await flows.get_dependencies(ctx, "load", ids["c"]) == [("load", ids["b"])]
    assert await flows.get_dependents(ctx, "extract", ids["a"]) == [("load", ids["b"])]


async def test_a_child_waits_for_every_parent(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    ids = await flows.flow(
        ctx,
        [
            {"ref": "p1", "name": "q"},
            {"ref": "p2", "name": "q"},
            {"ref": "child", "name": "q", "depends_on": ["p1", "p2", "p1"]},  # repeat: once
        ],
    )
    assert (await row(ctx, ids["child"]))["pending_dependencies"] == 2
    assert len(await flows.get_dependencies(ctx, "q", ids["child"])) == 2
    first, second = await jobs.fetch(ctx, "q", batch_size=10)
    await jobs.complete(ctx, "q", first)
    await resolve_flows(ctx)
    child = await row(ctx, ids["child"])
    assert (child["blocked"], child["pending_dependencies"]) == (True, 1)
    assert await jobs.fetch(ctx, "q", batch_size=10) == []
    await jobs.complete(ctx, "q", second)
    await resolve_flows(ctx)
    [released] = await jobs.fetch(ctx, "q", batch_size=10)
    assert released.id == ids["child"]


@pytest.mark.parametrize("ending", ["failed", "cancelled", "deleted"])
async def test_a_parent_that_does_not_complete_releases_nothing(ctx: Context, ending: str) -> None:
    await queues.create_queue(ctx, "q", retry_limit=0)
    ids = await flows.flow(
        ctx,
        [{"ref": "parent", "name": "q"}, {"ref": "child", "name": "q", "depends_on": ["parent"]}],
    )
    [parent] = await jobs.fetch(ctx, "q", batch_size=10)
    if ending == "failed":
        await jobs.fail(ctx, "q", parent, "boom")
    elif ending == "cancelled":
        await jobs.cancel(ctx, "q", parent)
    else:
        await jobs.delete_job(ctx, "q", parent)
    assert await resolve_flows(ctx) == 0
    assert (await row(ctx, ids["child"]))["blocked"] is True
    assert await jobs.fetch(ctx, "q", batch_size=10) == []
    if ending == "failed":  # another attempt that completes releases the child
        await jobs.retry(ctx, "q", parent.id)
        [again] = await jobs.fetch(ctx, "q", batch_size=10)
        await jobs.complete(ctx, "q", again)
        assert await resolve_flows(ctx) == 1
    else:  # the operator releases the child by hand
        await jobs.complete(ctx, "q", ids["child"], include_queued=True)
        assert (await row(ctx, ids["child"]))["state"] == "completed"
        return
    [child] = await jobs.fetch(ctx, "q", batch_size=10)
    assert child.id == ids["child"]


@pytest.mark.parametrize(
    ("graph", "match"),
    [
        ([{"ref": "a", "name": "q"}], "at least 2 jobs"),
        (
            [{"ref": "a", "name": "q"}, {"ref": "b", "name": "q"}],
            "at least one job with depends_on",
        ),
        (
            [{"ref": "a", "name": "q"}, {"ref": "a", "name": "q", "depends_on": ["a"]}],
            "duplicate ref 'a'",
        ),
        (
            [{"ref": "a", "name": "q"}, {"ref": "b", "name": "q", "depends_on": ["z"]}],
            "depends on 'z', not in the flow",
        ),
        (
            [{"ref": "a", "name": "q"}, {"ref": "b", "name": "q", "depends_on": ["b"]}],
            "cannot depend on itself",
        ),
        (
            [
                {"ref": "a", "name": "q", "depends_on": ["c"]},
                {"ref": "b", "name": "q", "depends_on": ["a"]},
                {"ref": "c", "name": "q", "depends_on": ["b"]},
                {"ref": "d", "name": "q"},
            ],
            "cycle: ",
        ),
        (
            [{"ref": "", "name": "q"}, {"ref": "b", "name": "q", "depends_on": [""]}],
            "ref must be a non-empty",
        ),
        (
            [{"ref": "a", "name": "bad name!"}, {"ref": "b", "name": "q", "depends_on": ["a"]}],
            "queue name",
        ),
        (
            [
                {"ref": "a", "name": "q", "colour": 1},
                {"ref": "b", "name": "q", "depends_on": ["a"]},
            ],
            "unknown key colour",
        ),
        (
            [
                {"ref": "a", "name": "q", "options": {"priority": "x"}},
                {"ref": "b", "name": "q", "depends_on": ["a"]},
            ],
            "job 'a': priority",
        ),
        (
            [
                {"ref": "a", "name": "q", "data": {"x": float("inf")}},
                {"ref": "b", "name": "q", "depends_on": ["a"]},
            ],
            "JSON",
        ),
        (
            [{"ref": "a", "name": "q"}, {"ref": "b", "name": "q", "depends_on": "a"}],
            "depends_on must be a list",
        ),
        ("not a list", "list of job specs"),
    ],
)
async def test_a_bad_graph_is_refused_whole(ctx: Context, graph: Any, match: str) -> None:
    await queues.create_queue(ctx, "q")
    before = await totals(ctx), await count(ctx, "job_dependency")
    with pytest.raises(ValidationError, match=match):
        await flows.flow(ctx, graph)
    assert (await totals(ctx), await count(ctx, "job_dependency")) == before


async def test_the_cycle_is_named(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    graph = [
        {"ref": "a", "name": "q", "depends_on": ["c"]},
        {"ref": "b", "name": "q", "depends_on": ["a"]},
        {"ref": "c", "name": "q", "depends_on": ["b"]},
    ]
    with pytest.raises(ValidationError) as caught:
        await flows.flow(ctx, graph)
    named = str(caught.value).split("cycle: ")[1].split(" -> ")
    assert named[0] == named[-1] and set(named) == {"a", "b", "c"}


async def test_a_missing_queue_or_a_refused_job_writes_nothing(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    await queues.create_queue(ctx, "one", policy="singleton")
    before = await totals(ctx), await count(ctx, "job_dependency")
    with pytest.raises(QueueNotFoundError, match="'nowhere'"):
        await flows.flow(
            ctx, [{"ref": "a", "name": "q"}, {"ref": "b", "name": "nowhere", "depends_on": ["a"]}]
        )
    assert (await totals(ctx), await count(ctx, "job_dependency")) == before
    fixed = str(uuid.uuid4())
    await jobs.send(ctx, "q", id=fixed)
    with pytest.raises(ValidationError, match="refused a job of the flow"):
        await flows.flow(  # a duplicate id is refused by the table's key
            ctx,
            [
                {"ref": "a", "name": "q", "options": {"id": fixed}},
                {"ref": "b", "name": "q", "depends_on": ["a"]},
            ],
        )
    assert await count(ctx, "job") == before[0][1] + 1 and await count(ctx, "job_dependency") == 0


async def test_paging_dependencies(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    graph: list[dict[str, Any]] = [{"ref": f"p{i}", "name": "q"} for i in range(5)]
    graph.append({"ref": "c", "name": "q", "depends_on": [f"p{i}" for i in range(5)]})
    ids = await flows.flow(ctx, graph)
    every = await flows.get_dependencies(ctx, "q", ids["c"])
    assert sorted(every) == sorted(("q", ids[f"p{i}"]) for i in range(5))
    first = await flows.get_dependencies(ctx, "q", ids["c"], limit=2)
    rest = await flows.get_dependencies(ctx, "q", ids["c"], after=first[-1])
    assert first + rest == every
    with pytest.raises(ValidationError, match="limit"):
        await flows.get_dependents(ctx, "q", ids["c"], limit=0)
    with pytest.raises(ValidationError):
        await flows.get_dependents(ctx, "q", "not-a-uuid")


async def test_a_flow_in_a_callers_transaction(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")

    class Undo(Exception):
        pass

    graph: list[dict[str, Any]] = [
        {"ref": "a", "name": "q"},
        {"ref": "b", "name": "q", "depends_on": ["a"]},
    ]
    with pytest.raises(Undo):
        async with ctx.db.transaction() as tx:
            await flows.flow(ctx.with_db(tx), graph)
            raise Undo
    assert await count(ctx, "job") == 0 and await count(ctx, "job_dependency") == 0


async def test_the_resolver_gate_and_event(ctx: Context) -> None:
    await queues.create_queue(ctx, "q")
    await flows.flow(
        ctx, [{"ref": "a", "name": "q"}, {"ref": "b", "name": "q", "depends_on": ["a"]}]
    )
    [a] = await jobs.fetch(ctx, "q", batch_size=5)
    await jobs.complete(ctx, "q", a)
    events = Events()
    seen: list[dict[str, Any]] = []
    events.on("flow", seen.append)
    first = FlowResolver(lambda: ctx, events, 60, enabled=False)
    other = FlowResolver(lambda: ctx, events, 60, enabled=False)
    await other.run_pass()  # takes the interval's gate and resolves
    assert [s["resolved"] for s in seen] == [1]
    await queues.create_queue(ctx, "r")
    await flows.flow(
        ctx, [{"ref": "a", "name": "r"}, {"ref": "b", "name": "r", "depends_on": ["a"]}]
    )
    [ra] = await jobs.fetch(ctx, "r", batch_size=5)
    await jobs.complete(ctx, "r", ra)
    await first.run_pass()  # within the interval: gated, nothing resolved
    assert len(seen) == 1
    assert await first.resolve_now() == 1  # explicit: ungated
    assert len(seen) == 2


async def test_a_thousand_node_graph_wide_and_deep(ctx: Context) -> None:
    """20 layers of 50 jobs, each depending on 1-3 jobs of the layer before: each round
    claims what is ready, checks it is exactly the next layer, completes it, resolves."""
    await queues.create_queue(ctx, "dag")
    rng = random.Random(7)
    layers = [[f"n{d}_{w}" for w in range(50)] for d in range(20)]
    graph: list[dict[str, Any]] = []
    for depth, layer in enumerate(layers):
        for ref in layer:
            spec: dict[str, Any] = {"ref": ref, "name": "dag", "data": {"depth": depth}}
            if depth:
                spec["depends_on"] = rng.sample(layers[depth - 1], rng.randint(1, 3))
            graph.append(spec)
    ids = await flows.flow(ctx, graph)
    assert len(ids) == 1000 and await count(ctx, "job_dependency") > 1000
    for depth in range(20):
        ready = await jobs.fetch(ctx, "dag", batch_size=1000)
        assert sorted(j.id for j in ready) == sorted(ids[r] for r in layers[depth]), depth
        await jobs.complete(ctx, "dag", ready)
        await resolve_flows(ctx)
    assert await jobs.fetch(ctx, "dag", batch_size=1000) == []
    assert await count(ctx, "job", "state = 'completed'") == 1000

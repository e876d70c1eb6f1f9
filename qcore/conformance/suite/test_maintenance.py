"""Maintenance on every backend: retention deletes exactly the jobs that are due, in
batches, under pg-boss's claim; snapshots and warnings are pruned; the daily
``queue_stats`` partitions follow the clock. Time is the schema's own clock
(``set_clock``), never a sleep."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import count, running, set_clock
from qcore.context import Context
from qcore.errors import ConfigError
from qcore.job import POLICIES
from qcore.options import QueueOptions
from qcore.services import maintenance
from qcore.services.maintenance import Maintenance
from qcore.services.monitor import supervise
from qcore.verbs import flows, jobs, queues

pytestmark = pytest.mark.feature("maintenance")

#: the queue settings of the retention cases: finished jobs go a minute after they
#: finished, jobs never started an hour after they could have
RETENTION: QueueOptions = {"retention_seconds": 3600, "delete_after_seconds": 60}


async def _jobs_in_every_state(ctx: Context, queue: str) -> dict[str, uuid.UUID]:
    """One job per state of interest, each with a key of its own (so every policy lets
    it in): the finished ones finished now, the active one started now."""
    ids = await jobs.insert(
        ctx, queue, [{"singleton_key": f"k{i}", "data": {"i": i}} for i in range(6)]
    )
    assert ids is not None
    names = ["completed", "cancelled", "failed", "created", "retry", "active"]
    by_state = dict(zip(names, ids, strict=True))
    for state in ("completed", "cancelled", "failed"):
        await ctx.db.execute(
            f"UPDATE {ctx.q}.job SET state = $2::text::{ctx.q}.job_state,"
            f" started_on = {ctx.q}.job_now(), completed_on = {ctx.q}.job_now() WHERE id = $1",
            [by_state[state], state],
        )
    await ctx.db.execute(
        f"UPDATE {ctx.q}.job SET state = 'retry' WHERE id = $1", [by_state["retry"]]
    )
    await ctx.db.execute(  # started now, and it may run for a day (the monitor leaves it)
        f"UPDATE {ctx.q}.job SET state = 'active', started_on = {ctx.q}.job_now(),"
        " expire_seconds = 86400 WHERE id = $1",
        [by_state["active"]],
    )
    return by_state


async def _left(ctx: Context, ids: dict[str, uuid.UUID]) -> set[str]:
    rows = await ctx.db.execute(
        f"SELECT id FROM {ctx.q}.job WHERE id = ANY($1::uuid[])", [list(ids.values())]
    )
    present = {str(r["id"]) for r in rows}
    return {state for state, job_id in ids.items() if str(job_id) in present}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("partition", [False, True], ids=["shared", "partitioned"])
async def test_retention_deletes_exactly_what_is_due(
    ctx: Context, backend: Backend, policy: str, partition: bool
) -> None:
    if partition and not backend.schema.partitioned:
        pytest.skip(f"the {backend.name} backend keeps every queue in one table (no partitions)")
    await queues.create_queue(
        ctx,
        "q",
        policy=policy,
        partition=partition,
        retention_seconds=3600,
        delete_after_seconds=60,
    )
    await queues.create_queue(ctx, "keep", policy=policy, retention_seconds=3600)
    due = await _jobs_in_every_state(ctx, "q")
    kept = await _jobs_in_every_state(ctx, "keep")  # delete_after_seconds=0: kept when done
    everything = set(due)

    result = await supervise(ctx)  # nothing has aged yet
    assert result.deleted == 0 and set(result.maintained) == {"keep", "q"}
    assert await _left(ctx, due) == everything

    await set_clock(ctx, 120)  # finished two minutes ago: past delete_after_seconds
    result = await supervise(ctx)
    assert await _left(ctx, due) == {"created", "retry", "active"}
    assert result.deleted == 3
    assert await _left(ctx, kept) == everything

    await set_clock(ctx, 7200)  # two hours: past the never-started jobs' keep_until
    await supervise(ctx)
    assert await _left(ctx, due) == {"active"}  # an active job is never retention's
    assert await _left(ctx, kept) == {"completed", "cancelled", "failed", "active"}
    [queue] = await queues.get_queues(ctx, ["q"])
    assert queue.total_count == 1  # the cached counts follow the deletions


async def test_retention_takes_the_flow_edges_of_the_jobs_it_deletes(ctx: Context) -> None:
    """An edge goes once either of its jobs is gone: a flow whose parent retention
    deleted loses that edge, one whose jobs are all still there keeps its edges."""
    await queues.create_queue(ctx, "steps", **RETENTION)
    await queues.create_queue(ctx, "kept")  # nothing here ever ages out
    gone = await flows.flow(
        ctx,
        [
            {"ref": "a", "name": "steps"},
            {"ref": "b", "name": "steps", "depends_on": ["a"]},
            {"ref": "c", "name": "kept", "depends_on": ["b"]},
        ],
    )
    stays = await flows.flow(
        ctx, [{"ref": "x", "name": "kept"}, {"ref": "y", "name": "kept", "depends_on": ["x"]}]
    )
    assert await count(ctx, "job_dependency") == 3
    await ctx.db.execute(  # the two jobs of "steps" finished now
        f"UPDATE {ctx.q}.job SET state = 'completed', completed_on = {ctx.q}.job_now()"
        " WHERE name = 'steps'"
    )
    await set_clock(ctx, 120)  # past their delete_after_seconds
    result = await supervise(ctx)
    assert result.deleted == 2
    edges = await ctx.db.execute(
        f"SELECT child_id, parent_id FROM {ctx.q}.job_dependency ORDER BY child_id"
    )
    # a→b (both gone) and b→c (its parent gone) went; x→y stays
    assert [(str(e["parent_id"]), str(e["child_id"])) for e in edges] == [
        (str(stays["x"]), str(stays["y"]))
    ]
    assert await count(ctx, "job", "id = $1", gone["c"]) == 1  # the child itself is kept


async def _ten_jobs_past_retention(ctx: Context) -> str:
    """Queue ``q`` with ten jobs finished two minutes ago on the schema's clock; its job
    table."""
    await queues.create_queue(ctx, "q", **RETENTION)
    await jobs.insert(ctx, "q", [{"data": i} for i in range(10)])
    await ctx.db.execute(
        f"UPDATE {ctx.q}.job SET state = 'completed', completed_on = {ctx.q}.job_now()"
        " WHERE name = 'q'"
    )
    await set_clock(ctx, 120)
    [table] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'q'")
    return str(table["table_name"])


async def test_retention_walks_in_batches_and_one_instance_per_interval(ctx: Context) -> None:
    name = await _ten_jobs_past_retention(ctx)

    def go(**kw: Any) -> Any:
        return maintenance.retain(ctx, name, ["q"], stopping=lambda: False, batch_size=3, **kw)

    first = await go(interval_seconds=3600)
    assert first.maintained == ("q",) and first.deleted == 10  # four batches of 3 keys
    assert await count(ctx, "job", "name = $1", "q") == 0
    again = await go(interval_seconds=3600)  # claimed a moment ago: not due
    assert again.maintained == () and again.deleted == 0


async def test_a_walk_cut_short_hands_its_claim_back(ctx: Context) -> None:
    name = await _ten_jobs_past_retention(ctx)
    asked = 0

    def after_one_batch() -> bool:
        nonlocal asked
        asked += 1
        return asked > 2  # the walk's first check, its first batch, then stop

    cut = await maintenance.retain(
        ctx,
        name,
        ["q"],
        interval_seconds=3600,
        stopping=after_one_batch,
        batch_size=3,
    )
    assert cut.maintained == () and cut.deleted == 3
    [claim] = await ctx.db.execute(f"SELECT maintain_on FROM {ctx.q}.queue WHERE name = 'q'")
    assert claim["maintain_on"] is None  # due again for the next pass, anyone's
    assert await count(ctx, "job", "name = $1", "q") == 7


@pytest.mark.usefixtures("installed")
@pytest.mark.feature("warnings")
async def test_persisted_warnings_are_pruned_after_their_retention(
    db: Any, backend: Backend, schema: str
) -> None:
    boss = Boss(
        db=db,
        backend=backend,
        schema=schema,
        supervise=False,
        persist_warnings=True,
        warning_retention_days=2,
    )
    async with running(boss):
        ctx = boss.context()
        boss.events.warn("custom_check", "something to look at", level=3)
        await boss.events.drain()
        [stored] = await ctx.db.execute(f"SELECT type, message, data FROM {ctx.q}.warning")
        assert stored["type"] == "custom_check" and stored["data"] == {"level": 3}
        await set_clock(ctx, 86_400)  # a day on: kept
        await boss.supervise()
        assert len(await ctx.db.execute(f"SELECT 1 FROM {ctx.q}.warning")) == 1
        await set_clock(ctx, 3 * 86_400)  # three days: past retention
        await boss.supervise()
        assert await ctx.db.execute(f"SELECT 1 FROM {ctx.q}.warning") == []


@pytest.mark.feature("stats")
async def test_snapshots_follow_the_clock_into_new_partitions_and_are_pruned(
    ctx: Context, backend: Backend
) -> None:
    """Snapshots are written on any day the clock reaches (the partitioned shape creates
    that day's partition first) and removed past ``queue_stat_retention_days``."""
    settings = Maintenance(persist_queue_stats=True, queue_stat_retention_days=2)
    await queues.create_queue(ctx, "q")
    await jobs.send(ctx, "q")
    for days in (0, 3, 4):  # the install made only today's and tomorrow's partitions
        await set_clock(ctx, days * 86_400)
        result = await supervise(ctx, settings=settings)
        assert result.cached == ("q",)
    rows = await ctx.db.execute(
        f"SELECT (captured_on - now())::text AS ahead FROM {ctx.q}.queue_stats ORDER BY 1"
    )
    assert len(rows) == 2, rows  # the first, four days back, is past two days' retention
    if backend.schema.partitioned:
        parts = await ctx.db.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n"
            " ON n.oid = p.relnamespace WHERE n.nspname = $1 AND p.relname = 'queue_stats'",
            [ctx.schema],
        )
        assert len(parts) == 3  # the days 3, 4 and 5 ahead; the first two are dropped


@pytest.mark.parametrize(
    "option, value, allowed",
    [
        ("maintenance_interval_seconds", 0, "from 1 to 86400"),
        ("maintenance_interval_seconds", 86_401, "from 1 to 86400"),
        ("queue_cache_interval_seconds", 0.5, "from 1 to 86400"),
        ("reindex_interval_seconds", 90_000, "from 1 to 86400"),
        ("warning_slow_query_seconds", 0, "from 1 to 86400"),
        ("warning_queue_size", 0, "from 1 to"),
        ("warning_retention_days", 366, "from 1 to 365"),
        ("queue_stat_retention_days", 0, "from 1 to 365"),
        ("queue_stat_retention_days", 1.5, "an integer"),
        ("persist_warnings", "yes", "True or False"),
        ("monitor_vacuum", 1, "True or False"),
        ("reindex", "sometimes", "True, False or a mapping"),
        ("reindex", {"force": True}, "force is only for supervise"),
        ("reindex", {"min_pages": -1}, "from 0"),
        ("reindex", {"max_entries_per_page": 0}, "> 0"),
        ("supervise_interval_seconds", 0.05, "from 1 to 86400"),
        ("monitor_interval_seconds", 100_000, "from 1 to 86400"),
    ],
)
def test_maintenance_options_out_of_range_raise_before_anything_runs(
    backend: Backend, option: str, value: Any, allowed: str
) -> None:
    with pytest.raises(ConfigError, match=f"{option.split('_')[0]}.*{allowed}"):
        Boss("postgresql://nowhere.invalid/x", backend=backend, **{option: value})

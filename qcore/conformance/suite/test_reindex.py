"""The index bloat check: a job index left at the size of a drained backlog is found,
warned about, listed by ``get_reindex_commands`` and rebuilt by the supervise pass
(once per interval between instances, or now with ``force``); a backend without
REINDEX lists nothing."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import running
from qcore.errors import ConfigError, ValidationError
from qcore.events import WarningEvent
from qcore.identifiers import quote
from qcore.verbs import jobs
from qcore.verbs.reindex import INDEX_BLOAT, get_index_bloat_plans

pytestmark = pytest.mark.feature("reindex")

#: thresholds a small test table can cross (the defaults want 128 pages)
SMALL: dict[str, Any] = {"min_pages": 10}


async def _drained_backlog(boss: Boss, name: str = "q") -> None:
    """10,000 jobs inserted and all but ten deleted, then vacuumed: the job indexes keep
    their pages while their entries are gone."""
    ctx = boss.context()
    for _ in range(10):
        await jobs.insert(ctx, name, [{"data": i} for i in range(1000)])
    await ctx.db.execute(
        f"DELETE FROM {ctx.q}.job WHERE name = $1 AND id NOT IN"
        f" (SELECT id FROM {ctx.q}.job WHERE name = $1 ORDER BY id LIMIT 10)",
        [name],
    )
    await ctx.db.execute(f"VACUUM ANALYZE {ctx.q}.job")


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("reindex")
async def test_a_bloated_index_is_found_warned_and_rebuilt(
    db: Any, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, reindex=SMALL)
    warnings: list[WarningEvent] = []
    boss.on("warning", warnings.append)
    async with running(boss):
        assert await boss.get_reindex_commands(min_pages=10) == []  # healthy: nothing to do
        await boss.create_queue("q")
        await _drained_backlog(boss)
        commands = await boss.get_reindex_commands(min_pages=10)
        assert commands and all(c.startswith("REINDEX INDEX CONCURRENTLY ") for c in commands)
        assert any("i11" in c for c in commands), commands  # the fetch index
        every = await boss.get_reindex_commands(force=True)
        assert len(every) >= len(commands)

        await boss.supervise(reindex=False)  # detection only: warned, not rebuilt
        assert {w.data["index"] for w in warnings if w.type == INDEX_BLOAT}
        assert await boss.get_reindex_commands(min_pages=10) == commands

        await boss.supervise()  # the interval is due (never claimed): rebuilt
        assert await boss.get_reindex_commands(min_pages=10) == []
        ctx = boss.context()
        [claim] = await ctx.db.execute(f"SELECT reindex_on FROM {ctx.q}.version")
        assert claim["reindex_on"] is not None

        await _drained_backlog(boss)
        await boss.supervise()  # claimed a moment ago: the shared interval holds
        assert await boss.get_reindex_commands(min_pages=10) != []
        await boss.supervise(reindex={"force": True})  # force: now, bloated or not
        assert await boss.get_reindex_commands(min_pages=10) == []


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("reindex")
async def test_the_offline_bloat_plan_finds_what_the_pass_finds(
    db: Any, backend: Backend, schema: str
) -> None:
    """``get_index_bloat_plans``, run by hand, lists the indexes the pass would rebuild:
    none on a healthy install, the same ones after a drained backlog."""
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    async with running(boss):
        ctx = boss.context()
        plan = get_index_bloat_plans(schema, backend, **SMALL)
        assert await ctx.db.execute(plan) == []
        await boss.create_queue("q")
        await _drained_backlog(boss)
        found = {str(r["index"]) for r in await ctx.db.execute(plan)}
        commands = await boss.get_reindex_commands(**SMALL)
        assert found and {c.rsplit(".", 1)[-1].strip('"') for c in commands} == found
    for bad in ({"min_pages": -1}, {"force": True}, {"minpages": 1}):
        with pytest.raises(ValidationError):
            get_index_bloat_plans(schema, backend, **bad)


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("reindex")
async def test_a_partitioned_queues_own_table_is_checked_too(
    db: Any, backend: Backend, schema: str
) -> None:
    """The busiest queues are the partitioned ones: their own tables' indexes are read
    like the common table's, beside an unpartitioned queue."""
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, reindex=SMALL)
    async with running(boss):
        await boss.create_queue("plain")
        await boss.create_queue("own", partition=True)
        ctx = boss.context()
        [row] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'own'")
        own = await ctx.db.execute(
            "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
            " JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
            " WHERE n.nspname = $1 AND t.relname = $2",
            [ctx.schema, row["table_name"]],
        )
        own_indexes = {r["relname"] for r in own}
        assert own_indexes
        await _drained_backlog(boss, "own")
        bloated = " ".join(await boss.get_reindex_commands(min_pages=10))
        assert any(index in bloated for index in own_indexes), bloated


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("reindex")
async def test_an_index_of_long_singleton_keys_is_not_mistaken_for_bloat(
    db: Any, backend: Backend, schema: str
) -> None:
    """20,000 waiting jobs with 1.6 kB keys pack few entries per page into a healthy
    index: the size they need, estimated from the statistics of the indexed expression,
    says it is not bloated (the default thresholds)."""
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False)
    async with running(boss):
        await boss.create_queue("wide", policy="short")
        ctx = boss.context()
        for start in range(0, 20_000, 1000):
            batch = [  # in key order, as keys that carry a sequence or a time arrive
                {"singleton_key": f"{n:06d}-{secrets.token_hex(800)}"}
                for n in range(start, start + 1000)
            ]
            await jobs.insert(ctx, "wide", batch)
        await ctx.db.execute(f"ANALYZE {ctx.q}.job")
        [row] = await ctx.db.execute(
            "SELECT c.relpages FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relname = 'job_common_i1'",
            [ctx.schema],
        )
        assert row["relpages"] >= 128 * 4  # big enough for the check to look at it
        assert [c for c in await boss.get_reindex_commands() if "_i1" in c] == []


async def _invalidate(boss: Boss, index: str) -> None:
    """Mark ``index`` invalid, as a failed concurrent build leaves one (superuser only)."""
    ctx = boss.context()
    await ctx.db.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass",
        [f"{ctx.q}.{index}"],
    )


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("reindex")
async def test_an_invalid_index_is_rebuilt_and_only_an_interrupted_rebuilds_stub_dropped(
    db: Any, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, reindex=SMALL)
    async with running(boss):
        await boss.create_queue("q")
        ctx = boss.context()
        [row] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'q'")
        table = row["table_name"]
        rows = await ctx.db.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2"
            " AND indexname NOT LIKE '%pkey' ORDER BY indexname",
            [ctx.schema, table],
        )
        real, building = rows[0]["indexname"], rows[1]["indexname"]
        stub = f"{real}_ccnew"
        await ctx.db.execute(f"CREATE INDEX {stub} ON {ctx.q}.{table} (id)")
        for index in (real, building, stub):
            await _invalidate(boss, index)
        # a background migration still building ``building`` owns it
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.bam (name, version, status, table_name, command)"
            " VALUES ('rebuild', 46, 'in_progress', $1, $2)",
            [table, f"CREATE INDEX CONCURRENTLY {building} ON {ctx.q}.{table} (name)"],
        )
        commands = await boss.get_reindex_commands(min_pages=10)
        assert commands == [
            f"DROP INDEX CONCURRENTLY IF EXISTS {ctx.q}.{quote(stub)}",
            f"REINDEX INDEX CONCURRENTLY {ctx.q}.{quote(real)}",
        ], commands
        await boss.supervise()
        valid = await ctx.db.execute(
            "SELECT c.relname, x.indisvalid FROM pg_index x JOIN pg_class c"
            " ON c.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relname = ANY($2::text[])",
            [ctx.schema, [real, stub]],
        )
        assert [(r["relname"], r["indisvalid"]) for r in valid] == [(real, True)]


async def test_reindex_arguments_are_checked_and_unsupported_backends_list_nothing(
    boss: Boss, backend: Backend
) -> None:
    for bad in ({"min_pages": -1}, {"max_entries_per_page": 0}, {"force": "yes"}, {"minpages": 1}):
        with pytest.raises(ValidationError):
            await boss.get_reindex_commands(**bad)
    with pytest.raises(ValidationError):
        await boss.supervise(reindex="sometimes")  # type: ignore[arg-type]
    if not backend.capabilities.reindex:
        assert await boss.get_reindex_commands(force=True) == []
        with pytest.raises(ConfigError, match="no index rebuilds"):
            get_index_bloat_plans("pgboss", backend)

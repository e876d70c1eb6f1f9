"""Async migrations (BAM): the commands in the ``bam`` table run one at a time, in order
per migration and table, a failure held with its error and holding the commands after
it until a retry succeeds; two workers never run one command twice; a concurrent index
build that was interrupted is healed on its next attempt; ``stop()`` ends a command
that outlives its timeout; the summary and the pages an operator reads."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from qcore import Boss
from qcore.context import Context
from qcore.errors import DatabaseError, ValidationError
from qcore.events import Events
from qcore.services.bam import run_commands
from qcore.verbs.bam import get_bam_entries, get_bam_status

pytestmark = pytest.mark.feature("bam")


async def _queue(ctx: Context, name: str, version: int, table: str, command: str) -> uuid.UUID:
    # a millisecond apart: an engine's clock may not tell two quick inserts apart
    [row] = await ctx.db.execute(
        f"INSERT INTO {ctx.q}.bam (name, version, table_name, command, created_on)"
        " VALUES ($1, $2, $3, $4, clock_timestamp()"
        f" + (SELECT count(*) FROM {ctx.q}.bam) * interval '1 millisecond') RETURNING id",
        [name, version, table, command],
    )
    return row["id"] if isinstance(row["id"], uuid.UUID) else uuid.UUID(str(row["id"]))


async def _statuses(ctx: Context) -> dict[str, str]:
    rows = await ctx.db.execute(f"SELECT name, status FROM {ctx.q}.bam ORDER BY created_on")
    return {r["name"]: r["status"] for r in rows}


async def test_commands_run_in_order_and_a_failure_holds_its_successors(ctx: Context) -> None:
    await ctx.db.execute_script(f"CREATE TABLE {ctx.q}.bam_log (step text)")
    log = f"{ctx.q}.bam_log"
    await _queue(ctx, "first", 50, "job_common", f"INSERT INTO {log} VALUES ('first')")
    await _queue(ctx, "broken", 50, "job_common", f"INSERT INTO {log} VALUES (1/0)")
    await _queue(ctx, "after-broken", 50, "job_common", f"INSERT INTO {log} VALUES ('after')")
    await _queue(ctx, "other-table", 50, "other", f"INSERT INTO {log} VALUES ('other')")
    events = Events()
    seen: list[tuple[str, str]] = []
    events.on("bam", lambda e: seen.append((e["name"], e["status"])))
    errors: list[Any] = []
    events.on("error", errors.append)

    assert await run_commands(ctx, events) == 3
    assert await _statuses(ctx) == {
        "first": "completed",
        "broken": "failed",
        "after-broken": "pending",  # held behind the failure (same migration, same table)
        "other-table": "completed",
    }
    [broken] = [e for e in await get_bam_entries(ctx) if e.name == "broken"]
    assert "division by zero" in (broken.error or "")
    assert ("broken", "failed") in seen and ("first", "in_progress") in seen
    assert len(errors) == 1

    # the retry fails again until the command is fixed; then its successor runs
    await run_commands(ctx)
    assert (await _statuses(ctx))["after-broken"] == "pending"
    await ctx.db.execute(
        f"UPDATE {ctx.q}.bam SET command = $1 WHERE name = 'broken'",
        [f"INSERT INTO {log} VALUES ('fixed')"],
    )
    await run_commands(ctx)
    assert set((await _statuses(ctx)).values()) == {"completed"}
    rows = await ctx.db.execute(f"SELECT step FROM {log}")
    assert sorted(r["step"] for r in rows) == ["after", "first", "fixed", "other"]


async def test_two_workers_run_each_command_once(db: Any, backend: Any, schema: str) -> None:
    if backend.capabilities.single_session:
        pytest.skip("two workers need two sessions; this engine has one")
    from qcore.verbs.schema import install_or_migrate

    ctx = Context(db=db, backend=backend, schema_spec=schema)
    await install_or_migrate(ctx)
    await ctx.db.execute_script(f"CREATE TABLE {ctx.q}.bam_log (n int)")
    for n in range(8):
        await _queue(ctx, f"c{n}", 50, f"t{n}", f"INSERT INTO {ctx.q}.bam_log VALUES ({n})")
    other = Context(db=db, backend=backend, schema_spec=schema)
    claimed = await asyncio.gather(run_commands(ctx), run_commands(other))
    assert sum(claimed) == 8
    rows = await ctx.db.execute(f"SELECT n FROM {ctx.q}.bam_log ORDER BY n")
    assert [r["n"] for r in rows] == list(range(8))


async def test_a_concurrent_build_runs_and_an_interrupted_one_is_healed(ctx: Context) -> None:
    if not ctx.backend.capabilities.index_build_progress:
        pytest.skip("healing an interrupted concurrent build needs index_build_progress")
    table = "job_common" if ctx.backend.schema.partitioned else "job"
    build = f"CREATE INDEX CONCURRENTLY IF NOT EXISTS bam_probe ON {ctx.q}.{table} (name, id)"
    await _queue(ctx, "build", 50, table, build)
    await run_commands(ctx)
    assert await _statuses(ctx) == {"build": "completed"}
    # an interrupted build leaves an INVALID index and a failed row
    try:
        await ctx.db.execute_script(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid ="
            f" to_regclass('{ctx.q}.bam_probe')"
        )
    except DatabaseError as exc:
        pytest.skip(f"this engine's catalog cannot be edited to fake an interruption: {exc}")
    await ctx.db.execute(f"UPDATE {ctx.q}.bam SET status = 'failed' WHERE name = 'build'")
    await run_commands(ctx)
    assert await _statuses(ctx) == {"build": "completed"}
    [row] = await ctx.db.execute(
        f"SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{ctx.q}.bam_probe')"
    )
    assert row["indisvalid"] is True


async def test_stop_ends_a_command_that_outlives_the_timeout(
    db: Any, backend: Any, schema: str
) -> None:
    if backend.capabilities.single_session:
        pytest.skip("cancelling a command needs a second session; this engine has one")
    ctx = Context(db=db, backend=backend, schema_spec=schema)
    from qcore.verbs.schema import install_or_migrate

    await install_or_migrate(ctx)
    await _queue(ctx, "slow", 50, "job_common", "SELECT pg_sleep(120)")
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, schedule=False)
    await boss.start()
    deadline = time.monotonic() + 60
    while not boss.is_bam_working():
        assert time.monotonic() < deadline, "the BAM worker never took the command"
        await asyncio.sleep(0.1)
    started = time.monotonic()
    await boss.stop(timeout=1)
    assert time.monotonic() - started < 60  # not the two minutes of the command
    assert await _statuses(ctx) == {"slow": "failed"}


async def test_the_summary_and_the_pages(ctx: Context) -> None:
    ids = [await _queue(ctx, f"c{n}", 40 + n % 2, "job_common", "SELECT 1") for n in range(5)]
    await ctx.db.execute(f"UPDATE {ctx.q}.bam SET status = 'completed' WHERE id = $1", [ids[0]])
    summary = {s.status: s.count for s in await get_bam_status(ctx)}
    assert summary == {"completed": 1, "pending": 4}
    first = await get_bam_entries(ctx, limit=2)
    assert [e.version for e in first] == [40, 40]  # oldest version first
    rest = await get_bam_entries(ctx, limit=100, after=first[-1].id)
    assert len(rest) == 3 and {e.id for e in first + rest} == set(ids)
    for bad in (0, 100_001, "10", True):
        with pytest.raises(ValidationError, match="limit"):
            await get_bam_entries(ctx, limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="a UUID"):
        await get_bam_entries(ctx, after="not-an-id")
    await ctx.db.execute(f"DELETE FROM {ctx.q}.bam WHERE id = $1", [first[-1].id])
    with pytest.raises(ValidationError, match="no longer exists"):
        await get_bam_entries(ctx, after=first[-1].id)

"""``work()`` options are checked before anything runs; the per-backend worker tests are
in the conformance suite (``qcore/conformance/suite/test_worker.py``)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from qcore import Boss, backends
from qcore.backend import MutationStrategy
from qcore.conformance.guard import emulation_conninfo
from qcore.conformance.helpers import running, states, until
from qcore.conformance.provisioners import Provisioner
from qcore.conformance.suite.test_settle_and_claim import count_settle_and_claims
from qcore.conformance.suite.test_worker_recovery import need_own_sessions
from qcore.context import Context
from qcore.errors import ConfigError
from qcore.job import Job
from qcore.verbs import jobs, queues
from tests.conftest import admin_execute


async def test_work_options_are_checked_before_anything_runs() -> None:
    boss = Boss("postgresql://nobody@127.0.0.1:1/none", supervise=False)

    async def handler(batch: list[Job]) -> None:
        return None

    for bad in (
        {"batch_size": 0},
        {"local_concurrency": 0},
        {"local_concurrency": True},
        {"polling_interval_seconds": 0.1},
        {"heartbeat_refresh_seconds": 0},
        {"notify_polling_interval_seconds": 0.2},
        {"include_metadata": "yes"},
        {"min_priority": 5, "max_priority": 1},
    ):
        with pytest.raises(ConfigError):
            await boss.work("q", handler, **bad)
    with pytest.raises(ConfigError):
        await boss.work("bad name!", handler)
    with pytest.raises(ConfigError):
        await boss.work("q", "not callable")  # type: ignore[arg-type]
    assert boss.worker_statuses() == []


async def _hold_first_completion(ctx: Context, queue: str) -> None:
    """A trigger on the queue's job table that holds the first completion's statement
    for a minute (``pg_sleep``), so a test can terminate its connection meanwhile."""
    rows = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = $1", [queue])
    table = f'{ctx.q}."{rows[0]["table_name"]}"'
    await ctx.db.execute_script(
        f"CREATE SEQUENCE {ctx.q}.hold_seq; CREATE FUNCTION {ctx.q}.hold() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN IF NEW.state = 'completed'"
        f" AND nextval('{ctx.q}.hold_seq') = 1 THEN PERFORM pg_sleep(60); END IF;"
        f" RETURN NEW; END $$; CREATE TRIGGER hold BEFORE UPDATE ON {table}"
        f" FOR EACH ROW EXECUTE FUNCTION {ctx.q}.hold()"
    )


async def _held(ctx: Context) -> list[dict[str, Any]]:
    """The sessions held in that completion."""
    return await ctx.db.execute(
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
        " AND query LIKE '%done AS (UPDATE%' AND pid <> pg_backend_pid()"
    )


async def test_a_settle_and_claim_killed_mid_statement_loses_nothing(
    pool: Any, ctx: Context, schema: str, provisioned: Provisioner
) -> None:
    """The connection running a worker's settle-and-claim is terminated while the server
    executes it: the statement is undone whole, and every job is still handled and
    completed exactly once (the batch is settled again, the claim made again)."""
    need_own_sessions(ctx.backend, provisioned)
    await queues.create_queue(ctx, "q")
    await _hold_first_completion(ctx, "q")
    sent = await jobs.insert(ctx, "q", [{"data": {"n": n}} for n in range(10)])
    assert sent is not None
    handled: Counter[uuid.UUID] = Counter()

    async def handler(batch: list[Job]) -> None:
        handled.update(j.id for j in batch)

    async with running(Boss(db=pool, schema=schema, supervise=False)) as boss:
        await boss.work("q", handler, batch_size=1, local_concurrency=2)
        [victim] = await until(lambda: _held(ctx), timeout=60, what="a settle-and-claim in flight")
        [killed] = await ctx.db.execute(
            "SELECT pg_terminate_backend($1::int) AS ok", [victim["pid"]]
        )
        assert killed["ok"] is True

        async def drained() -> bool:
            return await states(ctx, "q") == {"completed": 10}

        await until(drained, timeout=120, what="every job completed")
    assert set(handled) == set(sent) and set(handled.values()) == {1}


@pytest.mark.postgres
async def test_a_split_settle_and_claim_killed_mid_pipeline_loses_nothing(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a backend splits its mutations (the cockroachdb backend, here on PostgreSQL
    in its session settings) the settle and the claim are two statements of one
    transaction, sent in one pipelined exchange. The connection is terminated while the
    server holds the complete: neither lands, and every job is still handled and
    completed exactly once."""
    cockroach = backends.get("cockroachdb")
    assert cockroach.mutation is MutationStrategy.SPLIT
    merged = count_settle_and_claims(monkeypatch)
    boss = Boss(
        emulation_conninfo(pg_dsn, cockroach),
        backend=cockroach,
        schema="qcore_split_settle",
        supervise=False,
    )
    handled: Counter[uuid.UUID] = Counter()

    async def handler(batch: list[Job]) -> None:
        handled.update(j.id for j in batch)

    try:
        async with running(boss):
            ctx = boss.context()
            await queues.create_queue(ctx, "q")
            await _hold_first_completion(ctx, "q")
            sent = await jobs.insert(ctx, "q", [{"data": {"n": n}} for n in range(10)])
            assert sent is not None
            await boss.work("q", handler, batch_size=1, local_concurrency=2)
            [victim] = await until(lambda: _held(ctx), timeout=60, what="a settle in flight")
            await ctx.db.execute("SELECT pg_terminate_backend($1::int)", [victim["pid"]])

            async def drained() -> bool:
                return await states(ctx, "q") == {"completed": 10}

            await until(drained, timeout=120, what="every job completed")
    finally:
        admin_execute("DROP SCHEMA IF EXISTS qcore_split_settle CASCADE", pg_dsn)
    assert set(handled) == set(sent) and set(handled.values()) == {1}
    assert merged and merged[0] == 1  # the held complete was a settle-and-claim's

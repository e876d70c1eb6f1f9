"""pg-boss 12.38's async migration worker and qcore's on the same ``bam`` rows: both
claim under pg-boss's ``bamClaim`` advisory lock, so every command runs once, whoever
runs it, and both mark it. Local PostgreSQL only."""

from __future__ import annotations

import asyncio

from qcore.conformance.helpers import until
from qcore.context import Context
from qcore.services.bam import run_commands
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = interop_marks()

COMMANDS = 12


async def test_qcore_and_pgboss_run_each_command_once(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await ctx.db.execute_script(f"CREATE TABLE {ctx.q}.bam_log (n int, pid int)")
    for n in range(COMMANDS):
        # a short sleep in each, so the two workers overlap
        command = f"INSERT INTO {ctx.q}.bam_log SELECT {n}, pg_backend_pid() FROM pg_sleep(0.2)"
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.bam (name, version, table_name, command, created_on)"
            f" VALUES ($1, 46, $2, $3, clock_timestamp() + {n} * interval '1 millisecond')",
            [f"c{n}", f"t{n}", command],
        )
    pgboss = asyncio.to_thread(
        run_ok,
        {
            "connectionString": pg_dsn,
            "schema": ctx.schema_spec,
            "migrate": True,
            "actions": [{"op": "start"}, {"op": "sleep", "args": [5000]}, {"op": "stop"}],
        },
    )
    node = asyncio.ensure_future(pgboss)

    async def pgboss_took_one() -> bool:
        rows = await ctx.db.execute(f"SELECT 1 FROM {ctx.q}.bam WHERE status <> 'pending'")
        return bool(rows)

    await until(pgboss_took_one, timeout=60, what="pg-boss's worker to take a command")
    claimed_here = await run_commands(ctx)  # qcore's worker joins while pg-boss's runs
    await node
    rows = await ctx.db.execute(f"SELECT n FROM {ctx.q}.bam_log ORDER BY n")
    assert [r["n"] for r in rows] == list(range(COMMANDS))  # each exactly once
    states = await ctx.db.execute(f"SELECT DISTINCT status FROM {ctx.q}.bam")
    assert [s["status"] for s in states] == ["completed"]
    assert claimed_here < COMMANDS  # pg-boss ran at least the one it took first

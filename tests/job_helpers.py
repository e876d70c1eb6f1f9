"""Small reads the queue and job tests share: row counts, the server clock, raw rows.

Test plumbing, written against the installed schema directly so the
assertions do not depend on the code under test.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from qcore.context import Context


async def count(ctx: Context, table: str = "job", where: str = "true", *params: Any) -> int:
    rows = await ctx.db.execute(
        f"SELECT count(*)::int AS n FROM {ctx.q}.{table} WHERE {where}", params
    )
    return int(rows[0]["n"])


async def totals(ctx: Context) -> tuple[int, int]:
    """(queues, jobs) in the schema: what "nothing was written" is checked against."""
    return await count(ctx, "queue"), await count(ctx, "job")


async def server_now(ctx: Context) -> dt.datetime:
    rows = await ctx.db.execute("SELECT clock_timestamp() AS now")
    value = rows[0]["now"]
    assert isinstance(value, dt.datetime)
    return value


async def row(ctx: Context, job_id: Any) -> dict[str, Any]:
    rows = await ctx.db.execute(f"SELECT * FROM {ctx.q}.job WHERE id = $1::uuid", [job_id])
    assert len(rows) == 1, f"expected one row for {job_id}, got {len(rows)}"
    return rows[0]


async def states(ctx: Context, queue: str) -> dict[str, int]:
    rows = await ctx.db.execute(
        f"SELECT state::text AS state, count(*)::int AS n FROM {ctx.q}.job WHERE name = $1"
        " GROUP BY state ORDER BY state",
        [queue],
    )
    return {r["state"]: r["n"] for r in rows}

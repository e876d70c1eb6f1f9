"""The statistics step of the supervise pass.

A job table whose planner statistics describe a much smaller table is analyzed.

A backlog written faster than autovacuum's analyze follows (a burst, a bulk insert, a
table with autovacuum turned off) leaves the planner with the statistics of the small
table it was: a prepared statement then settles on a generic plan chosen for a few
pages and keeps it once the queue holds a hundred thousand jobs (a settle that finds
its ids among every job of the queue through the ``(name, created_on)`` index, 10 ms
where it takes 0.04). ``ANALYZE`` replaces the statistics, and the server re-plans
every cached statement on that table. A table qualifies once the rows changed since
its last analyze reach :data:`MIN_CHANGED_ROWS` and :data:`GROWTH` times the rows its
statistics count; autovacuum's own threshold (a tenth) stays the usual path, this one
catches what it lags behind. Backends without ``vacuum_stats`` skip the step.
"""

from __future__ import annotations

from qcore import retry
from qcore.context import Context
from qcore.sql import statistics as sql

__all__ = ["GROWTH", "MIN_CHANGED_ROWS", "refresh_statistics"]

#: the fewest changed rows that make a table's statistics worth refreshing
MIN_CHANGED_ROWS = 1_000
#: changed rows, as a multiple of the rows the statistics count, that make them stale
GROWTH = 1.0


async def refresh_statistics(ctx: Context) -> list[str]:
    """Analyze the job tables whose statistics went stale; their names."""
    if not ctx.backend.capabilities.vacuum_stats:
        return []
    statement = sql.stale_job_tables(ctx.q)
    rows = await retry.run(
        ctx, statement, schema=ctx.schema, min_rows=MIN_CHANGED_ROWS, growth=GROWTH
    )
    tables = [str(row["table_name"]) for row in rows]
    for table in tables:
        await ctx.db.execute_script(sql.analyze(ctx.q, table))
    return tables

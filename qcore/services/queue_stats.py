"""The queue-stats step of the supervise pass.

The reads of what it wrote are :mod:`qcore.verbs.stats`.

For the queues the monitor claimed, one statement counts the job table and writes the
counts on each queue row (see :mod:`qcore.sql.stats` for what each column
means); with ``persist_queue_stats`` the throughput window is counted too and a
snapshot per queue goes to ``queue_stats``. Each queue whose queued count is over its
``warning_queue_size`` (or, without one, the ``Boss``'s) raises a ``queue_backlog``
warning.
"""

from __future__ import annotations

from qcore import retry
from qcore.context import Context
from qcore.events import Events
from qcore.sql import stats as sql
from qcore.verbs.stats import count_queues

__all__ = ["BACKLOG", "cache_stats"]

#: the type of the warning a queue over its backlog threshold raises
BACKLOG = "queue_backlog"


async def cache_stats(
    ctx: Context,
    table: str,
    names: list[str],
    *,
    persist: bool,
    warning_queue_size: int,
    pass_seconds: float,
    events: Events | None,
) -> list[str]:
    """Count the queues ``names`` of ``table`` and cache the counts on their rows.

    Returns the queues written (none when another instance holds the stats lock).
    """
    reset = max(sql.DELTA_RESET_MAX_SECONDS, int(2 * pass_seconds))
    rows = await count_queues(ctx, table, names, throughput=persist, reset_seconds=reset)
    written = sorted(str(r["name"]) for r in rows)
    if persist and written:
        await retry.run(ctx, sql.insert_queue_stats(ctx.q), names=written)
    if events is not None:
        for row in rows:
            threshold = int(row["warning_queued"] or 0) or warning_queue_size
            queued = int(row["queued_count"])
            if queued > threshold:
                events.warn(
                    BACKLOG,
                    f'queue "{row["name"]}" has {queued} jobs in the created or retry state,'
                    f" over its warning threshold of {threshold}",
                    name=row["name"],
                    queued_count=queued,
                    warning_queue_size=threshold,
                )
    return written

"""The flow resolver: children of completed parents are released.

This happens off the completion's hot path (as pg-boss 12.38 does it: completing a job
does no dependency work).

A pass (:func:`resolve_flows`) walks the queues grouped by physical job table, 100
names at a time, and resolves batches of completed blocking parents
(:mod:`qcore.sql.flows`) until a batch comes back short, at most
:data:`MAX_BATCHES_PER_CHUNK` per chunk; each batch that resolved something emits a
``flow`` event ``{"table", "resolved"}``. :class:`FlowResolver` runs a pass every
``flow_interval_seconds`` behind pg-boss's ``flow_on`` gate, so one instance per
interval resolves, qcore or pg-boss; ``Boss.resolve_flow()`` runs one now, ungated.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import Any

from qcore import retry
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.context import Context
from qcore.db import Database
from qcore.events import Events
from qcore.periodic import Periodic
from qcore.sql import flows as sql
from qcore.sql import monitor as monitor_sql

__all__ = ["CHUNK_SIZE", "MAX_BATCHES_PER_CHUNK", "FlowResolver", "resolve_flows"]

CHUNK_SIZE = 100
#: batches one pass resolves per chunk of queues before moving on (the next pass goes on)
MAX_BATCHES_PER_CHUNK = 100


async def _resolve_batch(ctx: Context, table: str, names: list[str]) -> int:
    """One batch: how many parents it resolved."""
    skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
    if ctx.backend.mutation is MutationStrategy.CTE:
        statement = sql.resolve_flow_batch(ctx.q, table, skip_locked=skip_locked)
        [row] = await retry.run(ctx, statement, names=names)
        return int(row["resolved"])

    async def split(tx: Database) -> int:
        lock = sql.lock_blocking_parents(ctx.q, table, skip_locked=skip_locked)
        parents = await tx.execute(lock.sql, lock.bind(names=names))
        if not parents:
            return 0
        values = {"names": [p["name"] for p in parents], "ids": [p["id"] for p in parents]}
        for statement in (sql.decrement_dependents(ctx.q), sql.clear_blocking(ctx.q, table)):
            await tx.execute(statement.sql, statement.bind(**values))
        return len(parents)

    if ctx.db.in_transaction:
        return await split(ctx.db)
    return await retry.transaction(ctx, split)


async def resolve_flows(
    ctx: Context, events: Events | None = None, stopping: Callable[[], bool] = lambda: False
) -> int:
    """One resolver pass over every queue; how many parents it resolved."""
    rows = await retry.run(ctx, monitor_sql.monitor_queues(ctx.q, by_name=False), name=None)
    total = 0
    for table, group in groupby(rows, key=lambda r: str(r["table_name"])):
        names = [str(r["name"]) for r in group]
        for start in range(0, len(names), CHUNK_SIZE):
            chunk = names[start : start + CHUNK_SIZE]
            for _ in range(MAX_BATCHES_PER_CHUNK):
                if stopping():
                    return total
                resolved = await _resolve_batch(ctx, table, chunk)
                total += resolved
                if resolved and events is not None:
                    events.emit("flow", {"table": table, "resolved": resolved})
                if resolved < sql.FLOW_BATCH_SIZE:
                    break
    return total


class FlowResolver(Periodic):
    """A resolver pass every ``interval_seconds``, for the instance that takes the ``flow_on`` gate.

    The gate is the interval's; :meth:`resolve_now` runs one at once, ungated.
    """

    name = "flows"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        interval_seconds: float,
        *,
        enabled: bool = True,
    ) -> None:
        super().__init__(events, interval_seconds, detached=True, enabled=enabled)
        self._context = context

    async def run_pass(self) -> bool:
        ctx = self._context()
        claimed = await retry.run(ctx, sql.claim_flow_pass(ctx.q), seconds=self.interval_seconds)
        if claimed:
            await resolve_flows(ctx, self.events, lambda: self.stopping)
        return True

    async def resolve_now(self) -> int:
        """A pass now (after the one in flight); how many parents it resolved."""

        async def work() -> int:
            return await resolve_flows(self._context(), self.events, lambda: self.stopping)

        resolved: Any = await self.exclusive(work)
        return int(resolved or 0)

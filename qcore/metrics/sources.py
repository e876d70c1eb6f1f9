"""What the recorder reads: :class:`PgBossQueues`, the queues of one pg-boss/qcore job schema.

They are read only, never written.

A source answers, per queue: the jobs completed and failed per closed minute (on the
schema's clock), their wait and run times per histogram slot, the age of the oldest
waiting job, and whether the index those counts need exists. Its queues are keyed
``pgboss:<schema>:<queue>`` in the store (:func:`namespace_of`), its rollup
``pgboss:<schema>:__global__``, so two schemas, or a board of another system, can share
one store without one's totals counting the other's jobs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from qcore import retry
from qcore.context import Context
from qcore.metrics import histogram
from qcore.sql import metrics as sql
from qcore.sql.catalog import job_table_name

__all__ = ["Clock", "PgBossQueues", "namespace_of"]

#: the most priority levels the queue-age probe visits per queue
AGE_PRIORITY_LEVELS = 100

#: parts a sampled minute is read in (so the sample spreads over the minute)
_SLICES = 6


def namespace_of(schema: str) -> str:
    """The key prefix of a job schema's queues in a metrics store."""
    return f"pgboss:{schema}:"


@dataclass(frozen=True)
class Clock:
    """The schema's clock as minute indexes.

    The first minute not yet closed (with the late-commit margin) and the current one.
    """

    closed: int
    current: int


#: minute -> (completed, failed)
Counts = dict[int, tuple[int, int]]
#: minute -> (wait histogram, run histogram)
Latency = dict[int, tuple[list[int], list[int]]]


class PgBossQueues:
    """The queues of a pg-boss/qcore schema as the recorder's sources.

    They are resolved on every tick (a queue created since records from its next tick);
    ``allow`` limits them to those names.
    """

    def __init__(self, ctx: Context, *, allow: Collection[str] | None = None) -> None:
        self.ctx = ctx
        self.allow = frozenset(allow) if allow is not None else None
        #: the prefix of this source's keys in the store
        self.namespace = namespace_of(ctx.schema)
        self._now: str | None = None

    async def _clock_expression(self) -> str:
        """The clock expression: qcore's ``job_now()`` where the schema has it, else ``now()``.

        A test clock moves ``job_now()``; the database's ``now()`` serves a schema pg-boss
        installed.
        """
        if self._now is None:
            [row] = await retry.run(self.ctx, sql.has_job_now(self.ctx.q))
            self._now = f"{self.ctx.q}.job_now()" if row["present"] else "now()"
        return self._now

    async def names(self) -> list[str]:
        rows = await retry.run(self.ctx, sql.recorded_queues(self.ctx.q))
        names = [str(r["name"]) for r in rows]
        return [n for n in names if self.allow is None or n in self.allow]

    async def clock(self, margin_seconds: float) -> Clock:
        now = await self._clock_expression()
        [row] = await retry.run(self.ctx, sql.clock(now), margin=margin_seconds)
        return Clock(closed=int(row["closed"]), current=int(row["current"]))

    async def finished(self, queue: str, first: int, last: int) -> Counts:
        """minute -> (completed, failed) for the minutes ``first`` to ``last - 1``."""
        rows = await retry.run(
            self.ctx, sql.finished_per_minute(self.ctx.q), queue=queue, first=first, last=last
        )
        return {int(r["minute"]): (int(r["completed"]), int(r["failed"])) for r in rows}

    async def latency(self, queue: str, counts: Counts, max_samples: int) -> Latency:
        """minute -> (wait, run) histograms for the minutes of ``counts``.

        Every job of a minute that finished at most ``max_samples``; a uniform sample of
        that many from a busier one, scaled back to the minute's count.
        """
        minutes = sorted(counts)
        if not minutes:
            return {}
        slices = [1 if sum(counts[m]) <= max_samples else _SLICES for m in minutes]
        rows = await retry.run(
            self.ctx,
            sql.latency_samples(self.ctx.q),
            queue=queue,
            bounds=[float(b) for b in histogram.BOUNDS_MS],
            minutes=minutes,
            slices=slices,
            per_slice=[max(max_samples // s, 1) for s in slices],
        )
        sampled: Latency = {m: ([0] * histogram.SLOTS, [0] * histogram.SLOTS) for m in minutes}
        for r in rows:
            wait, run = sampled[int(r["minute"])]
            (wait if r["metric"] == "wait" else run)[int(r["slot"])] += int(r["n"])
        for minute, (wait, run) in sampled.items():
            taken = sum(run)
            total = sum(counts[minute])
            if taken and total > taken:  # a sample: scale back to the minute's count
                scale = total / taken
                wait[:] = [round(n * scale) for n in wait]
                run[:] = [round(n * scale) for n in run]
        return {m: h for m, h in sampled.items() if any(h[0]) or any(h[1])}

    async def queue_ages(self, queues: Sequence[str]) -> dict[str, float]:
        """queue -> seconds the oldest waiting job has waited.

        Only for queues where one waits.
        """
        rows = await retry.run(
            self.ctx,
            sql.oldest_waiting(self.ctx.q, await self._clock_expression()),
            queues=list(queues),
            levels=AGE_PRIORITY_LEVELS,
        )
        return {str(r["name"]): float(r["age"]) for r in rows if r["age"] is not None}

    async def indexed(self) -> dict[str, bool]:
        """queue -> whether an index serves its counts (``(name, completed_on)``).

        Every queue is True where the backend keeps no index catalog to check.
        """
        if not self.ctx.backend.capabilities.drift_catalog:
            return {name: True for name in await self.names()}
        rows = await retry.run(
            self.ctx, sql.usable_completed_index(self.ctx.q), schema=self.ctx.schema
        )
        return {str(r["name"]): bool(r["usable"]) for r in rows}

    async def index_statements(self, queues: Collection[str]) -> list[str]:
        """The statements that give ``queues`` the index their counts need.

        That is pg-boss's own ``job_i16`` on each of their job tables, built without
        blocking writes.
        """
        rows = await retry.run(self.ctx, sql.queue_tables(self.ctx.q), queues=sorted(queues))
        tables = sorted({str(r["table_name"]) for r in rows})
        if not self.ctx.backend.schema.partitioned:
            tables = [job_table_name(self.ctx.backend, "")]
        return [sql.completed_index(self.ctx.q, table) for table in tables]

    async def build_indexes(self, queues: Collection[str]) -> list[str]:
        """Build what :meth:`index_statements` gives; what ran.

        One statement at a time outside a transaction (each waits for the writes in
        flight, blocking none).
        """
        statements = await self.index_statements(queues)
        for statement in statements:
            await self.ctx.db.execute(statement)
        return statements

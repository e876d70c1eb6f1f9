"""A fresh schema for one run of one scenario, on the parent side.

:func:`fresh_schema` installs qcore in a schema of its own (``bench_<hex>``)
with the backend profile under test, creates the queues the scenario needs,
and drops the schema afterwards, whatever happened. The raw baselines get
their plain tables in the same schema (:meth:`Env.make_raw_table`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.common import quote_ident
from qcore import Boss

__all__ = ["Env", "fresh_schema"]

#: the queue every throughput scenario uses
QUEUE = "bench"


@dataclass
class Env:
    """One fresh schema: where it is, its parent-side ``Boss`` and an admin connection."""

    dsn: str
    backend: str
    schema: str
    boss: Boss
    admin: psycopg.AsyncConnection[Any]
    queue: str = QUEUE
    #: the table qcore's rows of ``queue`` physically live in (``job_common``, ``job``, …)
    physical: str = "job"
    raw_tables: list[str] = field(default_factory=list)

    @property
    def q(self) -> str:
        return quote_ident(self.schema)

    def table(self, name: str) -> str:
        return f"{self.q}.{quote_ident(name)}"

    async def rows(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        cur = await self.admin.execute(sql, params)
        return await cur.fetchall() if cur.description else []

    async def value(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        rows = await self.rows(sql, params)
        return rows[0][0] if rows else None

    async def make_raw_table(self, name: str) -> str:
        """A plain table ``LIKE`` qcore's physical job table, ``INCLUDING ALL``: the same
        columns, types, defaults, CHECK constraints and indexes (not the foreign keys,
        which ``LIKE`` never copies, nor partitioning)."""
        await self.admin.execute(
            f"CREATE TABLE {self.table(name)} (LIKE {self.table(self.physical)} INCLUDING ALL)"
        )
        self.raw_tables.append(name)
        return name

    async def copy_foreign_keys(self, name: str) -> None:
        """Give the plain table ``name`` the foreign keys of qcore's physical job table."""
        for (definition,) in await self.rows(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'f' ORDER BY conname",
            (self.table(self.physical),),
        ):
            await self.admin.execute(f"ALTER TABLE {self.table(name)} ADD {definition}")

    async def analyze(self, *tables: str) -> None:
        """VACUUM ANALYZE (ANALYZE where the engine has no VACUUM) so both sides start
        with statistics and a visibility map, and autovacuum has less reason to kick in."""
        for name in tables:
            try:
                await self.admin.execute(f"VACUUM ANALYZE {self.table(name)}")
            except psycopg.Error:
                await self.admin.execute(f"ANALYZE {self.table(name)}")

    async def checkpoint(self) -> None:
        """CHECKPOINT before a timed side: neither side then pays for a checkpoint that
        the other's writes (or the preparation's) set off, and both start with clean
        pages (each first write logs a full page alike). Skipped where the engine or
        the role cannot."""
        try:
            await self.admin.execute("CHECKPOINT")
        except psycopg.Error:
            pass

    def spec(self, **extra: Any) -> dict[str, Any]:
        """What a child process needs to find this schema."""
        return {
            "dsn": self.dsn,
            "backend": self.backend,
            "schema": self.schema,
            "queue": self.queue,
            "physical": self.physical,
            **extra,
        }


@asynccontextmanager
async def fresh_schema(
    dsn: str, backend: str, queues: Sequence[tuple[str, dict[str, Any]]] = ((QUEUE, {}),)
) -> AsyncIterator[Env]:
    """qcore installed in a new schema with ``queues`` created; dropped on exit."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True, application_name="bench")
    boss = Boss(
        dsn,
        schema=schema,
        backend=backend,
        supervise=False,
        max=2,
        application_name="bench-setup",
    )
    try:
        await boss.start()
        for name, options in queues:
            await boss.create_queue(name, **options)
        queue = queues[0][0]
        physical = await _physical_table(admin, schema, queue)
        yield Env(
            dsn=dsn,
            backend=backend,
            schema=schema,
            boss=boss,
            admin=admin,
            queue=queue,
            physical=physical,
        )
    finally:
        try:
            await boss.stop(timeout=5)
        finally:
            try:
                await admin.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
            finally:
                await admin.close()


async def _physical_table(admin: psycopg.AsyncConnection[Any], schema: str, queue: str) -> str:
    cur = await admin.execute(
        f"SELECT table_name FROM {quote_ident(schema)}.queue WHERE name = %s", (queue,)
    )
    row = await cur.fetchone()
    return str(row[0]) if row and row[0] else "job"

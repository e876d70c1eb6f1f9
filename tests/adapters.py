"""One factory per way of reaching PostgreSQL, for the shared adapter suite.

Each factory opens what a user would open (a pool, a connection, an
SQLAlchemy engine or session, a custom ``execute_sql`` object), hands it to
qcore through ``qcore.db.adapt`` or ``qcore.db.connect``, and says what the
result can do, so one parametrised suite runs against every driver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from qcore.db import Database, Json, adapt, connect

# What a subject can do, beyond executing statements:
OWN_TX = "own_transactions"  # transaction() really commits/rolls back on its own
CALLER_TX = "caller_transaction"  # statements join a transaction the caller commits
RECOVERS = "recovers_after_kill"  # a killed connection is replaced for the next statement
LISTEN = "listen"


@dataclass
class Subject:
    db: Database
    caps: set[str]
    commit: Callable[[], Awaitable[None]] | None = None  # commit the caller's transaction
    rollback: Callable[[], Awaitable[None]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# The value round trip every adapter must pass: (id, SQL type, parameter, expected value back).
U1, U2 = uuid.UUID(int=1), uuid.uuid4()
AWARE = datetime(2026, 11, 29, 12, 30, 45, 123456, tzinfo=timezone.utc)
OFFSET = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5, minutes=30)))

ROUND_TRIP: list[tuple[str, str, Any, Any]] = [
    ("jsonb-dict", "jsonb", {"a": 1, "b": [1, "x", None], "c": {"d": True}}, None),
    ("jsonb-list", "jsonb", Json([1, "two", {"3": 4.5}]), [1, "two", {"3": 4.5}]),
    ("jsonb-string", "jsonb", Json("text"), "text"),
    ("uuid", "uuid", U2, None),
    ("timestamptz-utc", "timestamptz", AWARE, None),
    ("timestamptz-offset", "timestamptz", OFFSET, None),
    ("text-array", "text[]", ["a", "b,c", '"q"', "", None], None),
    ("uuid-array", "uuid[]", [U1, U2], None),
    ("null", "text", None, None),
    ("bool", "boolean", True, None),
    ("int", "bigint", 2**40 + 7, None),
    ("float", "double precision", 1.25, None),
    ("str", "text", "héllo 'q' %s $1 ? %%", None),
]

ROUND_TRIP_CASES = pytest.mark.parametrize(
    ("sql_type", "value", "expected"),
    [r[1:] for r in ROUND_TRIP],
    ids=[r[0] for r in ROUND_TRIP],
)


async def check_round_trip(db: Database, sql_type: str, value: Any, expected: Any) -> None:
    """``value`` sent as a ``sql_type`` parameter comes back equal and of the same plain type."""
    rows = await db.execute(f"SELECT $1::{sql_type} AS v", [value])
    want = expected if expected is not None else value
    got = rows[0]["v"]
    assert got == want
    assert type(got) is type(want)
    if isinstance(want, list):
        assert [type(x) for x in got] == [type(x) for x in want]
    if isinstance(want, datetime):
        assert got.utcoffset() is not None


Factory = Callable[[str], Any]  # dsn -> async context manager yielding a Subject
FACTORIES: dict[str, Factory] = {}


def factory(name: str) -> Callable[[Factory], Factory]:
    def register(fn: Factory) -> Factory:
        FACTORIES[name] = asynccontextmanager(fn)
        return fn

    return register


def _sa_url(dsn: str, driver: str) -> str:
    return dsn.replace("postgresql://", f"postgresql+{driver}://", 1)


@factory("psycopg-pool")
async def _psycopg_owned(dsn: str) -> AsyncIterator[Subject]:
    db = await connect(dsn)
    yield Subject(db, {OWN_TX, RECOVERS, LISTEN})
    await db.close()


@factory("psycopg-user-pool")
async def _psycopg_user_pool(dsn: str) -> AsyncIterator[Subject]:
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False) as pool:
        yield Subject(adapt(pool), {OWN_TX, RECOVERS, LISTEN})


@factory("psycopg-user-connection")
async def _psycopg_user_conn(dsn: str) -> AsyncIterator[Subject]:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(dsn)  # not autocommit: the caller's transaction
    yield Subject(adapt(conn), {CALLER_TX}, commit=conn.commit, rollback=conn.rollback)
    await conn.close()


@factory("asyncpg-pool")
async def _asyncpg_owned(dsn: str) -> AsyncIterator[Subject]:
    db = await connect(dsn, driver="asyncpg")
    yield Subject(db, {OWN_TX, RECOVERS, LISTEN})
    await db.close()


@factory("asyncpg-user-connection")
async def _asyncpg_user_conn(dsn: str) -> AsyncIterator[Subject]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    yield Subject(adapt(conn), {OWN_TX})
    await conn.close()


@factory("sqlalchemy-async-engine-psycopg")
async def _sa_async_engine(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_sa_url(dsn, "psycopg"))
    yield Subject(adapt(engine), {OWN_TX, RECOVERS})
    await engine.dispose()


@factory("sqlalchemy-async-engine-asyncpg")
async def _sa_async_engine_asyncpg(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_sa_url(dsn, "asyncpg"))
    yield Subject(adapt(engine), {OWN_TX, RECOVERS})
    await engine.dispose()


@factory("sqlalchemy-async-connection")
async def _sa_async_conn(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_sa_url(dsn, "asyncpg"))
    async with engine.connect() as conn:
        yield Subject(adapt(conn), {CALLER_TX}, commit=conn.commit, rollback=conn.rollback)
    await engine.dispose()


@factory("sqlalchemy-async-session")
async def _sa_async_session(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(_sa_url(dsn, "psycopg"))
    async with AsyncSession(engine) as session:
        yield Subject(adapt(session), {CALLER_TX}, commit=session.commit, rollback=session.rollback)
    await engine.dispose()


@factory("sqlalchemy-engine")
async def _sa_engine(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy import create_engine

    engine = create_engine(_sa_url(dsn, "psycopg2"))
    yield Subject(adapt(engine), {OWN_TX, RECOVERS})
    engine.dispose()


@factory("sqlalchemy-connection")
async def _sa_conn(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy import create_engine

    engine = create_engine(_sa_url(dsn, "psycopg2"))
    with engine.connect() as conn:
        yield Subject(
            adapt(conn), {CALLER_TX}, commit=_sync(conn.commit), rollback=_sync(conn.rollback)
        )
    engine.dispose()


@factory("sqlalchemy-session")
async def _sa_session(dsn: str) -> AsyncIterator[Subject]:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(_sa_url(dsn, "psycopg"))
    with Session(engine) as session:
        yield Subject(
            adapt(session),
            {CALLER_TX},
            commit=_sync(session.commit),
            rollback=_sync(session.rollback),
        )
    engine.dispose()


@factory("psycopg-sync-connection")
async def _psycopg_sync_conn(dsn: str) -> AsyncIterator[Subject]:
    import psycopg

    conn = psycopg.connect(dsn)  # what Django 4.2+ holds: blocking, not in autocommit
    yield Subject(
        adapt(conn), {CALLER_TX}, commit=_sync(conn.commit), rollback=_sync(conn.rollback)
    )
    conn.close()


@factory("psycopg2-connection")
async def _psycopg2_conn(dsn: str) -> AsyncIterator[Subject]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    yield Subject(
        adapt(conn), {CALLER_TX}, commit=_sync(conn.commit), rollback=_sync(conn.rollback)
    )
    conn.close()


class AsyncExecuteSql:
    """A user's own async ``execute_sql`` object, built on asyncpg."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def execute_sql(self, text: str, values: list[Any]) -> Result:
        if not values and text.count(";") > 1:  # a script: the simple protocol, as node-postgres
            await self.pool.execute(text)
            return Result([])
        records = await self.pool.fetch(text, *values)
        return Result([dict(r) for r in records])


@dataclass
class Result:  # what node-postgres returns: an object with .rows
    rows: list[dict[str, Any]]


class SyncExecuteSql:
    """A user's own blocking ``execute_sql`` object, on psycopg's raw ($n) cursor."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute_sql(self, text: str, values: list[Any]) -> list[dict[str, Any]]:
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
            cur.execute(text, values or None)
            return cur.fetchall() if cur.description else []


@factory("custom-async")
async def _custom_async(dsn: str) -> AsyncIterator[Subject]:
    import asyncpg

    async def init(conn: Any) -> None:
        for name in ("json", "jsonb"):
            await conn.set_type_codec(name, encoder=str, decoder=json.loads, schema="pg_catalog")

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=init)
    yield Subject(adapt(AsyncExecuteSql(pool)), set())
    await pool.close()


@factory("custom-sync")
async def _custom_sync(dsn: str) -> AsyncIterator[Subject]:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    yield Subject(adapt(SyncExecuteSql(conn)), set())
    conn.close()


def _sync(fn: Callable[[], Any]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        fn()

    return run

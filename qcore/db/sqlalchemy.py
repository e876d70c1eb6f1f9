"""SQLAlchemy: an engine qcore checks connections out of, or a caller's connection or session.

* ``Engine`` / ``AsyncEngine``: each statement runs on its own connection in
  ``begin()`` (committed); ``transaction()`` is one connection in ``begin()``.
  qcore never disposes the engine.
* ``Connection`` / ``Session`` and their async twins belong to the caller:
  statements join the caller's transaction (autobegun if none is open), which
  qcore never commits, rolls back or closes. ``transaction()`` there is a
  SAVEPOINT (``begin_nested()``, which autobegins the outer transaction too):
  an exception inside rolls back qcore's part only, and the caller still
  commits the whole. Calls on one connection or session are serialised.

Sync objects run in a worker thread. Statements travel through
``exec_driver_sql`` in the dialect's own parameter style.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from qcore.db._base import Bound, Database, Rows
from qcore.db._placeholders import reorder, to_format
from qcore.db._threads import blocking
from qcore.db._values import dumps, is_json, normalize_rows, verbatim
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    QcoreError,
    database_error,
)

__all__ = ["SQLAlchemyDatabase", "map_error"]

T = TypeVar("T")
ACCEPTED = (
    "an SQLAlchemy Engine, Connection or Session (sync: run in a worker thread), or an"
    " AsyncEngine, AsyncConnection or AsyncSession"
)


def map_error(exc: BaseException, sql: str | None = None) -> QcoreError:
    """The qcore exception for an SQLAlchemy or driver exception."""
    if isinstance(exc, QcoreError):
        return exc
    lost = False
    if isinstance(exc, sa_exc.DBAPIError):
        lost = exc.connection_invalidated or (
            isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError))
            and _sqlstate(exc.orig) is None
        )
        exc = exc.orig if exc.orig is not None else exc
    elif isinstance(exc, sa_exc.TimeoutError):  # the pool had no connection to give
        return ConnectionLostError(str(exc), statement=sql, retryable=True)
    elif isinstance(exc, sa_exc.SQLAlchemyError):
        return DatabaseError(f"{type(exc).__name__}: {exc}", statement=sql)
    sqlstate = _sqlstate(exc)
    message = str(exc).strip() or type(exc).__name__
    if lost or (sqlstate is None and isinstance(exc, OSError)):
        return ConnectionLostError(message, sqlstate=sqlstate, statement=sql, retryable=True)
    if sqlstate is None:  # raised by the driver itself (a value it cannot adapt, ...)
        message = f"{type(exc).__name__}: {message}"
    return database_error(message, sqlstate=sqlstate, sql=sql)


def _sqlstate(exc: BaseException | None) -> str | None:
    """SQLSTATE of a driver exception: psycopg and asyncpg ``sqlstate``, psycopg2 ``pgcode``."""
    for err in (exc, getattr(exc, "__cause__", None)):
        code = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


@contextlib.contextmanager
def _mapped(sql: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        raise map_error(exc, sql) from exc


class _Style:
    """How one dialect takes ``$n`` statements and jsonb parameters."""

    def __init__(self, dialect: Dialect) -> None:
        self.dollar = dialect.paramstyle == "numeric_dollar"  # asyncpg
        if not self.dollar and dialect.paramstyle not in ("format", "pyformat"):
            raise ConfigError(
                f"the SQLAlchemy dialect {dialect.name}+{dialect.driver} uses the"
                f" {dialect.paramstyle!r} parameter style; qcore supports asyncpg, psycopg and"
                " psycopg2 (numeric_dollar, format or pyformat)"
            )
        self.json: Callable[[Any], Any] = dumps  # asyncpg's codec under SQLAlchemy takes text
        if dialect.driver == "psycopg":
            from psycopg.types.json import Jsonb

            self.json = lambda v: Jsonb(dumps(v), dumps=verbatim)
        elif dialect.driver == "psycopg2":
            from psycopg2.extras import Json

            self.json = lambda v: Json(dumps(v), dumps=verbatim)

    def bind(self, sql: str, params: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        values = [self.json(v) if is_json(v) else v for v in params]
        if self.dollar:
            return sql, tuple(values)
        text, order = to_format(sql)  # also doubles every literal %
        return text, tuple(reorder(order, values))


def _run(conn: Connection, text: str, args: tuple[Any, ...]) -> Rows:
    result = conn.exec_driver_sql(text, args)
    if not result.returns_rows:
        return []
    keys = list(result.keys())
    # the three drivers decode json/jsonb themselves (SQLAlchemy installs the codecs);
    # normalize_rows makes asyncpg's UUID subclass a plain uuid.UUID, in arrays too
    return normalize_rows([dict(zip(keys, row, strict=True)) for row in result.fetchall()])


def _run_script(conn: Connection, sql: str) -> None:
    # no parameters at all: psycopg and psycopg2 use the simple query protocol
    # (several statements) and leave % alone
    conn.exec_driver_sql(sql, execution_options={"no_parameters": True})


async def _async_script(conn: AsyncConnection, sql: str) -> None:
    if conn.dialect.driver != "asyncpg":
        return await conn.run_sync(_run_script, sql)
    # SQLAlchemy prepares every asyncpg statement (one per call): run the script on
    # the asyncpg connection itself, once a first statement has made SQLAlchemy's
    # adapter send its (lazy) BEGIN, so the script joins the transaction
    await conn.exec_driver_sql("SELECT 1")
    raw: Any = (await conn.get_raw_connection()).driver_connection
    try:
        await raw.execute(sql)
    except Exception as exc:
        if raw.is_closed():
            await conn.invalidate(exc)
            raise ConnectionLostError(str(exc), statement=sql, retryable=True) from exc
        raise


class _AsyncBound(Bound):
    """One async connection (or the connection of an async session's transaction)."""

    driver = "sqlalchemy"

    def __init__(self, get: Callable[[], Awaitable[AsyncConnection]], style: _Style) -> None:
        self._get, self._style, self._lock = get, style, asyncio.Lock()

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        text, args = self._style.bind(sql, params)
        async with self._lock:
            with _mapped(sql):
                return await (await self._get()).run_sync(_run, text, args)

    async def _execute_script(self, sql: str) -> None:
        async with self._lock:
            with _mapped(sql):
                await _async_script(await self._get(), sql)


class _SyncBound(Bound):
    """One sync connection (or a sync session's), used from a worker thread."""

    driver = "sqlalchemy"

    def __init__(self, get: Callable[[], Connection], style: _Style) -> None:
        self._get, self._style, self._lock = get, style, asyncio.Lock()

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        text, args = self._style.bind(sql, params)
        async with self._lock:
            with _mapped(sql):
                return await blocking(lambda: _run(self._get(), text, args))

    async def _execute_script(self, sql: str) -> None:
        async with self._lock:
            with _mapped(sql):
                await blocking(lambda: _run_script(self._get(), sql))


class SQLAlchemyDatabase(Database):
    """qcore over an SQLAlchemy engine, connection or session, sync or async."""

    driver = "sqlalchemy"

    def __init__(self, source: Any) -> None:
        super().__init__()
        if isinstance(source, (AsyncSession, Session)):
            try:
                dialect = source.get_bind().dialect
            except sa_exc.UnboundExecutionError as exc:
                raise ConfigError(f"the session is not bound to an engine: {exc}") from exc
        elif isinstance(source, (AsyncEngine, AsyncConnection, Engine, Connection)):
            dialect = source.dialect
        else:
            raise ConfigError(
                f"cannot use {type(source).__name__} as a database; qcore accepts {ACCEPTED}"
            )
        if isinstance(source, (Engine, Connection, Session)) and dialect.is_async:
            raise ConfigError(
                f"{type(source).__name__} runs an async driver ({dialect.driver}); pass the"
                " AsyncEngine, AsyncConnection or AsyncSession itself"
            )
        self._source = source
        self.joins_caller_transaction = not isinstance(source, (Engine, AsyncEngine))
        self.single_connection = self.joins_caller_transaction  # a connection or session
        self._style = _Style(dialect)
        self._lock = asyncio.Lock()  # serialises a caller's connection or session

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        src = self._source
        if isinstance(src, Engine):  # one worker-thread hop: check out, run, commit
            text, args = self._style.bind(sql, params)
            with _mapped(sql):
                return await asyncio.to_thread(_run_committed, src, text, args)
        async with self._use(savepoint=False) as tx:
            return await tx.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        async with self._use(savepoint=False) as tx:
            await tx.execute_script(sql)

    def _transaction(self) -> Any:
        return self._use(savepoint=True)

    @asynccontextmanager
    async def _use(self, *, savepoint: bool) -> AsyncIterator[Database]:
        """``_open()``, with the errors of BEGIN, SAVEPOINT, COMMIT or RELEASE mapped.

        Those of the block are not mapped here.
        """
        raised: BaseException | None = None
        try:
            async with self._open(savepoint) as tx:
                try:
                    yield tx
                except BaseException as exc:
                    raised = exc
                    raise
        except Exception as exc:
            if exc is raised:
                raise
            raise map_error(exc) from exc

    @asynccontextmanager
    async def _open(self, savepoint: bool) -> AsyncIterator[Database]:
        """A bound adapter on a fresh engine connection or the caller's.

        A fresh engine connection in ``begin()``, or the caller's connection in the
        caller's transaction (inside a SAVEPOINT when ``savepoint``).
        """
        src, style = self._source, self._style
        if isinstance(src, AsyncEngine):
            async with src.begin() as conn:
                yield _AsyncBound(_const(conn), style)
        elif isinstance(src, Engine):
            async with _in_thread(src.begin) as sync_conn:
                yield _SyncBound(lambda: sync_conn, style)
        elif isinstance(src, (AsyncConnection, AsyncSession)):
            get = _const(src) if isinstance(src, AsyncConnection) else src.connection
            nested = src.begin_nested() if savepoint else contextlib.nullcontext()
            async with self._lock, nested:
                yield _AsyncBound(get, style)
        else:
            get_sync = (lambda: src) if isinstance(src, Connection) else src.connection
            sync_nested = _in_thread(src.begin_nested) if savepoint else contextlib.nullcontext()
            async with self._lock, sync_nested:
                yield _SyncBound(get_sync, style)


def _run_committed(engine: Engine, text: str, args: tuple[Any, ...]) -> Rows:
    with engine.begin() as conn:
        return _run(conn, text, args)


def _const(conn: AsyncConnection) -> Callable[[], Awaitable[AsyncConnection]]:
    async def get() -> AsyncConnection:
        return conn

    return get


@asynccontextmanager
async def _in_thread(open_cm: Callable[[], AbstractContextManager[T]]) -> AsyncIterator[T]:
    """A blocking context manager opened, entered and exited in worker threads."""
    cm = await blocking(open_cm)
    value = await blocking(cm.__enter__)
    try:
        yield value
    except BaseException as exc:
        await blocking(cm.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await blocking(cm.__exit__, None, None, None)

"""psycopg 3, the default driver.

A pool qcore owns, or a pool or connection the caller owns; a caller's blocking ``Connection``
(Django 4.2+'s) through :mod:`qcore.db._blocking`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from qcore.db._base import (
    DEFAULT_LISTEN,
    Bound,
    Database,
    Listener,
    ListenOptions,
    OnMessage,
    OnReconnect,
    Rows,
    Statements,
)
from qcore.db._blocking import BlockingDatabase
from qcore.db._connect import connect_error
from qcore.db._listen import HeartbeatSession, ReconnectingListener, deliver, still_listening_sql
from qcore.db._values import dumps, is_json, verbatim
from qcore.errors import ConnectionLostError, DatabaseError, QcoreError, database_error
from qcore.identifiers import quote

__all__ = [
    "BoundConnection",
    "PsycopgDatabase",
    "PsycopgSyncDatabase",
    "map_error",
    "run",
    "run_script",
    "run_together",
    "values",
]

Conn = psycopg.AsyncConnection[Any]
R = TypeVar("R")


def map_error(exc: BaseException, sql: str | None = None) -> QcoreError:
    """The qcore exception for a psycopg or pool exception."""
    if isinstance(exc, QcoreError):
        return exc
    if isinstance(exc, PoolClosed):
        return ConnectionLostError(f"the connection pool is closed: {exc}", statement=sql)
    if isinstance(exc, PoolTimeout):
        return ConnectionLostError(
            f"no database connection became available: {exc}", statement=sql, retryable=True
        )
    if isinstance(exc, psycopg.Error):
        message = str(exc).strip() or type(exc).__name__
        if exc.sqlstate is None and isinstance(
            exc, (psycopg.OperationalError, psycopg.InterfaceError)
        ):
            return ConnectionLostError(message, statement=sql, retryable=True)
        return database_error(message, sqlstate=exc.sqlstate, sql=sql)
    if isinstance(exc, OSError):
        return ConnectionLostError(f"connection failed: {exc}", statement=sql, retryable=True)
    return DatabaseError(f"{type(exc).__name__}: {exc}", statement=sql)


def values(params: Sequence[Any]) -> list[Any] | None:
    """Parameters as psycopg dumps them; None when there are none.

    jsonb is wrapped, arrays of ids sent as array text.
    """
    if not params:
        return None
    return [_value(v) for v in params]


def _value(value: Any) -> Any:
    if is_json(value):
        return Jsonb(dumps(value), dumps=verbatim)
    if type(value) is list and value:
        # a batch's ids, in every settle, and its attempts, in a fenced one: psycopg's
        # dump of a list checks each element for its type and quoting (7x and 5x this);
        # the statement casts the text (``$n::uuid[]``, ``$n::int[]``)
        if all(type(v) is uuid.UUID for v in value):
            return "{" + ",".join([v.hex for v in value]) + "}"
        if all(type(v) is int for v in value):
            return "{" + ",".join(map(str, value)) + "}"
    return value


async def run(conn: Conn, sql: str, params: Sequence[Any]) -> Rows:
    """One statement on one connection, rows as dicts.

    A raw cursor sends ``$1..$n`` to the server as they are: no rewriting,
    and a ``%`` in the text needs no escaping.
    """
    try:
        async with psycopg.AsyncRawCursor(conn, row_factory=dict_row) as cur:
            await cur.execute(sql, values(params))
            return await cur.fetchall() if cur.description is not None else []
    except BaseException as exc:
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            raise
        raise map_error(exc, sql) from exc


async def run_together(conn: Conn, statements: Statements) -> list[Rows]:
    """Run several statements on an autocommit connection as one implicit transaction.

    They are sent in pipeline mode with one Sync after the last: the server runs
    everything before a Sync as one implicit transaction, so they commit together, and
    the first that fails aborts the rest and undoes those before it. One round trip, no
    BEGIN or COMMIT to send. (Its error names no statement: the server reports it at the
    Sync.)
    """
    try:
        async with conn.pipeline():
            cursors = []
            for sql, params in statements:
                cur = psycopg.AsyncRawCursor(conn, row_factory=dict_row)
                cursors.append(cur)
                await cur.execute(sql, values(params))
        return [await c.fetchall() if c.description is not None else [] for c in cursors]
    except BaseException as exc:
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
            raise
        raise map_error(exc) from exc


async def run_script(conn: Conn, sql: str) -> None:
    try:
        await conn.execute(sql)  # no parameters: the simple query protocol, several statements
    except Exception as exc:
        raise map_error(exc, sql) from exc


class PsycopgSyncDatabase(BlockingDatabase):
    """A caller's blocking psycopg 3 ``Connection``.

    Every call runs in a worker thread, one at a time, inside the caller's transaction
    unless it is in autocommit mode.
    """

    driver = "psycopg"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        if not isinstance(conn, psycopg.Connection):
            raise TypeError(f"expected a psycopg Connection, got {type(conn).__name__}")
        super().__init__(conn)

    def run_sync(self, sql: str, params: Sequence[Any]) -> Rows:
        # as run(): $n sent as they are; no parameters, the simple protocol (a script)
        try:
            with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
                cur.execute(sql, values(params))
                return cur.fetchall() if cur.description is not None else []
        except Exception as exc:
            raise map_error(exc, sql) from exc


class BoundConnection(Bound):
    driver = "psycopg"

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await run(self._conn, sql, params)

    async def _execute_script(self, sql: str) -> None:
        await run_script(self._conn, sql)


class PsycopgDatabase(Database):
    """psycopg 3 over an ``AsyncConnectionPool`` or one ``AsyncConnection``.

    With a single connection every statement and transaction is serialised
    through a lock; on a connection that is not in autocommit mode, statements
    join the caller's open transaction and are committed by the caller.
    """

    driver = "psycopg"

    def __init__(
        self,
        source: AsyncConnectionPool[Any] | Conn,
        *,
        owned: bool = False,
        conninfo: str | None = None,
        connect_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._pool = source if isinstance(source, AsyncConnectionPool) else None
        self._conn = source if isinstance(source, psycopg.AsyncConnection) else None
        if self._pool is None and self._conn is None:
            raise TypeError(f"expected an AsyncConnectionPool or AsyncConnection, got {source!r}")
        self._owned = owned
        self._lock = asyncio.Lock()
        if conninfo is None and self._pool is not None and isinstance(self._pool.conninfo, str):
            conninfo = self._pool.conninfo  # a caller's pool: listen on a connection of our own
        self._conninfo = conninfo
        self._connect_kwargs = connect_kwargs or {}
        self.can_listen = self._conninfo is not None

    def pool_counts(self) -> dict[str, int] | None:
        if self._pool is None:
            return None
        stats = self._pool.get_stats()
        return {
            "max": self._pool.max_size,
            "total": stats.get("pool_size", 0),
            "idle": stats.get("pool_available", 0),
            "waiting": stats.get("requests_waiting", 0),
        }

    @classmethod
    async def connect(
        cls,
        conninfo: str = "",
        *,
        max_size: int = 10,
        min_size: int = 1,
        timeout: float = 10.0,
        **kwargs: Any,
    ) -> PsycopgDatabase:
        """Open a pool qcore owns (closed by :meth:`close`).

        One connection is opened first, so a server that refuses the settings fails here
        at once, with its own message (:class:`~qcore.errors.ConnectionSettingsError`),
        and one that does not answer with a retryable
        :class:`~qcore.errors.ConnectionLostError`.
        """
        try:
            probe = await psycopg.AsyncConnection.connect(
                conninfo, autocommit=True, connect_timeout=max(1, round(timeout)), **kwargs
            )
        except Exception as exc:
            raise connect_error(exc, conninfo) from exc
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conninfo,
            min_size=min(min_size, max_size),
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True, **kwargs},
            open=False,
            name="qcore",
        )
        await pool.open(wait=False)
        return cls(pool, owned=True, conninfo=conninfo, connect_kwargs=kwargs)

    @property
    def joins_caller_transaction(self) -> bool:  # type: ignore[override]
        return self._conn is not None and not self._conn.autocommit

    @property
    def single_connection(self) -> bool:  # type: ignore[override]
        return self._conn is not None  # a caller's connection, not a pool

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        if self._conn is not None:
            async with self._lock:
                return await run(self._conn, sql, params)
        return await self._pooled(lambda conn: run(conn, sql, params), sql)

    async def _execute_together(self, statements: Statements) -> list[Rows]:
        if self._conn is not None:  # a caller's connection: in turn, as its own statements
            return await super()._execute_together(statements)
        return await self._pooled(lambda conn: run_together(conn, statements), None)

    async def _pooled(self, work: Callable[[Conn], Awaitable[R]], sql: str | None) -> R:
        """Run ``work`` on a connection checked out of the pool.

        After a lost connection the pool drops its dead idle ones, and a failed checkout
        is reported as ``sql``'s.
        """
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                return await work(conn)
        except ConnectionLostError:
            await self._drop_broken()
            raise
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:  # checking a connection out
            raise map_error(exc, sql) from exc

    async def _execute_script(self, sql: str) -> None:
        async with self._transaction() as tx:
            await tx.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        if self._conn is not None:
            async with self._lock, self._conn_transaction(self._conn) as tx:
                yield tx
            return
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn, self._conn_transaction(conn) as tx:
                yield tx
        except ConnectionLostError:
            await self._drop_broken()
            raise
        except (PoolTimeout, PoolClosed, psycopg.Error) as exc:  # checking a connection out
            raise map_error(exc) from exc

    @asynccontextmanager
    async def _conn_transaction(self, conn: Conn) -> AsyncIterator[Database]:
        try:
            async with conn.transaction():
                yield BoundConnection(conn)
        except psycopg.Error as exc:  # raised by BEGIN / COMMIT themselves
            raise map_error(exc, "COMMIT") from exc

    async def _drop_broken(self) -> None:
        """After a lost connection, discard every idle connection that is also dead.

        So the next statement gets a working one.
        """
        if self._pool is not None:
            try:
                await self._pool.check()
            except Exception:  # the server may still be down; the next checkout retries
                pass

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        if self._conninfo is None:
            return await super().listen(channel, on_message, on_reconnect, options=options)
        conninfo, kwargs = self._conninfo, self._connect_kwargs
        # TCP keepalive on the listening connection (pg-boss's
        # notifyKeepAliveInitialDelayMs); libpq ignores it on a Unix socket, and keepalive
        # options the caller gave win
        idle = max(1, round(options.keepalive_idle_seconds))
        wanted = {"keepalives": 1, "keepalives_idle": idle}

        async def open_session() -> _PsycopgListenSession:
            try:
                given = {**conninfo_to_dict(conninfo), **kwargs}
                keepalive: dict[str, Any] = {k: v for k, v in wanted.items() if k not in given}
                conn = await psycopg.AsyncConnection.connect(
                    conninfo, autocommit=True, **keepalive, **kwargs
                )
                await conn.execute(f"LISTEN {quote(channel)}")
            except Exception as exc:
                raise map_error(exc, "LISTEN") from exc
            return _PsycopgListenSession(conn, channel, options)

        return await ReconnectingListener(open_session, on_message, on_reconnect).start()

    async def close(self) -> None:
        if self._owned and self._pool is not None:
            await self._pool.close()


_STILL_LISTENING = still_listening_sql("%s")


class _PsycopgListenSession(HeartbeatSession):
    """Notifications read from psycopg's notifies() generator."""

    def __init__(self, conn: Conn, channel: str, options: ListenOptions) -> None:
        super().__init__(channel, options)
        self._conn = conn

    async def run(self, on_message: OnMessage) -> None:
        while True:
            async for note in self._conn.notifies(timeout=self.heartbeat_seconds):
                await deliver(on_message, note.channel, note.payload)
            await self.heartbeat()

    async def still_listening(self) -> bool:
        cur = await self._conn.execute(_STILL_LISTENING, [self._channel])
        row = await cur.fetchone()
        return bool(row and row[0])

    async def close(self) -> None:
        await self._conn.close()

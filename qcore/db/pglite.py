"""PGlite through its socket server: one connection, everything serialised.

PGlite is one PostgreSQL session however many sockets connect to it: a
``SKIP LOCKED`` waits instead of skipping, advisory locks and settings are
shared, the messages of two sockets can interleave, and a NOTIFY reaches only
the socket whose statement sent it. So this adapter holds exactly one psycopg
connection and lets one statement or one transaction use it at a time (a
transaction keeps it from BEGIN to COMMIT or ROLLBACK; other coroutines wait
their turn), and delivers notifications in process: a ``pg_notify`` sent
through this adapter reaches this adapter's listeners. Notifications sent by
other clients of the same PGlite are lost.

Do not wait, inside a transaction, for another task that needs this adapter:
it waits for the transaction to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from qcore.db._base import (
    DEFAULT_LISTEN,
    Database,
    Listener,
    ListenOptions,
    OnMessage,
    OnReconnect,
    Rows,
    call,
)
from qcore.db._connect import connect_error
from qcore.db._listen import deliver
from qcore.db.psycopg import BoundConnection, map_error, run, run_script
from qcore.errors import ConnectionLostError, QcoreError
from qcore.identifiers import quote
from qcore.tasks import cancel_and_wait

__all__ = ["PGliteDatabase"]

log = logging.getLogger("qcore")

Conn = psycopg.AsyncConnection[Any]


class PGliteDatabase(Database):
    """One psycopg ``AsyncConnection`` to a PGlite server, serialised by a lock.

    A lost connection fails the statement that found it with
    ``ConnectionLostError``; the next statement opens a new one (once: if that
    fails too, it raises and the one after tries again), LISTENs again and
    calls the listeners' ``on_reconnect``.
    """

    driver = "pglite"
    can_listen = True
    single_connection = True

    def __init__(self, conninfo: str, *, connect_kwargs: dict[str, Any] | None = None) -> None:
        """Connects lazily, on the first statement; :meth:`connect` connects at once."""
        super().__init__()
        self._conninfo = conninfo
        self._connect_kwargs = dict(connect_kwargs or {})
        self._conn: Conn | None = None
        self._lock = asyncio.Lock()
        self._listeners: list[_InProcessListener] = []
        self._closed = False
        self._was_connected = False

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> PGliteDatabase:
        """Open the connection (closed by :meth:`close`); ``kwargs`` go to psycopg."""
        db = cls(url, connect_kwargs=kwargs)
        async with db._lock:
            await db._connection()
        return db

    # -- the one connection ------------------------------------------------------------

    async def _open(self) -> Conn:
        options: dict[str, Any] = {
            "autocommit": True,
            "row_factory": dict_row,
            # Named prepared statements live in the shared session and would clash
            # with those of an earlier connection or of another client.
            "prepare_threshold": None,
        }
        options.update(self._connect_kwargs)
        try:
            return await psycopg.AsyncConnection.connect(self._conninfo, **options)
        except Exception as exc:
            raise connect_error(exc, self._conninfo) from exc

    async def _connection(self) -> Conn:
        """The open connection, reconnecting once if it was lost. Call with the lock held."""
        if self._closed:
            raise ConnectionLostError("the PGlite adapter is closed")
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        reconnect = self._was_connected
        self._conn = None
        conn = await self._open()
        try:
            for channel in self._channels():
                await run_script(conn, f"LISTEN {quote(channel)}")
        except BaseException:
            await _close_quietly(conn)
            raise
        self._attach_handlers(conn)
        self._conn = conn
        self._was_connected = True
        if reconnect:
            log.info("PGlite connection re-established")
            for listener in self._listeners:
                listener.reconnected()
        return conn

    def _attach_handlers(self, conn: Conn) -> None:
        for listener in self._listeners:
            conn.add_notify_handler(listener.handle)

    async def _lost(self, conn: Conn) -> None:
        """Forget a connection that broke, so the next statement opens a new one."""
        if self._conn is conn:
            self._conn = None
        await _close_quietly(conn)

    # -- Database primitives -----------------------------------------------------------

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        async with self._lock:
            conn = await self._connection()
            try:
                return await run(conn, sql, params)
            except ConnectionLostError:
                await self._lost(conn)
                raise

    async def _execute_script(self, sql: str) -> None:
        async with self._transaction() as tx:
            await tx.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        async with self._lock:
            conn = await self._connection()
            try:
                try:
                    async with conn.transaction():
                        yield BoundConnection(conn)
                except psycopg.Error as exc:  # raised by BEGIN / COMMIT / ROLLBACK themselves
                    raise map_error(exc, "COMMIT") from exc
            except ConnectionLostError:
                await self._lost(conn)
                raise
            finally:
                if conn.closed:
                    await self._lost(conn)

    # -- LISTEN in process -------------------------------------------------------------

    def _channels(self) -> list[str]:
        return list(dict.fromkeys(listener.channel for listener in self._listeners))

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        """Call ``on_message(channel, payload)`` for each NOTIFY on ``channel``.

        Only those sent through this adapter, in order, from a task of its own (no
        connection to keep alive: ``options`` have nothing to do here).
        """
        statement = f"LISTEN {quote(channel)}"
        listener = _InProcessListener(self, channel, on_message, on_reconnect)
        async with self._lock:
            conn = await self._connection()
            try:
                await run_script(conn, statement)
            except ConnectionLostError:
                await self._lost(conn)
                raise
            self._listeners.append(listener)
            conn.add_notify_handler(listener.handle)
        listener.start()
        return listener

    async def _unlisten(self, listener: _InProcessListener) -> None:
        async with self._lock:
            if listener not in self._listeners:
                return
            self._listeners.remove(listener)
            conn = self._conn
            if conn is None or conn.closed:
                return
            with contextlib.suppress(ValueError):
                conn.remove_notify_handler(listener.handle)
            if listener.channel in self._channels():
                return  # another listener still wants it
            try:
                await run_script(conn, f"UNLISTEN {quote(listener.channel)}")
            except ConnectionLostError:
                await self._lost(conn)
            except QcoreError as exc:
                log.warning("UNLISTEN %s failed: %s", listener.channel, exc)

    async def close(self) -> None:
        """Stop the listeners and close the connection."""
        for listener in list(self._listeners):
            await listener.close()
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await _close_quietly(conn)


class _InProcessListener(Listener):
    """Notifications of one channel, handed to the callback by a task of their own.

    They are queued by the connection's notify handler, and the task lets a callback use
    the adapter.
    """

    def __init__(
        self,
        db: PGliteDatabase,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None,
    ) -> None:
        self.channel = channel
        self._db = db
        self._on_message = on_message
        self._on_reconnect = on_reconnect
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"qcore-pglite-listen-{self.channel}")

    def handle(self, note: psycopg.Notify) -> None:
        if note.channel == self.channel:
            self._queue.put_nowait(note.payload)

    def reconnected(self) -> None:
        if self._on_reconnect is not None:
            self._queue.put_nowait(None)

    async def _run(self) -> None:
        while True:
            payload = await self._queue.get()
            if payload is not None:
                await deliver(self._on_message, self.channel, payload)
            elif self._on_reconnect is not None:
                try:
                    await call(self._on_reconnect)
                except Exception:
                    log.exception("on_reconnect callback failed")

    async def close(self) -> None:
        await self._db._unlisten(self)
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)


async def _close_quietly(conn: Conn) -> None:
    try:
        await conn.close()
    except Exception:  # already broken
        pass

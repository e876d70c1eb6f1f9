"""asyncpg: a pool qcore opens from a DSN, or a caller's ``Pool`` or ``Connection``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

try:
    import asyncpg
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from qcore.errors import NotInstalledError

    raise NotInstalledError(
        "the asyncpg driver is not installed: pip install 'qcore-queue[asyncpg]'"
    ) from exc

from qcore.db._base import (
    DEFAULT_LISTEN,
    Bound,
    Database,
    Listener,
    ListenOptions,
    OnMessage,
    OnReconnect,
    Rows,
)
from qcore.db._connect import connect_error
from qcore.db._listen import HeartbeatSession, ReconnectingListener, deliver, still_listening_sql
from qcore.db._values import JSON_OIDS, dumps, is_json, normalize_rows
from qcore.errors import ConfigError, ConnectionLostError, DatabaseError, QcoreError, database_error

__all__ = ["AsyncpgDatabase", "map_error"]


def map_error(exc: BaseException, sql: str | None = None) -> QcoreError:
    """The qcore exception for an asyncpg exception."""
    if isinstance(exc, QcoreError):
        return exc
    if isinstance(exc, asyncpg.ClientConfigurationError):
        return ConfigError(f"invalid asyncpg connection options: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return database_error(message, sqlstate=exc.sqlstate, sql=sql)
    if isinstance(exc, (asyncpg.InterfaceError, ConnectionError, OSError, asyncio.TimeoutError)):
        return ConnectionLostError(
            f"connection lost: {exc or type(exc).__name__}", statement=sql, retryable=True
        )
    return DatabaseError(f"{type(exc).__name__}: {exc}", statement=sql)


def values(params: Sequence[Any]) -> list[Any]:
    """Parameters as asyncpg binds them: jsonb as JSON text (the default codec's input)."""
    return [dumps(v) if is_json(v) else v for v in params]


def connect_options(conninfo: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a libpq URL or key=value DSN."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        p = conninfo_to_dict(conninfo)
    except Exception as exc:
        raise ConfigError(f"invalid connection string: {exc}") from exc
    options: dict[str, Any] = {
        "host": p.get("host"),
        "port": int(str(p["port"])) if p.get("port") else None,
        "user": p.get("user"),
        "password": p.get("password"),
        "database": p.get("dbname"),
        "ssl": p.get("sslmode"),
    }
    if p.get("connect_timeout"):
        options["timeout"] = float(str(p["connect_timeout"]))
    settings = _session_settings(str(p.get("options") or ""))
    if p.get("application_name"):
        settings["application_name"] = str(p["application_name"])
    if settings:
        options["server_settings"] = settings
    return {k: v for k, v in options.items() if v is not None}


def _session_settings(options: str) -> dict[str, str]:
    """libpq's ``options`` as asyncpg's ``server_settings``.

    The options are ``-c key=value`` or ``--key=value``; a backslash escapes a space.
    """
    words = [w.replace("\\ ", " ") for w in re.split(r"(?<!\\)\s+", options.strip()) if w]
    settings: dict[str, str] = {}
    pending = False
    for word in words:
        if word == "-c":
            pending = True
            continue
        item = word[2:] if word.startswith(("-c", "--")) and not pending else word
        pending = False
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigError(f"invalid connection option {word!r} in options={options!r}")
        settings[key.replace("-", "_")] = value
    return settings


async def _own_codecs(conn: Any) -> None:
    """On connections qcore opens, jsonb decodes straight to Python objects."""
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=str, decoder=json.loads, schema="pg_catalog")


async def run(conn: Any, sql: str, params: Sequence[Any], *, own_codecs: bool) -> Rows:
    """One statement on one connection.

    On qcore's own connections the codecs decode jsonb; on a caller's, the
    statement's column types say which text to decode. asyncpg's UUID
    subclass becomes ``uuid.UUID``.
    """
    try:
        if own_codecs:
            return normalize_rows([dict(r) for r in await conn.fetch(sql, *values(params))])
        stmt = await conn.prepare(sql)
        records = await stmt.fetch(*values(params))
        json_columns = [a.name for a in stmt.get_attributes() if a.type.oid in JSON_OIDS]
        return normalize_rows([dict(r) for r in records], json_columns)
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except BaseException as exc:
        raise map_error(exc, sql) from exc


async def run_script(conn: Any, sql: str) -> None:
    try:
        await conn.execute(sql)  # no arguments: the simple query protocol
    except Exception as exc:
        raise map_error(exc, sql) from exc


class _BoundConnection(Bound):
    driver = "asyncpg"

    def __init__(self, conn: Any, own_codecs: bool) -> None:
        self._conn = conn
        self._own_codecs = own_codecs

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await run(self._conn, sql, params, own_codecs=self._own_codecs)

    async def _execute_script(self, sql: str) -> None:
        await run_script(self._conn, sql)


class AsyncpgDatabase(Database):
    """asyncpg over a pool or one connection (serialised through a lock)."""

    driver = "asyncpg"
    can_listen = True

    def __init__(self, source: Any, *, owned: bool = False) -> None:
        super().__init__()
        if isinstance(source, asyncpg.Pool):
            self._pool, self._conn = source, None
        elif isinstance(source, asyncpg.Connection):
            self._pool, self._conn = None, source
        else:
            raise QcoreError(f"expected an asyncpg Pool or Connection, got {type(source).__name__}")
        self.single_connection = self._conn is not None
        self._owned = owned
        self._connect_options: dict[str, Any] | None = None
        self._acquire_timeout: float | None = None
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(
        cls, conninfo: str, *, max_size: int = 10, timeout: float = 10.0
    ) -> AsyncpgDatabase:
        """Open a pool qcore owns (closed by :meth:`close`) from a URL or libpq DSN."""
        options = {"timeout": timeout, **connect_options(conninfo)}
        try:
            pool = await asyncpg.create_pool(
                min_size=1, max_size=max_size, init=_own_codecs, **options
            )
        except Exception as exc:
            raise connect_error(exc, conninfo) from exc
        db = cls(pool, owned=True)
        db._connect_options = options
        db._acquire_timeout = timeout
        return db

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self._conn is not None:
            async with self._lock:
                yield self._conn
            return
        try:
            conn_cm = self._pool.acquire(timeout=self._acquire_timeout)
            conn = await conn_cm.__aenter__()
        except Exception as exc:
            raise map_error(exc, None) from exc
        try:
            yield conn
        finally:
            await conn_cm.__aexit__(None, None, None)

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        async with self._connection() as conn:
            return await run(conn, sql, params, own_codecs=self._owned)

    async def _execute_script(self, sql: str) -> None:
        async with self._transaction() as tx:
            await tx.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        async with self._connection() as conn:
            tx = conn.transaction()
            try:
                await tx.start()
            except Exception as exc:
                raise map_error(exc, "BEGIN") from exc
            try:
                yield _BoundConnection(conn, self._owned)
            except BaseException:
                try:
                    await tx.rollback()
                except Exception:  # the connection may be gone; the server rolled back
                    pass
                raise
            try:
                await tx.commit()
            except Exception as exc:
                raise map_error(exc, "COMMIT") from exc

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        """LISTEN on a dedicated connection.

        It is a new one from the DSN qcore was given, or one held out of the caller's
        pool for as long as the listener runs.
        """
        if self._connect_options is None and self._pool is None:
            return await super().listen(channel, on_message, on_reconnect, options=options)
        connecting, pool = self._connect_options, self._pool

        async def open_session() -> _AsyncpgListenSession:
            try:
                if connecting is not None:
                    conn = await asyncpg.connect(**connecting)
                    release: Callable[[], Awaitable[None]] = conn.close
                else:
                    assert pool is not None
                    conn = await pool.acquire()

                    async def release() -> None:
                        await pool.release(conn)

                session = _AsyncpgListenSession(conn, release, channel, options)
                await conn.add_listener(channel, session.notify)  # sends a quoted LISTEN
            except Exception as exc:
                raise map_error(exc, "LISTEN") from exc
            return session

        return await ReconnectingListener(open_session, on_message, on_reconnect).start()

    async def close(self) -> None:
        if self._owned and self._pool is not None:
            await self._pool.close()


_STILL_LISTENING = still_listening_sql("$1")


class _AsyncpgListenSession(HeartbeatSession):
    """Notifications queued by asyncpg's listener callback."""

    def __init__(
        self,
        conn: Any,
        release: Callable[[], Awaitable[None]],
        channel: str,
        options: ListenOptions,
    ) -> None:
        super().__init__(channel, options)
        self._conn = conn
        self._release = release
        self._queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        conn.add_termination_listener(lambda _conn: self._queue.put_nowait(None))

    def notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self._queue.put_nowait((channel, payload))

    async def run(self, on_message: OnMessage) -> None:
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), self.heartbeat_seconds)
            except asyncio.TimeoutError:
                await self.heartbeat()
                continue
            if item is None or self._conn.is_closed():
                raise ConnectionLostError("the LISTEN connection was closed")
            await deliver(on_message, *item)

    async def still_listening(self) -> bool:
        return bool(await self._conn.fetchval(_STILL_LISTENING, self._channel))

    async def close(self) -> None:
        await self._release()

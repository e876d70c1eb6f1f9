"""Database adapters: the one async protocol through which SQL reaches an engine.

``adapt(obj)`` wraps anything a caller already has (a custom object with
``execute_sql``, a psycopg pool or connection, an asyncpg pool or
connection, an SQLAlchemy engine, connection or session, a psycopg2
connection); qcore never opens or closes what it was given. ``connect()``
opens a pool that qcore owns and closes.
"""

from __future__ import annotations

from typing import Any

from qcore.db._base import Bound, Database, Listener, OnMessage, OnReconnect, Rows
from qcore.db._values import Json
from qcore.errors import ConfigError, NotInstalledError

__all__ = [
    "Bound",
    "Database",
    "Json",
    "Listener",
    "OnMessage",
    "OnReconnect",
    "Rows",
    "adapt",
    "check_pool_options",
    "connect",
    "make_conninfo",
]

DRIVERS = ("psycopg", "asyncpg")

ACCEPTED = (
    "an object with execute_sql(text, values); a psycopg AsyncConnectionPool or AsyncConnection;"
    " an asyncpg Pool or Connection; an SQLAlchemy Engine, Connection, Session, AsyncEngine,"
    " AsyncConnection or AsyncSession; a psycopg Connection or psycopg2 connection (blocking,"
    " run in a worker thread); a qcore Database"
)


def adapt(obj: Any) -> Database:
    """The adapter for a connection-like object the caller owns."""
    if isinstance(obj, Database):
        return obj
    root = type(obj).__module__.split(".", 1)[0]
    if root in ("psycopg", "psycopg_pool"):
        import psycopg

        from qcore.db.psycopg import PsycopgDatabase, PsycopgSyncDatabase

        if isinstance(obj, psycopg.Connection):  # blocking, as Django 4.2+ holds one
            return PsycopgSyncDatabase(obj)
        try:
            return PsycopgDatabase(obj)
        except TypeError as exc:
            raise ConfigError(
                f"{type(obj).__name__} is not supported: pass a psycopg AsyncConnectionPool,"
                " AsyncConnection or (blocking) Connection"
            ) from exc
    if root == "asyncpg":
        from qcore.db.asyncpg import AsyncpgDatabase

        return AsyncpgDatabase(obj)
    if root == "sqlalchemy":
        from qcore.db.sqlalchemy import SQLAlchemyDatabase

        return SQLAlchemyDatabase(obj)
    if root == "psycopg2":
        from qcore.db.psycopg2 import Psycopg2Database

        return Psycopg2Database(obj)
    if callable(getattr(obj, "execute_sql", None)):
        from qcore.db.custom import CustomDatabase

        return CustomDatabase(obj)
    raise ConfigError(f"cannot use {type(obj).__name__} as a database; qcore accepts {ACCEPTED}")


def make_conninfo(
    connection_string: str | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    database: str | None = None,
    user: str | None = None,
    password: str | None = None,
    ssl: bool | str | None = None,
    application_name: str | None = "qcore",
    connection_timeout: float | None = None,
) -> str:
    """A libpq connection string from a URL/DSN and keyword options (options win)."""
    from psycopg.conninfo import make_conninfo as _make

    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "dbname": database,
        "user": user,
        "password": password,
        "application_name": application_name,
    }
    if ssl is not None:
        options["sslmode"] = ssl if isinstance(ssl, str) else ("require" if ssl else "disable")
    if connection_timeout:
        options["connect_timeout"] = max(1, int(connection_timeout))
    try:
        return _make(connection_string or "", **{k: v for k, v in options.items() if v is not None})
    except Exception as exc:
        raise ConfigError(f"invalid connection options: {exc}") from exc


def check_pool_options(*, max: int, connection_timeout: float) -> None:
    """Refuse a pool size or connect timeout that cannot work."""
    if not isinstance(max, int) or isinstance(max, bool) or max < 1:
        raise ConfigError(f"max must be a positive integer (pool size), got {max!r}")
    if not isinstance(connection_timeout, (int, float)) or connection_timeout < 0:
        raise ConfigError(f"connection_timeout must be >= 0 seconds, got {connection_timeout!r}")


async def connect(
    connection_string: str | None = None,
    *,
    driver: str = "psycopg",
    host: str | None = None,
    port: int | None = None,
    database: str | None = None,
    user: str | None = None,
    password: str | None = None,
    ssl: bool | str | None = None,
    max: int = 10,
    application_name: str | None = "qcore",
    connection_timeout: float = 10.0,
) -> Database:
    """Open a connection pool that qcore owns; ``close()`` on the result closes it."""
    if driver not in DRIVERS:
        raise ConfigError(f"unknown driver {driver!r}; qcore can open: {', '.join(DRIVERS)}")
    check_pool_options(max=max, connection_timeout=connection_timeout)
    conninfo = make_conninfo(
        connection_string,
        host=host,
        port=port,
        database=database,
        user=user,
        password=password,
        ssl=ssl,
        application_name=application_name,
        connection_timeout=connection_timeout,
    )
    timeout = connection_timeout or 24 * 3600.0
    if driver == "asyncpg":
        try:
            from qcore.db.asyncpg import AsyncpgDatabase
        except ImportError as exc:
            raise NotInstalledError(
                "the asyncpg driver is not installed: pip install 'qcore[asyncpg]'"
            ) from exc
        return await AsyncpgDatabase.connect(conninfo, max_size=max, timeout=timeout)
    from qcore.db.psycopg import PsycopgDatabase

    return await PsycopgDatabase.connect(conninfo, max_size=max, timeout=timeout)

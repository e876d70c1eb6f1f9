"""Database adapters: the one async protocol through which SQL reaches an engine.

``adapt(obj)`` wraps anything a caller already has (a custom object with
``execute_sql``, a psycopg pool or connection, an asyncpg pool or
connection, an SQLAlchemy engine, connection or session, a psycopg2
connection); qcore never opens or closes what it was given. ``connect()``
opens a pool that qcore owns and closes.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

from typing_extensions import Unpack

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
from qcore.db._url import check_url
from qcore.db._values import Json
from qcore.errors import ConfigError, NotInstalledError

__all__ = [
    "CONNECTION_OPTIONS",
    "DEFAULT_LISTEN",
    "Bound",
    "ConnectionOptions",
    "Database",
    "Json",
    "ListenOptions",
    "Listener",
    "OnMessage",
    "OnReconnect",
    "Rows",
    "Statements",
    "adapt",
    "check_connection_options",
    "check_url",
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


class ConnectionOptions(TypedDict, total=False):
    """Keyword options of a pool qcore opens (``connect()``, ``Boss(...)``).

    Each one given wins over the connection string's setting. Unset: ``max`` 10
    connections, ``application_name`` "qcore", ``connection_timeout`` 10 s (0: wait for
    ever).
    """

    host: str | None
    port: int | None
    database: str | None
    user: str | None
    password: str | None
    #: True → sslmode=require, False → disable, or a libpq sslmode by name
    ssl: bool | str | None
    #: the pool size (pg-boss's name for it)
    max: int
    application_name: str | None
    connection_timeout: float


#: every connection option, in declaration order
CONNECTION_OPTIONS: Final = tuple(ConnectionOptions.__annotations__)
#: the options that say where to connect (with none of them, a connection string must)
ADDRESS_OPTIONS: Final = ("host", "port", "database", "user", "password", "ssl")
DEFAULT_MAX = 10
DEFAULT_CONNECTION_TIMEOUT = 10.0
#: a day: past it, "wait for ever" (0) says what is meant
MAX_CONNECTION_TIMEOUT = 24 * 3600.0


def make_conninfo(
    connection_string: str | None = None, **options: Unpack[ConnectionOptions]
) -> str:
    """A libpq connection string from a URL/DSN and keyword options (options win).

    A URL of another scheme than ``postgresql://`` or ``postgres://`` is a ``ConfigError``.
    """
    from psycopg.conninfo import make_conninfo as _make

    check_url(connection_string)

    params: dict[str, Any] = {
        "host": options.get("host"),
        "port": options.get("port"),
        "dbname": options.get("database"),
        "user": options.get("user"),
        "password": options.get("password"),
        "application_name": options.get("application_name", "qcore"),
    }
    ssl = options.get("ssl")
    if ssl is not None:
        params["sslmode"] = ssl if isinstance(ssl, str) else ("require" if ssl else "disable")
    timeout = options.get("connection_timeout", DEFAULT_CONNECTION_TIMEOUT)
    if timeout:
        params["connect_timeout"] = max(1, int(timeout))
    try:
        return _make(connection_string or "", **{k: v for k, v in params.items() if v is not None})
    except Exception as exc:
        raise ConfigError(f"invalid connection options: {exc}") from exc


def check_connection_options(options: dict[str, Any]) -> None:
    """Refuse an unknown connection option, or a pool size or timeout that cannot work."""
    unknown = sorted(set(options) - set(CONNECTION_OPTIONS))
    if unknown:
        known = ", ".join(CONNECTION_OPTIONS)
        raise ConfigError(f"unknown connection option {', '.join(unknown)}; known: {known}")
    size = options.get("max", DEFAULT_MAX)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ConfigError(f"max must be a positive integer (pool size), got {size!r}")
    timeout = options.get("connection_timeout", DEFAULT_CONNECTION_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 <= timeout <= MAX_CONNECTION_TIMEOUT
    ):  # NaN fails the comparison too
        raise ConfigError(
            f"connection_timeout must be from 0 (wait for ever) to {MAX_CONNECTION_TIMEOUT:.0f}"
            f" seconds, got {timeout!r}"
        )


async def connect(
    connection_string: str | None = None,
    *,
    driver: str = "psycopg",
    **options: Unpack[ConnectionOptions],
) -> Database:
    """Open a connection pool that qcore owns; ``close()`` on the result closes it."""
    if driver not in DRIVERS:
        raise ConfigError(f"unknown driver {driver!r}; qcore can open: {', '.join(DRIVERS)}")
    check_connection_options(dict(options))
    conninfo = make_conninfo(connection_string, **options)
    size = options.get("max", DEFAULT_MAX)
    timeout = (
        options.get("connection_timeout", DEFAULT_CONNECTION_TIMEOUT) or MAX_CONNECTION_TIMEOUT
    )
    if driver == "asyncpg":
        try:
            from qcore.db.asyncpg import AsyncpgDatabase
        except ImportError as exc:
            raise NotInstalledError(
                "the asyncpg driver is not installed: pip install 'qcore-queue[asyncpg]'"
            ) from exc
        return await AsyncpgDatabase.connect(conninfo, max_size=size, timeout=timeout)
    from qcore.db.psycopg import PsycopgDatabase

    return await PsycopgDatabase.connect(conninfo, max_size=size, timeout=timeout)

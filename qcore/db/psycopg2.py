"""psycopg2: a caller's blocking connection, driven from a worker thread.

Statements join the caller's transaction when the connection is not in
autocommit mode (the caller commits); ``transaction()`` is a savepoint, so an
error inside it undoes only qcore's part.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

try:
    import psycopg2
    import psycopg2.extensions
    import psycopg2.extras
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from qcore.errors import NotInstalledError

    raise NotInstalledError(
        "the psycopg2 driver is not installed: pip install 'qcore[cockroachdb]'"
    ) from exc

from qcore.db._base import Bound, Database, Rows
from qcore.db._placeholders import reorder, to_format
from qcore.db._threads import blocking
from qcore.db._values import dumps, is_json, verbatim
from qcore.errors import ConnectionLostError, DatabaseError, QcoreError, database_error

__all__ = ["Psycopg2Database", "map_error"]

_SAVEPOINT = "qcore_transaction"


def map_error(exc: BaseException, sql: str | None = None) -> QcoreError:
    """The qcore exception for a psycopg2 exception."""
    if isinstance(exc, QcoreError):
        return exc
    if isinstance(exc, psycopg2.Error):
        message = (exc.pgerror or str(exc)).strip() or type(exc).__name__
        if exc.pgcode is None and isinstance(
            exc, (psycopg2.OperationalError, psycopg2.InterfaceError)
        ):
            return ConnectionLostError(message, statement=sql, retryable=True)
        return database_error(message, sqlstate=exc.pgcode, sql=sql)
    return DatabaseError(f"{type(exc).__name__}: {exc}", statement=sql)


def run_sync(conn: Any, sql: str, params: Sequence[Any]) -> Rows:
    """One statement on a psycopg2 connection, rows as dicts (call from a thread)."""
    try:
        with conn.cursor() as cur:
            psycopg2.extras.register_uuid(conn_or_curs=cur)  # type: ignore[no-untyped-call]
            if params:
                text, order = to_format(sql)
                cur.execute(
                    text,
                    [
                        psycopg2.extras.Json(dumps(v), dumps=verbatim) if is_json(v) else v
                        for v in reorder(order, params)
                    ],
                )
            else:
                cur.execute(sql)
            if cur.description is None:
                return []
            names = [c.name for c in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except Exception as exc:
        raise map_error(exc, sql) from exc


class _Savepoint(Bound):
    driver = "psycopg2"

    def __init__(self, root: Psycopg2Database) -> None:
        self._root = root

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await blocking(run_sync, self._root.conn, sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._execute(sql, ())


class Psycopg2Database(Database):
    """A caller's psycopg2 connection; every call runs in a worker thread, one at a time."""

    driver = "psycopg2"

    def __init__(self, conn: Any) -> None:
        super().__init__()
        if not isinstance(conn, psycopg2.extensions.connection):
            raise QcoreError(f"expected a psycopg2 connection, got {type(conn).__name__}")
        self.conn = conn
        self._lock = asyncio.Lock()

    @property
    def joins_caller_transaction(self) -> bool:  # type: ignore[override]
        return not self.conn.autocommit

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        async with self._lock:
            return await blocking(run_sync, self.conn, sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._execute(sql, ())

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        async with self._lock:
            autocommit = self.conn.autocommit
            begin, end = (
                ("BEGIN", "COMMIT")
                if autocommit
                else (f"SAVEPOINT {_SAVEPOINT}", f"RELEASE SAVEPOINT {_SAVEPOINT}")
            )
            undo = "ROLLBACK" if autocommit else f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}"
            await blocking(run_sync, self.conn, begin, ())
            try:
                yield _Savepoint(self)
            except BaseException:
                try:
                    await blocking(run_sync, self.conn, undo, ())
                except QcoreError:  # the connection is gone; the server undid it
                    pass
                raise
            await blocking(run_sync, self.conn, end, ())

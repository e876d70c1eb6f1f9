"""psycopg2: a caller's blocking connection, driven from a worker thread.

See :mod:`qcore.db._blocking`: it joins the caller's transaction, inside a savepoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import psycopg2
    import psycopg2.extensions
    import psycopg2.extras
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from qcore.errors import NotInstalledError

    raise NotInstalledError(
        "the psycopg2 driver is not installed: pip install 'qcore-queue[cockroachdb]'"
    ) from exc

from qcore.db._base import Rows
from qcore.db._blocking import BlockingDatabase
from qcore.db._placeholders import reorder, to_format
from qcore.db._values import dumps, is_json, verbatim
from qcore.errors import ConnectionLostError, DatabaseError, QcoreError, database_error

__all__ = ["Psycopg2Database", "map_error"]


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


class Psycopg2Database(BlockingDatabase):
    """A caller's psycopg2 connection; every call runs in a worker thread, one at a time."""

    driver = "psycopg2"

    def __init__(self, conn: Any) -> None:
        if not isinstance(conn, psycopg2.extensions.connection):
            raise QcoreError(f"expected a psycopg2 connection, got {type(conn).__name__}")
        super().__init__(conn)

    def run_sync(self, sql: str, params: Sequence[Any]) -> Rows:
        return run_sync(self.conn, sql, params)

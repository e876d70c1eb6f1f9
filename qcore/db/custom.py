"""Any object with ``execute_sql(text, values)``, as pg-boss's ``db`` option takes."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from qcore.db._base import Bound, Database, Rows
from qcore.db._threads import blocking
from qcore.db._values import dumps, is_json, normalize_rows
from qcore.errors import DatabaseError, QcoreError, database_error

__all__ = ["JSON_COLUMNS", "CustomDatabase"]

#: the json/jsonb columns of qcore's (pg-boss's) tables, by name
JSON_COLUMNS = (
    "data",
    "output",
    "source_output",
    "trace_context",
    "options",
    "workers",
    "metrics",
    "config",
)
_PROBE = "SELECT '{\"qcore\": 1}'::jsonb AS probe"


class CustomDatabase(Database):
    """Wraps a caller's ``execute_sql``; statements keep their ``$n`` placeholders.

    An ``async def execute_sql`` is awaited; a blocking one runs in a worker
    thread, one call at a time.

    The object owns its transactions: ``transaction()`` sends nothing of its
    own and each statement runs as the object runs it. jsonb parameters
    arrive as JSON text, as pg-boss sends them, so any driver can bind them.

    Many drivers return json and jsonb values as text. The first statement that
    returns rows is preceded by one probe (``SELECT '{}'::jsonb``); when the object
    answers with text, the JSON columns of qcore's tables (:data:`JSON_COLUMNS`) are
    decoded in every row it returns.
    """

    driver = "custom"
    atomic_transactions = False

    def __init__(self, obj: Any) -> None:
        super().__init__()
        if not callable(getattr(obj, "execute_sql", None)):
            raise TypeError(f"{type(obj).__name__} has no execute_sql(text, values) method")
        self._obj = obj
        self._is_async = inspect.iscoroutinefunction(obj.execute_sql)
        self._lock = asyncio.Lock()  # a blocking object is not assumed thread-safe
        self._json_as_text: bool | None = None  # unknown until the first rows come back

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        rows = await self._send(sql, params)
        if rows and self._json_as_text is None:
            probe = await self._send(_PROBE, ())
            self._json_as_text = bool(probe) and isinstance(probe[0].get("probe"), str)
        return normalize_rows(rows, JSON_COLUMNS if self._json_as_text else ())

    async def _send(self, sql: str, params: Sequence[Any]) -> Rows:
        """One statement through the object; its rows as dicts, as the object gave them."""
        values = [dumps(v) if is_json(v) else v for v in params]
        try:
            if self._is_async:
                result = self._obj.execute_sql(sql, values)
            else:  # a blocking call must not stall the event loop
                async with self._lock:
                    result = await blocking(self._obj.execute_sql, sql, values)
            if inspect.isawaitable(result):
                result = await result
        except QcoreError:
            raise
        except Exception as exc:
            sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
            if sqlstate is None:
                code = getattr(exc, "code", None)
                sqlstate = code if isinstance(code, str) and len(code) == 5 else None
            raise database_error(str(exc), sqlstate=sqlstate, sql=sql) from exc
        rows = getattr(result, "rows", result)
        if rows is None:
            return []
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise DatabaseError(
                f"{type(self._obj).__name__}.execute_sql must return a list of dicts or an object"
                f" with .rows; got {type(result).__name__}",
                statement=sql,
            )
        return [dict(r) for r in rows]

    async def _execute_script(self, sql: str) -> None:
        await self._send(sql, ())

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        yield _Joined(self)


class _Joined(Bound):
    """Statements of a ``transaction()`` block: sent as they come, to the same object."""

    driver = "custom"
    atomic_transactions = False

    def __init__(self, root: CustomDatabase) -> None:
        self._root = root

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await self._root._execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._root._execute_script(sql)

"""Any object with ``execute_sql(text, values)``, as pg-boss's ``db`` option takes."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from qcore.db._base import Bound, Database, Rows
from qcore.db._values import Json, normalize_rows
from qcore.errors import DatabaseError, QcoreError, database_error

__all__ = ["CustomDatabase"]


class CustomDatabase(Database):
    """Wraps a caller's ``execute_sql``; statements keep their ``$n`` placeholders.

    The object owns its transactions: ``transaction()`` sends nothing of its
    own and each statement runs as the object runs it. jsonb parameters are
    passed as :class:`~qcore.db.Json` unwrapped to their Python value.
    """

    driver = "custom"

    def __init__(self, obj: Any) -> None:
        super().__init__()
        if not callable(getattr(obj, "execute_sql", None)):
            raise TypeError(f"{type(obj).__name__} has no execute_sql(text, values) method")
        self._obj = obj

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        values = [v.value if isinstance(v, Json) else v for v in params]
        try:
            result = self._obj.execute_sql(sql, values)
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
        return normalize_rows([dict(r) for r in rows])

    async def _execute_script(self, sql: str) -> None:
        await self._execute(sql, ())

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        yield _Joined(self)


class _Joined(Bound):
    """Statements of a ``transaction()`` block: sent as they come, to the same object."""

    driver = "custom"

    def __init__(self, root: CustomDatabase) -> None:
        self._root = root

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await self._root._execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._root._execute_script(sql)

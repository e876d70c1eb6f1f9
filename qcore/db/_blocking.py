"""A caller's blocking (sync) connection, driven from worker threads one call at a time.

Statements join the caller's transaction when the connection is not in
autocommit mode (the caller commits); ``transaction()`` is a SAVEPOINT there
(BEGIN/COMMIT on an autocommit connection), so an error inside it undoes only
qcore's part. A driver supplies :meth:`BlockingDatabase.run_sync`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from qcore.db._base import Bound, Database, Rows
from qcore.db._threads import blocking
from qcore.errors import QcoreError

__all__ = ["BlockingDatabase"]

_SAVEPOINT = "qcore_transaction"


class BlockingDatabase(Database):
    """A caller's sync connection (anything with an ``autocommit`` attribute)."""

    single_connection = True

    def __init__(self, conn: Any) -> None:
        super().__init__()
        self.conn = conn
        self._lock = asyncio.Lock()

    @abc.abstractmethod
    def run_sync(self, sql: str, params: Sequence[Any]) -> Rows:
        """One statement with ``$1..$n`` parameters on ``self.conn`` (called in a thread)."""

    @property
    def joins_caller_transaction(self) -> bool:  # type: ignore[override]
        return not self.conn.autocommit

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        async with self._lock:
            return await blocking(self.run_sync, sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._execute(sql, ())

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        async with self._lock:
            if self.conn.autocommit:
                begin, end, undo = "BEGIN", "COMMIT", "ROLLBACK"
            else:
                begin = f"SAVEPOINT {_SAVEPOINT}"
                end = f"RELEASE SAVEPOINT {_SAVEPOINT}"
                undo = f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}"
            await blocking(self.run_sync, begin, ())
            try:
                yield _Bound(self)
            except BaseException:
                try:
                    await blocking(self.run_sync, undo, ())
                except QcoreError:  # the connection is gone; the server undid it
                    pass
                raise
            await blocking(self.run_sync, end, ())


class _Bound(Bound):
    """Inside ``transaction()``: the connection's lock is held already."""

    def __init__(self, root: BlockingDatabase) -> None:
        self._root = root
        self.driver = root.driver

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        return await blocking(self._root.run_sync, sql, params)

    async def _execute_script(self, sql: str) -> None:
        await self._execute(sql, ())

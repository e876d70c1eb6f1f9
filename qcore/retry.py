"""Running a statement or a transaction again after a retryable failure.

Distributed engines abort transactions that lose a serialization race
(SQLSTATE 40001) and expect the client to run them again. qcore retries the
whole unit a bounded number of times with jittered exponential backoff, then
raises ``SerializationError``. Inside a caller's transaction nothing is
retried: the caller owns it and must run it again.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from qcore.context import Context
from qcore.db import Database, Rows, Statements
from qcore.errors import DatabaseError, SerializationError
from qcore.sql._statement import Statement

__all__ = ["ATTEMPTS", "execute", "execute_together", "is_retryable", "run", "transaction"]

T = TypeVar("T")
ATTEMPTS = 6
BASE_DELAY_SECONDS = 0.01
MAX_DELAY_SECONDS = 0.5


def is_retryable(ctx: Context, exc: DatabaseError) -> bool:
    """A serialization failure or deadlock, or a SQLSTATE the backend marks retryable."""
    return isinstance(exc, SerializationError) or exc.sqlstate in ctx.backend.retryable_sqlstates


async def transaction(
    ctx: Context, work: Callable[[Database], Awaitable[T]], *, attempts: int = ATTEMPTS
) -> T:
    """Run ``work(tx)`` in one transaction, again from the start if it fails retryably."""

    async def once() -> T:
        async with ctx.db.transaction() as tx:
            return await work(tx)

    if ctx.watch is None:
        return await _retrying(ctx, once, attempts)
    started = time.monotonic()
    try:
        return await _retrying(ctx, once, attempts)
    finally:
        ctx.watch(time.monotonic() - started, f"transaction ({work.__qualname__})", ())


async def execute(
    ctx: Context, sql: str, params: Sequence[Any] = (), *, attempts: int = ATTEMPTS
) -> Rows:
    """One statement, run again if it fails retryably."""
    return await _watched(ctx, lambda: (sql, params), lambda: ctx.db.execute(sql, params), attempts)


async def execute_together(
    ctx: Context, statements: Statements, *, attempts: int = ATTEMPTS
) -> list[Rows]:
    """Statements in one transaction, all run again if it fails retryably.

    See :meth:`Database.execute_together`: one round trip where the adapter pipelines.
    """
    return await _watched(
        ctx,
        lambda: ("; ".join(sql for sql, _ in statements), ()),
        lambda: ctx.db.execute_together(statements),
        attempts,
    )


async def _watched(
    ctx: Context,
    watched: Callable[[], tuple[str, Sequence[Any]]],
    once: Callable[[], Awaitable[T]],
    attempts: int,
) -> T:
    """``once()`` with retries, its time reported to ``ctx.watch`` when one is set.

    The report carries what ``watched()`` says was run (built only for a watcher).
    """
    if ctx.watch is None:
        return await _retrying(ctx, once, attempts)
    started = time.monotonic()
    try:
        return await _retrying(ctx, once, attempts)
    finally:
        ctx.watch(time.monotonic() - started, *watched())


async def run(ctx: Context, statement: Statement, **values: Any) -> Rows:
    """A built statement with its values (by name), run again if it fails retryably."""
    return await execute(ctx, statement.sql, statement.bind(**values))


async def _retrying(ctx: Context, once: Callable[[], Awaitable[T]], attempts: int) -> T:
    if ctx.db.in_transaction:  # the caller's transaction: theirs to run again
        return await once()
    for attempt in range(1, attempts + 1):
        try:
            return await once()
        except DatabaseError as exc:
            if not is_retryable(ctx, exc):
                raise
            if attempt == attempts:
                raise SerializationError(
                    f"gave up after {attempts} attempts: {exc}",
                    sqlstate=exc.sqlstate,
                    statement=exc.statement,
                    retryable=True,
                ) from exc
            await asyncio.sleep(_backoff(attempt))
    raise AssertionError("unreachable")


def _backoff(attempt: int) -> float:
    ceiling = min(MAX_DELAY_SECONDS, BASE_DELAY_SECONDS * 2**attempt)
    return random.uniform(ceiling / 2, ceiling)

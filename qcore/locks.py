"""Mutual exclusion between instances, whatever the engine offers.

On a backend with advisory locks (``LockStrategy.ADVISORY``) a lock is
pg-boss's own: ``pg_advisory_xact_lock`` with pg-boss's key, taken inside the
transaction that does the work, so qcore and pg-boss instances exclude each
other. On a backend without them (``LockStrategy.LEASE``) a lock is a lease
row in qcore's lock table, acquired before the work and released after it,
renewed while the work runs (pg-boss itself simply goes without a lock there).

:func:`locked` and :func:`run_locked` are what the rest of qcore calls: "run
this under lock X" without caring which strategy the backend uses.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from qcore import retry
from qcore.backend import LockStrategy
from qcore.context import Context
from qcore.db import Database
from qcore.errors import DatabaseError
from qcore.events import Events
from qcore.periodic import Periodic
from qcore.sql import locks as sql
from qcore.sql._statement import Statement

__all__ = [
    "DEFAULT_EXPIRY_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "INSTALL",
    "Lease",
    "advisory_lock",
    "lease",
    "locked",
    "notify_channel",
    "run_locked",
]

log = logging.getLogger("qcore.locks")

T = TypeVar("T")

#: the install / migration lock
INSTALL = sql.INSTALL
#: how long to wait for a lock before giving up
DEFAULT_TIMEOUT_SECONDS = 60.0
#: how long a lease lasts unless renewed (a crashed holder blocks others this long at most)
DEFAULT_EXPIRY_SECONDS = 60.0
LOCK_NOT_AVAILABLE = "55P03"

notify_channel = sql.notify_channel


async def advisory_lock(
    ctx: Context, tx: Database, suffix: str = INSTALL, *, timeout: float | None = None
) -> bool:
    """Inside transaction ``tx``, wait for pg-boss's advisory lock ``suffix``.

    It is released at commit or rollback. Only on advisory-lock backends; elsewhere it
    does nothing and returns False (use :func:`lease` or :func:`locked` there).

    With ``timeout``, the wait (and every other lock wait of the transaction) is bounded;
    running out raises ``DatabaseError`` with SQLSTATE 55P03.
    """
    if ctx.backend.lock is not LockStrategy.ADVISORY:
        return False
    if timeout is not None:
        await tx.execute(sql.set_lock_timeout(timeout).sql)
    statement = sql.advisory_xact_lock
    await tx.execute(statement.sql, statement.bind(key=sql.lock_key_text(ctx.schema_spec, suffix)))
    return True


async def _detached(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` in a task that belongs to no transaction of the caller's.

    So a lease row is written and seen at once even when the caller is inside a
    transaction.
    """
    task: asyncio.Future[T] = contextvars.Context().run(asyncio.ensure_future, coro)
    return await task


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class Lease:
    """A lease row held in the schema's lock table (see :func:`lease`)."""

    def __init__(
        self,
        ctx: Context,
        suffix: str,
        *,
        expiry: float,
        renew_every: float | None = None,
        events: Events | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = sql.lease_name(suffix)
        self.holder = _holder()
        self.expiry = expiry
        self.renew_every = renew_every if renew_every is not None else expiry / 3
        self.lost = False
        self._renewal = _Renewal(self, events)

    async def _run(self, statement: Statement, **values: Any) -> list[dict[str, Any]]:
        """A lease statement on this lease, outside the caller's transaction.

        The statement takes the lease's ``name`` and ``holder`` if it needs them.
        """
        return await _detached(
            retry.run(self.ctx, statement, name=self.name, holder=self.holder, **values)
        )

    async def try_acquire(self) -> bool:
        """Take the lease if it is free or expired; whether we hold it now."""
        rows = await self._run(sql.acquire_lease(self.ctx.schema), seconds=float(self.expiry))
        return bool(rows)

    async def acquire(self, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        """Wait until the lease is ours, polling with short jittered sleeps.

        It raises ``DatabaseError`` (SQLSTATE 55P03) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        delay = 0.02
        while not await self.try_acquire():
            if time.monotonic() >= deadline:
                rows = await self._run(sql.lease_holder(self.ctx.schema))
                held = ""
                if rows:
                    held = f" (held by {rows[0]['holder']} until {rows[0]['expires_on']})"
                raise DatabaseError(
                    f"could not take the qcore lock {self.name!r} in schema {self.ctx.schema!r}"
                    f" within {timeout:g} s{held}",
                    sqlstate=LOCK_NOT_AVAILABLE,
                )
            await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), deadline - time.monotonic()))
            delay = min(delay * 2, 0.5)
        await self._renewal.start()

    async def release(self) -> None:
        """Stop renewing and give the lease back (best effort: it expires anyway)."""
        await self._renewal.stop()
        try:
            await self._run(sql.release_lease(self.ctx.schema))
        except DatabaseError as exc:
            log.warning(
                "releasing the qcore lock %r failed (it expires in %g s): %s",
                self.name,
                self.expiry,
                exc,
            )


class _Renewal(Periodic):
    """Pushes a held lease's expiry out every ``renew_every`` seconds.

    It runs detached from any transaction of the holder's; a failed renewal is reported
    (``error``, or the log without events) and tried at the next tick, as the lease has
    slack; a lease found lost ends the renewal.
    """

    name = "lease renewal"

    def __init__(self, held: Lease, events: Events | None) -> None:
        super().__init__(events, held.renew_every, detached=True)
        self.held = held

    async def run_pass(self) -> bool:
        held = self.held
        rows = await held._run(sql.renew_lease(held.ctx.schema), seconds=float(held.expiry))
        if rows:
            return True
        held.lost = True
        message = (
            f"the qcore lock {held.name!r} in schema {held.ctx.schema!r} expired while held"
            f" by {held.holder}; another instance may be running the same work"
        )
        if self.events is not None:
            self.events.emit("error", DatabaseError(message, sqlstate=LOCK_NOT_AVAILABLE))
        else:
            log.error("%s", message)
        return False


@asynccontextmanager
async def lease(
    ctx: Context,
    suffix: str = INSTALL,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    expiry: float = DEFAULT_EXPIRY_SECONDS,
) -> AsyncIterator[Lease]:
    """Hold lease ``suffix`` of the schema's lock table for the duration of the block.

    Acquired and released outside any transaction of the caller's; renewed every
    ``expiry / 3`` seconds while held. The lock table must exist (it is created by the
    install and by :func:`qcore.verbs.schema.install_or_migrate` before it takes a lease).
    """
    held = Lease(ctx, suffix, expiry=expiry)
    await held.acquire(timeout)
    try:
        yield held
    finally:
        await held.release()


@asynccontextmanager
async def locked(
    ctx: Context,
    suffix: str = INSTALL,
    *,
    transaction: bool = True,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> AsyncIterator[Database]:
    """Run the block under lock ``suffix``, whatever the backend's strategy.

    It yields the adapter to run the work on.

    Advisory backends: a transaction (the caller's, if one is open) that takes
    pg-boss's advisory lock first; the block's work commits with it. Lease backends:
    the lease is taken, then the block runs in a transaction — or, with
    ``transaction=False`` (DDL on an engine without transactional DDL), statement by
    statement on ``ctx.db`` — and the lease is released after. Nothing is retried here;
    see :func:`run_locked`.
    """
    if ctx.backend.lock is LockStrategy.ADVISORY:
        async with ctx.db.transaction() as tx:
            await advisory_lock(ctx, tx, suffix, timeout=timeout)
            yield tx
        return
    async with lease(ctx, suffix, timeout=timeout):
        if transaction:
            async with ctx.db.transaction() as tx:
                yield tx
        else:
            yield ctx.db


async def run_locked(
    ctx: Context,
    suffix: str,
    work: Callable[[Database], Awaitable[T]],
    *,
    transaction: bool = True,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> T:
    """``work(db)`` under lock ``suffix``, run again from the start if it fails retryably.

    See :func:`locked`; a retryable failure is a serialization failure on a distributed
    engine.
    """
    if ctx.backend.lock is LockStrategy.ADVISORY:

        async def in_transaction(tx: Database) -> T:
            await advisory_lock(ctx, tx, suffix, timeout=timeout)
            return await work(tx)

        return await retry.transaction(ctx, in_transaction)
    async with lease(ctx, suffix, timeout=timeout):
        if transaction:
            return await retry.transaction(ctx, work)
        return await work(ctx.db)

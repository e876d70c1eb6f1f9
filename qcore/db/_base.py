"""The adapter protocol: the only way SQL reaches an engine.

Every adapter implements four primitives — run one statement on a fresh
checkout, run a script, open a transaction bound to one connection, close —
and this base class adds what is the same for all of them: a transaction
opened while another is active in the same task joins it, and statements
sent through the root adapter inside ``async with db.transaction()`` run in
that transaction.
"""

from __future__ import annotations

import abc
import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from qcore.errors import ConfigError

__all__ = [
    "DEFAULT_LISTEN",
    "Bound",
    "Database",
    "ListenOptions",
    "Listener",
    "OnMessage",
    "OnReconnect",
    "Rows",
    "Statements",
    "call",
]

Rows = list[dict[str, Any]]
#: statements with their parameters, run together (``Database.execute_together``)
Statements = Sequence[tuple[str, Sequence[Any]]]
OnMessage = Callable[[str, str], Awaitable[None] | None]  # (channel, payload)
OnReconnect = Callable[[], Awaitable[None] | None]


async def call(callback: Callable[..., Any], *args: Any) -> None:
    """Call a sync or async callback."""
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


@dataclass(frozen=True)
class ListenOptions:
    """How a dedicated listening connection is kept alive (pg-boss's notify heartbeat and
    keepalive options, in seconds).

    When no notification came for ``heartbeat_seconds``, the session checks within
    ``heartbeat_timeout_seconds`` that it still listens, and is reopened if not; the
    connection's TCP keepalive starts after ``keepalive_idle_seconds`` idle (libpq's
    ``keepalives_idle``: the psycopg adapter).
    """

    heartbeat_seconds: float = 10.0
    heartbeat_timeout_seconds: float = 5.0
    keepalive_idle_seconds: float = 10.0


#: pg-boss's defaults
DEFAULT_LISTEN = ListenOptions()


class Listener(abc.ABC):
    """A running LISTEN; ``close()`` stops it and frees its connection."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class Database(abc.ABC):
    """An async connection to an engine, whatever the driver."""

    #: the driver's name, for messages and the matrix ("psycopg", "asyncpg", ...)
    driver: str = ""
    #: whether ``listen()`` works on this adapter
    can_listen: bool = False

    def __init__(self) -> None:
        self._active: contextvars.ContextVar[Database | None] = contextvars.ContextVar(
            f"qcore_transaction_{id(self)}", default=None
        )

    def pool_counts(self) -> dict[str, int] | None:
        """The pool's ``max``, ``total``, ``idle`` and ``waiting`` connections now.

        Only where the adapter has a pool of its own (None otherwise).
        """
        return None

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Run one statement with ``$1..$n`` parameters; its rows as dicts."""
        tx = self._active.get()
        if tx is not None:
            return await tx.execute(sql, params)
        return await self._execute(sql, params)

    async def execute_script(self, sql: str) -> None:
        """Run several parameter-less statements (DDL, DO blocks) as one script."""
        tx = self._active.get()
        if tx is not None:
            return await tx.execute_script(sql)
        return await self._execute_script(sql)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Database]:
        """A transaction on one connection: commits on exit, rolls back on error.

        Inside another transaction of this adapter in the same task, joins it.
        """
        tx = self._active.get()
        if tx is not None:
            yield tx
            return
        async with self._transaction() as tx:
            token = self._active.set(tx)
            try:
                yield tx
            finally:
                self._active.reset(token)

    async def execute_together(self, statements: Statements) -> list[Rows]:
        """Run several statements in one transaction, in order, all or none; their rows.

        An error in one undoes those before it and runs none after. The rows come
        statement by statement.

        Inside a transaction of this task they join it. An adapter that can send them in
        one exchange does (psycopg: pipeline mode, one round trip for all of them and
        the commit); the others run them in turn."""
        tx = self._active.get()
        if tx is not None:
            return [await tx.execute(sql, params) for sql, params in statements]
        return await self._execute_together(statements)

    async def _execute_together(self, statements: Statements) -> list[Rows]:
        async with self.transaction() as tx:
            return [await tx.execute(sql, params) for sql, params in statements]

    def separate_transaction(self) -> AbstractAsyncContextManager[Database]:
        """A transaction on a connection of its own, which this task's other statements do not join.

        Those of :meth:`transaction` do join theirs. It is what a locked claim holds
        while its jobs run, so the code running them uses the pool as always.
        """
        tx: AbstractAsyncContextManager[Database] = self._transaction()
        return tx

    @property
    def in_transaction(self) -> bool:
        """Whether statements run inside a transaction someone else ends.

        That is one opened with ``transaction()`` in this task, or the caller's own on a
        connection they own. Nothing run inside one is retried by qcore: an error aborts
        it for its owner.
        """
        return self._active.get() is not None or self.joins_caller_transaction

    #: statements join a transaction the caller owns (their connection or session)
    joins_caller_transaction: bool = False
    #: whether ``transaction()`` makes its statements one unit that commits or rolls
    #: back whole (not so for an ``execute_sql`` object, whose transactions are its own)
    atomic_transactions: bool = True
    #: every statement goes through one connection: a transaction held open stops
    #: all others until it ends
    single_connection: bool = False

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        """Call ``on_message(channel, payload)`` for each NOTIFY on ``channel``.

        The listener reconnects by itself and calls ``on_reconnect`` after it
        has (notifications sent while it was away are lost; callers re-poll);
        ``options`` say how its connection is kept alive.
        """
        raise ConfigError(
            f"the {self.driver or type(self).__name__} adapter cannot LISTEN; use the psycopg or"
            " asyncpg adapter with a connection qcore can pin, or poll"
        )

    async def close(self) -> None:
        """Release what this adapter opened; never what it was given."""

    @abc.abstractmethod
    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows: ...

    @abc.abstractmethod
    async def _execute_script(self, sql: str) -> None: ...

    @abc.abstractmethod
    def _transaction(self) -> Any:
        """An async context manager yielding a ``Database`` bound to one connection."""


class Bound(Database):
    """An adapter bound to one connection inside a transaction.

    Nested ``transaction()`` calls yield itself.
    """

    def __init__(self) -> None:  # no context variable: a bound adapter is its own transaction
        pass

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        return await self._execute(sql, params)

    async def execute_script(self, sql: str) -> None:
        await self._execute_script(sql)

    async def execute_together(self, statements: Statements) -> list[Rows]:
        # in turn, as its next statements: not pipelined (psycopg's pipeline inside an open
        # transaction left an idle_in_transaction_session_timeout it set unarmed)
        return await self._execute_together(statements)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Database]:
        yield self

    @property
    def in_transaction(self) -> bool:
        return True

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        yield self

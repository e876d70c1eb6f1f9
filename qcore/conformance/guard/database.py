"""The guarded adapter: a ``Database`` that refuses, before the server sees it, every
statement using a capability the emulated backend lacks; and the emulation's session
settings."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from qcore.backend import Backend
from qcore.conformance.guard.analysis import analyse
from qcore.conformance.guard.detectors import (
    DETECTORS,
    IN_FAILED_TRANSACTION,
    SERIALIZATION_FAILURE,
    UnsupportedFeature,
    forbidden_features,
)
from qcore.db._base import (
    DEFAULT_LISTEN,
    Bound,
    Database,
    Listener,
    ListenOptions,
    OnMessage,
    OnReconnect,
    Rows,
)
from qcore.errors import DatabaseError, SerializationError, first_line
from qcore.sql.engine import EMULATION_SETTING


class _RollbackOnly(Exception):
    """Raised inside the inner transaction to roll it back after an emulated abort."""


class GuardedDatabase(Database):
    """A ``Database`` that refuses, before sending, every statement the backend cannot run.

    ``execute``, ``execute_script``, ``transaction`` and ``listen`` check and
    delegate to ``inner``; a transaction yields a guarded bound adapter.

    Inside a transaction, a refused or fault-injected statement aborts the
    transaction as an error on a real engine would: later statements fail
    with SQLSTATE ``25P02`` and leaving the block rolls back, even if the
    caller caught the error (PostgreSQL answers COMMIT of a failed transaction
    with ROLLBACK).
    """

    def __init__(self, inner: Database, backend: Backend) -> None:
        super().__init__()
        self.inner = inner
        self.backend = backend
        self.forbidden = forbidden_features(backend)
        self.driver = inner.driver
        self.can_listen = inner.can_listen and "listen_notify" not in self.forbidden
        self.atomic_transactions = inner.atomic_transactions
        self.single_connection = inner.single_connection
        #: how many serialization failures have been injected so far
        self.injected = 0
        self._tx_nth = 0
        self._tx_times = 0
        self._out_countdown = 0
        self._out_times = 0

    # ----------------------------------------------------------------- checking

    def check(self, sql: str) -> None:
        """Raise :class:`UnsupportedFeature` if ``sql`` uses a feature the backend lacks
        (:class:`GuardParseError` if it does not parse)."""
        for stmt in analyse(sql):
            bad = [f for f in stmt.features if f in self.forbidden]
            if bad:
                feature = bad[0]
                raise UnsupportedFeature(
                    f"{self.backend.name} does not support {feature}"
                    f" ({DETECTORS[feature].description}); refused by the capability guard"
                    f" before it reached the server: {stmt.statement}",
                    feature=feature,
                    backend=self.backend.name,
                    statement=stmt.statement,
                    features=bad,
                )

    # ----------------------------------------------------------------- fault injection

    def inject_serialization_failure(
        self, nth: int, times: int = 1, *, in_transaction: bool = True
    ) -> None:
        """Make statements fail with ``SerializationError`` (SQLSTATE ``40001``, retryable).

        With ``in_transaction`` (the default), the ``nth`` statement (1-based) of
        each of the next ``times`` transactions opened from now on that reach an
        ``nth`` statement fails; the statement is not run and the real transaction
        rolls back. Otherwise the ``nth`` statement executed outside a transaction
        from now on fails, and so do the ``times - 1`` after it (the retries).
        A new call replaces the pending injection of the same kind.
        """
        if nth < 1 or times < 0:
            raise ValueError(f"nth must be >= 1 and times >= 0, got nth={nth}, times={times}")
        if in_transaction:
            self._tx_nth, self._tx_times = nth, times
        else:
            self._out_countdown, self._out_times = nth, times

    def cancel_injections(self) -> None:
        """Drop every pending injected failure."""
        self._tx_times = self._out_times = 0

    def _injected_failure(self, sql: str) -> SerializationError:
        self.injected += 1
        return SerializationError(
            f"restart transaction: injected serialization failure #{self.injected}"
            f" (emulating {self.backend.name})",
            sqlstate=SERIALIZATION_FAILURE,
            statement=first_line(sql),
            retryable=True,
        )

    def _before_outside(self, sql: str) -> None:
        self.check(sql)
        if self._out_times > 0:
            self._out_countdown -= 1
            if self._out_countdown <= 0:
                self._out_times -= 1
                raise self._injected_failure(sql)

    def _tx_injection_due(self, armed: bool, count: int) -> bool:
        if armed and count == self._tx_nth and self._tx_times > 0:
            self._tx_times -= 1
            return True
        return False

    # ----------------------------------------------------------------- Database primitives

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self._before_outside(sql)
        return await self.inner.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self._before_outside(sql)
        await self.inner.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        armed = self._tx_times > 0
        with contextlib.suppress(_RollbackOnly):
            async with self.inner.separate_transaction() as inner_tx:
                bound = _GuardedBound(self, inner_tx, armed)
                yield bound
                if bound.aborted:
                    raise _RollbackOnly

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        """Refused when the backend has no LISTEN/NOTIFY; otherwise the inner adapter's."""
        if "listen_notify" in self.forbidden:
            raise UnsupportedFeature(
                f"{self.backend.name} does not support listen_notify"
                f" ({DETECTORS['listen_notify'].description}); refused by the capability guard",
                feature="listen_notify",
                backend=self.backend.name,
                statement="LISTEN",
            )
        return await self.inner.listen(channel, on_message, on_reconnect, options=options)

    async def close(self) -> None:
        """Close the inner adapter (which closes only what it opened itself)."""
        await self.inner.close()


class _GuardedBound(Bound):
    """The guarded view of one transaction of the inner adapter."""

    def __init__(self, guard: GuardedDatabase, inner: Database, armed: bool) -> None:
        super().__init__()
        self.driver = guard.driver
        self._guard = guard
        self._inner = inner
        self._armed = armed
        self.statements = 0
        self.aborted = False

    def _before(self, sql: str) -> None:
        if self.aborted:
            raise DatabaseError(
                "current transaction is aborted, commands ignored until end of transaction block",
                sqlstate=IN_FAILED_TRANSACTION,
                statement=first_line(sql),
            )
        self.statements += 1
        try:
            self._guard.check(sql)
        except DatabaseError:
            self.aborted = True
            raise
        if self._guard._tx_injection_due(self._armed, self.statements):
            self.aborted = True
            raise self._guard._injected_failure(sql)

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self._before(sql)
        return await self._inner.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self._before(sql)
        await self._inner.execute_script(sql)


_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _escape_option(value: str) -> str:
    """libpq splits ``options`` on spaces; a backslash escapes a space or a backslash."""
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def emulation_conninfo(dsn: str, backend: Backend) -> str:
    """``dsn`` with libpq ``options=-c key=value`` for an emulated session: the
    backend's provisioning ``session_settings``, so it runs as the engine would (e.g.
    CockroachDB's ``default_transaction_isolation=serializable``), and the setting
    that tells qcore's engine check which backend the session stands in for
    (``qcore.emulate``). Options already in ``dsn`` are kept."""
    settings = dict(backend.provisioning.session_settings) if backend.provisioning else {}
    settings[EMULATION_SETTING] = backend.name
    params = conninfo_to_dict(dsn)
    parts = [str(params["options"])] if params.get("options") else []
    for key, value in settings.items():
        if not _SETTING_NAME.match(key):
            raise ValueError(f"invalid session setting name {key!r} for {backend.name}")
        parts.append(f"-c {key}={_escape_option(str(value))}")
    params["options"] = " ".join(parts)
    return make_conninfo("", **params)

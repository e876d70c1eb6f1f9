"""A service that does not stop in time is cancelled, and ``stop()`` returns only once its
open transaction has been rolled back: a caller that blocks the event loop right after
(a synchronous ``DROP SCHEMA`` in a test's teardown, a process exiting) must not find a
connection of ours idle in a transaction that nothing will ever end."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from qcore import Boss
from qcore.context import Context
from qcore.events import Events
from qcore.periodic import Periodic

pytestmark = [pytest.mark.feature("boss"), pytest.mark.postgres]


class _HoldsATransaction(Periodic):
    """A pass that opens a transaction, marks it, and then never finishes on its own."""

    name = "holds-a-transaction"

    def __init__(self, ctx: Context, events: Events, marker: str, entered: asyncio.Event) -> None:
        super().__init__(events, 0.05)
        self.ctx, self.marker, self.entered = ctx, marker, entered

    async def run_pass(self) -> None:
        async with self.ctx.db.transaction() as tx:
            await tx.execute(f"SELECT 1 AS {self.marker}")
            self.entered.set()
            await asyncio.sleep(3600)


def _idle_in_transaction(dsn: str, marker: str) -> int:
    """Blocking on purpose: the event loop gets no turn while this runs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(n,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND query LIKE %s",
            [f"%{marker}%"],
        ).fetchall()
        return int(n)


async def test_a_late_services_transaction_is_rolled_back_before_stop_returns(
    pg_dsn: str,
) -> None:
    marker = f"held_{uuid.uuid4().hex[:8]}"
    entered = asyncio.Event()
    errors: list[Any] = []
    boss = Boss(pg_dsn, schema=f"q_{marker}", supervise=False, schedule=False)
    boss.on("error", errors.append)
    await boss.start()
    try:
        await boss.add_service(lambda ctx, events: _HoldsATransaction(ctx, events, marker, entered))
        await asyncio.wait_for(entered.wait(), 60)
        assert _idle_in_transaction(pg_dsn, marker) == 1
    finally:
        await boss.stop(timeout=0.5)
    assert _idle_in_transaction(pg_dsn, marker) == 0
    assert any("did not stop in time" in str(e) for e in errors)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "q_{marker}" CASCADE')

"""LISTEN/NOTIFY beyond the conformance suite (``qcore/conformance/suite/test_notify.py``):
the listener's heartbeat on each driver, and a pg-boss producer waking a qcore notifier."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from qcore.conformance.suite.test_notify import Heard
from qcore.context import Context
from qcore.db import connect
from qcore.events import Events
from qcore.services.notifier import Notifier
from qcore.verbs import queues
from tests.interop.pgboss import interop, run_ok


@pytest.mark.postgres
@pytest.mark.parametrize("stale", [False, True], ids=["listening", "stale"])
@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
async def test_listener_heartbeat_on_each_driver(
    pg_dsn: str, driver: str, stale: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each listening adapter's heartbeat asks whether its session still listens on the
    channel: a healthy one stays; told no (as through a pooler that swapped the
    session), it reconnects and says so."""
    from qcore.db import asyncpg as asyncpg_adapter
    from qcore.db import psycopg as psycopg_adapter

    if driver == "psycopg":
        adapter: Any = psycopg_adapter
        session: Any = psycopg_adapter._PsycopgListenSession
    else:
        adapter, session = asyncpg_adapter, asyncpg_adapter._AsyncpgListenSession
    monkeypatch.setattr(session, "heartbeat_seconds", 0.05)
    healthy = adapter._STILL_LISTENING
    if stale:
        placeholder = "%s" if driver == "psycopg" else "$1"
        monkeypatch.setattr(adapter, "_STILL_LISTENING", f"SELECT {placeholder}::text IS NULL")
    db = await connect(pg_dsn, driver=driver, max=2)
    heard = Heard()
    listener = await db.listen("qcore_hb", lambda _c, p: heard.on_queue(p), heard.on_reconnect)
    try:
        if stale:
            await asyncio.wait_for(heard.reconnected.wait(), 30)
            monkeypatch.setattr(adapter, "_STILL_LISTENING", healthy)
            await asyncio.sleep(0.3)  # a reconnect under way settles on a healthy session
        else:
            await asyncio.sleep(0.3)  # several heartbeats
            assert not heard.reconnected.is_set()
        await db.execute("SELECT pg_notify('qcore_hb', 'still here')")
        assert (await heard.next(5))[0] == "still here"
    finally:
        await listener.close()
        await db.close()


@interop
async def test_a_pgboss_producer_wakes_a_qcore_notifier(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    heard = Heard()
    notifier = Notifier(ctx, Events(), on_queue=heard.on_queue, on_reconnect=heard.on_reconnect)
    try:
        await queues.create_queue(ctx, "from-node", notify=True)
        await queues.create_queue(ctx, "quiet")
        assert await notifier.start()
        await asyncio.to_thread(
            run_ok,
            {
                "connectionString": pg_dsn,
                "schema": ctx.schema_spec,
                "migrate": False,
                "actions": [
                    {"op": "start"},
                    {"op": "send", "args": ["quiet", {"x": 0}]},
                    {"op": "send", "args": ["from-node", {"x": 1}]},
                    {"op": "stop"},
                ],
            },
        )
        name, _ = await heard.next(10)
        assert name == "from-node"  # first: the earlier send to "quiet" notified nothing
    finally:
        await notifier.stop()

"""LISTEN/NOTIFY beyond the conformance suite (``qcore/conformance/suite/test_notify.py``):
the listener's heartbeat on each driver, and a pg-boss producer waking a qcore notifier."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.suite.test_notify import Heard
from qcore.context import Context
from qcore.db import ListenOptions, connect
from qcore.errors import ConfigError
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

    adapter: Any = psycopg_adapter if driver == "psycopg" else asyncpg_adapter
    healthy = adapter._STILL_LISTENING
    if stale:
        placeholder = "%s" if driver == "psycopg" else "$1"
        monkeypatch.setattr(adapter, "_STILL_LISTENING", f"SELECT {placeholder}::text IS NULL")
    db = await connect(pg_dsn, driver=driver, max=2)
    heard = Heard()
    listener = await db.listen(
        "qcore_hb",
        lambda _c, p: heard.on_queue(p),
        heard.on_reconnect,
        options=ListenOptions(heartbeat_seconds=0.05),
    )
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


async def test_the_notify_options_reach_the_listening_connection(pg_dsn: str) -> None:
    """``notify_heartbeat_interval_seconds``, ``notify_heartbeat_timeout_seconds`` and
    ``notify_keep_alive_initial_delay_seconds`` (pg-boss's notify*Ms options, in seconds)
    are the listening session's heartbeat and its connection's TCP keepalive; a value
    out of range is a ``ConfigError`` naming it."""
    for option in (
        "notify_heartbeat_interval_seconds",
        "notify_heartbeat_timeout_seconds",
        "notify_keep_alive_initial_delay_seconds",
    ):
        bad: dict[str, Any] = {option: 0}
        with pytest.raises(ConfigError, match=option):
            Boss(pg_dsn, **bad)
    boss = Boss(
        pg_dsn,
        schema="qcore_notify_options",
        use_listen_notify=True,
        supervise=False,
        schedule=False,
        notify_heartbeat_interval_seconds=7.5,
        notify_heartbeat_timeout_seconds=2,
        notify_keep_alive_initial_delay_seconds=30,
    )
    async with boss:
        notifier = boss.services.get("notifier", Notifier)
        assert notifier is not None and notifier.available
        session: Any = notifier._listener._session  # type: ignore[union-attr]
        assert (session.heartbeat_seconds, session.heartbeat_timeout_seconds) == (7.5, 2)
        assert session._conn.info.get_parameters()["keepalives_idle"] == "30"
        await boss.db.execute_script("DROP SCHEMA qcore_notify_options CASCADE")

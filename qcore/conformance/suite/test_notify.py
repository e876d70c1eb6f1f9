"""LISTEN/NOTIFY: a runnable job created on a ``notify`` queue (send, insert, retry)
reaches the Notifier's ``on_queue`` at once, on pg-boss's channel; the listener comes
back after its connection is killed and says so; backends and adapters that cannot
listen fall back to polling with one ``listen_notify_unavailable`` warning."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from qcore import Boss
from qcore.affinity import Affinity
from qcore.backend import Backend
from qcore.conformance.helpers import cut_connection
from qcore.conformance.provisioners import Provisioner
from qcore.context import Context
from qcore.db import DEFAULT_LISTEN, Database, ListenOptions
from qcore.db.custom import CustomDatabase
from qcore.errors import ConnectionLostError
from qcore.events import Events, WarningEvent
from qcore.services.notifier import UNAVAILABLE, Notifier
from qcore.sql.locks import notify_channel
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("notify")

#: how long a notification may take to arrive once the statement that sent it has
#: committed. The notifier has no poll of its own, so arriving at all is what proves
#: the wake; a deadline generous for a busy machine keeps the test honest there
#: (how fast a wake is, bench/ measures: python -m bench run reports its p50/p99).
PROMPT = 5.0
#: a notifying queue whose job proves nothing was heard before it (Heard.nothing_before)
FENCE = "fence"


class Heard:
    """What a Notifier reported: each queue name with the time it arrived, and reconnects."""

    def __init__(self) -> None:
        self.queues: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
        self.reconnected = asyncio.Event()

    def on_queue(self, name: str) -> None:
        self.queues.put_nowait((name, time.monotonic()))

    def on_reconnect(self) -> None:
        self.reconnected.set()

    async def next(self, timeout: float = PROMPT) -> tuple[str, float]:
        return await asyncio.wait_for(self.queues.get(), timeout)

    async def nothing_before(self, ctx: Context) -> None:
        """No notification came since the last one: a job sent now to the notifying
        queue ``FENCE`` is the next one heard (NOTIFYs arrive in commit order, so one
        sent earlier would come first; no sleep to outlast)."""
        await jobs.send(ctx, FENCE)
        name, _ = await self.next()
        assert name == FENCE, f"unexpected notification before the fence: {name}"


@pytest_asyncio.fixture
async def listening(ctx: Context) -> AsyncIterator[tuple[Notifier, Heard]]:
    heard = Heard()
    notifier = Notifier(ctx, Events(), on_queue=heard.on_queue, on_reconnect=heard.on_reconnect)
    assert await notifier.start()
    try:
        yield notifier, heard
    finally:
        await notifier.stop()


async def _prompt(heard: Heard, queue: str, since: float) -> None:
    name, at = await heard.next()
    assert name == queue
    assert at - since <= PROMPT, f"took {(at - since) * 1000:.1f} ms"


@pytest.mark.requires("listen_notify")
async def test_send_to_a_notify_queue_wakes_at_once(
    ctx: Context, listening: tuple[Notifier, Heard]
) -> None:
    notifier, heard = listening
    assert notifier.available and notifier.channel == notify_channel(ctx.schema_spec)
    await queues.create_queue(ctx, "loud", notify=True)
    await queues.create_queue(ctx, "quiet")
    await queues.create_queue(ctx, FENCE, notify=True)

    await jobs.send(ctx, "quiet", {"n": 1})  # notify=False: nothing
    await jobs.send(ctx, "loud", {"n": 2})
    since = time.monotonic()
    await _prompt(heard, "loud", since)

    await jobs.insert(ctx, "loud", [{"data": i} for i in range(3)])
    since = time.monotonic()
    await _prompt(heard, "loud", since)  # one notification for the batch
    await heard.nothing_before(ctx)

    await jobs.send(ctx, "loud", start_after=3600)  # not runnable yet: pg-boss stays quiet
    await heard.nothing_before(ctx)


@pytest.mark.usefixtures("installed")
@pytest.mark.requires("listen_notify")
async def test_a_sent_job_starts_at_once_on_an_idle_worker(
    db: Database, backend: Backend, schema: str
) -> None:
    """End to end: a worker polling every 60 s runs a job sent to its notify queue at
    once (the wake, the worker's claim and that claim's own commit), not at its next
    poll: within 10 s, a sixth of the poll interval."""
    boss = Boss(db=db, backend=backend, schema=schema, use_listen_notify=True)
    await boss.start()
    try:
        await boss.create_queue("q", notify=True)
        started: asyncio.Queue[float] = asyncio.Queue()

        async def handler(_jobs: Any) -> None:
            started.put_nowait(time.monotonic())

        await boss.work("q", handler, polling_interval_seconds=60)
        await asyncio.sleep(0.3)  # its first (empty) poll is done: the worker is idle
        for _ in range(2):
            await boss.send("q", {"x": 1})
            since = time.monotonic()
            at = await asyncio.wait_for(started.get(), 30)
            assert at - since <= 10.0, f"took {(at - since) * 1000:.1f} ms"
            await asyncio.sleep(0.1)  # completed; idle again
    finally:
        await boss.stop(timeout=5)


@pytest.mark.requires("listen_notify")
async def test_retry_wakes_but_a_failure_does_not(
    ctx: Context, listening: tuple[Notifier, Heard]
) -> None:
    _, heard = listening
    await queues.create_queue(ctx, "loud", notify=True, retry_limit=0)
    await queues.create_queue(ctx, FENCE, notify=True)
    sent = await jobs.send(ctx, "loud")
    assert sent is not None
    await _prompt(heard, "loud", time.monotonic())
    [job] = await jobs.fetch(ctx, "loud")
    await jobs.fail(ctx, "loud", job)  # failed for good: a retry to retry() later
    await heard.nothing_before(ctx)
    result = await jobs.retry(ctx, "loud", sent)
    since = time.monotonic()
    assert result.affected == 1
    await _prompt(heard, "loud", since)
    assert (await jobs.retry(ctx, "loud", sent)).affected == 0  # not failed any more
    await heard.nothing_before(ctx)


@pytest.mark.requires("listen_notify")
async def test_listener_comes_back_after_its_connection_dies(
    ctx: Context, provisioned: Provisioner, backend: Backend, listening: tuple[Notifier, Heard]
) -> None:
    notifier, heard = listening
    await queues.create_queue(ctx, "loud", notify=True)
    if backend.capabilities.single_session:  # PGlite: one connection, the adapter's
        cut_connection(ctx.db)
        with pytest.raises(ConnectionLostError):
            await ctx.db.execute("SELECT 1")
    else:
        killed = await asyncio.to_thread(_terminate_listener, provisioned.url, notifier.channel)
        assert killed == 1
    await ctx.db.execute("SELECT 1")  # PGlite reconnects on the next statement
    await asyncio.wait_for(heard.reconnected.wait(), 10)
    await jobs.send(ctx, "loud")
    since = time.monotonic()
    await _prompt(heard, "loud", since)


@pytest.mark.requires("listen_notify")
async def test_heartbeat_keeps_a_healthy_listener(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a heartbeat every 50 ms (10 s by default) the check that the session still
    listens runs many times, finds it does, and notifications keep coming."""
    assert (DEFAULT_LISTEN.heartbeat_seconds, DEFAULT_LISTEN.heartbeat_timeout_seconds) == (10, 5)
    heard = Heard()
    notifier = Notifier(
        ctx,
        Events(),
        on_queue=heard.on_queue,
        on_reconnect=heard.on_reconnect,
        listening=ListenOptions(heartbeat_seconds=0.05),
    )
    assert await notifier.start()
    try:
        await queues.create_queue(ctx, "loud", notify=True)
        await asyncio.sleep(0.4)
        assert not heard.reconnected.is_set()
        await jobs.send(ctx, "loud")
        since = time.monotonic()
        await _prompt(heard, "loud", since)
    finally:
        await notifier.stop()


@pytest.mark.usefixtures("installed")
async def test_unavailable_listener_warns_once_and_polls(
    db: Database, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, use_listen_notify=True)
    warnings: list[WarningEvent] = []
    boss.on("warning", warnings.append)
    await boss.start()
    try:
        await boss.create_queue("q", notify=True)
        assert await boss.send("q") is not None  # sending works either way
        handled = asyncio.Event()

        async def handler(_jobs: Any) -> None:
            handled.set()

        # without a listener the worker polls: the job is worked all the same
        await boss.work("q", handler, polling_interval_seconds=0.5)
        await asyncio.wait_for(handled.wait(), 30)
        unavailable = [w for w in warnings if w.type == UNAVAILABLE]
        if backend.has("listen_notify"):
            assert unavailable == []
        else:
            assert len(unavailable) == 1 and backend.name in unavailable[0].message
            assert unavailable[0].data["backend"] == backend.name
    finally:
        await boss.stop(close=False)
    assert len([w for w in warnings if w.type == UNAVAILABLE]) == (
        0 if backend.has("listen_notify") else 1
    )


async def test_an_adapter_that_cannot_listen_warns_once(ctx: Context) -> None:
    class Forward:
        async def execute_sql(self, text: str, values: list[Any]) -> list[dict[str, Any]]:
            return await ctx.db.execute(text, values)

    custom = Context(db=CustomDatabase(Forward()), backend=ctx.backend, schema_spec=ctx.schema)
    events = Events()
    warnings: list[WarningEvent] = []
    events.on("warning", warnings.append)
    notifier = Notifier(custom, events, on_queue=lambda _q: None, on_reconnect=lambda: None)
    assert await notifier.start() is False
    assert not notifier.available
    await notifier.stop()
    assert [w.type for w in warnings] == [UNAVAILABLE]


@pytest.mark.requires("listen_notify")
async def test_channel_follows_the_schema_spelling(ctx: Context) -> None:
    # the channel is pg-boss's: computed from the schema as configured
    assert notify_channel("pgboss") == "pgboss_454650302e472074f72063fd"
    assert notify_channel('"pgboss"') == notify_channel("pgboss")
    notifier = Notifier(ctx, Events(), on_queue=lambda _q: None, on_reconnect=lambda: None)
    assert notifier.channel == notify_channel(ctx.schema_spec)


# --------------------------------------------------------------------------- interop


# --------------------------------------------------------------------------- helpers


def _terminate_listener(url: str, channel: str) -> int:
    """Kill the session that LISTENs on ``channel`` (its last statement was the LISTEN)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND query LIKE %s",
            [f"LISTEN %{channel}%"],
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.requires("listen_notify")
async def test_a_wake_for_a_pattern_this_server_cannot_match_is_skipped(ctx: Context) -> None:
    """A job with an affinity pattern notifies its pattern; a server whose key cannot
    match it does not wake for it (its workers would claim nothing), one whose key
    matches does."""
    heard = Heard()
    server = replace(ctx, affinity=Affinity(key="b:ram-2gb:cpu-1cor"))
    sender = replace(ctx, affinity=Affinity(key="a:ram-8gb:cpu-4cor"))
    notifier = Notifier(server, Events(), on_queue=heard.on_queue, on_reconnect=heard.on_reconnect)
    assert await notifier.start()
    try:
        await queues.create_queue(ctx, "render", notify=True)
        await queues.create_queue(ctx, FENCE, notify=True)
        await jobs.send(sender, "render", {"n": 1}, preferred_instance_key_pattern="ram-8gb")
        await heard.nothing_before(ctx)  # notified, and skipped: not this server's
        await jobs.send(sender, "render", {"n": 2}, preferred_instance_key_pattern="ram-2gb")
        since = time.monotonic()
        await _prompt(heard, "render", since)
    finally:
        await notifier.stop()

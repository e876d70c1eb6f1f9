"""start(attempts): a database that comes up late, and configuration errors that never retry."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from qcore import Boss
from qcore.conformance.helpers import until
from qcore.conformance.provisioners import TempCluster, free_port
from qcore.errors import ConfigError, ConnectionLostError, NotInstalledError
from qcore.events import WarningEvent
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("lifecycle")]


def _warnings(boss: Boss) -> list[WarningEvent]:
    seen: list[WarningEvent] = []
    boss.on("warning", seen.append)
    return seen


@pytest.mark.skipif(not TempCluster.available(), reason="needs pg_ctl and initdb to start a server")
async def test_start_waits_for_a_database_that_comes_up_late() -> None:
    port = free_port()
    cluster = TempCluster(port=port)
    boss = Boss(
        f"postgresql://postgres@127.0.0.1:{port}/postgres",
        schema="late",
        supervise=False,
        connection_timeout=2,
    )
    seen = _warnings(boss)
    starting = asyncio.ensure_future(boss.start(attempts=6))
    try:
        await asyncio.sleep(1.5)  # the first attempts find nobody listening
        assert not starting.done()
        await asyncio.to_thread(cluster.start)
        await asyncio.wait_for(starting, 60)
        assert await boss.schema_version() == 46
        assert [w.type for w in seen] == ["start_retry"]  # once per call, however many tries
    finally:
        if not starting.done():
            starting.cancel()
        await boss.stop()
        await asyncio.to_thread(cluster.stop)


async def test_last_error_after_the_attempts_run_out() -> None:
    port = free_port()  # nothing listens there
    boss = Boss(f"postgresql://postgres@127.0.0.1:{port}/postgres", connection_timeout=1)
    seen = _warnings(boss)
    with pytest.raises(ConnectionLostError):
        await boss.start(attempts=2)
    assert [w.type for w in seen] == ["start_retry"]
    await boss.stop()


async def test_a_configuration_error_is_never_retried(pg_dsn: str) -> None:
    boss = Boss(pg_dsn, schema="never_created", create_schema=False, supervise=False)
    seen = _warnings(boss)
    began = time.monotonic()
    with pytest.raises(ConfigError, match="never_created"):
        await boss.start(attempts=5)
    assert time.monotonic() - began < 10  # not the 1 + 2 + 4 + 8 s of four retries
    assert seen == []
    await boss.stop()


async def test_stop_during_a_wait_ends_it() -> None:
    port = free_port()
    boss = Boss(f"postgresql://postgres@127.0.0.1:{port}/postgres", connection_timeout=1)
    starting = asyncio.ensure_future(boss.start(attempts=10))
    await asyncio.sleep(0.3)
    await boss.stop()
    with pytest.raises(ConnectionLostError):
        await asyncio.wait_for(starting, 10)


async def test_start_again_after_a_failure_is_safe(pg_dsn: str) -> None:
    boss = Boss(pg_dsn, schema="second_try", create_schema=False, supervise=False)
    with pytest.raises(ConfigError):
        await boss.start()
    admin_execute('CREATE SCHEMA "second_try"', pg_dsn)
    try:
        await boss.start()
        assert await boss.is_installed()
    finally:
        await boss.stop()
        admin_execute('DROP SCHEMA "second_try" CASCADE', pg_dsn)


async def test_migrate_false_waits_for_the_instance_that_installs(pg_dsn: str) -> None:
    """A ``migrate=False`` instance started before the schema exists retries (pg-boss:
    a schema another process is still creating or migrating is retried) and starts
    once an instance with ``migrate=True`` has installed it; with no tries left it is
    the ``NotInstalledError`` it always was."""
    schema = f"waits_{uuid.uuid4().hex[:8]}"
    waiting = Boss(
        pg_dsn,
        schema=schema,
        migrate=False,
        supervise=False,
        schedule=False,
        register_instance=True,
    )
    seen = _warnings(waiting)
    starting = asyncio.ensure_future(waiting.start(attempts=6))
    installer = Boss(
        pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=True
    )
    try:
        await until(lambda: bool(seen), 60, what="the waiting instance's start_retry warning")
        assert [w.type for w in seen] == ["start_retry"] and "migrate=True" in seen[0].message
        async with installer:
            await asyncio.wait_for(starting, 120)  # its next try finds the install
            assert await waiting.is_installed()
            # its registry row says which try got through, as pg-boss's does
            rows = {i.id: i for i in await waiting.get_instances()}
            assert rows[waiting.instance_id].config["startAttempt"] >= 2
            assert "startAttempt" not in rows[installer.instance_id].config
    finally:
        starting.cancel()
        await waiting.stop()
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)
    alone = Boss(pg_dsn, schema=f"{schema}_none", migrate=False, supervise=False)
    with pytest.raises(NotInstalledError):
        await alone.start(attempts=1)
    await alone.stop()

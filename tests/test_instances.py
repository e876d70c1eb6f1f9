"""The instance registry on the local PostgreSQL, where it meets the world outside the
database: lives ended by SIGKILL counted as crash restarts, connections joined to their
row through ``pg_stat_activity``, a password in the connection string never stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import set_clock, until
from tests.conftest import admin_execute

pytestmark = [pytest.mark.feature("instances"), pytest.mark.postgres]

SCHEMA = "qcore_instances"

#: a process that registers as "killed" and waits to be killed
LIFE = textwrap.dedent(
    """
    import asyncio, sys
    from qcore import Boss

    async def main():
        boss = Boss(sys.argv[1], schema=sys.argv[2], supervise=False, schedule=False,
                    register_instance=True, instance_name="killed",
                    instance_heartbeat_seconds=1)
        await boss.start()
        print("up", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False, schedule=False, register_instance=True)
    await instance.start()
    try:
        yield instance
    finally:
        await instance.stop()
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


def _life(dsn: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LIFE, dsn, SCHEMA], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


async def test_lives_killed_with_sigkill_count_as_crash_restarts(pg_dsn: str, boss: Boss) -> None:
    for _ in range(2):
        proc = _life(pg_dsn)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    lives = [i for i in await boss.get_instances() if i.name == "killed"]
    assert len(lives) == 2 and all(i.stopped_on is None for i in lives)
    ctx = boss.context()
    await set_clock(ctx, 60)  # a minute on: both have missed their three heartbeats
    try:
        async with Boss(
            pg_dsn,
            schema=SCHEMA,
            supervise=False,
            schedule=False,
            register_instance=True,
            instance_name="killed",
        ) as again:
            [me] = [i for i in await again.get_instances() if i.id == again.instance_id]
            assert me.crash_restarts == 2 and me.crash_restarts_since is not None
        assert not any(i.live for i in await boss.get_instances() if i.name == "killed")
    finally:
        await set_clock(ctx, 0)


async def test_connections_per_instance_join_pg_stat_activity(boss: Boss) -> None:
    [me] = [i for i in await boss.get_instances() if i.id == boss.instance_id]
    assert me.application_name == f"qcore:{str(boss.instance_id)[:8]}"
    assert me.pool_max == 10 and me.pool_total is not None and me.pool_total >= 1

    async def connections() -> int:
        rows = await boss.db.execute(
            f"SELECT i.name, i.host, count(a.pid) AS connections FROM {SCHEMA}.instance i"
            " LEFT JOIN pg_stat_activity a ON a.application_name = i.application_name"
            " WHERE i.id = $1 GROUP BY 1, 2",
            [boss.instance_id],
        )
        return int(rows[0]["connections"])

    assert await until(connections, timeout=30, what="a connection of the instance") >= 1


async def test_a_password_in_the_connection_string_is_never_stored(pg_dsn: str) -> None:
    secret = "sekrit-Pa55-word"
    user, _, rest = pg_dsn.partition("@")
    dsn = f"{user}:{secret}@{rest}"  # trust auth: the password is sent, never checked
    quiet: dict[str, Any] = {"supervise": False, "schedule": False, "register_instance": True}
    async with Boss(dsn, schema=SCHEMA, password=secret, **quiet) as b:
        rows = await b.db.execute(f"SELECT to_jsonb(i)::text AS row FROM {SCHEMA}.instance i")
        await b.db.execute_script(f"DROP SCHEMA {SCHEMA} CASCADE")
    assert rows and not any(secret in r["row"] for r in rows)
    assert all("postgresql://" not in r["row"] for r in rows)


def test_an_application_name_given_is_kept(pg_dsn: str) -> None:
    boss = Boss(pg_dsn, schema=SCHEMA, application_name="billing")
    assert boss._connect_options.get("application_name") == "billing"
    unnamed = Boss(pg_dsn, schema=SCHEMA)
    assert (
        unnamed._connect_options.get("application_name") == f"qcore:{str(unnamed.instance_id)[:8]}"
    )

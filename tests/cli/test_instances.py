"""``qcore instances``: the registry of a real database as a table, and its errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from qcore import Boss
from qcore.cli import main
from qcore.cli.connection import LIBPQ_VARIABLES
from qcore.cli.instances import COLUMNS
from qcore.job import Job
from qcore.services.instances import InstanceRegistry
from tests.conftest import admin_execute

pytestmark = [pytest.mark.feature("cli"), pytest.mark.postgres]

SCHEMA = "qcore_cli_instances"


async def test_it_lists_a_live_fleet(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        async with Boss(pg_dsn, schema=SCHEMA, supervise=False, instance_name="api-1") as one:

            async def handler(jobs: list[Job]) -> None:
                return None

            await one.create_queue("q")
            await one.work("q", handler, local_concurrency=3)
            registry = one.services.get("registry", InstanceRegistry)
            assert registry is not None
            await registry.exclusive(registry.run_pass)
            async with Boss(pg_dsn, schema=SCHEMA, supervise=False, instance_name="api-2"):
                argv = ["instances", "--url", pg_dsn, "--schema", SCHEMA]
                assert await asyncio.to_thread(main, argv) == 0
                hidden = capsys.readouterr().out.splitlines()
                status = await asyncio.to_thread(main, [*argv, "--all"])
        # anonymous servers (no instance key) are behind --all; the count line says so
        assert hidden[1:] == [
            "0 shown; the registry holds 2 rows, 2 live: 0 keyed (0 paused),"
            " 2 anonymous (shown with --all)"
        ]
        assert status == 0
        *lines, counted = capsys.readouterr().out.splitlines()
        assert counted.startswith("2 shown; the registry holds 2 rows, 2 live")
        assert tuple(lines[0].split()) == COLUMNS
        rows = {line.split()[1]: line.split() for line in lines[1:]}
        workers = COLUMNS.index("workers")
        assert rows["api-1"][0] == "yes" and rows["api-1"][workers] == "3"
        assert rows["api-2"][0] == "yes" and rows["api-2"][workers] == "0"
        assert len(lines) == 3  # the command itself registers no row
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


async def test_pause_resume_and_remove_from_the_shell(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--url", pg_dsn, "--schema", SCHEMA]
    try:
        async with Boss(pg_dsn, schema=SCHEMA, supervise=False, instance_key="b:ram-2gb") as b:
            assert await asyncio.to_thread(main, ["pause-instance", "b:ram-2gb", *base]) == 0
            assert "paused: b:ram-2gb" in capsys.readouterr().out
            [me] = [i for i in await b.get_instances() if i.id == b.instance_id]
            assert me.paused
            assert await asyncio.to_thread(main, ["instances", *base]) == 0
            line = next(x for x in capsys.readouterr().out.splitlines() if "b:ram-2gb" in x)
            # no worker, no listener: the server reads its pause at its next heartbeat
            assert line.split()[COLUMNS.index("paused")] == "requested"
            registry = b.services.get("registry", InstanceRegistry)
            assert registry is not None
            await registry.exclusive(registry.run_pass)  # that heartbeat, now
            assert await asyncio.to_thread(main, ["instances", *base]) == 0
            line = next(x for x in capsys.readouterr().out.splitlines() if "b:ram-2gb" in x)
            assert line.split()[COLUMNS.index("paused")] == "yes"
            assert await asyncio.to_thread(main, ["resume-instance", "b:ram-2gb", *base]) == 0
            argv = ["remove-instance", "--instance-key", "b:ram-2gb", *base]
            assert await asyncio.to_thread(main, argv) == 1  # seen just now
            assert "minutes ago" in capsys.readouterr().err
        assert await asyncio.to_thread(main, ["resume-instance", "nobody", *base]) == 1
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


def test_without_a_database_it_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("QCORE_DATABASE_URL", "DATABASE_URL", *LIBPQ_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["instances"]) == 2
    assert "no database given: pass --url" in capsys.readouterr().err


def test_a_schema_without_an_install_exits_1(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["instances", "--url", pg_dsn, "--schema", "qcore_nothing_here"]) == 1
    assert "holds no pg-boss/qcore install" in capsys.readouterr().err

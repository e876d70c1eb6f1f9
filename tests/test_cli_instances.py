"""``qcore instances``: the registry of a real database as a table, and its errors."""

from __future__ import annotations

import asyncio

import pytest

from qcore import Boss
from qcore.cli import main
from qcore.cli.instances import COLUMNS
from qcore.job import Job
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
            registry = next(s for s in one._services if s.name == "instances")
            await registry.exclusive(registry.run_pass)  # type: ignore[attr-defined]
            async with Boss(pg_dsn, schema=SCHEMA, supervise=False, instance_name="api-2"):
                argv = ["instances", "--url", pg_dsn, "--schema", SCHEMA]
                status = await asyncio.to_thread(main, argv)
        assert status == 0
        lines = capsys.readouterr().out.splitlines()
        assert tuple(lines[0].split()) == COLUMNS
        rows = {line.split()[1]: line.split() for line in lines[1:]}
        assert rows["api-1"][0] == "yes" and rows["api-1"][6] == "3"
        assert rows["api-2"][0] == "yes" and rows["api-2"][6] == "0"
        assert len(lines) == 3  # the command itself registers no row
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", pg_dsn)


def test_without_a_database_it_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["instances"]) == 2
    assert "give --url or set DATABASE_URL" in capsys.readouterr().err


def test_a_schema_without_an_install_exits_1(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["instances", "--url", pg_dsn, "--schema", "qcore_nothing_here"]) == 1
    assert "holds no pg-boss/qcore install" in capsys.readouterr().err

"""``qcore doctor`` in a subprocess against the local PostgreSQL: a clean report and exit
0 on a fresh install, the repair beneath an injected drift and exit 1, ``--json`` for
scripts, and where the connection comes from (arguments, then the environment, then
``[tool.qcore]`` in pyproject.toml)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qcore import Boss
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = pytest.mark.postgres


@pytest.fixture
def installed(pg_dsn: str) -> Iterator[str]:
    """A schema qcore installed, with a partitioned queue; dropped afterwards."""
    import asyncio

    schema = f"doctor_{uuid.uuid4().hex[:8]}"

    async def install() -> None:
        async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
            await boss.create_queue("own", partition=True)

    asyncio.run(install())
    try:
        yield schema
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def doctor(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_qcore("doctor", *args, env=env, cwd=cwd)


def test_a_fresh_install_is_clean(pg_dsn: str, installed: str, tmp_path: Path) -> None:
    done = doctor("--url", pg_dsn, "--schema", installed, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok: no drift")
    as_json = doctor("--url", pg_dsn, "--schema", installed, "--json", cwd=tmp_path)
    assert as_json.returncode == 0
    report = json.loads(as_json.stdout)
    assert report["ok"] is True and report["missing"] == []


def test_drift_prints_the_repair_and_exits_1(pg_dsn: str, installed: str, tmp_path: Path) -> None:
    admin_execute(
        f"DROP INDEX {installed}.job_common_i11;"
        f" CREATE INDEX extra_one ON {installed}.job_common (data)",
        pg_dsn,
    )
    done = doctor("--url", pg_dsn, "--schema", installed, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "missing: index job_common_i11 on job_common" in out
    assert "CREATE INDEX job_common_i11 ON" in out.split("missing: index job_common_i11")[1]
    assert "warning: extra index extra_one on job_common (harmless)" in out
    assert out.strip().endswith("drift found")
    report = json.loads(doctor("--url", pg_dsn, "--schema", installed, "--json").stdout)
    assert [i["name"] for i in report["missing"]] == ["job_common_i11"]
    assert report["extra_indexes"] == [{"name": "extra_one", "table": "job_common"}]


def test_an_extra_index_alone_exits_0(pg_dsn: str, installed: str, tmp_path: Path) -> None:
    admin_execute(f"CREATE INDEX extra_one ON {installed}.job_common (data)", pg_dsn)
    done = doctor("--url", pg_dsn, "--schema", installed, cwd=tmp_path)
    assert done.returncode == 0
    assert "warning: extra index extra_one" in done.stdout


def test_the_connection_comes_from_arguments_then_environment_then_pyproject(
    pg_dsn: str, installed: str, tmp_path: Path
) -> None:
    bogus = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.qcore]\nurl = "{pg_dsn}"\nschema = "{installed}"\n'
    )
    assert doctor(cwd=tmp_path).returncode == 0  # pyproject alone
    nested = tmp_path / "src" / "app"
    nested.mkdir(parents=True)
    assert doctor(cwd=nested).returncode == 0  # found in a parent folder
    env = {"QCORE_DATABASE_URL": bogus}
    failed = doctor(cwd=tmp_path, env=env)
    assert failed.returncode == 1 and "qcore doctor:" in failed.stderr  # env wins over it
    assert "Traceback" not in failed.stderr
    assert doctor("--url", pg_dsn, cwd=tmp_path, env=env).returncode == 0  # args win


def test_without_a_database_it_is_a_usage_error(tmp_path: Path) -> None:
    done = doctor(cwd=tmp_path)
    assert done.returncode == 2
    assert "no database given" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_backend_is_an_error_not_a_traceback(pg_dsn: str, tmp_path: Path) -> None:
    done = doctor("--url", pg_dsn, "--backend", "nosuch", cwd=tmp_path)
    assert done.returncode == 1
    assert "unknown backend 'nosuch'" in done.stderr and "Traceback" not in done.stderr

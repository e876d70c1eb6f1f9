"""The schema commands in a subprocess against the local PostgreSQL: ``plans create``
without a connection gives SQL that installs a clean schema, ``create`` installs once,
``version`` tells installed from latest and the async migrations' state, ``migrate``
says when there is nothing to do and refuses a version it has no migration from."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"cli_schema_{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {name} CASCADE", pg_dsn)


def qcore(*args: str, dsn: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_qcore(*args, env={"QCORE_DATABASE_URL": dsn} if dsn else None)


def test_offline_plans_install_a_clean_schema(pg_dsn: str, schema: str) -> None:
    plans = qcore("plans", "create", "--schema", schema)  # no database anywhere
    assert plans.returncode == 0, plans.stderr
    assert f'CREATE SCHEMA IF NOT EXISTS "{schema}"' in plans.stdout
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(plans.stdout.encode())
    version = json.loads(qcore("version", "--schema", schema, "--json", dsn=pg_dsn).stdout)
    assert version == {
        "schema": schema,
        "installed": 46,
        "latest": 46,
        "pending_migrations": [],
        "bam": {},
    }
    doctor = qcore("doctor", "--schema", schema, dsn=pg_dsn)
    assert doctor.returncode == 0, doctor.stdout
    # pg-boss's name for it prints the same; the uninstall plan takes it all out again
    construct = qcore("plans", "construct", "--schema", schema)
    assert construct.stdout.count("CREATE TABLE") == plans.stdout.count("CREATE TABLE")
    uninstall = qcore("plans", "uninstall", "--schema", schema)
    assert uninstall.returncode == 0, uninstall.stderr
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(uninstall.stdout.encode())
        left = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s",
            [schema],
        ).fetchone()
    assert left == (0,)


def test_create_installs_once_and_dry_run_changes_nothing(pg_dsn: str, schema: str) -> None:
    dry = qcore("create", "--schema", schema, "--dry-run", dsn=pg_dsn)
    assert dry.returncode == 0 and "CREATE TABLE" in dry.stdout
    before = qcore("version", "--schema", schema, dsn=pg_dsn)
    assert before.returncode == 0 and "installed nothing" in before.stdout
    done = qcore("create", "--schema", schema, dsn=pg_dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"installed schema {schema!r} at version 46"
    again = qcore("create", "--schema", schema, dsn=pg_dsn)
    assert again.returncode == 0 and "installed already" in again.stdout


def test_version_shows_the_async_migrations(pg_dsn: str, schema: str) -> None:
    assert qcore("create", "--schema", schema, dsn=pg_dsn).returncode == 0
    admin_execute(
        f"INSERT INTO {schema}.bam (name, version, table_name, command, status) VALUES"
        " ('a', 46, 'job_common', 'SELECT 1', 'failed'),"
        " ('b', 46, 'job_common', 'SELECT 1', 'pending')",
        pg_dsn,
    )
    text = qcore("version", "--schema", schema, dsn=pg_dsn).stdout
    assert "async migrations: failed 1, pending 1" in text
    as_json = json.loads(qcore("version", "--schema", schema, "--json", dsn=pg_dsn).stdout)
    assert as_json["bam"] == {"failed": 1, "pending": 1}


def test_migrate_has_nothing_to_do_and_refuses_an_unknown_path(pg_dsn: str, schema: str) -> None:
    assert qcore("create", "--schema", schema, dsn=pg_dsn).returncode == 0
    done = qcore("migrate", "--schema", schema, dsn=pg_dsn)
    assert done.returncode == 0 and "nothing to do" in done.stdout
    admin_execute(f"UPDATE {schema}.version SET version = 24", pg_dsn)
    for extra in ((), ("--dry-run",)):
        refused = qcore("migrate", "--schema", schema, *extra, dsn=pg_dsn)
        assert refused.returncode == 1, refused.stdout
        assert "the oldest version qcore (like pg-boss 12.38) upgrades is 25" in refused.stderr
        assert "Traceback" not in refused.stderr
    version = json.loads(qcore("version", "--schema", schema, "--json", dsn=pg_dsn).stdout)
    assert version["installed"] == 24 and "oldest version" in version["pending_migrations"]
    offline = qcore("plans", "migrate", "--from-version", "24")
    assert offline.returncode == 1 and "oldest version" in offline.stderr


def test_migrate_dry_run_prints_and_migrate_applies(pg_dsn: str, schema: str) -> None:
    assert qcore("create", "--schema", schema, dsn=pg_dsn).returncode == 0
    admin_execute(f"UPDATE {schema}.version SET version = 45", pg_dsn)
    dry = qcore("migrate", "--schema", schema, "--dry-run", dsn=pg_dsn)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.rstrip().endswith(f'UPDATE "{schema}".version SET version = 46;')
    version = json.loads(qcore("version", "--schema", schema, "--json", dsn=pg_dsn).stdout)
    assert version["installed"] == 45 and version["pending_migrations"] == [46]
    done = qcore("migrate", "--schema", schema, dsn=pg_dsn)
    assert done.returncode == 0 and "to version 46" in done.stdout
    version = json.loads(qcore("version", "--schema", schema, "--json", dsn=pg_dsn).stdout)
    assert version["installed"] == 46 and version["pending_migrations"] == []


def test_migrate_on_an_empty_schema_is_an_error(pg_dsn: str, schema: str) -> None:
    done = qcore("migrate", "--schema", schema, dsn=pg_dsn)
    assert done.returncode == 1 and "holds no install" in done.stderr

"""``qcore reindex`` in a subprocess against the local PostgreSQL: the statements a
drained backlog's bloated indexes need (``--dry-run``), then the rebuild itself, after
which nothing is bloated; a bad threshold is refused before anything runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from qcore import Boss
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("reindex")]


@pytest.fixture
async def drained(pg_dsn: str) -> AsyncIterator[str]:
    """A schema whose queue held 10,000 jobs, all but ten deleted and vacuumed: its job
    indexes keep their pages while their entries are gone."""
    schema = f"cli_reindex_{uuid.uuid4().hex[:8]}"
    async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
        await boss.create_queue("q")
        for _ in range(10):
            await boss.insert("q", [{"data": i} for i in range(1000)])
        await boss.db.execute(
            f"DELETE FROM {schema}.job WHERE id NOT IN (SELECT id FROM {schema}.job LIMIT 10)"
        )
        await boss.db.execute(f"VACUUM ANALYZE {schema}.job")
    try:
        yield schema
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def test_reindex_prints_then_rebuilds_the_bloated_indexes(pg_dsn: str, drained: str) -> None:
    env = {"QCORE_DATABASE_URL": pg_dsn}
    common = ("--schema", drained, "--min-pages", "10")
    dry = run_qcore("reindex", *common, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    planned = dry.stdout.splitlines()
    assert planned and all(s.startswith("REINDEX INDEX CONCURRENTLY ") for s in planned)
    assert "rebuilt" not in dry.stdout  # nothing ran
    assert run_qcore("reindex", *common, "--dry-run", env=env).stdout.splitlines() == planned

    done = run_qcore("reindex", *common, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [*planned, f"rebuilt {len(planned)} index(es) in schema"
                                        f" {drained!r}"]  # fmt: skip
    assert run_qcore("reindex", *common, "--dry-run", env=env).stdout == ""
    forced = run_qcore("reindex", *common, "--dry-run", "--force", env=env)
    assert len(forced.stdout.splitlines()) > len(planned)  # every job index


def test_a_bad_threshold_is_refused(pg_dsn: str, drained: str) -> None:
    bad = run_qcore(
        "reindex", "--schema", drained, "--min-pages", "-1", env={"QCORE_DATABASE_URL": pg_dsn}
    )
    assert bad.returncode != 0
    assert "min_pages" in bad.stderr and "REINDEX" not in bad.stdout

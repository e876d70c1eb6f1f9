"""``qcore metrics`` in a subprocess against the local PostgreSQL: a recorder tick, the
footprint table and its JSON, a purge that asks for ``--yes``, and the index check that
prints, then builds, what a queue lacks; the same verbs on a Redis store."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qcore import Boss
from qcore.conformance.suite.test_metrics import REDIS_URL, drop_prefix, redis_client
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("cli")]


@pytest.fixture
def filled(pg_dsn: str) -> Iterator[str]:
    """A schema with queue ``mail`` holding three jobs completed ten minutes ago."""
    schema = f"climetrics_{uuid.uuid4().hex[:8]}"

    async def fill() -> None:
        async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
            await boss.create_queue("mail")
            await boss.db.execute(
                f"INSERT INTO {schema}.job (name, state, created_on, started_on, completed_on)"
                " SELECT 'mail', 'completed', now() - interval '11 minutes',"
                " now() - interval '10 minutes', now() - interval '10 minutes'"
                " FROM generate_series(1, 3)"
            )

    asyncio.run(fill())
    try:
        yield schema
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def test_record_stats_and_purge(pg_dsn: str, filled: str, tmp_path: Path) -> None:
    done = run_qcore("metrics", "record", "--once", "--url", pg_dsn, "--schema", filled)
    assert done.returncode == 0, done.stderr
    assert "1 queue-minute(s) changed" in done.stdout

    stats = run_qcore("metrics", "stats", "--url", pg_dsn, "--schema", filled)
    assert stats.returncode == 0, stats.stderr
    lines = stats.stdout.splitlines()
    assert lines[0].split()[:3] == ["queue", "rows", "bytes"]
    assert {line.split()[0] for line in lines[1:-1]} == {"mail", "__global__"}
    as_json = run_qcore("metrics", "stats", "--json", "--url", pg_dsn, "--schema", filled)
    usage = json.loads(as_json.stdout)
    assert usage["rows"] == 6 and usage["tiers"]["minute"]["rows"] == 2

    refused = run_qcore("metrics", "purge", "mail", "--url", pg_dsn, "--schema", filled)
    assert refused.returncode == 2 and "--yes" in refused.stdout
    bad = run_qcore("metrics", "purge", "--before", "soon", "--yes", "--url", pg_dsn)
    assert bad.returncode == 1 and "YYYY-MM-DD" in bad.stderr and "Traceback" not in bad.stderr
    purged = run_qcore("metrics", "purge", "mail", "--yes", "--url", pg_dsn, "--schema", filled)
    assert purged.returncode == 0, purged.stderr
    usage = json.loads(
        run_qcore("metrics", "stats", "--json", "--url", pg_dsn, "--schema", filled).stdout
    )
    assert [q["queue"] for q in usage["queues"]] == ["__global__"]


def test_index_prints_then_builds_what_a_queue_lacks(pg_dsn: str, filled: str) -> None:
    index = ["metrics", "index", "--url", pg_dsn, "--schema", filled]
    assert "every queue has the index" in run_qcore(*index).stdout
    admin_execute(f"DROP INDEX {filled}.job_common_i16", pg_dsn)
    printed = run_qcore(*index, "mail")
    assert printed.returncode == 0, printed.stderr
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS" in printed.stdout
    built = run_qcore(*index, "--run")
    assert built.returncode == 0 and built.stdout.startswith("built: ")
    assert "every queue has the index" in run_qcore(*index).stdout
    unknown = run_qcore(*index, "nope")
    assert unknown.returncode == 1 and "no such queue: nope" in unknown.stderr


def test_the_same_verbs_on_a_redis_store(pg_dsn: str, filled: str) -> None:
    prefix = f"qcore-cli:{uuid.uuid4().hex[:8]}"
    redis = ["--redis", REDIS_URL, "--redis-prefix", prefix]
    common = ["--url", pg_dsn, "--schema", filled, *redis]
    asyncio.run(_drop(prefix))  # skips the test when no Redis server answers
    try:
        done = run_qcore("metrics", "record", "--once", *common)
        assert done.returncode == 0, done.stderr
        assert "1 queue-minute(s) changed" in done.stdout
        usage = json.loads(run_qcore("metrics", "stats", "--json", *common).stdout)
        assert usage["rows"] == 6 and not usage["estimated"]
        assert run_qcore("metrics", "purge", "--yes", *common).returncode == 0
        assert json.loads(run_qcore("metrics", "stats", "--json", *common).stdout)["rows"] == 0
        both = run_qcore("metrics", "stats", "--store-schema", "x", *common)
        assert both.returncode == 2 and "not both" in both.stderr  # a usage error
    finally:
        asyncio.run(_drop(prefix))


async def _drop(prefix: str) -> None:
    client = await redis_client()
    try:
        await drop_prefix(client, prefix)
    finally:
        await client.aclose()


def _series_rows(dsn: str, schema: str) -> int:
    """The rows of the store's series table in ``schema``, counted in SQL."""
    [(n,)] = admin_execute(f"SELECT count(*) FROM {schema}.qcore_metrics_series", dsn)
    return int(n)


def test_a_store_in_another_schema_reads_and_purges_the_queues_history(
    pg_dsn: str, filled: str
) -> None:
    store = f"{filled}_store"
    common = ["--url", pg_dsn, "--schema", filled, "--store-schema", store]
    try:
        done = run_qcore("metrics", "record", "--once", *common)
        assert done.returncode == 0, done.stderr
        assert "1 queue-minute(s) changed" in done.stdout
        assert _series_rows(pg_dsn, store) == 6

        stats = run_qcore("metrics", "stats", *common)
        assert stats.returncode == 0, stats.stderr
        assert {line.split()[0] for line in stats.stdout.splitlines()[1:-1]} == {
            "mail",
            "__global__",
        }
        usage = json.loads(run_qcore("metrics", "stats", "--json", *common).stdout)
        assert usage["rows"] == 6 and usage["tiers"]["minute"]["rows"] == 2

        one = run_qcore("metrics", "purge", "mail", "--yes", *common)
        assert one.returncode == 0, one.stderr
        assert "deleted 3 rows" in one.stdout
        assert _series_rows(pg_dsn, store) == 3
        purged = run_qcore("metrics", "purge", "--yes", *common)
        assert purged.returncode == 0, purged.stderr
        assert "deleted 3 rows" in purged.stdout
        assert _series_rows(pg_dsn, store) == 0

        again = run_qcore("metrics", "purge", "--yes", *common)
        assert again.returncode == 3, (again.stdout, again.stderr)
        assert "nothing to purge" in again.stdout and "deleted" not in again.stdout
        assert filled in again.stdout and store in again.stdout
        empty = run_qcore("metrics", "stats", *common)
        assert empty.returncode == 0 and "no history rows" in empty.stdout
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {store} CASCADE", pg_dsn)


def test_a_purge_beside_the_queues_counts_what_it_deleted(pg_dsn: str, filled: str) -> None:
    common = ["--url", pg_dsn, "--schema", filled]
    assert run_qcore("metrics", "record", "--once", *common).returncode == 0
    assert _series_rows(pg_dsn, filled) == 6
    old = run_qcore("metrics", "purge", "--before", "2001-01-01", "--yes", *common)
    assert old.returncode == 3 and "nothing to purge" in old.stdout
    purged = run_qcore("metrics", "purge", "--yes", *common)
    assert purged.returncode == 0, purged.stderr
    assert "deleted 6 rows" in purged.stdout
    assert _series_rows(pg_dsn, filled) == 0
    again = run_qcore("metrics", "purge", "mail", "--yes", *common)
    assert again.returncode == 3 and "nothing to purge" in again.stdout

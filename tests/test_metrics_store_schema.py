"""A metrics store in a schema of its own, apart from the queues it records: the
dashboard (``qcore dashboard --history --store-schema``, normal and read-only) shows the
history the CLI recorded there, its storage panel counts it and its purge empties it;
in library mode the store told the job schema reads, measures and purges what
``record_metrics`` wrote into it. The same store beside the queues needs telling
nothing."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from qcore import Boss
from qcore.cli import dashboard
from qcore.cli.connection import resolve
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    PostgresMetricsStore,
    record_metrics,
)
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]


@pytest_asyncio.fixture
async def jobs(pg_dsn: str) -> AsyncIterator[str]:
    """A job schema with queue ``mail`` holding three jobs completed ten minutes ago;
    its schema and the store's (``<schema>_store``) dropped afterwards."""
    schema = f"storeschema_{uuid.uuid4().hex[:8]}"
    async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
        await boss.create_queue("mail")
        await boss.db.execute(
            f"INSERT INTO {schema}.job (name, state, created_on, started_on, completed_on)"
            " SELECT 'mail', 'completed', now() - interval '11 minutes',"
            " now() - interval '10 minutes', now() - interval '10 minutes'"
            " FROM generate_series(1, 3)"
        )
    try:
        yield schema
    finally:
        for name in (schema, f"{schema}_store"):
            admin_execute(f"DROP SCHEMA IF EXISTS {name} CASCADE", pg_dsn)


def _rows(dsn: str, store: str) -> int:
    [(n,)] = admin_execute(f"SELECT count(*) FROM {store}.qcore_metrics_series", dsn)
    return int(n)


def _dashboard_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    dashboard.add_parser(parser.add_subparsers())
    return parser.parse_args(["dashboard", *argv])


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080"
    )


async def _completed(http: httpx.AsyncClient, queue: str) -> float:
    """``qcore_jobs_finished`` of ``queue``'s completed jobs on the board's /metrics."""
    page = await http.get("/metrics")
    assert page.status_code == 200, page.text[:500]
    for family in text_string_to_metric_families(page.text):
        for sample in family.samples:
            wanted = {"queue": queue, "outcome": "completed"}
            if sample.name.startswith("qcore_jobs_finished") and sample.labels == wanted:
                return sample.value
    return 0.0


async def _stored(http: httpx.AsyncClient) -> str:
    """The storage panel's summary line (bytes in N buckets)."""
    page = await http.get("/history/storage")
    assert page.status_code == 200, page.text[:500]
    found = re.search(r"in ([\d,]+) buckets", page.text)
    assert found, page.text[:1000]
    return found.group(1)


@pytest.mark.parametrize("apart", [True, False], ids=["store-apart", "store-beside"])
async def test_the_dashboard_shows_and_purges_the_history_the_cli_recorded(
    pg_dsn: str, jobs: str, apart: bool
) -> None:
    store = f"{jobs}_store" if apart else jobs
    where = ["--url", pg_dsn, "--schema", jobs] + (["--store-schema", store] if apart else [])
    done = await asyncio.to_thread(run_qcore, "metrics", "record", "--once", *where)
    assert done.returncode == 0, done.stderr
    assert _rows(pg_dsn, store) == 6

    for mode in (["--read-only"], []):
        args = _dashboard_args(*where, "--history", *mode)
        async with contextlib.AsyncExitStack() as stack:
            app = await dashboard.open_board(resolve(args), args, stack)
            async with _client(app) as http:
                history = await http.get("/history")
                assert history.status_code == 200 and "mail" in history.text, mode
                assert await _completed(http, "mail") == 3, mode
                assert await _stored(http) == "6", mode
                if mode:
                    continue
                confirm = await http.get("/history/purge?keep=all")
                csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm.text)
                assert csrf, confirm.text[:1000]
                purged = await http.post(
                    "/history/purge", data={"csrf": csrf.group(1), "keep": "all"}
                )
                assert purged.status_code == 303
                assert _rows(pg_dsn, store) == 0
                assert await _stored(http) == "0"


async def test_a_library_store_apart_told_the_job_schema(pg_dsn: str, jobs: str) -> None:
    store_schema = f"{jobs}_store"
    async with Boss(pg_dsn, schema=jobs, supervise=False, schedule=False) as boss:
        await record_metrics(boss, schema=store_schema, interval_seconds=3600)
        deadline = asyncio.get_running_loop().time() + 120
        while asyncio.get_running_loop().time() < deadline:
            present = admin_execute(
                f"SELECT to_regclass('{store_schema}.qcore_metrics_series') IS NOT NULL", pg_dsn
            )
            if present[0][0] and _rows(pg_dsn, store_schema) == 6:
                break
            await asyncio.sleep(0.2)
        assert _rows(pg_dsn, store_schema) == 6

        store = PostgresMetricsStore(boss.db, schema=store_schema, queue_schema=jobs)
        assert store.default_namespace == f"pgboss:{jobs}:"
        totals = await MetricsHistoryProvider(store).totals("mail", window="7d")
        assert totals.completed == 3
        admin = MetricsHistoryAdmin(store)
        assert (await admin.stats()).rows == 6
        assert await admin.purge("mail") == 3
        assert await admin.purge() == 3
        assert await admin.purge() == 0
        assert _rows(pg_dsn, store_schema) == 0

        # a store not told the job schema shows the queues of its own schema: none here
        unaware = PostgresMetricsStore(boss.db, schema=store_schema)
        assert unaware.default_namespace == f"pgboss:{store_schema}:"

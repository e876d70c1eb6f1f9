"""Fixtures shared by the whole suite: a throw-away database on the local PostgreSQL.

The per-backend fixtures (``backend``, ``provisioned``, ``db``, ``schema``, ``ctx``,
``boss``) and the ``--backend`` option come from the conformance kit's plugin
(``qcore.conformance.plugin``, loaded by the project's pytest configuration).
"""

from __future__ import annotations

import asyncio
import io
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import pytest_asyncio
from psycopg.conninfo import conninfo_to_dict

from qcore import backends
from qcore.conformance.provisioners import LocalProvisioner, NotAvailable
from qcore.conformance.schemas import SchemaPool
from qcore.context import Context
from qcore.db import connect
from qcore.schema import install_or_migrate

ADMIN_DSN = os.environ.get("QCORE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def admin_execute(sql: str, dsn: str = ADMIN_DSN) -> list[tuple[Any, ...]]:
    """Run one statement on its own autocommit connection (test plumbing, not qcore)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def terminate_others(dsn: str) -> int:
    """Kill every other session on the database of ``dsn``; how many were killed."""
    rows = admin_execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        dsn,
    )
    return int(rows[0][0])


def with_database(dsn: str, database: str) -> str:
    """The URL of ``dsn`` pointed at another database (URLs suit every driver)."""
    p = conninfo_to_dict(dsn)
    auth = quote(str(p.get("user", "postgres")), safe="")
    if p.get("password"):
        auth += ":" + quote(str(p["password"]), safe="")
    host = p.get("host", "127.0.0.1")
    return f"postgresql://{auth}@{host}:{p.get('port', 5432)}/{database}"


#: the fewest pytest-xdist workers ``-n auto`` starts: the tests mostly wait on servers
#: (PostgreSQL, Node, subprocesses), so even two cores keep four busy
MIN_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(MIN_WORKERS, os.cpu_count() or 1)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A database of its own on the local PostgreSQL, dropped afterwards: the server at
    QCORE_TEST_DSN, or a throw-away initdb cluster when none answers (the matrix's
    local provisioner). Not per backend: the tests using it run once."""
    provisioner = LocalProvisioner(backends.get("postgres"))
    try:
        provisioner.start()
    except NotAvailable as exc:
        pytest.fail(f"no PostgreSQL for the tests (QCORE_TEST_DSN={ADMIN_DSN}): {exc.reason}")
    try:
        yield provisioner.url
    finally:
        provisioner.stop()


@pytest.fixture
def empty_database() -> Iterator[str]:
    """The URL of an empty database of its own on the local PostgreSQL, dropped
    afterwards (for a command that installs into a database it finds empty)."""
    name = f"qcore_empty_{uuid.uuid4().hex[:10]}"
    admin_execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(ADMIN_DSN, name)
    finally:
        admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def shared_installs() -> SchemaPool:
    """The installs :func:`shared` hands out, one test at a time (this worker's)."""
    return SchemaPool()


@pytest_asyncio.fixture
async def shared(pg_dsn: str, shared_installs: SchemaPool) -> AsyncIterator[Context]:
    """A qcore Context on a schema of its own of the local PostgreSQL, installed by qcore:
    the schema a test shares with the real pg-boss (``tests.interop.pgboss``). An install
    from this worker's pool, reset to the state of a new one (one a test changed is
    dropped and replaced: :mod:`qcore.conformance.schemas`)."""
    db = await connect(pg_dsn, max=4)
    schema = await shared_installs.take(db)
    try:
        if schema is None:
            schema = f"interop_{uuid.uuid4().hex[:10]}"  # no "qcore_" in pg-boss's reports
            await install_or_migrate(_postgres(db, schema))
            await shared_installs.remember(db, schema)
        yield _postgres(db, schema)
    finally:
        if schema is not None:
            shared_installs.give_back(schema)
        await db.close()


def _postgres(db: Any, schema: str) -> Context:
    return Context(db=db, backend=backends.get("postgres"), schema_spec=schema)


#: how long the session's leftover tasks get to end once cancelled, in all
LEFTOVER_SECONDS = 30.0


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def leftover_tasks() -> AsyncIterator[None]:
    """At the end of the session, the tasks tests left on the shared event loop end.

    Each is cancelled, again and again while it catches the cancellation and waits on,
    for up to :data:`LEFTOVER_SECONDS` in all; one still running then is reported with
    its stack (a warning in the run's summary) and left behind, so closing the loop
    afterwards cannot hang the whole run on it.
    """
    yield
    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    deadline = loop.time() + LEFTOVER_SECONDS
    left = {t for t in asyncio.all_tasks() if t is not current and not t.done()}
    while left and loop.time() < deadline:
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=0.5)
        left = {t for t in left if not t.done()}
    for task in left:
        stack = io.StringIO()
        task.print_stack(file=stack)
        warnings.warn(
            f"a task ignored cancellation at the end of the session: {task!r}\n{stack.getvalue()}",
            pytest.PytestWarning,
            stacklevel=1,
        )
        _LEFT_BEHIND.append(task)
        asyncio.tasks._unregister_task(task)  # the loop's close skips it


#: the tasks the session could not end (kept referenced; never awaited again)
_LEFT_BEHIND: list[asyncio.Task[Any]] = []


@pytest_asyncio.fixture
async def redis() -> AsyncIterator[tuple[Any, str]]:
    """A client of the local Redis server and a key prefix of the test's own (its keys
    dropped afterwards)."""
    from qcore.conformance.suite.test_metrics import drop_prefix, redis_client

    client = await redis_client()
    prefix = f"qcore-test:{uuid.uuid4().hex[:12]}"
    try:
        yield client, prefix
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()

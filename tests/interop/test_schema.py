"""qcore installs what pg-boss 12.38 installs, and each starts on the other's schema.

On the local PostgreSQL only (pg-boss needs a real server; the cockroachdb
*shape* is compared on PostgreSQL too, the way pg-boss builds it there). Two
scratch databases: qcore installs into one, the real pg-boss (from npm, see
``tests/interop``) into the other, and their catalogs are compared —
tables, columns, constraints, indexes, the enum, function signatures
(:mod:`tests.interop.catalog` lists every attribute) — without qcore's own
tables. No difference is allowed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from qcore import backends
from qcore.context import Context
from qcore.db import Database, connect
from qcore.identifiers import quote
from qcore.verbs.schema import SCHEMA_VERSION, install_or_migrate, schema_version
from tests.conftest import ADMIN_DSN, admin_execute, with_database
from tests.interop import catalog
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = interop_marks()

POLICIES = ["standard", "short", "singleton", "stately", "exclusive", "key_strict_fifo"]
# (qcore backend profile, pg-boss backend option, does the shape partition?)
SHAPES = [("postgres", "postgres", True), ("cockroachdb", "cockroachdb", False)]
SHAPE_IDS = ["partitioned", "single-table"]


@pytest.fixture(scope="module")
def databases() -> Iterator[tuple[str, str]]:
    """Two scratch databases on the local PostgreSQL: (qcore's, pg-boss's)."""
    stem = f"qcore_interop_{uuid.uuid4().hex[:8]}"
    names = (f"{stem}_q", f"{stem}_p")
    for name in names:
        admin_execute(f"CREATE DATABASE {quote(name)}")
    try:
        yield with_database(ADMIN_DSN, names[0]), with_database(ADMIN_DSN, names[1])
    finally:
        for name in names:
            admin_execute(f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")


@pytest.fixture
async def qdb(databases: tuple[str, str]) -> AsyncIterator[Database]:
    """A qcore adapter on qcore's scratch database (unguarded: real PostgreSQL)."""
    db = await connect(databases[0], max=4)
    try:
        yield db
    finally:
        await db.close()


def fresh_schema(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def pgboss(dsn: str, schema: str, backend: str, *actions: dict[str, Any], **extra: Any) -> Any:
    return run_ok(
        {
            "connectionString": dsn,
            "schema": schema,
            "backend": backend,
            "actions": list(actions),
            **extra,
        }
    )


async def qcore_install(db: Database, backend: str, schema: str, **options: Any) -> Context:
    ctx = Context(db=db, backend=backends.get(backend), schema_spec=schema)
    await install_or_migrate(ctx, **options)
    return ctx


def assert_same_catalog(qcore_dsn: str, pgboss_dsn: str, schema: str) -> None:
    ours = catalog.snapshot(qcore_dsn, schema)
    theirs = catalog.snapshot(pgboss_dsn, schema)
    assert ours["tables"], "nothing installed"
    differences = catalog.diff(ours, theirs)
    assert differences == [], "\n".join(differences)


# --------------------------------------------------------------------------- install


@pytest.mark.parametrize(("qcore_backend", "pgboss_backend", "partitioned"), SHAPES, ids=SHAPE_IDS)
async def test_install_matches_pgboss(
    databases: tuple[str, str],
    qdb: Database,
    qcore_backend: str,
    pgboss_backend: str,
    partitioned: bool,
) -> None:
    qcore_dsn, pgboss_dsn = databases
    schema = fresh_schema("cmp")
    await qcore_install(qdb, qcore_backend, schema)
    pgboss(pgboss_dsn, schema, pgboss_backend, {"op": "start"}, {"op": "stop"})
    assert_same_catalog(qcore_dsn, pgboss_dsn, schema)
    tables = catalog.snapshot(qcore_dsn, schema)["tables"]
    assert (("job_common",) in tables) is partitioned


def queue_calls(schema: str, partitioned: bool) -> list[tuple[str, list[Any]]]:
    """create_queue / delete_queue / job_table_run(_async) calls, the same for both sides."""
    q = quote(schema)
    calls: list[tuple[str, list[Any]]] = [
        (f"SELECT {q}.create_queue(%s, %s)", ["dlq", json.dumps({"policy": "standard"})])
    ]
    for policy in POLICIES:
        shared = {"policy": policy, "deadLetter": "dlq", "retryLimit": 1, "notify": True}
        own = {
            "policy": policy,
            "partition": True,
            "retryBackoff": True,
            "retryDelayMax": 5,
            "heartbeatSeconds": 30,
            "expireInSeconds": 60,
            "retentionSeconds": 3600,
            "deleteAfterSeconds": 0,
            "warningQueueSize": 7,
            "notify": True,
        }
        calls.append((f"SELECT {q}.create_queue(%s, %s)", [f"q_{policy}", json.dumps(shared)]))
        calls.append((f"SELECT {q}.create_queue(%s, %s)", [f"p_{policy}", json.dumps(own)]))
    calls.append((f"SELECT {q}.create_queue(%s, %s)", ["p_short", json.dumps({"policy": "x"})]))
    calls.append((f"SELECT {q}.delete_queue(%s)", ["p_singleton"]))
    calls.append((f"SELECT {q}.delete_queue(%s)", ["q_stately"]))
    if partitioned:
        index = f"CREATE INDEX job_i90 ON {q}.job (name, created_on)"
        calls.append((f"SELECT {q}.job_table_run(%s)", [index]))
        calls.append(
            (f"SELECT {q}.job_table_run(%s, NULL, %s)", [index.replace("i90", "i91"), "p_short"])
        )
        calls.append((f"SELECT {q}.job_table_run_async(%s, %s, %s)", ["idx", 47, index]))
        calls.append(
            (
                f"SELECT {q}.job_table_run_async(%s, %s, %s, NULL, %s)",
                ["idx2", 48, index, "p_stately"],
            )
        )
    return calls


def rows_of(dsn: str, schema: str) -> dict[str, Any]:
    q = quote(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        queues = conn.execute(
            f"SELECT name, policy, retry_limit, retry_delay, retry_backoff, retry_delay_max,"
            f" expire_seconds, retention_seconds, deletion_seconds, warning_queued, dead_letter,"
            f" partition, table_name, heartbeat_seconds, notify, created_on = updated_on"
            f" FROM {q}.queue ORDER BY name"
        ).fetchall()
        bam = conn.execute(
            f"SELECT name, version, status, queue, table_name, command FROM {q}.bam"
        ).fetchall()
    return {"queues": queues, "bam": sorted(bam, key=repr)}


@pytest.mark.parametrize(("qcore_backend", "pgboss_backend", "partitioned"), SHAPES, ids=SHAPE_IDS)
async def test_schema_functions_behave_as_pgboss(
    databases: tuple[str, str],
    qdb: Database,
    qcore_backend: str,
    pgboss_backend: str,
    partitioned: bool,
) -> None:
    """The same create_queue / delete_queue / job_table_run(_async) calls leave the same
    queue rows, background-migration rows and per-queue partitions on both sides."""
    qcore_dsn, pgboss_dsn = databases
    schema = fresh_schema("fn")
    await qcore_install(qdb, qcore_backend, schema)
    pgboss(pgboss_dsn, schema, pgboss_backend, {"op": "start"}, {"op": "stop"})
    for dsn in databases:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement, params in queue_calls(schema, partitioned):
                conn.execute(statement, params)
    assert rows_of(qcore_dsn, schema) == rows_of(pgboss_dsn, schema)
    assert_same_catalog(qcore_dsn, pgboss_dsn, schema)


async def test_concurrent_qcore_and_pgboss_installs(
    databases: tuple[str, str], qdb: Database
) -> None:
    """qcore and pg-boss starting at once on an empty schema take the same install lock:
    whichever comes second finds the schema installed, and the result is pg-boss's."""
    qcore_dsn, pgboss_dsn = databases
    schema = fresh_schema("race")
    pgboss(pgboss_dsn, schema, "postgres", {"op": "start"}, {"op": "stop"})  # the reference
    for _ in range(3):
        with psycopg.connect(qcore_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
        node = asyncio.to_thread(
            pgboss, qcore_dsn, schema, "postgres", {"op": "start"}, {"op": "stop"}
        )
        python = qcore_install(qdb, "postgres", schema)
        await asyncio.gather(node, python)
        assert_same_catalog(qcore_dsn, pgboss_dsn, schema)


# --------------------------------------------------------------------------- each on the other's


@pytest.mark.parametrize(("qcore_backend", "pgboss_backend", "partitioned"), SHAPES, ids=SHAPE_IDS)
async def test_pgboss_starts_on_a_qcore_install(
    databases: tuple[str, str],
    qdb: Database,
    qcore_backend: str,
    pgboss_backend: str,
    partitioned: bool,
) -> None:
    """pg-boss 12.38 with ``migrate: false`` accepts a schema qcore installed, and its
    queue verbs work there (including its own per-queue partitions)."""
    qcore_dsn, _ = databases
    schema = fresh_schema("onq")
    await qcore_install(qdb, qcore_backend, schema)
    results = pgboss(
        qcore_dsn,
        schema,
        pgboss_backend,
        {"op": "start"},
        {"op": "createQueue", "args": ["shared", {"policy": "standard"}]},
        {"op": "createQueue", "args": ["own", {"policy": "singleton", "partition": True}]},
        {"op": "send", "args": ["shared", {"n": 1}]},
        {"op": "send", "args": ["own", {"n": 2}]},
        {"op": "fetch", "args": ["shared"]},
        {"op": "fetch", "args": ["own"]},
        {"op": "getQueue", "args": ["own"]},
        {"op": "stop"},
        migrate=False,
    )
    by_op = [r["result"] for r in results]
    sent_shared, sent_own = by_op[3], by_op[4]
    fetched_shared, fetched_own = by_op[5], by_op[6]
    assert [j["id"] for j in fetched_shared] == [sent_shared]
    assert [j["id"] for j in fetched_own] == [sent_own]
    assert fetched_own[0]["data"] == {"n": 2}
    queue = by_op[7]
    assert queue["partition"] is partitioned
    with psycopg.connect(qcore_dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT name, state::text FROM {quote(schema)}.job ORDER BY name"
        ).fetchall()
    assert rows == [("own", "active"), ("shared", "active")]
    # and the default (migrate: true) start finds nothing to do either
    pgboss(qcore_dsn, schema, pgboss_backend, {"op": "start"}, {"op": "stop"})
    assert await schema_version(Context(qdb, backends.get(qcore_backend), schema)) == 46


@pytest.mark.parametrize(("qcore_backend", "pgboss_backend", "partitioned"), SHAPES, ids=SHAPE_IDS)
async def test_qcore_starts_on_a_pgboss_install(
    databases: tuple[str, str],
    qcore_backend: str,
    pgboss_backend: str,
    partitioned: bool,
) -> None:
    _, pgboss_dsn = databases
    schema = fresh_schema("onp")
    pgboss(pgboss_dsn, schema, pgboss_backend, {"op": "start"}, {"op": "stop"})
    db = await connect(pgboss_dsn, max=2)
    try:
        ctx = await qcore_install(db, qcore_backend, schema, migrate=False)
        assert await schema_version(ctx) == SCHEMA_VERSION
        await install_or_migrate(ctx)  # nothing to do
    finally:
        await db.close()

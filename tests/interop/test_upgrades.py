"""Older pg-boss schemas upgrade through qcore to what pg-boss 12.38's own upgrade gives.

The real older releases (``tests/interop/releases``: pg-boss 11.0 at schema 25, 11.1 at
26, 10.4 at 24) create and fill a schema; ``qcore migrate`` takes it to 46 and qcore's
BAM worker runs the index builds it queued. The same schema filled the same way and
upgraded by pg-boss 12.38 must give the identical catalog (tables, columns in order,
constraints, indexes, the enum, function signatures: :mod:`tests.interop.catalog`;
function bodies are each project's own). Every job, queue and schedule keeps its state;
qcore's drift report is ``ok``; pg-boss 12.38 starts on the result without migrating.
One-step rollback (46 to 45) matches pg-boss's own rollback the same way. On the local
PostgreSQL only: older pg-boss releases know no other engine.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from qcore import backends
from qcore.context import Context
from qcore.db import Database, connect
from qcore.errors import SchemaVersionError
from qcore.identifiers import quote
from qcore.services.bam import run_commands
from qcore.verbs.drift import detect_schema_drift
from qcore.verbs.schema import SCHEMA_VERSION, install_or_migrate, schema_version
from tests.cli import run_qcore
from tests.interop import catalog
from tests.interop.pgboss import interop_marks, run_ok

pytestmark = [*interop_marks(), pytest.mark.feature("migration")]

#: older pg-boss releases npm serves, by the schema version each installs
UPGRADABLE = {"11.0.8": 25, "11.1.2": 26}
TOO_OLD = ("10.4.2", 24)

#: queues of other policies than standard, each holding one waiting job
POLICIES = ["short", "singleton", "stately"]


def fill_with_legacy(dsn: str, schema: str, release: str) -> None:
    """An older pg-boss creates ``schema``: a shared and a partitioned standard queue,
    each with a job active, completed, retrying and waiting; both kinds of queue of other
    policies, with a job each; a schedule."""
    actions: list[dict[str, Any]] = [{"op": "start"}]
    for name, options in [
        (f"{policy}_{kind}", {"policy": policy, "partition": kind == "own"})
        for policy in ["standard", *POLICIES]
        for kind in ("shared", "own")
    ]:
        actions.append({"op": "createQueue", "args": [name, options]})
        count = 4 if options["policy"] == "standard" else 1
        actions += [{"op": "send", "args": [name, {"n": n}]} for n in range(count)]
        if count == 4:
            actions.append({"op": "fetch", "args": [name, {"batchSize": 3}]})
    actions.append({"op": "schedule", "args": ["standard_shared", "*/5 * * * *", {"every": 5}]})
    results = run_ok(
        {"connectionString": dsn, "schema": schema, "migrate": True, "actions": actions},
        release=release,
    )
    settle: list[dict[str, Any]] = []
    for result in results:
        if result["op"] == "fetch":
            jobs = result["result"]
            name = jobs[0]["name"]
            settle.append({"op": "complete", "args": [name, jobs[1]["id"], {"done": True}]})
            settle.append({"op": "fail", "args": [name, jobs[2]["id"], {"why": "test"}]})
    run_ok(
        {
            "connectionString": dsn,
            "schema": schema,
            "migrate": False,
            "actions": [{"op": "start"}, *settle],
        },
        release=release,
    )


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return list(cursor.fetchall()) if cursor.description else []


def contents(dsn: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the tables hold that an upgrade must keep."""
    q = quote(schema)
    return {
        "jobs": rows(
            dsn,
            f"SELECT name, id, state::text, data, output, retry_count, retry_limit, policy,"
            f" created_on, started_on, completed_on, singleton_key FROM {q}.job ORDER BY name, id",
        ),
        "queues": rows(
            dsn,
            f"SELECT name, policy, partition, table_name, retry_limit, expire_seconds,"
            f" retention_seconds, deletion_seconds, created_on FROM {q}.queue ORDER BY name",
        ),
        "schedules": rows(
            dsn, f"SELECT name, key, cron, data, options FROM {q}.schedule ORDER BY 1, 2"
        ),
    }


def pgboss_upgrade(dsn: str, schema: str) -> None:
    """pg-boss 12.38 migrates ``schema`` and its BAM worker runs every queued build."""
    run_ok(
        {
            "connectionString": dsn,
            "schema": schema,
            "migrate": True,
            "actions": [{"op": "start"}, *wait_for_pgboss_bam()],
        },
        timeout=300,
    )


def wait_for_pgboss_bam() -> list[dict[str, Any]]:
    # pg-boss's BAM worker runs every pending command back to back from its first poll
    return [{"op": "sleep", "args": [1000]}] * 20 + [{"op": "getBamStatus"}]


def bam_statuses(dsn: str, schema: str) -> dict[str, int]:
    return dict(rows(dsn, f"SELECT status, count(*) FROM {quote(schema)}.bam GROUP BY 1"))


@pytest.fixture
async def qdb(pg_dsn: str) -> AsyncIterator[Database]:
    db = await connect(pg_dsn, max=4)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def schemas(pg_dsn: str) -> Any:
    made: list[str] = []

    def make(prefix: str) -> str:
        made.append(f"{prefix}_{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield make
    for name in made:
        rows(pg_dsn, f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE")


def ctx_on(db: Database, schema: str) -> Context:
    return Context(db=db, backend=backends.get("postgres"), schema_spec=schema)


async def qcore_upgrade(dsn: str, db: Database, schema: str) -> None:
    """``qcore migrate`` in a subprocess, then qcore's BAM worker until nothing is left."""
    done = run_qcore("migrate", "--url", dsn, "--schema", schema)
    assert done.returncode == 0, done.stderr
    assert f"to version {SCHEMA_VERSION}" in done.stdout
    await run_commands(ctx_on(db, schema))


@pytest.mark.parametrize("release", sorted(UPGRADABLE))
async def test_an_older_pgboss_schema_upgrades_to_pgboss_own_upgrade(
    pg_dsn: str, qdb: Database, schemas: Any, release: str
) -> None:
    ours, theirs = schemas("up_qcore"), schemas("up_pgboss")
    for schema in (ours, theirs):
        fill_with_legacy(pg_dsn, schema, release)
        assert rows(pg_dsn, f"SELECT version FROM {quote(schema)}.version") == [
            (UPGRADABLE[release],)
        ]
    before = contents(pg_dsn, ours)

    await qcore_upgrade(pg_dsn, qdb, ours)
    pgboss_upgrade(pg_dsn, theirs)

    assert await schema_version(ctx_on(qdb, ours)) == SCHEMA_VERSION
    assert bam_statuses(pg_dsn, ours) == bam_statuses(pg_dsn, theirs)
    assert set(bam_statuses(pg_dsn, ours)) == {"completed"}
    assert catalog.diff(catalog.snapshot(pg_dsn, ours), catalog.snapshot(pg_dsn, theirs)) == []
    assert contents(pg_dsn, ours) == before

    report = await detect_schema_drift(ctx_on(qdb, ours))
    assert report.ok, report

    # pg-boss 12.38 works on it as it is, without migrating: it fetches the old waiting
    # and retrying jobs
    results = run_ok(
        {
            "connectionString": pg_dsn,
            "schema": ours,
            "migrate": False,
            "actions": [
                {"op": "start"},
                {"op": "fetch", "args": ["standard_own", {"batchSize": 10}]},
                {"op": "sql", "args": [f"SELECT version FROM {quote(ours)}.version"]},
            ],
        }
    )
    waiting = [
        job for job in before["jobs"] if job[0] == "standard_own" and job[2] in ("created", "retry")
    ]
    assert len(waiting) == 2
    assert sorted(job["id"] for job in results[1]["result"]) == sorted(
        str(job[1]) for job in waiting
    )
    assert results[2]["result"] == [{"version": SCHEMA_VERSION}]


async def test_a_schema_older_than_pgboss_11_is_refused_untouched(
    pg_dsn: str, qdb: Database, schemas: Any
) -> None:
    release, version = TOO_OLD
    schema = schemas("up_old")
    run_ok(
        {
            "connectionString": pg_dsn,
            "schema": schema,
            "actions": [
                {"op": "start"},
                {"op": "createQueue", "args": ["q"]},
                {"op": "send", "args": ["q", {}]},
            ],
        },
        release=release,
    )
    before = catalog.snapshot(pg_dsn, schema)

    done = run_qcore("migrate", "--url", pg_dsn, "--schema", schema)
    assert done.returncode == 1
    assert "oldest version qcore (like pg-boss 12.38) upgrades is 25" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(SchemaVersionError, match="pg-boss 11"):
        await install_or_migrate(ctx_on(qdb, schema))

    assert rows(pg_dsn, f"SELECT version FROM {quote(schema)}.version") == [(version,)]
    assert catalog.diff(catalog.snapshot(pg_dsn, schema), before) == []


async def test_rollback_matches_pgboss_and_migrates_forward_again(
    pg_dsn: str, qdb: Database, schemas: Any
) -> None:
    ours, theirs = schemas("rb_qcore"), schemas("rb_pgboss")
    ctx = ctx_on(qdb, ours)
    await install_or_migrate(ctx)
    run_ok({"connectionString": pg_dsn, "schema": theirs, "actions": [{"op": "start"}]})
    own = '{"partition": true, "policy": "standard"}'
    for schema in (ours, theirs):
        rows(pg_dsn, f"SELECT {quote(schema)}.create_queue('own', '{own}')")
        rows(pg_dsn, f"INSERT INTO {quote(schema)}.job (name, data) VALUES ('own', '{{}}')")
    before = contents(pg_dsn, ours)

    dry = run_qcore("rollback", "--dry-run", "--url", pg_dsn, "--schema", ours)
    assert dry.returncode == 0, dry.stderr
    assert "DROP INDEX IF EXISTS" in dry.stdout
    assert await schema_version(ctx) == SCHEMA_VERSION  # a dry run changes nothing

    done = run_qcore("rollback", "--url", pg_dsn, "--schema", ours)
    assert done.returncode == 0, done.stderr
    assert f"to version {SCHEMA_VERSION - 1}" in done.stdout
    [result] = run_ok(
        {
            "connectionString": pg_dsn,
            "actions": [{"op": "rollbackPlans", "args": [theirs, SCHEMA_VERSION]}],
        }
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(result["result"])

    assert await schema_version(ctx) == SCHEMA_VERSION - 1
    assert catalog.diff(catalog.snapshot(pg_dsn, ours), catalog.snapshot(pg_dsn, theirs)) == []
    assert contents(pg_dsn, ours) == before

    # a second step back is pg-boss's to take: refused, nothing changed
    again = run_qcore("rollback", "--url", pg_dsn, "--schema", ours)
    assert again.returncode == 1
    assert "from version 46 only" in again.stderr
    assert await schema_version(ctx) == SCHEMA_VERSION - 1

    await install_or_migrate(ctx)
    await run_commands(ctx)
    assert await schema_version(ctx) == SCHEMA_VERSION
    report = await detect_schema_drift(ctx)
    assert report.ok, report
    assert contents(pg_dsn, ours) == before


def test_plans_print_the_upgrade_and_the_rollback_offline() -> None:
    upgrade = run_qcore("plans", "migrate", "--from-version", "25", "--schema", "legacy")
    assert upgrade.returncode == 0, upgrade.stderr
    assert upgrade.stdout.count('UPDATE "legacy".version SET version =') == 21
    assert "job_table_run_async('live_index_build', 46" in upgrade.stdout
    back = run_qcore("plans", "rollback", "--schema", "legacy")
    assert back.returncode == 0, back.stderr
    assert back.stdout.rstrip().endswith('UPDATE "legacy".version SET version = 45;')
    too_old = run_qcore("plans", "migrate", "--from-version", "24")
    assert too_old.returncode == 1
    assert "oldest version" in too_old.stderr
    single = run_qcore("plans", "migrate", "--from-version", "30", "--backend", "cockroachdb")
    assert single.returncode == 1
    assert "partitioned backend" in single.stderr

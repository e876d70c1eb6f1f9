"""Installing, checking and migrating the pg-boss v46 schema, and the locks around it.

Runs on every backend (``pytest --backend all qcore/conformance/suite/test_schema.py``). The
expected objects below are written out from the reference
(docs/design/pg-boss-reference.md, sections 2 and 3), not derived from the
builders, so a builder that drifts from pg-boss fails here.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from qcore import locks
from qcore.backend import Backend, LockStrategy
from qcore.conformance.markers import requires
from qcore.conformance.plugin import open_database
from qcore.conformance.provisioners import Provisioner
from qcore.context import Context
from qcore.db import Bound, Database, Rows
from qcore.errors import (
    ConfigError,
    DatabaseError,
    NotInstalledError,
    SchemaVersionError,
    ValidationError,
)
from qcore.identifiers import quote
from qcore.sql import locks as lock_sql
from qcore.sql import schema as schema_sql
from qcore.verbs.migrations import Migration
from qcore.verbs.schema import SCHEMA_VERSION, install_or_migrate, is_installed, schema_version

pytestmark = pytest.mark.feature("schema")

# --------------------------------------------------------------------------- expectations

JOB_COLUMNS = [
    ("id", "uuid", True),
    ("name", "text", True),
    ("priority", "integer", True),
    ("data", "jsonb", False),
    ("state", "job_state", True),
    ("retry_limit", "integer", True),
    ("retry_count", "integer", True),
    ("retry_delay", "integer", True),
    ("retry_backoff", "boolean", True),
    ("retry_delay_max", "integer", False),
    ("expire_seconds", "integer", True),
    ("deletion_seconds", "integer", True),
    ("singleton_key", "text", False),
    ("singleton_on", "timestamp without time zone", False),
    ("group_id", "text", False),
    ("group_tier", "text", False),
    ("start_after", "timestamp with time zone", True),
    ("created_on", "timestamp with time zone", True),
    ("started_on", "timestamp with time zone", False),
    ("completed_on", "timestamp with time zone", False),
    ("keep_until", "timestamp with time zone", True),
    ("output", "jsonb", False),
    ("dead_letter", "text", False),
    ("policy", "text", False),
    ("heartbeat_on", "timestamp with time zone", False),
    ("heartbeat_seconds", "integer", False),
    ("blocked", "boolean", True),
    ("blocking", "boolean", True),
    ("pending_dependencies", "integer", True),
    ("source_name", "text", False),
    ("source_id", "uuid", False),
    ("source_created_on", "timestamp with time zone", False),
    ("source_retry_count", "integer", False),
    ("source_output", "jsonb", False),
    ("source_root_id", "uuid", False),
    ("trace_context", "jsonb", False),
    ("upsert_by_key", "boolean", False),
]
TS = "timestamp with time zone"
QUEUE_STATS_COLUMNS = [
    ("id", "uuid", True),
    ("name", "text", True),
    ("deferred_count", "integer", True),
    ("queued_count", "integer", True),
    ("ready_count", "integer", True),
    ("active_count", "integer", True),
    ("failed_count", "integer", True),
    ("total_count", "integer", True),
    ("created_delta", "integer", False),
    ("completed_delta", "integer", False),
    ("failed_delta", "integer", False),
    ("delta_seconds", "integer", False),
    ("delta_on", TS, False),
    ("wait_bins", "integer[]", False),
    ("run_bins", "integer[]", False),
    ("ready_oldest_seconds", "integer", False),
    ("captured_on", TS, True),
]
TABLE_COLUMNS: dict[str, list[tuple[str, str, bool]]] = {
    "version": [
        ("version", "integer", True),
        ("cron_on", TS, False),
        ("bam_on", TS, False),
        ("flow_on", TS, False),
        ("reindex_on", TS, False),
        ("monitor_backoff_on", TS, False),
    ],
    "queue": [
        ("name", "text", True),
        ("policy", "text", True),
        ("retry_limit", "integer", True),
        ("retry_delay", "integer", True),
        ("retry_backoff", "boolean", True),
        ("retry_delay_max", "integer", False),
        ("expire_seconds", "integer", True),
        ("retention_seconds", "integer", True),
        ("deletion_seconds", "integer", True),
        ("dead_letter", "text", False),
        ("partition", "boolean", True),
        ("table_name", "text", True),
        ("deferred_count", "integer", True),
        ("blocked_count", "integer", True),
        ("queued_count", "integer", True),
        ("ready_count", "integer", True),
        ("warning_queued", "integer", True),
        ("active_count", "integer", True),
        ("failed_count", "integer", True),
        ("total_count", "integer", True),
        ("retained_count", "integer", False),
        ("retained_on", TS, False),
        ("created_delta", "integer", True),
        ("completed_delta", "integer", True),
        ("failed_delta", "integer", True),
        ("delta_on", TS, False),
        ("delta_seconds", "integer", False),
        ("wait_bins", "integer[]", False),
        ("run_bins", "integer[]", False),
        ("ready_oldest_seconds", "integer", False),
        ("ready_history", "integer[]", True),
        ("heartbeat_seconds", "integer", False),
        ("notify", "boolean", True),
        ("singletons_active", "text[]", False),
        ("monitor_claim_on", TS, False),
        ("monitor_on", TS, False),
        ("maintain_on", TS, False),
        ("created_on", TS, True),
        ("updated_on", TS, True),
    ],
    "schedule": [
        ("name", "text", True),
        ("key", "text", True),
        ("kind", "text", True),
        ("cron", "text", True),
        ("timezone", "text", False),
        ("data", "jsonb", False),
        ("options", "jsonb", False),
        ("created_on", TS, True),
        ("updated_on", TS, True),
        ("last_job_id", "uuid", False),
    ],
    "subscription": [
        ("event", "text", True),
        ("name", "text", True),
        ("created_on", TS, True),
        ("updated_on", TS, True),
    ],
    "bam": [
        ("id", "uuid", True),
        ("name", "text", True),
        ("version", "integer", True),
        ("status", "text", True),
        ("queue", "text", False),
        ("table_name", "text", True),
        ("command", "text", True),
        ("error", "text", False),
        ("created_on", TS, True),
        ("started_on", TS, False),
        ("completed_on", TS, False),
    ],
    "job": JOB_COLUMNS,
    "warning": [
        ("id", "uuid", True),
        ("type", "text", True),
        ("message", "text", True),
        ("data", "jsonb", False),
        ("created_on", TS, True),
    ],
    "queue_stats": QUEUE_STATS_COLUMNS,
    "job_dependency": [
        ("child_name", "text", True),
        ("child_id", "uuid", True),
        ("parent_name", "text", True),
        ("parent_id", "uuid", True),
    ],
    "instance": [
        ("id", "uuid", True),
        ("name", "text", False),
        ("host", "text", True),
        ("pid", "integer", True),
        ("version", "text", True),
        ("node_version", "text", True),
        ("application_name", "text", False),
        ("heartbeat_seconds", "integer", True),
        ("supervise", "boolean", True),
        ("schedule", "boolean", True),
        ("migrate", "boolean", True),
        ("persist_queue_stats", "boolean", True),
        ("persist_warnings", "boolean", True),
        ("pool_max", "integer", False),
        ("pool_total", "integer", False),
        ("pool_idle", "integer", False),
        ("pool_waiting", "integer", False),
        ("workers", "jsonb", True),
        ("metrics", "jsonb", False),
        ("config", "jsonb", True),
        ("crash_restarts", "integer", True),
        ("crash_restarts_since", TS, False),
        ("started_on", TS, True),
        ("heartbeat_on", TS, True),
        ("stopped_on", TS, False),
    ],
    "qcore_lock": [("name", "text", True), ("holder", "text", True), ("expires_on", TS, True)],
    "qcore_instance_key": [
        ("instance_key", "text", True),
        ("paused", "boolean", True),
        ("changed_on", TS, False),
        ("seen_on", TS, False),
        ("instance_id", "uuid", False),
        ("jobs_processed", "bigint", True),
        ("acknowledged_on", TS, False),
    ],
    "qcore_job_pattern": [("name", "text", True), ("id", "uuid", True), ("pattern", "text", True)],
    "qcore_job_processed": [
        ("name", "text", True),
        ("id", "uuid", True),
        ("instance_key", "text", True),
    ],
    "qcore_audit": [
        ("id", "uuid", True),
        ("at", TS, True),
        ("actor", "text", True),
        ("action", "text", True),
        ("target", "text", True),
        ("detail", "jsonb", False),
    ],
    "qcore_instance_notice": [
        ("id", "uuid", True),
        ("at", TS, True),
        ("instance_key", "text", True),
        ("action", "text", True),
        ("by", "text", False),
    ],
}

# job index number -> (unique, number of key columns, has a predicate, INCLUDE column)
JOB_INDEXES: dict[int, tuple[bool, int, bool, str | None]] = {
    1: (True, 2, True, None),
    2: (True, 2, True, None),
    3: (True, 3, True, None),
    4: (True, 3, True, None),
    6: (True, 2, True, None),
    7: (False, 2, True, None),
    8: (True, 2, True, None),
    9: (False, 2, True, None),
    10: (False, 5, True, "start_after"),
    11: (False, 4, True, None),
    12: (False, 1, True, None),
    13: (True, 2, True, None),
    14: (False, 4, True, None),
    15: (False, 2, False, None),
    16: (False, 2, True, None),
    17: (False, 3, True, None),
}
JOB_STATES = ["created", "retry", "active", "completed", "cancelled", "failed"]


def expected_tables(backend: Backend, today: dt.date) -> dict[str, list[tuple[str, str, bool]]]:
    tables = dict(TABLE_COLUMNS)
    if backend.schema.partitioned:
        tables["job_common"] = JOB_COLUMNS
        for day in (today, today + dt.timedelta(days=1)):
            tables[f"queue_stats_{day:%Y%m%d}"] = QUEUE_STATS_COLUMNS
    return tables


def expected_indexes(
    backend: Backend, today: dt.date
) -> dict[tuple[str, str], tuple[bool, int, bool, str | None]]:
    """(table, index) -> (unique, key columns, partial, INCLUDE column or None)."""
    covering = backend.schema.covering_indexes
    job_table = "job_common" if backend.schema.partitioned else "job"
    found: dict[tuple[str, str], tuple[bool, int, bool, str | None]] = {
        ("version", "version_pkey"): (True, 1, False, None),
        ("queue", "queue_pkey"): (True, 1, False, None),
        ("schedule", "schedule_pkey"): (True, 2, False, None),
        ("subscription", "subscription_pkey"): (True, 2, False, None),
        ("bam", "bam_pkey"): (True, 1, False, None),
        ("job", "job_pkey"): (True, 2, False, None),
        ("warning", "warning_pkey"): (True, 1, False, None),
        ("warning", "warning_i1"): (False, 1, False, None),
        ("job_dependency", "job_dependency_pkey"): (True, 4, False, None),
        ("job_dependency", "job_dep_parent_idx"): (False, 2, False, None),
        ("instance", "instance_pkey"): (True, 1, False, None),
        ("qcore_lock", "qcore_lock_pkey"): (True, 1, False, None),
        ("qcore_instance_key", "qcore_instance_key_pkey"): (True, 1, False, None),
        ("qcore_job_pattern", "qcore_job_pattern_pkey"): (True, 2, False, None),
        ("qcore_job_pattern", "qcore_job_pattern_i1"): (False, 2, False, None),
        ("qcore_job_processed", "qcore_job_processed_pkey"): (True, 2, False, None),
        ("qcore_audit", "qcore_audit_pkey"): (True, 1, False, None),
        ("qcore_audit", "qcore_audit_i1"): (False, 2, False, None),
        ("qcore_instance_notice", "qcore_instance_notice_pkey"): (True, 1, False, None),
        ("qcore_instance_notice", "qcore_instance_notice_i1"): (False, 1, False, None),
    }
    for n, (unique, keys, partial, include) in JOB_INDEXES.items():
        found[(job_table, f"{job_table}_i{n}")] = (
            unique,
            keys,
            partial,
            include if covering else None,
        )
    stats_include = "deferred_count" if covering else None
    if backend.schema.partitioned:
        found[("job_common", "job_common_pkey")] = (True, 2, False, None)
        found[("queue_stats", "queue_stats_pkey")] = (True, 2, False, None)
        found[("queue_stats", "queue_stats_i1")] = (False, 2, False, stats_include)
        for day in (today, today + dt.timedelta(days=1)):
            table = f"queue_stats_{day:%Y%m%d}"
            found[(table, f"{table}_pkey")] = (True, 2, False, None)
            found[(table, f"{table}_name_captured_on_deferred_count_queued_idx")] = (
                False,
                2,
                False,
                stats_include,
            )
    else:
        found[("queue_stats", "queue_stats_pkey")] = (True, 1, False, None)
        found[("queue_stats", "queue_stats_i1")] = (False, 2, False, stats_include)
        found[("queue_stats", "queue_stats_i2")] = (False, 2, False, None)
    return found


def expected_constraints(
    backend: Backend, today: dt.date
) -> dict[tuple[str, str], tuple[str, bool]]:
    """(table, constraint) -> (type, deferrable)."""
    deferrable = backend.schema.deferrable_foreign_keys
    job_table = "job_common" if backend.schema.partitioned else "job"
    found = {
        ("version", "version_pkey"): ("p", False),
        ("queue", "queue_pkey"): ("p", False),
        ("queue", "queue_dead_letter_fkey"): ("f", False),
        ("queue", "queue_check"): ("c", False),
        ("schedule", "schedule_pkey"): ("p", False),
        ("schedule", "schedule_name_fkey"): ("f", False),
        ("schedule", "schedule_kind_check"): ("c", False),
        ("subscription", "subscription_pkey"): ("p", False),
        ("subscription", "subscription_name_fkey"): ("f", False),
        ("bam", "bam_pkey"): ("p", False),
        ("job", "job_pkey"): ("p", False),
        (job_table, "q_fkey"): ("f", deferrable),
        (job_table, "dlq_fkey"): ("f", deferrable),
        (job_table, "job_key_strict_fifo_singleton_key_check"): ("c", False),
        ("warning", "warning_pkey"): ("p", False),
        ("queue_stats", "queue_stats_pkey"): ("p", False),
        ("job_dependency", "job_dependency_pkey"): ("p", False),
        ("instance", "instance_pkey"): ("p", False),
        ("qcore_lock", "qcore_lock_pkey"): ("p", False),
        ("qcore_instance_key", "qcore_instance_key_pkey"): ("p", False),
        ("qcore_job_pattern", "qcore_job_pattern_pkey"): ("p", False),
        ("qcore_job_processed", "qcore_job_processed_pkey"): ("p", False),
        ("qcore_audit", "qcore_audit_pkey"): ("p", False),
        ("qcore_instance_notice", "qcore_instance_notice_pkey"): ("p", False),
    }
    if backend.schema.partitioned:
        found[("job_common", "job_common_pkey")] = ("p", False)
        for day in (today, today + dt.timedelta(days=1)):
            found[(f"queue_stats_{day:%Y%m%d}", f"queue_stats_{day:%Y%m%d}_pkey")] = ("p", False)
    return found


def expected_functions(backend: Backend) -> dict[str, str]:
    functions = {
        "job_now": "",
        "create_queue": "queue_name text, options jsonb",
        "delete_queue": "queue_name text",
    }
    if backend.schema.partitioned:
        functions.update(
            job_table_format="command text, table_name text",
            job_table_run="command text, tbl_name text, queue_name text",
            job_table_run_async=(
                "command_name text, version integer, command text, tbl_name text, queue_name text"
            ),
        )
    return functions


# --------------------------------------------------------------------------- catalog reads
# Plain catalog columns only: the emulated cockroachdb refuses pg_get_indexdef & co.


async def server_today(db: Database) -> dt.date:
    rows = await db.execute(schema_sql.server_today.sql)
    return dt.date.fromisoformat(str(rows[0]["today"]))


async def read_tables(db: Database, schema: str) -> dict[str, list[tuple[str, str, bool]]]:
    rows = await db.execute(
        "SELECT c.relname AS t, a.attname AS col, format_type(a.atttypid, a.atttypmod) AS typ,"
        " a.attnotnull AS nn, a.attnum AS pos"
        " FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
        " AND NOT a.attisdropped"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')"
        " ORDER BY c.relname, a.attnum",
        [schema],
    )
    tables: dict[str, list[tuple[str, str, bool]]] = {}
    for r in rows:
        typ = str(r["typ"]).replace(f"{quote(schema)}.", "").replace(f"{schema}.", "")
        tables.setdefault(str(r["t"]), []).append((str(r["col"]), typ, bool(r["nn"])))
    return tables


async def read_indexes(
    db: Database, schema: str
) -> dict[tuple[str, str], tuple[bool, int, bool, str | None]]:
    rows = await db.execute(
        "SELECT t.relname AS t, i.relname AS i, x.indisunique AS u, x.indnkeyatts AS nkeys,"
        " x.indnatts AS natts, x.indpred IS NOT NULL AS partial,"
        " (SELECT a.attname FROM pg_catalog.pg_attribute a WHERE a.attrelid = t.oid"
        "  AND a.attnum = x.indkey[x.indnkeyatts]) AS first_include"
        " FROM pg_catalog.pg_index x"
        " JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid"
        " JOIN pg_catalog.pg_class t ON t.oid = x.indrelid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = $1",
        [schema],
    )
    return {
        (str(r["t"]), str(r["i"])): (
            bool(r["u"]),
            int(r["nkeys"]),
            bool(r["partial"]),
            str(r["first_include"]) if int(r["natts"]) > int(r["nkeys"]) else None,
        )
        for r in rows
    }


async def read_constraints(db: Database, schema: str) -> dict[tuple[str, str], tuple[str, bool]]:
    rows = await db.execute(
        "SELECT t.relname AS t, k.conname AS name, k.contype::text AS type,"
        " k.condeferrable AS d, k.condeferred AS dd"
        " FROM pg_catalog.pg_constraint k"
        " JOIN pg_catalog.pg_class t ON t.oid = k.conrelid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = $1 AND k.contype <> 'n'",
        [schema],
    )
    for r in rows:
        assert bool(r["d"]) == bool(r["dd"]), f"{r['name']}: deferrable but not initially deferred"
    return {(str(r["t"]), str(r["name"])): (str(r["type"]), bool(r["d"])) for r in rows}


async def read_functions(db: Database, schema: str) -> dict[str, str]:
    rows = await db.execute(
        "SELECT p.proname AS name, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args"
        " FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = $1",
        [schema],
    )
    return {str(r["name"]): str(r["args"]) for r in rows}


async def read_enum(db: Database, schema: str) -> list[str]:
    rows = await db.execute(
        "SELECT e.enumlabel AS label FROM pg_catalog.pg_enum e"
        " JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace"
        " WHERE n.nspname = $1 AND t.typname = 'job_state' ORDER BY e.enumsortorder",
        [schema],
    )
    return [str(r["label"]) for r in rows]


async def catalog(db: Database, schema: str) -> dict[str, Any]:
    return {
        "tables": await read_tables(db, schema),
        "indexes": await read_indexes(db, schema),
        "constraints": await read_constraints(db, schema),
        "functions": await read_functions(db, schema),
        "enum": await read_enum(db, schema),
    }


async def schema_exists(db: Database, name: str) -> bool:
    rows = await db.execute(
        "SELECT count(*) AS n FROM pg_catalog.pg_namespace WHERE nspname = $1", [name]
    )
    return int(rows[0]["n"]) == 1


async def drop_schema(db: Database, name: str) -> None:
    await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE")


def ctx_for(db: Database, backend: Backend, schema_spec: str) -> Context:
    return Context(db=db, backend=backend, schema_spec=schema_spec)


def unique_name(prefix: str = "qcore_t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def install_events(records: Sequence[logging.LogRecord], kind: str = "install") -> int:
    return sum(1 for r in records if getattr(r, "qcore_event", None) == kind)


class Recording(Database):
    """Passes everything to ``inner`` and remembers each statement's text; ``check``
    (if given) sees each text first and may raise to refuse it."""

    def __init__(self, inner: Database, check: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.driver = inner.driver
        self.statements: list[str] = []
        self.check = check

    def record(self, sql: str) -> None:
        if self.check is not None:
            self.check(sql)
        self.statements.append(sql)

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self.record(sql)
        return await self.inner.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self.record(sql)
        await self.inner.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        async with self.inner.transaction() as tx:
            yield _RecordingBound(self, tx)


class _RecordingBound(Bound):
    def __init__(self, owner: Recording, tx: Database) -> None:
        super().__init__()
        self.owner = owner
        self.tx = tx

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self.owner.record(sql)
        return await self.tx.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self.owner.record(sql)
        await self.tx.execute_script(sql)


# --------------------------------------------------------------------------- install


async def test_install_creates_every_object(db: Database, backend: Backend, schema: str) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    today = await server_today(db)
    got = await catalog(db, schema)

    assert got["tables"] == expected_tables(backend, today)
    assert got["indexes"] == expected_indexes(backend, today)
    assert got["constraints"] == expected_constraints(backend, today)
    assert got["functions"] == expected_functions(backend)
    assert got["enum"] == JOB_STATES

    rows = await db.execute(f"SELECT * FROM {quote(schema)}.version")
    assert rows == [
        {
            "version": 46,
            "cron_on": None,
            "bam_on": None,
            "flow_on": None,
            "reindex_on": None,
            "monitor_backoff_on": None,
        }
    ]
    for table in ("queue", "job", "bam", "schedule", "instance", "qcore_lock"):
        count = await db.execute(f"SELECT count(*) AS n FROM {quote(schema)}.{quote(table)}")
        assert int(count[0]["n"]) == 0, table


async def test_partition_parent_and_default_partition(
    db: Database, backend: Backend, schema: str
) -> None:
    await install_or_migrate(ctx_for(db, backend, schema))
    rows = await db.execute(
        "SELECT c.relname AS t, c.relkind::text AS kind,"
        " (SELECT p.relname FROM pg_catalog.pg_inherits i"
        "  JOIN pg_catalog.pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = c.oid) AS parent"
        " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = $1 AND c.relname IN ('job', 'job_common', 'queue_stats')",
        [schema],
    )
    kinds = {str(r["t"]): (str(r["kind"]), r["parent"]) for r in rows}
    if backend.schema.partitioned:
        assert kinds == {
            "job": ("p", None),
            "job_common": ("r", "job"),
            "queue_stats": ("p", None),
        }
    else:
        assert kinds == {"job": ("r", None), "queue_stats": ("r", None)}


async def test_install_is_idempotent(
    db: Database, backend: Backend, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ctx_for(db, backend, schema)
    caplog.set_level(logging.INFO, logger="qcore.schema")
    await install_or_migrate(ctx)
    before = await catalog(db, schema)
    await install_or_migrate(ctx)
    assert install_events(caplog.records) == 1

    # every install statement may run again on a complete install and changes nothing
    statements = schema_sql.install(backend, schema, today=await server_today(db))
    for step in statements:
        if step.skip_if is not None:
            probe, values = step.skip_if
            if (await db.execute(probe.sql, probe.bind(**values)))[0]["present"]:
                continue
        await db.execute(step.sql)
    assert await catalog(db, schema) == before
    assert await schema_version(ctx) == SCHEMA_VERSION


async def test_interrupted_install_is_completed_or_refused(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    expected = await catalog(db, schema)
    # what an install cut off before its last statement leaves: everything but the row
    await db.execute(f"DELETE FROM {quote(schema)}.version")
    if backend.capabilities.transactional_ddl:
        with pytest.raises(SchemaVersionError, match="without a version row"):
            await install_or_migrate(ctx)
    else:
        await install_or_migrate(ctx)  # statement-by-statement install: completed
        assert await schema_version(ctx) == SCHEMA_VERSION
        assert await catalog(db, schema) == expected


async def test_is_installed_and_schema_version(db: Database, backend: Backend, schema: str) -> None:
    ctx = ctx_for(db, backend, schema)
    assert await is_installed(ctx) is False
    assert await schema_version(ctx) is None
    await install_or_migrate(ctx)
    assert await is_installed(ctx) is True
    assert await schema_version(ctx) == SCHEMA_VERSION == 46


async def test_a_newer_schema_is_refused(db: Database, backend: Backend, schema: str) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    await db.execute(f"UPDATE {quote(schema)}.version SET version = 52")
    with pytest.raises(SchemaVersionError, match=r"version 52.*up to 46"):
        await install_or_migrate(ctx)
    with pytest.raises(SchemaVersionError, match=r"version 52.*up to 46"):
        await install_or_migrate(ctx, migrate=False)
    assert await schema_version(ctx) == 52


async def test_an_outdated_schema_with_migrate_false(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    await db.execute(f"UPDATE {quote(schema)}.version SET version = 45")
    with pytest.raises(SchemaVersionError, match=r"version 45.*migrated.*46.*migrate=True"):
        await install_or_migrate(ctx, migrate=False)
    assert await schema_version(ctx) == 45  # (test_migrations: what migrate=True does)


async def test_migrate_false_does_not_install(db: Database, backend: Backend, schema: str) -> None:
    ctx = ctx_for(db, backend, schema)
    with pytest.raises(NotInstalledError, match="migrate=False"):
        await install_or_migrate(ctx, migrate=False)
    assert await is_installed(ctx) is False


# --------------------------------------------------------------------------- migrations


def migration_to_47(backend: Backend, ran: list[str]) -> Migration:
    """A test-only migration: a column on the job table and an index on every job table."""

    async def record(ctx: Context) -> None:
        rows = await ctx.db.execute(f"SELECT version FROM {ctx.q}.version")
        ran.append(f"{ctx.schema}@{rows[0]['version']}")

    add_column = "ALTER TABLE {schema}.job ADD COLUMN IF NOT EXISTS qcore_note text"
    index = "CREATE INDEX IF NOT EXISTS job_i90 ON {schema}.job (name, qcore_note)"
    if backend.schema.partitioned:  # every job table, as pg-boss's migrations do it
        add_index = "SELECT {schema}.job_table_run('" + index.replace("'", "''") + "')"
    else:
        add_index = index
    return Migration(47, (add_column, add_index, record), "test: qcore_note and job_i90")


async def test_migration_46_to_47(
    db: Database, backend: Backend, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="qcore.schema")
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    partitioned_table = schema_sql.job_table_name(backend, "q_own", partition=True)
    await db.execute(f"SELECT {quote(schema)}.create_queue($1, $2)", ["q_own", {"partition": True}])
    ran: list[str] = []
    migration = migration_to_47(backend, ran)

    await install_or_migrate(ctx, migrations=[migration], target=47)

    assert await schema_version(ctx) == 47
    assert ran == [f"{schema}@46"]
    assert install_events(caplog.records, "migrate") == 1
    tables = await read_tables(db, schema)
    assert tables["job"][-1] == ("qcore_note", "text", False)
    indexes = await read_indexes(db, schema)
    job_tables = ["job_common", partitioned_table] if backend.schema.partitioned else ["job"]
    for table in job_tables:
        assert indexes[(table, f"{table}_i90")] == (False, 2, False, None)
        assert tables[table][-1] == ("qcore_note", "text", False)

    # done: nothing runs again; this qcore (knowing only 46) refuses the newer schema
    await install_or_migrate(ctx, migrations=[migration], target=47)
    assert ran == [f"{schema}@46"]
    with pytest.raises(SchemaVersionError, match=r"version 47.*up to 46"):
        await install_or_migrate(ctx)


async def test_fresh_install_migrates_on_to_the_target(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    ran: list[str] = []
    await install_or_migrate(ctx, migrations=[migration_to_47(backend, ran)], target=47)
    assert await schema_version(ctx) == 47
    assert ran == [f"{schema}@46"]


async def test_migration_gap_is_refused_before_anything_runs(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    ran: list[str] = []
    later = Migration(48, ("SELECT 1",), "needs 47 first")
    with pytest.raises(SchemaVersionError, match="no migration to version 47"):
        await install_or_migrate(ctx, migrations=[later], target=48)
    assert ran == []
    assert await schema_version(ctx) == 46


@requires("transactional_ddl")
async def test_a_failing_migration_changes_nothing(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    broken = Migration(
        47,
        (
            "ALTER TABLE {schema}.job ADD COLUMN qcore_note text",
            "SELECT no_such_function_qcore()",
        ),
    )
    with pytest.raises(DatabaseError, match="no_such_function_qcore") as info:
        await install_or_migrate(ctx, migrations=[broken], target=47)
    assert info.value.sqlstate == "42883"  # undefined_function: its second statement failed
    assert await schema_version(ctx) == 46
    assert "qcore_note" not in [c[0] for c in (await read_tables(db, schema))["job"]]


# --------------------------------------------------------------------------- concurrency


async def test_ten_concurrent_installers(
    db: Database,
    backend: Backend,
    provisioned: Provisioner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten instances start at once on a schema that does not exist yet: one installs, the
    others wait for the install lock and find it done; none fails."""
    caplog.set_level(logging.INFO, logger="qcore.schema")
    name = unique_name("qcore_ten")
    single = backend.capabilities.single_session  # PGlite: ten tasks share the one adapter
    adapters = [db] * 10 if single else [await open_database(provisioned) for _ in range(10)]
    try:
        results = await asyncio.gather(
            *(install_or_migrate(ctx_for(a, backend, name)) for a in adapters),
            return_exceptions=True,
        )
        assert [r for r in results if r is not None] == []
        assert install_events(caplog.records) == 1
        assert await schema_version(ctx_for(db, backend, name)) == SCHEMA_VERSION
        today = await server_today(db)
        assert (await read_tables(db, name)) == expected_tables(backend, today)
    finally:
        if not single:
            for adapter in adapters:
                await adapter.close()
        await drop_schema(db, name)


# --------------------------------------------------------------------------- options


async def test_create_schema_false(db: Database, backend: Backend, schema: str) -> None:
    missing = unique_name("qcore_missing")
    with pytest.raises(ConfigError, match=r"does not exist.*create_schema=False"):
        await install_or_migrate(ctx_for(db, backend, missing), create_schema=False)
    assert not await schema_exists(db, missing)

    recording = Recording(db)
    ctx = ctx_for(recording, backend, schema)  # the fixture's schema exists
    await install_or_migrate(ctx, create_schema=False)
    assert await schema_version(ctx) == SCHEMA_VERSION
    assert not [s for s in recording.statements if "CREATE SCHEMA" in s.upper()]
    # the default does issue it
    other = unique_name("qcore_made")
    recording.statements.clear()
    try:
        await install_or_migrate(ctx_for(recording, backend, other))
        assert [s for s in recording.statements if "CREATE SCHEMA" in s.upper()]
    finally:
        await drop_schema(db, other)


async def test_schema_case_variant_is_refused_unless_allowed(
    db: Database, backend: Backend
) -> None:
    base = unique_name("QcoreCase")
    mixed = f'"{base}"'  # stored as written
    folded = base.lower()  # what the bare spelling reaches
    try:
        await install_or_migrate(ctx_for(db, backend, mixed))
        with pytest.raises(ConfigError) as info:
            await install_or_migrate(ctx_for(db, backend, base))
        message = str(info.value)
        assert f"""schema='"{base}"'""" in message
        assert "allow_schema_case_variant" in message
        assert not await schema_exists(db, folded)

        await install_or_migrate(ctx_for(db, backend, base), allow_schema_case_variant=True)
        assert await schema_version(ctx_for(db, backend, base)) == SCHEMA_VERSION

        # and the other way round: a quoted upper-case spelling is pointed at the bare one
        upper = f'"{base.upper()}"'
        with pytest.raises(ConfigError, match=rf"schema='{folded}'"):
            await install_or_migrate(ctx_for(db, backend, upper))
        assert not await schema_exists(db, base.upper())
    finally:
        for name in (base, folded, base.upper()):
            await drop_schema(db, name)


@pytest.mark.parametrize(
    "spec",
    [
        "bad-name",
        "1starts_with_digit",
        '"has.period"',
        '"has%percent"',
        '"has$dollar"',
        '"has\\backslash"',
        '"has\'quote"',
        "a" * 51,
        '"' + "é" * 26 + '"',  # 52 bytes
    ],
)
async def test_bad_schema_names_fail_before_anything_is_written(
    db: Database, backend: Backend, spec: str
) -> None:
    rows = await db.execute("SELECT count(*) AS n FROM pg_catalog.pg_namespace")
    with pytest.raises(ValidationError):
        ctx_for(db, backend, spec)
    with pytest.raises(ValidationError):
        lock_sql.lock_key_text(spec)
    with pytest.raises(ValidationError):
        lock_sql.notify_channel(spec)
    after = await db.execute("SELECT count(*) AS n FROM pg_catalog.pg_namespace")
    assert after == rows


async def test_quoted_schema_names_work(db: Database, backend: Backend) -> None:
    name = f"My-Schema {uuid.uuid4().hex[:6]}"
    ctx = ctx_for(db, backend, f'"{name}"')
    try:
        await install_or_migrate(ctx)
        assert await schema_version(ctx) == SCHEMA_VERSION
        await db.execute(f"SELECT {quote(name)}.create_queue($1, $2)", ["q", {}])
        await db.execute(f"SELECT {quote(name)}.delete_queue($1)", ["q"])
    finally:
        await drop_schema(db, name)


# --------------------------------------------------------------------------- functions


async def test_create_and_delete_queue_functions(
    db: Database, backend: Backend, schema: str
) -> None:
    await install_or_migrate(ctx_for(db, backend, schema))
    q = quote(schema)
    await db.execute(f"SELECT {q}.create_queue($1, $2)", ["dlq", {"policy": "standard"}])
    options = {
        "policy": "key_strict_fifo",
        "retryLimit": 1,
        "retryBackoff": True,
        "retryDelayMax": 5,
        "deadLetter": "dlq",
        "partition": True,
        "notify": True,
        "heartbeatSeconds": 30,
    }
    await db.execute(f"SELECT {q}.create_queue($1, $2)", ["fifo", options])
    await db.execute(f"SELECT {q}.create_queue($1, $2)", ["fifo", {"policy": "short"}])  # no-op
    rows = await db.execute(
        f"SELECT name, policy, retry_limit, retry_backoff, retry_delay_max, dead_letter,"
        f" partition, table_name, notify, heartbeat_seconds, expire_seconds,"
        f" retention_seconds, deletion_seconds FROM {q}.queue ORDER BY name"
    )
    partitioned = backend.schema.partitioned
    own = schema_sql.job_table_name(backend, "fifo", partition=True)
    assert rows[1] == {
        "name": "fifo",
        "policy": "key_strict_fifo",
        "retry_limit": 1,
        "retry_backoff": True,
        "retry_delay_max": 5,
        "dead_letter": "dlq",
        "partition": partitioned,
        "table_name": own,
        "notify": partitioned,  # the single-table create_queue ignores notify, as pg-boss's
        "heartbeat_seconds": 30,
        "expire_seconds": 900,
        "retention_seconds": 1209600,
        "deletion_seconds": 604800,
    }
    assert rows[0]["table_name"] == ("job_common" if partitioned else "job")
    if partitioned:
        assert own == "j" + hashlib.sha224(b"fifo").hexdigest()
        indexes = await read_indexes(db, schema)
        names = sorted(i for t, i in indexes if t == own)
        expected = [f"{own}_i{n}" for n in (4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)]
        assert names == sorted([*expected, f"{own}_pkey"])
        constraints = {
            k[1]: v for k, v in (await read_constraints(db, schema)).items() if k[0] == own
        }
        deferrable = backend.schema.deferrable_foreign_keys
        assert constraints == {
            f"{own}_pkey": ("p", False),
            "q_fkey": ("f", deferrable),
            "dlq_fkey": ("f", deferrable),
            "job_key_strict_fifo_singleton_key_check": ("c", False),
            "cjc": ("c", False),
        }
    # a job in the queue's table, then delete_queue removes the queue and its jobs
    await db.execute(
        f"INSERT INTO {q}.job (name, singleton_key, policy) VALUES ('fifo', 'k', 'key_strict_fifo')"
    )
    await db.execute(f"SELECT {q}.delete_queue($1)", ["fifo"])
    left = await db.execute(f"SELECT count(*) AS n FROM {q}.job WHERE name = 'fifo'")
    assert int(left[0]["n"]) == 0
    assert [r["name"] for r in await db.execute(f"SELECT name FROM {q}.queue")] == ["dlq"]
    if partitioned:
        assert (own, f"{own}_pkey") not in await read_indexes(db, schema)


async def test_job_now_and_job_table_format(db: Database, backend: Backend, schema: str) -> None:
    await install_or_migrate(ctx_for(db, backend, schema))
    q = quote(schema)
    async with db.transaction() as tx:
        rows = await tx.execute(f"SELECT {q}.job_now() = now() AS same")
        assert rows == [{"same": True}]
    if backend.schema.partitioned:
        rows = await db.execute(
            f"SELECT {q}.job_table_format($1, 'jabc') AS cmd",
            [f"CREATE INDEX job_i11 ON {q}.job (name) WHERE x; -- {q}.job_dependency job_i"],
        )
        assert rows[0]["cmd"] == (
            f"CREATE INDEX jabc_i11 ON {q}.jabc (name) WHERE x; -- {q}.job_dependency job_i"
        )


# --------------------------------------------------------------------------- locks


async def test_lock_keys_server_side_equal_client_side(db: Database) -> None:
    rows = await db.execute("SELECT current_database() AS d")
    database = str(rows[0]["d"])
    for spec in ("pgboss", '"pgboss"', "MySchema", '"My-Schema"'):
        for suffix in ("", "create-queue", "job_commondeletion"):
            rows = await db.execute(
                f"SELECT {lock_sql.lock_key_expression()} AS key",
                [lock_sql.lock_key_text(spec, suffix)],
            )
            assert int(rows[0]["key"]) == lock_sql.lock_key(database, spec, suffix)


async def _second_adapter(
    db: Database, backend: Backend, provisioned: Provisioner
) -> tuple[Database, bool]:
    if backend.capabilities.single_session:
        return db, False
    return await open_database(provisioned), True


async def test_locked_excludes_concurrent_holders(
    db: Database, backend: Backend, schema: str, provisioned: Provisioner
) -> None:
    await install_or_migrate(ctx_for(db, backend, schema))
    other, owned = await _second_adapter(db, backend, provisioned)
    inside: list[int] = []
    overlaps: list[int] = []

    async def work(adapter: Database, n: int) -> int:
        async def body(tx: Database) -> int:
            if inside:
                overlaps.append(n)
            inside.append(n)
            await tx.execute("SELECT 1 AS x")
            await asyncio.sleep(0.05)
            inside.remove(n)
            return n

        return await locks.run_locked(ctx_for(adapter, backend, schema), "qcore-test", body)

    try:
        results = await asyncio.gather(*(work(db if i % 2 else other, i) for i in range(6)))
    finally:
        if owned:
            await other.close()
    assert sorted(results) == list(range(6))
    assert overlaps == []


async def test_locked_is_the_advisory_lock_or_a_lease(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    table = f"{quote(schema)}.qcore_lock"
    async with locks.locked(ctx, "qcore-test") as tx:
        rows = await db.execute(f"SELECT name FROM {table}")
        if backend.lock is LockStrategy.LEASE:
            assert rows == [{"name": "qcore-test"}]
        else:
            assert rows == []
            held = await tx.execute(
                "SELECT count(*) AS n FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid() AND granted"
            )
            assert int(held[0]["n"]) >= 1
    assert await db.execute(f"SELECT name FROM {table}") == []


async def test_lease_expires_and_can_be_taken_over(
    db: Database, backend: Backend, schema: str
) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    first = locks.Lease(ctx, "qcore-test", expiry=3, renew_every=3600)
    second = locks.Lease(ctx, "qcore-test", expiry=30)
    await first.acquire(timeout=30)
    try:
        assert not await second.try_acquire()
        with pytest.raises(DatabaseError, match="could not take") as info:
            await second.acquire(timeout=0.1)
        assert info.value.sqlstate == "55P03"
        await second.acquire(timeout=60)  # the first one's lease runs out (3 s)
        await second.release()
    finally:
        await first.release()  # no longer ours: releases nothing
    assert await db.execute(f"SELECT name FROM {quote(schema)}.qcore_lock") == []


async def test_lease_is_renewed_while_held(db: Database, backend: Backend, schema: str) -> None:
    ctx = ctx_for(db, backend, schema)
    await install_or_migrate(ctx)
    held = locks.Lease(ctx, "qcore-test", expiry=60, renew_every=0.2)
    other = locks.Lease(ctx, "qcore-test", expiry=30)
    await held.acquire(timeout=30)

    async def expires_on() -> Any:
        rows = await db.execute(f"SELECT expires_on FROM {quote(schema)}.qcore_lock")
        return rows[0]["expires_on"]

    try:
        taken = await expires_on()
        deadline = asyncio.get_running_loop().time() + 30
        while not await expires_on() > taken:  # the renewer moved the expiry forward
            assert asyncio.get_running_loop().time() < deadline, "the lease was never renewed"
            await asyncio.sleep(0.1)
        assert not await other.try_acquire()
        assert not held.lost
    finally:
        await held.release()
    assert await other.try_acquire()
    await other.release()

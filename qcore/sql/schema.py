"""The pg-boss v46 schema: every statement that installs it, for both physical shapes.

A backend with ``schema.partitioned`` gets the shape of pg-boss's
``postgres`` backend (reference, section 2): ``job`` is a list-partitioned
parent, queues without a table of their own share the DEFAULT partition
``job_common``, ``create_queue(..., partition => true)`` builds a partition
per queue, ``queue_stats`` is partitioned by day. Any other backend gets the
shape of pg-boss's ``cockroachdb`` backend (section 3): one ordinary ``job``
table and a plain ``queue_stats``. Within a shape, foreign keys are
``DEFERRABLE INITIALLY DEFERRED`` only where ``deferrable_foreign_keys`` and
indexes carry ``INCLUDE`` only where ``covering_indexes``.

Names, types, defaults, index keys and predicates are pg-boss's exactly (a
pg-boss instance reads and writes these tables); every statement and function
body here is qcore's own. Every statement is idempotent (``IF NOT EXISTS``,
``CREATE OR REPLACE``, ``ON CONFLICT``, or a :class:`DDL` ``skip_if`` probe),
so an install that an engine without transactional DDL interrupted can simply
be run again.

This module builds the install (its statements, in order); the catalog it installs is
:mod:`qcore.sql.catalog`, the functions :mod:`qcore.sql.functions`, the read-only
probes :mod:`qcore.sql.probes` — their public names are importable from here too.

Builders are pure: they take the backend and the stored schema name and return
SQL text. Statements whose text embeds the base job table spell it
``<schema>.job`` with the table name bare, because ``job_table_format``
retargets a command by rewriting exactly that spelling.
"""

from __future__ import annotations

import datetime as dt
import re

from qcore.backend import Backend
from qcore.errors import ConfigError
from qcore.identifiers import quote
from qcore.sql._statement import DDL
from qcore.sql.affinity import (
    JOB_PATTERN_TABLE,
    JOB_PROCESSED_TABLE,
    create_job_pattern_index,
    create_job_pattern_table,
    create_job_processed_table,
)
from qcore.sql.audit import AUDIT_TABLE, create_audit_index, create_audit_table
from qcore.sql.catalog import (
    ALL_INDEXES,
    BAM_TABLE,
    BASE_INDEXES,
    INDEXES,
    INSTANCE_TABLE,
    JOB_DEPENDENCY_INDEX,
    JOB_DEPENDENCY_TABLE,
    JOB_STATES,
    POLICY_INDEXES,
    QUEUE_STATS_INDEX,
    QUEUE_STATS_TIME_INDEX,
    QUEUE_TABLE,
    SCHEDULE_TABLE,
    SCHEMA_VERSION,
    SUBSCRIPTION_TABLE,
    VERSION_TABLE,
    WARNING_INDEX,
    WARNING_TABLE,
    IndexSpec,
    TableSpec,
    job_index,
    job_table,
    job_table_name,
    literal,
    queue_stats_partition_name,
    queue_stats_table,
)
from qcore.sql.functions import (
    create_queue_partitioned,
    create_queue_single,
    delete_queue_partitioned,
    delete_queue_single,
    job_now,
    job_table_format,
    job_table_run,
    job_table_run_async,
    partition_commands,
)
from qcore.sql.instance_notices import NOTICE_TABLE, create_notice_index, create_notice_table
from qcore.sql.instances import (
    INSTANCE_KEY_TABLE,
    add_jobs_processed_column,
    add_pause_acknowledged_column,
    create_instance_key_table,
)
from qcore.sql.locks import LOCK_TABLE, create_lock_table
from qcore.sql.probes import (
    case_variants,
    constraint_exists,
    is_partition,
    schema_exists,
    select_version,
    server_today,
    type_exists,
    update_version,
    version_table_exists,
)

__all__ = [
    "BASE_INDEXES",
    "DDL",
    "INDEXES",
    "JOB_STATES",
    "POLICY_INDEXES",
    "QCORE_TABLES",
    "SCHEMA_VERSION",
    "SHARED_TABLES",
    "case_variants",
    "create_schema_if_missing",
    "function_statements",
    "install",
    "job_common_table",
    "job_index",
    "job_table_name",
    "qcore_tables",
    "queue_stats_partition",
    "queue_stats_partition_name",
    "schema_exists",
    "select_version",
    "server_today",
    "uninstall",
    "update_version",
    "version_table_exists",
]


#: the names of qcore's own tables (:func:`qcore_tables`), beside pg-boss's in a schema
QCORE_TABLES = (
    LOCK_TABLE,
    INSTANCE_KEY_TABLE,
    JOB_PATTERN_TABLE,
    JOB_PROCESSED_TABLE,
    AUDIT_TABLE,
    NOTICE_TABLE,
)


def qcore_tables(schema: str) -> list[DDL]:
    """qcore's own tables, which pg-boss neither has nor reads. Idempotent.

    The lock table (first: the first lease needs it), instance keys, job patterns,
    attribution, the board's audit log and the instance notices.
    """
    return [
        create_lock_table(schema),
        create_instance_key_table(schema),
        add_jobs_processed_column(schema),
        add_pause_acknowledged_column(schema),
        create_job_pattern_table(schema),
        create_job_pattern_index(schema),
        create_job_processed_table(schema),
        create_audit_table(schema),
        create_audit_index(schema),
        create_notice_table(schema),
        create_notice_index(schema),
    ]


def create_schema_if_missing(schema: str) -> DDL:
    """The schema itself (skipped with create_schema=False); the same on every backend."""
    return DDL(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")


def _job_state(schema: str) -> DDL:
    # CREATE TYPE has no IF NOT EXISTS: a catalog probe makes it idempotent everywhere
    labels = ", ".join(literal(s) for s in JOB_STATES)
    sql = f"CREATE TYPE {quote(schema)}.job_state AS ENUM ({labels})"
    return DDL(sql, (type_exists, {"name": f"{quote(schema)}.job_state"}))


def queue_stats_partition(backend: Backend, schema: str, day: dt.date) -> str:
    """The partition of ``queue_stats`` for one UTC day (partitioned shape only).

    The single-table shape keeps ``queue_stats`` plain and needs none.
    """
    if not backend.schema.partitioned:
        raise ConfigError(f"the {backend.name} backend keeps queue_stats unpartitioned")
    q = quote(schema)
    following = day + dt.timedelta(days=1)
    return (
        f"CREATE TABLE IF NOT EXISTS {q}.{quote(queue_stats_partition_name(day))}"
        f" PARTITION OF {q}.queue_stats"
        f" FOR VALUES FROM ('{day:%Y-%m-%d} 00:00:00+00') TO ('{following:%Y-%m-%d} 00:00:00+00')"
    )


def _install_version(schema: str) -> str:
    return (
        f"INSERT INTO {quote(schema)}.version (version) VALUES ({SCHEMA_VERSION})"
        " ON CONFLICT DO NOTHING"
    )


def install(
    backend: Backend, schema: str, *, today: dt.date, create_schema: bool = True
) -> list[DDL]:
    """Every statement of a v46 install, in order; the shape follows ``backend.schema``.

    ``today`` is the server's current UTC date (the first ``queue_stats`` partition).
    The version row comes last, so a schema with a version row is complete.
    """
    if backend.schema.partitioned:
        steps = _install_partitioned(backend, schema, today)
    else:
        steps = _install_single(backend, schema)
    if create_schema:
        steps.insert(0, create_schema_if_missing(schema))
    steps += qcore_tables(schema)
    steps.append(DDL(_install_version(schema)))
    return steps


def uninstall(backend: Backend, schema: str) -> str:
    """Drop what :func:`install` creates in ``schema``, leaving the schema and anything
    else in it; the same objects on every backend that installed them.

    Read off the install's own statements: the functions first (CockroachDB ties a
    function to the tables its body names), then every table in one statement (a
    partitioned table takes its partitions: each day of ``queue_stats``, each queue's own
    job table), then the type. No CASCADE: an object of another application that depends
    on one of them stops the script rather than going with it.
    """
    q = quote(schema)
    creates = re.compile(
        r"CREATE (?:OR REPLACE )?(FUNCTION|TABLE|TYPE) (?:IF NOT EXISTS )?"
        + re.escape(q)
        + r'\.("[^"]+"|\w+)'
    )
    created: dict[str, list[str]] = {"FUNCTION": [], "TABLE": [], "TYPE": []}
    for step in install(backend, schema, today=dt.date(2000, 1, 1), create_schema=False):
        found = creates.match(step.sql)
        if found is None or " PARTITION OF " in step.sql:
            continue
        kind, obj = found.group(1), f"{q}.{found.group(2)}"
        if obj not in created[kind]:
            created[kind].append(obj)
    drops = [f"DROP {kind} IF EXISTS {', '.join(objs)};" for kind, objs in created.items() if objs]
    return "\n".join(drops)


#: the tables that are the same in both shapes and come before the job table
SHARED_TABLES: tuple[TableSpec, ...] = (
    VERSION_TABLE,
    QUEUE_TABLE,
    SCHEDULE_TABLE,
    SUBSCRIPTION_TABLE,
    BAM_TABLE,
)


def _shared_tables(schema: str) -> list[DDL]:
    """Tables that are the same in both shapes, created before the job table."""
    q = quote(schema)
    return [DDL(table.create(q)) for table in SHARED_TABLES]


def _bare_index(backend: Backend, schema: str, index: IndexSpec) -> str:
    # an index of a fixed table, its table spelt bare after the quoted schema
    on = f"{quote(schema)}.{index.table}"
    return index.create(on, covering=backend.schema.covering_indexes)


def warning_table(schema: str) -> list[DDL]:
    """warning and its index: the same in both shapes."""
    q = quote(schema)
    return [
        DDL(WARNING_TABLE.create(q)),
        DDL(WARNING_INDEX.create(f"{q}.warning", covering=False)),
    ]


def _dependency_and_instance(schema: str) -> list[DDL]:
    q = quote(schema)
    return [
        DDL(JOB_DEPENDENCY_TABLE.create(q)),
        DDL(JOB_DEPENDENCY_INDEX.create(f"{q}.job_dependency", covering=False)),
        DDL(INSTANCE_TABLE.create(q)),
    ]


def _queue_stats_table(backend: Backend, schema: str, *, partitioned: bool) -> list[DDL]:
    # the snapshots' table and its index; partitioned by day (captured_on in the key) or plain
    table = queue_stats_table(partitioned=partitioned).create(quote(schema))
    return [DDL(table), DDL(queue_stats_index(backend, schema))]


def queue_stats_index(backend: Backend, schema: str) -> str:
    return _bare_index(backend, schema, QUEUE_STATS_INDEX)


def job_common_table(schema: str) -> str:
    """The DEFAULT partition of the partitioned shape's job table (a copy of ``job``)."""
    q = quote(schema)
    return f"CREATE TABLE IF NOT EXISTS {q}.job_common (LIKE {q}.job INCLUDING DEFAULTS)"


def function_statements(backend: Backend, schema: str) -> dict[str, str]:
    """The schema's functions by name, each the statement that (re)creates it.

    In the order the install makes them; the shape follows ``backend.schema``.
    """
    q = quote(schema)
    if backend.schema.partitioned:
        return {
            "job_now": job_now(q),
            "job_table_format": job_table_format(q),
            "job_table_run": job_table_run(q),
            "job_table_run_async": job_table_run_async(q),
            "create_queue": create_queue_partitioned(backend, schema),
            "delete_queue": delete_queue_partitioned(schema),
        }
    return {
        "job_now": job_now(q),
        "create_queue": create_queue_single(schema),
        "delete_queue": delete_queue_single(schema),
    }


def _install_partitioned(backend: Backend, schema: str, today: dt.date) -> list[DDL]:
    # per-queue partitions need dynamic SQL in create_queue and job_table_run
    if not backend.capabilities.plpgsql_dynamic:
        raise ConfigError(
            f"the {backend.name} backend asks for a partitioned schema but has no dynamic"
            " PL/pgSQL (EXECUTE), which creating per-queue partitions needs"
        )
    q = quote(schema)
    functions = function_statements(backend, schema)
    steps = [
        _job_state(schema),
        DDL(functions["job_now"]),
        *_shared_tables(schema),
        DDL(functions["job_table_format"]),
        DDL(functions["job_table_run"]),
        DDL(functions["job_table_run_async"]),
        DDL(job_table(backend).create(q)),
        DDL(job_common_table(schema)),
    ]
    # job_common gets every constraint and every index, pinned through job_table_run
    common, by_policy = partition_commands(backend, schema)
    for constraint, command in common + [c for cs in by_policy.values() for c in cs]:
        probe = None
        if constraint is not None:
            name = constraint.format(table="job_common")
            probe = (constraint_exists, {"table": f"{q}.job_common", "name": name})
        steps.append(
            DDL(f"SELECT {q}.job_table_run({literal(command)}, 'job_common') AS done", probe)
        )
    steps.append(
        DDL(
            f"ALTER TABLE {q}.job ATTACH PARTITION {q}.job_common DEFAULT",
            (is_partition, {"table": f"{q}.job_common"}),
        )
    )
    steps += warning_table(schema)
    steps += [
        *_queue_stats_table(backend, schema, partitioned=True),
        DDL(queue_stats_partition(backend, schema, today)),
        DDL(queue_stats_partition(backend, schema, today + dt.timedelta(days=1))),
    ]
    steps += _dependency_and_instance(schema)
    steps += [DDL(functions["create_queue"]), DDL(functions["delete_queue"])]
    return steps


def _install_single(backend: Backend, schema: str) -> list[DDL]:
    # one ordinary job table holding every queue, its constraints inline
    functions = function_statements(backend, schema)
    steps = [
        _job_state(schema),
        DDL(functions["job_now"]),
        *_shared_tables(schema),
        DDL(job_table(backend).create(quote(schema))),
        *(DDL(job_index(backend, schema, n)) for n in ALL_INDEXES),
    ]
    steps += warning_table(schema)
    steps += [
        *_queue_stats_table(backend, schema, partitioned=False),
        DDL(_bare_index(backend, schema, QUEUE_STATS_TIME_INDEX)),
    ]
    steps += _dependency_and_instance(schema)
    steps += [DDL(functions["create_queue"]), DDL(functions["delete_queue"])]
    return steps

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
from qcore.sql.catalog import (
    _ALL_INDEXES,
    _BAM,
    _INSTANCE,
    _JOB,
    _JOB_DEPENDENCY,
    _QUEUE,
    _QUEUE_STATS,
    _SCHEDULE,
    _SUBSCRIPTION,
    _VERSION,
    _WARNING,
    BASE_INDEXES,
    INDEXES,
    JOB_STATES,
    POLICY_INDEXES,
    SCHEMA_VERSION,
    _create_table,
    _job_constraint_defs,
    _literal,
    job_index,
    job_table_name,
    queue_stats_partition_name,
)
from qcore.sql.functions import (
    _create_queue_partitioned,
    _create_queue_single,
    _delete_queue_partitioned,
    _delete_queue_single,
    _job_now,
    _job_table_format,
    _job_table_run,
    _job_table_run_async,
    _partition_commands,
)
from qcore.sql.instances import (
    INSTANCE_KEY_TABLE,
    add_jobs_processed_column,
    create_instance_key_table,
)
from qcore.sql.locks import LOCK_TABLE, create_lock_table
from qcore.sql.probes import (
    _constraint_exists,
    _is_partition,
    _type_exists,
    case_variants,
    schema_exists,
    select_version,
    server_today,
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
    "case_variants",
    "create_schema_if_missing",
    "install",
    "job_index",
    "job_table_name",
    "qcore_tables",
    "queue_stats_partition",
    "queue_stats_partition_name",
    "schema_exists",
    "select_version",
    "server_today",
    "update_version",
    "version_table_exists",
]


#: the names of qcore's own tables (:func:`qcore_tables`), beside pg-boss's in a schema
QCORE_TABLES = (LOCK_TABLE, INSTANCE_KEY_TABLE, JOB_PATTERN_TABLE, JOB_PROCESSED_TABLE)


def qcore_tables(schema: str) -> list[DDL]:
    """qcore's own tables, which pg-boss neither has nor reads: the lock table (first: the
    first lease needs it), instance keys, job patterns and attribution. Idempotent."""
    return [
        create_lock_table(schema),
        create_instance_key_table(schema),
        add_jobs_processed_column(schema),
        create_job_pattern_table(schema),
        create_job_pattern_index(schema),
        create_job_processed_table(schema),
    ]


def create_schema_if_missing(schema: str) -> DDL:
    """The schema itself (skipped with create_schema=False); the same on every backend."""
    return DDL(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")


def _job_state(schema: str) -> DDL:
    # CREATE TYPE has no IF NOT EXISTS: a catalog probe makes it idempotent everywhere
    labels = ", ".join(_literal(s) for s in JOB_STATES)
    sql = f"CREATE TYPE {quote(schema)}.job_state AS ENUM ({labels})"
    return DDL(sql, (_type_exists, {"name": f"{quote(schema)}.job_state"}))


def queue_stats_partition(backend: Backend, schema: str, day: dt.date) -> str:
    """The partition of ``queue_stats`` for one UTC day (partitioned shape only; the
    single-table shape keeps ``queue_stats`` plain and needs none)."""
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


def _shared_tables(schema: str) -> list[DDL]:
    """Tables that are the same in both shapes, created before the job table."""
    q = quote(schema)
    return [
        DDL(
            _create_table(q, "version", _VERSION, ["CONSTRAINT version_pkey PRIMARY KEY (version)"])
        ),
        DDL(
            _create_table(
                q,
                "queue",
                _QUEUE,
                [
                    "CONSTRAINT queue_pkey PRIMARY KEY (name)",
                    f"CONSTRAINT queue_dead_letter_fkey FOREIGN KEY (dead_letter)"
                    f" REFERENCES {q}.queue (name)",
                    "CONSTRAINT queue_check CHECK (dead_letter IS DISTINCT FROM name)",
                ],
            )
        ),
        DDL(
            _create_table(
                q,
                "schedule",
                _SCHEDULE,
                [
                    "CONSTRAINT schedule_pkey PRIMARY KEY (name, key)",
                    f"CONSTRAINT schedule_name_fkey FOREIGN KEY (name)"
                    f" REFERENCES {q}.queue (name) ON DELETE CASCADE",
                    "CONSTRAINT schedule_kind_check CHECK (kind IN ('cron', 'rrule'))",
                ],
            )
        ),
        DDL(
            _create_table(
                q,
                "subscription",
                _SUBSCRIPTION,
                [
                    "CONSTRAINT subscription_pkey PRIMARY KEY (event, name)",
                    f"CONSTRAINT subscription_name_fkey FOREIGN KEY (name)"
                    f" REFERENCES {q}.queue (name) ON DELETE CASCADE",
                ],
            )
        ),
        DDL(_create_table(q, "bam", _BAM, ["CONSTRAINT bam_pkey PRIMARY KEY (id)"])),
    ]


def _warning_table(schema: str) -> list[DDL]:
    """warning and its index: the same in both shapes."""
    q = quote(schema)
    return [
        DDL(_create_table(q, "warning", _WARNING, ["CONSTRAINT warning_pkey PRIMARY KEY (id)"])),
        DDL(f"CREATE INDEX IF NOT EXISTS warning_i1 ON {q}.warning (created_on DESC)"),
    ]


def _dependency_and_instance(schema: str) -> list[DDL]:
    q = quote(schema)
    return [
        DDL(
            _create_table(
                q,
                "job_dependency",
                _JOB_DEPENDENCY,
                [
                    "CONSTRAINT job_dependency_pkey"
                    " PRIMARY KEY (child_name, child_id, parent_name, parent_id)"
                ],
            )
        ),
        DDL(
            f"CREATE INDEX IF NOT EXISTS job_dep_parent_idx"
            f" ON {q}.job_dependency (parent_name, parent_id)"
        ),
        DDL(_create_table(q, "instance", _INSTANCE, ["CONSTRAINT instance_pkey PRIMARY KEY (id)"])),
    ]


def _queue_stats_table(backend: Backend, schema: str, *, partitioned: bool) -> list[DDL]:
    # the snapshots' table and its index; partitioned by day (captured_on in the key) or plain
    key = "id, captured_on" if partitioned else "id"
    suffix = " PARTITION BY RANGE (captured_on)" if partitioned else ""
    table = _create_table(
        quote(schema),
        "queue_stats",
        _QUEUE_STATS,
        [f"CONSTRAINT queue_stats_pkey PRIMARY KEY ({key})"],
        suffix,
    )
    return [DDL(table), DDL(_queue_stats_index(backend, schema))]


def _queue_stats_index(backend: Backend, schema: str) -> str:
    q = quote(schema)
    sql = f"CREATE INDEX IF NOT EXISTS queue_stats_i1 ON {q}.queue_stats (name, captured_on DESC)"
    if backend.schema.covering_indexes:
        sql += (
            " INCLUDE (deferred_count, queued_count, ready_count, active_count,"
            " failed_count, total_count)"
        )
    return sql


def _install_partitioned(backend: Backend, schema: str, today: dt.date) -> list[DDL]:
    # per-queue partitions need dynamic SQL in create_queue and job_table_run
    if not backend.capabilities.plpgsql_dynamic:
        raise ConfigError(
            f"the {backend.name} backend asks for a partitioned schema but has no dynamic"
            " PL/pgSQL (EXECUTE), which creating per-queue partitions needs"
        )
    q = quote(schema)
    steps = [
        _job_state(schema),
        DDL(_job_now(q)),
        *_shared_tables(schema),
        DDL(_job_table_format(q)),
        DDL(_job_table_run(q)),
        DDL(_job_table_run_async(q)),
        DDL(
            _create_table(
                q,
                "job",
                _JOB,
                ["CONSTRAINT job_pkey PRIMARY KEY (name, id)"],
                " PARTITION BY LIST (name)",
            )
        ),
        DDL(f"CREATE TABLE IF NOT EXISTS {q}.job_common (LIKE {q}.job INCLUDING DEFAULTS)"),
    ]
    # job_common gets every constraint and every index, pinned through job_table_run
    common, by_policy = _partition_commands(backend, schema)
    for constraint, command in common + [c for cs in by_policy.values() for c in cs]:
        probe = None
        if constraint is not None:
            name = constraint.format(table="job_common")
            probe = (_constraint_exists, {"table": f"{q}.job_common", "name": name})
        steps.append(
            DDL(f"SELECT {q}.job_table_run({_literal(command)}, 'job_common') AS done", probe)
        )
    steps.append(
        DDL(
            f"ALTER TABLE {q}.job ATTACH PARTITION {q}.job_common DEFAULT",
            (_is_partition, {"table": f"{q}.job_common"}),
        )
    )
    steps += _warning_table(schema)
    steps += [
        *_queue_stats_table(backend, schema, partitioned=True),
        DDL(queue_stats_partition(backend, schema, today)),
        DDL(queue_stats_partition(backend, schema, today + dt.timedelta(days=1))),
    ]
    steps += _dependency_and_instance(schema)
    steps += [
        DDL(_create_queue_partitioned(backend, schema)),
        DDL(_delete_queue_partitioned(schema)),
    ]
    return steps


def _install_single(backend: Backend, schema: str) -> list[DDL]:
    # one ordinary job table holding every queue; constraints inline so that
    # CREATE TABLE IF NOT EXISTS alone makes it idempotent
    q = quote(schema)
    constraints = _job_constraint_defs(backend, q)
    steps = [
        _job_state(schema),
        DDL(_job_now(q)),
        *_shared_tables(schema),
        DDL(
            _create_table(
                q,
                "job",
                _JOB,
                [
                    "CONSTRAINT job_pkey PRIMARY KEY (name, id)",
                    *(f"CONSTRAINT {name} {clause}" for name, clause in constraints.items()),
                ],
            )
        ),
        *(DDL(job_index(backend, schema, n)) for n in _ALL_INDEXES),
    ]
    steps += _warning_table(schema)
    steps += [
        *_queue_stats_table(backend, schema, partitioned=False),
        DDL(f"CREATE INDEX IF NOT EXISTS queue_stats_i2 ON {q}.queue_stats (captured_on, id)"),
    ]
    steps += _dependency_and_instance(schema)
    steps += [DDL(_create_queue_single(schema)), DDL(_delete_queue_single(schema))]
    return steps

"""pg-boss's schema upgrades, from version 25 (pg-boss 11.0) to 46, as qcore runs them.

:func:`upgrade` returns the statements that take an install from ``version - 1`` to
``version``; :func:`downgrade` those that take it back one step (only from the version
qcore runs at). The catalog they leave is pg-boss's own upgrade's, column order
included: every column is added in the release order pg-boss added it, with the
definition a fresh install has (read from :mod:`qcore.sql.catalog`), so the two cannot
drift apart. Index builds on tables that already hold jobs go to the ``bam`` table as
``CONCURRENTLY`` commands, fanned out over job_common and the partitions (by policy
where only some partitions need one), exactly where pg-boss queues them, so either
project's BAM worker runs them after the upgrade commits.

Only the partitioned shape has an upgrade path: pg-boss 11 installed nothing else, and
pg-boss's own unpartitioned installs are all younger than qcore's oldest supported
version. ``create_queue`` is replaced once, at 46, by qcore's; the whole chain runs in
one transaction where the engine allows it, so no queue is created half-way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from qcore.backend import Backend
from qcore.errors import SchemaVersionError
from qcore.identifiers import quote
from qcore.sql.catalog import (
    BAM,
    INSTANCE,
    JOB,
    JOB_DEPENDENCY,
    QUEUE,
    QUEUE_STATS,
    SCHEDULE,
    SCHEMA_VERSION,
    VERSION,
    Column,
    column_lines,
    create_table,
    job_constraint_defs,
    job_index,
    literal,
)
from qcore.sql.functions import (
    create_queue_partitioned,
    delete_queue_partitioned,
    job_now,
    job_table_format,
    job_table_run,
    job_table_run_async,
)
from qcore.sql.schema import queue_stats_index, warning_table

__all__ = ["OLDEST_UPGRADABLE", "downgrade", "upgrade"]

#: the oldest schema version with an upgrade path (pg-boss 11.0.x; pg-boss 12.38 starts
#: from the same version)
OLDEST_UPGRADABLE = 25

_TABLES: dict[str, Sequence[Column]] = {
    "job": JOB,
    "queue": QUEUE,
    "queue_stats": QUEUE_STATS,
    "schedule": SCHEDULE,
    "version": VERSION,
}

#: the indexes whose builds arrived at schema 46 (what a rollback to 45 removes)
_INDEXES_OF_46 = (14, 15, 16, 17)

#: the queue_stats columns that schemas 43 and 44 added, in the order they were added
_QUEUE_STATS_OF_43 = (
    "created_delta",
    "completed_delta",
    "failed_delta",
    "delta_seconds",
    "delta_on",
)
_QUEUE_STATS_OF_44 = ("wait_bins", "run_bins", "ready_oldest_seconds")

#: job_i5, the fetch index before job_i11 replaced it, in its shape from schema 33 on
_SLIM_FETCH_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_i5 ON {q}.job (name, start_after)"
    " WHERE state < 'active' AND NOT blocked"
)
_DROP_FETCH_INDEX = "DROP INDEX CONCURRENTLY IF EXISTS {q}.job_i5"


def _add_columns(q: str, table: str, *names: str) -> str:
    # columns as a fresh install defines them, in one ALTER (one rewrite check, one lock)
    by_name = {column[0]: column for column in _TABLES[table]}
    lines = column_lines([by_name[name] for name in names], q)
    return f"ALTER TABLE {q}.{table} " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c}" for c in lines)


def _concurrent_index(backend: Backend, schema: str, number: int) -> str:
    return job_index(backend, schema, number).replace(
        "INDEX IF NOT EXISTS", "INDEX CONCURRENTLY IF NOT EXISTS", 1
    )


def _enqueue(
    q: str,
    name: str,
    version: int,
    command: str,
    *,
    table: str | None = None,
    policy: str | None = None,
) -> str:
    """A background command per job table.

    Every one, one ``table``, or job_common and the partitions of queues with ``policy``.
    """
    args = f"{literal(name)}, {version}, {literal(command)}"
    if table is not None:
        return f"SELECT {q}.job_table_run_async({args}, {literal(table)}) AS queued"
    if policy is None:
        return f"SELECT {q}.job_table_run_async({args}) AS queued"
    return (
        f"SELECT {q}.job_table_run_async({args}, t.table_name, t.queue_name) AS queued"
        f" FROM (SELECT 'job_common'::text AS table_name, NULL::text AS queue_name"
        f" UNION ALL SELECT q.table_name, q.name FROM {q}.queue q"
        f" WHERE q.partition AND q.policy = {literal(policy)}) t"
    )


def _on_every_job_table(q: str, command: str, table: str | None = None) -> str:
    pinned = f", {literal(table)}" if table is not None else ""
    return f"SELECT {q}.job_table_run({literal(command)}{pinned}) AS done"


def _queue_stats_partitions(q: str) -> str:
    # today's and tomorrow's day partitions, on the server's UTC calendar
    create = literal(
        f"CREATE TABLE IF NOT EXISTS {q}.%I PARTITION OF {q}.queue_stats"
        " FOR VALUES FROM (%L) TO (%L)"
    )
    return f"""DO $qcore$
DECLARE
  first_day date := (now() AT TIME ZONE 'UTC')::date;
  each_day date;
BEGIN
  FOR offset_days IN 0..1 LOOP
    each_day := first_day + offset_days;
    EXECUTE format({create}, 'queue_stats_' || to_char(each_day, 'YYYYMMDD'),
                   to_char(each_day, 'YYYY-MM-DD') || ' 00:00:00+00',
                   to_char(each_day + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
  END LOOP;
END
$qcore$"""


def _to_26(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        f"CREATE UNIQUE INDEX IF NOT EXISTS job_i6 ON {q}.job_common"
        " (name, COALESCE(singleton_key, '')) WHERE state <= 'active' AND policy = 'exclusive'"
    ]


def _to_27(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(q, "version", "bam_on"),
        create_table(q, "bam", BAM, ["CONSTRAINT bam_pkey PRIMARY KEY (id)"]),
        job_table_format(q),
        job_table_run_async(q),
        job_table_run(q),
        _add_columns(q, "job", "group_id", "group_tier"),
        *(f"ALTER INDEX IF EXISTS {q}.job_i{n} RENAME TO job_common_i{n}" for n in range(1, 8)),
        _enqueue(q, "group_concurency_index", 27, _concurrent_index(backend, schema, 7)),
    ]


def _to_28(backend: Backend, schema: str, q: str) -> list[str]:
    check = "job_key_strict_fifo_singleton_key_check"
    clause = job_constraint_defs(backend, q)[check]
    return [
        _on_every_job_table(
            q, f"ALTER TABLE {q}.job ADD CONSTRAINT {check} {clause}", "job_common"
        ),
        _enqueue(
            q,
            "key_strict_fifo_index",
            28,
            _concurrent_index(backend, schema, 8),
            table="job_common",
        ),
    ]


def _to_29(backend: Backend, schema: str, q: str) -> list[str]:
    return [step.sql for step in warning_table(schema)]


def _to_30(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(q, "job", "heartbeat_on", "heartbeat_seconds"),
        _add_columns(q, "queue", "heartbeat_seconds"),
    ]


def _to_31(backend: Backend, schema: str, q: str) -> list[str]:
    key = (
        "CONSTRAINT job_dependency_pkey PRIMARY KEY (child_name, child_id, parent_name, parent_id)"
    )
    return [
        _add_columns(q, "job", "blocked", "blocking", "pending_dependencies"),
        create_table(q, "job_dependency", JOB_DEPENDENCY, [key]),
        f"CREATE INDEX IF NOT EXISTS job_dep_parent_idx ON {q}.job_dependency"
        " (parent_name, parent_id)",
    ]


def _to_32(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(q, "queue", "notify"),
        _add_columns(q, "queue", "failed_count", "ready_count"),
    ]


def _bam_default(q: str) -> str:
    return f"ALTER TABLE {q}.bam ALTER COLUMN created_on SET DEFAULT clock_timestamp()"


def _to_33(backend: Backend, schema: str, q: str) -> list[str]:
    # job_i5 cannot be reshaped concurrently in place: dropped, then built slim, in order
    return [
        _add_columns(q, "version", "flow_on"),
        _bam_default(q),
        _enqueue(q, "flow_resolver_index", 33, _concurrent_index(backend, schema, 9)),
        _enqueue(q, "fetch_index_drop", 33, _DROP_FETCH_INDEX.format(q=q)),
        _enqueue(q, "fetch_index", 33, _SLIM_FETCH_INDEX.format(q=q)),
    ]


def _to_34(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(
            q, "job", "source_name", "source_id", "source_created_on", "source_retry_count"
        )
    ]


def _to_35(backend: Backend, schema: str, q: str) -> list[str]:
    later = {*_QUEUE_STATS_OF_43, *_QUEUE_STATS_OF_44}
    columns = [c for c in QUEUE_STATS if c[0] not in later]
    key = "CONSTRAINT queue_stats_pkey PRIMARY KEY (id, captured_on)"
    return [
        create_table(q, "queue_stats", columns, [key], " PARTITION BY RANGE (captured_on)"),
        queue_stats_index(backend, schema),
        _queue_stats_partitions(q),
        _add_columns(q, "queue", "ready_history"),
    ]


def _to_36(backend: Backend, schema: str, q: str) -> list[str]:
    return [_bam_default(q)]


def _to_37(backend: Backend, schema: str, q: str) -> list[str]:
    return [job_table_format(q)]


def _to_38(backend: Backend, schema: str, q: str) -> list[str]:
    command = _concurrent_index(backend, schema, 10)
    return [_enqueue(q, "key_strict_fifo_head_index", 38, command, policy="key_strict_fifo")]


def _to_39(backend: Backend, schema: str, q: str) -> list[str]:
    return [_add_columns(q, "version", "reindex_on")]


def _to_40(backend: Backend, schema: str, q: str) -> list[str]:
    # the claim pace starts from the monitor's, so no queue is due at once after the upgrade;
    # job_i11 is built before job_i5 is retired (BAM holds a table's retire behind its build)
    return [
        _add_columns(q, "version", "monitor_backoff_on"),
        _add_columns(q, "queue", "monitor_claim_on"),
        f"UPDATE {q}.queue SET monitor_claim_on = monitor_on WHERE monitor_claim_on IS NULL",
        _enqueue(q, "fetch_index_priority_build", 40, _concurrent_index(backend, schema, 11)),
        _enqueue(q, "fetch_index_retire", 40, _DROP_FETCH_INDEX.format(q=q)),
    ]


def _to_41(backend: Backend, schema: str, q: str) -> list[str]:
    # kind: a rule (RFC 5545) has '=', ':' or ';' somewhere, which no cron field can hold;
    # a schedule without a zone has always meant UTC
    return [
        f"ALTER TABLE {q}.schedule ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'cron'"
        " CONSTRAINT schedule_kind_check CHECK (kind IN ('cron', 'rrule'))",
        f"UPDATE {q}.schedule SET kind = 'rrule' WHERE kind = 'cron' AND cron ~ '[=:;]'",
        f"UPDATE {q}.schedule SET timezone = 'UTC' WHERE timezone IS NULL",
        f"ALTER TABLE {q}.schedule ALTER COLUMN timezone SET DEFAULT 'UTC'",
        _add_columns(q, "schedule", "last_job_id"),
    ]


def _to_42(backend: Backend, schema: str, q: str) -> list[str]:
    return [job_now(q)]


def _to_43(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(
            q,
            "queue",
            "created_delta",
            "completed_delta",
            "failed_delta",
            "delta_on",
            "delta_seconds",
        ),
        _add_columns(q, "queue_stats", *_QUEUE_STATS_OF_43),
        _add_columns(q, "job", "source_output", "source_root_id"),
        _enqueue(q, "source_root_index_build", 43, _concurrent_index(backend, schema, 12)),
    ]


def _to_44(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        create_table(q, "instance", INSTANCE, ["CONSTRAINT instance_pkey PRIMARY KEY (id)"]),
        _add_columns(q, "queue", "blocked_count", "wait_bins", "run_bins", "ready_oldest_seconds"),
        _add_columns(q, "queue_stats", *_QUEUE_STATS_OF_44),
        _add_columns(q, "job", "trace_context"),
    ]


def _to_45(backend: Backend, schema: str, q: str) -> list[str]:
    return [
        _add_columns(q, "job", "upsert_by_key"),
        _enqueue(q, "upsert_index_build", 45, _concurrent_index(backend, schema, 13)),
    ]


def _to_46(backend: Backend, schema: str, q: str) -> list[str]:
    names = ("live", "created", "completed", "queued_key")
    return [
        _add_columns(q, "queue", "retained_count", "retained_on"),
        create_queue_partitioned(backend, schema),
        delete_queue_partitioned(schema),
        *(
            _enqueue(q, f"{name}_index_build", 46, _concurrent_index(backend, schema, n))
            for name, n in zip(names, _INDEXES_OF_46, strict=True)
        ),
    ]


_UPGRADES: dict[int, Callable[[Backend, str, str], list[str]]] = {
    26: _to_26, 27: _to_27, 28: _to_28, 29: _to_29, 30: _to_30, 31: _to_31, 32: _to_32,
    33: _to_33, 34: _to_34, 35: _to_35, 36: _to_36, 37: _to_37, 38: _to_38, 39: _to_39,
    40: _to_40, 41: _to_41, 42: _to_42, 43: _to_43, 44: _to_44, 45: _to_45, 46: _to_46,
}  # fmt: skip


def _check_shape(backend: Backend) -> None:
    if not backend.schema.partitioned:
        raise SchemaVersionError(
            f"the {backend.name} backend keeps one job table, and no pg-boss release older"
            f" than schema {SCHEMA_VERSION} installed that shape: qcore upgrades older pg-boss"
            " schemas only on a partitioned backend (postgres); install afresh, or upgrade"
            " with pg-boss 12.38"
        )


def upgrade(backend: Backend, schema: str, version: int) -> list[str]:
    """The statements that take the install of ``schema`` from ``version - 1`` to ``version``.

    For versions 26..46, the version row excepted.
    """
    _check_shape(backend)
    return _UPGRADES[version](backend, schema, quote(schema))


def downgrade(backend: Backend, schema: str, version: int) -> list[str]:
    """The statements that take the install of ``schema`` from ``version`` back one version.

    Back to ``version - 1``, the version row excepted: only from 46, the version qcore runs
    at. Unfinished background commands of that version go first, or a BAM worker would
    build again what the rollback drops.
    """
    _check_shape(backend)
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"qcore rolls a schema back one step from version {SCHEMA_VERSION} only, not from"
            f" {version}; roll back further with pg-boss 12.38"
        )
    q = quote(schema)
    return [
        f"DELETE FROM {q}.bam WHERE version = {version} AND status <> 'completed'",
        create_queue_partitioned(backend, schema, without=frozenset(_INDEXES_OF_46)),
        *(
            _on_every_job_table(q, f"DROP INDEX IF EXISTS {q}.job_i{n}")
            for n in reversed(_INDEXES_OF_46)
        ),
        f"ALTER TABLE {q}.queue DROP COLUMN retained_on, DROP COLUMN retained_count",
    ]

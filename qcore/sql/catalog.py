"""The pg-boss v46 catalog as qcore expects it: tables, columns, job indexes, constraints.

It holds the tables and their columns, the job indexes and constraints, for both physical
shapes (see :mod:`qcore.sql.schema`).

Pure data and the builders that render it as DDL: the install renders it, drift
detection compares it with the database's catalog as it is. Names, types, defaults,
index keys and predicates are pg-boss's exactly.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from qcore.backend import Backend
from qcore.identifiers import quote
from qcore.job import JobState

#: the pg-boss schema version this qcore installs
SCHEMA_VERSION = 46


#: ``job_state`` labels in declaration order (range comparisons depend on it)
JOB_STATES: tuple[str, ...] = tuple(state.value for state in JobState)


#: a column: (name, type, NOT NULL, default). "{S}" in a type stands for the quoted schema.
Column = tuple[str, str, bool, str | None]


VERSION: list[Column] = [
    ("version", "integer", True, None),
    ("cron_on", "timestamptz", False, None),
    ("bam_on", "timestamptz", False, None),
    ("flow_on", "timestamptz", False, None),
    ("reindex_on", "timestamptz", False, None),
    ("monitor_backoff_on", "timestamptz", False, None),
]


QUEUE: list[Column] = [
    ("name", "text", True, None),
    ("policy", "text", True, None),
    ("retry_limit", "integer", True, None),
    ("retry_delay", "integer", True, None),
    ("retry_backoff", "boolean", True, None),
    ("retry_delay_max", "integer", False, None),
    ("expire_seconds", "integer", True, None),
    ("retention_seconds", "integer", True, None),
    ("deletion_seconds", "integer", True, None),
    ("dead_letter", "text", False, None),
    ("partition", "boolean", True, None),
    ("table_name", "text", True, None),
    ("deferred_count", "integer", True, "0"),
    ("blocked_count", "integer", True, "0"),
    ("queued_count", "integer", True, "0"),
    ("ready_count", "integer", True, "0"),
    ("warning_queued", "integer", True, "0"),
    ("active_count", "integer", True, "0"),
    ("failed_count", "integer", True, "0"),
    ("total_count", "integer", True, "0"),
    ("retained_count", "integer", False, None),
    ("retained_on", "timestamptz", False, None),
    ("created_delta", "integer", True, "0"),
    ("completed_delta", "integer", True, "0"),
    ("failed_delta", "integer", True, "0"),
    ("delta_on", "timestamptz", False, None),
    ("delta_seconds", "integer", False, None),
    ("wait_bins", "integer[]", False, None),
    ("run_bins", "integer[]", False, None),
    ("ready_oldest_seconds", "integer", False, None),
    ("ready_history", "integer[]", True, "'{}'"),
    ("heartbeat_seconds", "integer", False, None),
    ("notify", "boolean", True, "false"),
    ("singletons_active", "text[]", False, None),
    ("monitor_claim_on", "timestamptz", False, None),
    ("monitor_on", "timestamptz", False, None),
    ("maintain_on", "timestamptz", False, None),
    ("created_on", "timestamptz", True, "now()"),
    ("updated_on", "timestamptz", True, "now()"),
]


SCHEDULE: list[Column] = [
    ("name", "text", True, None),
    ("key", "text", True, "''"),
    ("kind", "text", True, "'cron'"),
    ("cron", "text", True, None),
    ("timezone", "text", False, "'UTC'"),
    ("data", "jsonb", False, None),
    ("options", "jsonb", False, None),
    ("created_on", "timestamptz", True, "now()"),
    ("updated_on", "timestamptz", True, "now()"),
    ("last_job_id", "uuid", False, None),
]


_SUBSCRIPTION: list[Column] = [
    ("event", "text", True, None),
    ("name", "text", True, None),
    ("created_on", "timestamptz", True, "now()"),
    ("updated_on", "timestamptz", True, "now()"),
]


BAM: list[Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("name", "text", True, None),
    ("version", "integer", True, None),
    ("status", "text", True, "'pending'"),
    ("queue", "text", False, None),
    ("table_name", "text", True, None),
    ("command", "text", True, None),
    ("error", "text", False, None),
    # clock time, so that rows inserted by one transaction keep their order
    ("created_on", "timestamptz", True, "clock_timestamp()"),
    ("started_on", "timestamptz", False, None),
    ("completed_on", "timestamptz", False, None),
]


#: pg-boss's defaults for a job's and a queue's lifetimes and retries (seconds)
DEFAULT_RETRY_LIMIT = 2
DEFAULT_EXPIRE_SECONDS = 900
DEFAULT_RETENTION_SECONDS = 1_209_600  # 14 days
DEFAULT_DELETION_SECONDS = 604_800  # 7 days
_RETENTION_HOURS = DEFAULT_RETENTION_SECONDS // 3600

JOB: list[Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("name", "text", True, None),
    ("priority", "integer", True, "0"),
    ("data", "jsonb", False, None),
    ("state", "{S}.job_state", True, "'created'"),
    ("retry_limit", "integer", True, str(DEFAULT_RETRY_LIMIT)),
    ("retry_count", "integer", True, "0"),
    ("retry_delay", "integer", True, "0"),
    ("retry_backoff", "boolean", True, "false"),
    ("retry_delay_max", "integer", False, None),
    ("expire_seconds", "integer", True, str(DEFAULT_EXPIRE_SECONDS)),
    ("deletion_seconds", "integer", True, str(DEFAULT_DELETION_SECONDS)),
    ("singleton_key", "text", False, None),
    ("singleton_on", "timestamp without time zone", False, None),
    ("group_id", "text", False, None),
    ("group_tier", "text", False, None),
    ("start_after", "timestamptz", True, "now()"),
    ("created_on", "timestamptz", True, "now()"),
    ("started_on", "timestamptz", False, None),
    ("completed_on", "timestamptz", False, None),
    # the retention, written in hours so the catalog shows '336:00:00' as pg-boss's does
    (
        "keep_until",
        "timestamptz",
        True,
        f"now() + interval '{DEFAULT_RETENTION_SECONDS // 3600} hours'",
    ),
    ("output", "jsonb", False, None),
    ("dead_letter", "text", False, None),
    ("policy", "text", False, None),
    ("heartbeat_on", "timestamptz", False, None),
    ("heartbeat_seconds", "integer", False, None),
    ("blocked", "boolean", True, "false"),
    ("blocking", "boolean", True, "false"),
    ("pending_dependencies", "integer", True, "0"),
    ("source_name", "text", False, None),
    ("source_id", "uuid", False, None),
    ("source_created_on", "timestamptz", False, None),
    ("source_retry_count", "integer", False, None),
    ("source_output", "jsonb", False, None),
    ("source_root_id", "uuid", False, None),
    ("trace_context", "jsonb", False, None),
    ("upsert_by_key", "boolean", False, None),
]


_WARNING: list[Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("type", "text", True, None),
    ("message", "text", True, None),
    ("data", "jsonb", False, None),
    ("created_on", "timestamptz", True, "now()"),
]


QUEUE_STATS: list[Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("name", "text", True, None),
    ("deferred_count", "integer", True, "0"),
    ("queued_count", "integer", True, "0"),
    ("ready_count", "integer", True, "0"),
    ("active_count", "integer", True, "0"),
    ("failed_count", "integer", True, "0"),
    ("total_count", "integer", True, "0"),
    ("created_delta", "integer", False, None),
    ("completed_delta", "integer", False, None),
    ("failed_delta", "integer", False, None),
    ("delta_seconds", "integer", False, None),
    ("delta_on", "timestamptz", False, None),
    ("wait_bins", "integer[]", False, None),
    ("run_bins", "integer[]", False, None),
    ("ready_oldest_seconds", "integer", False, None),
    ("captured_on", "timestamptz", True, "now()"),
]


JOB_DEPENDENCY: list[Column] = [
    ("child_name", "text", True, None),
    ("child_id", "uuid", True, None),
    ("parent_name", "text", True, None),
    ("parent_id", "uuid", True, None),
]


INSTANCE: list[Column] = [
    ("id", "uuid", True, None),
    ("name", "text", False, None),
    ("host", "text", True, None),
    ("pid", "integer", True, None),
    ("version", "text", True, None),
    ("node_version", "text", True, None),
    ("application_name", "text", False, None),
    ("heartbeat_seconds", "integer", True, None),
    ("supervise", "boolean", True, None),
    ("schedule", "boolean", True, None),
    ("migrate", "boolean", True, None),
    ("persist_queue_stats", "boolean", True, None),
    ("persist_warnings", "boolean", True, None),
    ("pool_max", "integer", False, None),
    ("pool_total", "integer", False, None),
    ("pool_idle", "integer", False, None),
    ("pool_waiting", "integer", False, None),
    ("workers", "jsonb", True, "'[]'"),
    ("metrics", "jsonb", False, None),
    ("config", "jsonb", True, "'{}'"),
    ("crash_restarts", "integer", True, "0"),
    ("crash_restarts_since", "timestamptz", False, None),
    ("started_on", "timestamptz", True, "now()"),
    ("heartbeat_on", "timestamptz", True, "now()"),
    ("stopped_on", "timestamptz", False, None),
]


def column_lines(columns: Sequence[Column], q: str) -> list[str]:
    lines = []
    for name, typ, not_null, default in columns:
        line = f"{quote(name)} {typ.replace('{S}', q)}"
        if default is not None:
            line += f" DEFAULT {default}"
        if not_null:
            line += " NOT NULL"
        lines.append(line)
    return lines


def create_table(
    q: str, table: str, columns: Sequence[Column], constraints: Sequence[str] = (), tail: str = ""
) -> str:
    body = ",\n  ".join([*column_lines(columns, q), *constraints])
    return f"CREATE TABLE IF NOT EXISTS {q}.{quote(table)} (\n  {body}\n){tail}"


@dataclass(frozen=True)
class Constraint:
    """A named table constraint; "{S}" in its clause stands for the quoted schema."""

    name: str
    clause: str

    def render(self, q: str) -> str:
        """The clause for the schema quoted as ``q``."""
        return self.clause.replace("{S}", q)


@dataclass(frozen=True)
class TableSpec:
    """A table as the install makes it: columns, named constraints and what follows them.

    Its columns in order, its named constraints, and what follows the column list
    (``PARTITION BY ...``).
    """

    name: str
    columns: tuple[Column, ...]
    constraints: tuple[Constraint, ...] = ()
    tail: str = ""

    def create(self, q: str) -> str:
        """``CREATE TABLE IF NOT EXISTS`` for the schema quoted as ``q``."""
        clauses = [f"CONSTRAINT {c.name} {c.render(q)}" for c in self.constraints]
        return create_table(q, self.name, self.columns, clauses, self.tail)


def _pkey(table: str, key: str) -> Constraint:
    return Constraint(f"{table}_pkey", f"PRIMARY KEY ({key})")


VERSION_TABLE = TableSpec("version", tuple(VERSION), (_pkey("version", "version"),))

QUEUE_TABLE = TableSpec(
    "queue",
    tuple(QUEUE),
    (
        _pkey("queue", "name"),
        Constraint(
            "queue_dead_letter_fkey", "FOREIGN KEY (dead_letter) REFERENCES {S}.queue (name)"
        ),
        Constraint("queue_check", "CHECK (dead_letter IS DISTINCT FROM name)"),
    ),
)

SCHEDULE_TABLE = TableSpec(
    "schedule",
    tuple(SCHEDULE),
    (
        _pkey("schedule", "name, key"),
        Constraint(
            "schedule_name_fkey", "FOREIGN KEY (name) REFERENCES {S}.queue (name) ON DELETE CASCADE"
        ),
        Constraint("schedule_kind_check", "CHECK (kind IN ('cron', 'rrule'))"),
    ),
)

SUBSCRIPTION_TABLE = TableSpec(
    "subscription",
    tuple(_SUBSCRIPTION),
    (
        _pkey("subscription", "event, name"),
        Constraint(
            "subscription_name_fkey",
            "FOREIGN KEY (name) REFERENCES {S}.queue (name) ON DELETE CASCADE",
        ),
    ),
)

BAM_TABLE = TableSpec("bam", tuple(BAM), (_pkey("bam", "id"),))

WARNING_TABLE = TableSpec("warning", tuple(_WARNING), (_pkey("warning", "id"),))

JOB_DEPENDENCY_TABLE = TableSpec(
    "job_dependency",
    tuple(JOB_DEPENDENCY),
    (_pkey("job_dependency", "child_name, child_id, parent_name, parent_id"),),
)

INSTANCE_TABLE = TableSpec("instance", tuple(INSTANCE), (_pkey("instance", "id"),))


def queue_stats_table(*, partitioned: bool) -> TableSpec:
    """``queue_stats``: partitioned by day (``captured_on`` in the key) or plain."""
    if partitioned:
        return TableSpec(
            "queue_stats",
            tuple(QUEUE_STATS),
            (_pkey("queue_stats", "id, captured_on"),),
            " PARTITION BY RANGE (captured_on)",
        )
    return TableSpec("queue_stats", tuple(QUEUE_STATS), (_pkey("queue_stats", "id"),))


def job_table(backend: Backend) -> TableSpec:
    """The base job table: a list-partitioned parent holding only its key, or one table.

    A list-partitioned parent holding only its key (each partition gets the other
    constraints), or one ordinary table with all of them inline so that
    ``CREATE TABLE IF NOT EXISTS`` alone makes it idempotent.
    """
    key = _pkey("job", "name, id")
    if backend.schema.partitioned:
        return TableSpec("job", tuple(JOB), (key,), " PARTITION BY LIST (name)")
    extra = (Constraint(name, clause) for name, clause in job_constraints(backend).items())
    return TableSpec("job", tuple(JOB), (key, *extra))


@dataclass(frozen=True)
class IndexSpec:
    """A standalone index: its keys, covered columns and predicate, as the install writes them.

    The covered columns (``INCLUDE``) appear only where the backend has covering indexes.
    """

    name: str
    table: str
    unique: bool
    keys: str
    include: str = ""
    predicate: str = ""

    def create(self, on: str, *, covering: bool, if_not_exists: bool = True) -> str:
        """The statement that makes it on ``on`` (the table as the statement spells it)."""
        kind = "UNIQUE INDEX" if self.unique else "INDEX"
        guard = " IF NOT EXISTS" if if_not_exists else ""
        sql = f"CREATE {kind}{guard} {self.name} ON {on} ({self.keys})"
        if self.include and covering:
            sql += f" INCLUDE ({self.include})"
        if self.predicate:
            sql += f" WHERE {self.predicate}"
        return sql


WARNING_INDEX = IndexSpec("warning_i1", "warning", False, "created_on DESC")

JOB_DEPENDENCY_INDEX = IndexSpec(
    "job_dep_parent_idx", "job_dependency", False, "parent_name, parent_id"
)

#: the snapshots' lookup by queue; it covers the counts where the backend can
QUEUE_STATS_INDEX = IndexSpec(
    "queue_stats_i1",
    "queue_stats",
    False,
    "name, captured_on DESC",
    "deferred_count, queued_count, ready_count, active_count, failed_count, total_count",
)

#: the single-table shape's scan of snapshots by time (retention deletes by it)
QUEUE_STATS_TIME_INDEX = IndexSpec("queue_stats_i2", "queue_stats", False, "captured_on, id")


# number -> (unique, key columns, INCLUDE columns or "", predicate or "")
INDEXES: dict[int, tuple[bool, str, str, str]] = {
    1: (
        True,
        "name, COALESCE(singleton_key, '')",
        "",
        "state = 'created' AND policy = 'short'",
    ),
    2: (
        True,
        "name, COALESCE(singleton_key, '')",
        "",
        "state = 'active' AND policy = 'singleton'",
    ),
    3: (
        True,
        "name, state, COALESCE(singleton_key, '')",
        "",
        "state <= 'active' AND policy = 'stately'",
    ),
    4: (
        True,
        "name, singleton_on, COALESCE(singleton_key, '')",
        "",
        "state <> 'cancelled' AND singleton_on IS NOT NULL",
    ),
    6: (
        True,
        "name, COALESCE(singleton_key, '')",
        "",
        "state <= 'active' AND policy = 'exclusive'",
    ),
    7: (False, "name, group_id", "", "state = 'active' AND group_id IS NOT NULL"),
    8: (
        True,
        "name, singleton_key",
        "",
        "state IN ('active', 'retry', 'failed') AND policy = 'key_strict_fifo'",
    ),
    9: (False, "name, id", "", "blocking AND state = 'completed'"),
    10: (
        False,
        "name, singleton_key, state DESC, created_on, id",
        "start_after",
        "state < 'active' AND NOT blocked AND policy = 'key_strict_fifo'",
    ),
    11: (
        False,
        "name, priority DESC, created_on, start_after",
        "",
        "state < 'active' AND NOT blocked",
    ),
    12: (False, "source_root_id", "", "source_root_id IS NOT NULL"),
    13: (True, "name, singleton_key", "", "state = 'created' AND upsert_by_key"),
    14: (
        False,
        "name, state, blocked, start_after",
        "",
        "state IN ('created', 'retry', 'active', 'failed')",
    ),
    15: (False, "name, created_on", "", ""),
    16: (False, "name, completed_on", "", "completed_on IS NOT NULL"),
    17: (
        False,
        "name, singleton_key, created_on",
        "",
        "state < 'active' AND singleton_key IS NOT NULL",
    ),
}


#: the indexes every job table has
BASE_INDEXES = (11, 4, 7, 9, 12, 13, 14, 15, 16, 17)


#: the extra indexes of a per-queue partition, by policy (job_common and the single
#: job table have all of them)
POLICY_INDEXES: dict[str, tuple[int, ...]] = {
    "standard": (),
    "short": (1,),
    "singleton": (2,),
    "stately": (3,),
    "exclusive": (6,),
    "key_strict_fifo": (8, 10),
}


ALL_INDEXES = tuple(sorted(INDEXES))


_FIFO_CHECK = "NOT (policy = 'key_strict_fifo' AND singleton_key IS NULL)"


def job_index_spec(number: int, table: str = "job") -> IndexSpec:
    """Index number ``number`` of a job table, named as on that table (``<table>_i<n>``)."""
    unique, keys, include, predicate = INDEXES[number]
    return IndexSpec(f"{table}_i{number}", table, unique, keys, include, predicate)


def job_index(backend: Backend, schema: str, number: int, table: str | None = None) -> str:
    """Index ``job_i<number>`` on the base job table; INCLUDE only with covering indexes.

    The base table is spelt ``<schema>.job`` (what ``job_table_format`` retargets); with
    ``table``, the index as that retargeting makes it on that job table.
    """
    on = f"{quote(schema)}.job" if table is None else f"{quote(schema)}.{quote(table)}"
    spec = job_index_spec(number, table or "job")
    return spec.create(on, covering=backend.schema.covering_indexes)


def _fkey_tail(backend: Backend) -> str:
    # deferred FKs let a job and its queue row arrive in either order within a transaction
    return " DEFERRABLE INITIALLY DEFERRED" if backend.schema.deferrable_foreign_keys else ""


def job_constraints(backend: Backend) -> dict[str, str]:
    """The named constraints of every job table, as table-constraint clauses.

    ``"{S}"`` stands for the quoted schema.
    """
    tail = _fkey_tail(backend)
    return {
        "q_fkey": f"FOREIGN KEY (name) REFERENCES {{S}}.queue (name) ON DELETE RESTRICT{tail}",
        "dlq_fkey": (
            f"FOREIGN KEY (dead_letter) REFERENCES {{S}}.queue (name) ON DELETE RESTRICT{tail}"
        ),
        "job_key_strict_fifo_singleton_key_check": f"CHECK ({_FIFO_CHECK})",
    }


def job_constraint_defs(backend: Backend, q: str) -> dict[str, str]:
    """:func:`job_constraints` for the schema quoted as ``q``."""
    return {name: clause.replace("{S}", q) for name, clause in job_constraints(backend).items()}


def job_table_name(backend: Backend, queue: str, *, partition: bool = False) -> str:
    """The physical job table of a queue.

    ``j`` + SHA-224 hex of the name for a partitioned queue, ``job_common`` otherwise;
    ``job`` for every queue in the single-table shape.
    """
    if not backend.schema.partitioned:
        return "job"
    if partition:
        return "j" + hashlib.sha224(queue.encode()).hexdigest()
    return "job_common"


def literal(text: str) -> str:
    """A standard SQL string literal (the texts given here hold no backslashes)."""
    if "\\" in text:
        raise ValueError("a literal built here may not contain a backslash")
    return "'" + text.replace("'", "''") + "'"


#: the old private name, which the upgrade builders still import


def queue_stats_partition_name(day: dt.date) -> str:
    """The daily partition of ``queue_stats`` for a UTC day: ``queue_stats_YYYYMMDD``."""
    return f"queue_stats_{day:%Y%m%d}"


#: a JSON recordset's type for each catalog type of the job table (the rest are the same)
_RECORDSET_TYPES = {"{S}.job_state": "text", "timestamp without time zone": "timestamp"}

#: the job table's columns in table order, with the type each has in a JSON recordset
#: (the state enum travels as text and is cast where it is written)
JOB_COLUMN_TYPES: Mapping[str, str] = MappingProxyType(
    {name: _RECORDSET_TYPES.get(kind, kind) for name, kind, _, _ in JOB}
)

#: the instance table's columns in table order, with their types
INSTANCE_COLUMN_TYPES: Mapping[str, str] = MappingProxyType(
    {name: kind for name, kind, _, _ in INSTANCE}
)

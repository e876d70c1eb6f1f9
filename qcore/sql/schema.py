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

Builders are pure: they take the backend and the stored schema name and return
SQL text. Statements whose text embeds the base job table spell it
``<schema>.job`` with the table name bare, because ``job_table_format``
retargets a command by rewriting exactly that spelling.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from qcore.backend import Backend
from qcore.errors import ConfigError
from qcore.identifiers import quote
from qcore.job import JobState
from qcore.sql._statement import Statement
from qcore.sql.locks import create_lock_table

__all__ = [
    "BASE_INDEXES",
    "DDL",
    "INDEXES",
    "JOB_STATES",
    "POLICY_INDEXES",
    "SCHEMA_VERSION",
    "case_variants",
    "create_schema_if_missing",
    "install",
    "job_index",
    "job_table_name",
    "queue_stats_partition",
    "queue_stats_partition_name",
    "schema_exists",
    "select_version",
    "server_today",
    "update_version",
    "version_table_exists",
]

#: the pg-boss schema version this qcore installs
SCHEMA_VERSION = 46

#: ``job_state`` labels in declaration order (range comparisons depend on it)
JOB_STATES: tuple[str, ...] = tuple(state.value for state in JobState)


@dataclass(frozen=True)
class DDL:
    """One install statement (no parameters: DDL is sent as a script); skipped when
    ``skip_if`` — a probe :class:`Statement` and its values, answering one row with a
    boolean ``present`` — says the object it creates is already there."""

    sql: str
    skip_if: tuple[Statement, Mapping[str, Any]] | None = None


# --------------------------------------------------------------------------- columns

# (name, type, NOT NULL, default). "{S}" in a type stands for the quoted schema.
_Column = tuple[str, str, bool, str | None]

_VERSION: list[_Column] = [
    ("version", "integer", True, None),
    ("cron_on", "timestamptz", False, None),
    ("bam_on", "timestamptz", False, None),
    ("flow_on", "timestamptz", False, None),
    ("reindex_on", "timestamptz", False, None),
    ("monitor_backoff_on", "timestamptz", False, None),
]

_QUEUE: list[_Column] = [
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

_SCHEDULE: list[_Column] = [
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

_SUBSCRIPTION: list[_Column] = [
    ("event", "text", True, None),
    ("name", "text", True, None),
    ("created_on", "timestamptz", True, "now()"),
    ("updated_on", "timestamptz", True, "now()"),
]

_BAM: list[_Column] = [
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

_JOB: list[_Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("name", "text", True, None),
    ("priority", "integer", True, "0"),
    ("data", "jsonb", False, None),
    ("state", "{S}.job_state", True, "'created'"),
    ("retry_limit", "integer", True, "2"),
    ("retry_count", "integer", True, "0"),
    ("retry_delay", "integer", True, "0"),
    ("retry_backoff", "boolean", True, "false"),
    ("retry_delay_max", "integer", False, None),
    ("expire_seconds", "integer", True, "900"),
    ("deletion_seconds", "integer", True, "604800"),
    ("singleton_key", "text", False, None),
    ("singleton_on", "timestamp without time zone", False, None),
    ("group_id", "text", False, None),
    ("group_tier", "text", False, None),
    ("start_after", "timestamptz", True, "now()"),
    ("created_on", "timestamptz", True, "now()"),
    ("started_on", "timestamptz", False, None),
    ("completed_on", "timestamptz", False, None),
    # 14 days, written in hours so the catalog shows '336:00:00' as pg-boss's does
    ("keep_until", "timestamptz", True, "now() + interval '336 hours'"),
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

_WARNING: list[_Column] = [
    ("id", "uuid", True, "gen_random_uuid()"),
    ("type", "text", True, None),
    ("message", "text", True, None),
    ("data", "jsonb", False, None),
    ("created_on", "timestamptz", True, "now()"),
]

_QUEUE_STATS: list[_Column] = [
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

_JOB_DEPENDENCY: list[_Column] = [
    ("child_name", "text", True, None),
    ("child_id", "uuid", True, None),
    ("parent_name", "text", True, None),
    ("parent_id", "uuid", True, None),
]

_INSTANCE: list[_Column] = [
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


def _column_lines(columns: Sequence[_Column], q: str) -> list[str]:
    lines = []
    for name, typ, not_null, default in columns:
        line = f"{quote(name)} {typ.replace('{S}', q)}"
        if default is not None:
            line += f" DEFAULT {default}"
        if not_null:
            line += " NOT NULL"
        lines.append(line)
    return lines


def _create_table(
    q: str, table: str, columns: Sequence[_Column], constraints: Sequence[str] = (), tail: str = ""
) -> str:
    body = ",\n  ".join([*_column_lines(columns, q), *constraints])
    return f"CREATE TABLE IF NOT EXISTS {q}.{quote(table)} (\n  {body}\n){tail}"


# --------------------------------------------------------------------------- job indexes

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
_ALL_INDEXES = tuple(sorted(INDEXES))

_FIFO_CHECK = "NOT (policy = 'key_strict_fifo' AND singleton_key IS NULL)"


def job_index(backend: Backend, schema: str, number: int) -> str:
    """Index ``job_i<number>`` on the base job table; INCLUDE only with covering indexes.
    (Retargeted to another job table by ``job_table_format``.)"""
    unique, keys, include, predicate = INDEXES[number]
    sql = (
        f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS job_i{number}"
        f" ON {quote(schema)}.job ({keys})"
    )
    if include and backend.schema.covering_indexes:
        sql += f" INCLUDE ({include})"
    if predicate:
        sql += f" WHERE {predicate}"
    return sql


def _fkey_tail(backend: Backend) -> str:
    # deferred FKs let a job and its queue row arrive in either order within a transaction
    return " DEFERRABLE INITIALLY DEFERRED" if backend.schema.deferrable_foreign_keys else ""


def _job_constraint_defs(backend: Backend, q: str) -> dict[str, str]:
    """The named constraints of every job table, as table-constraint clauses."""
    tail = _fkey_tail(backend)
    return {
        "q_fkey": f"FOREIGN KEY (name) REFERENCES {q}.queue (name) ON DELETE RESTRICT{tail}",
        "dlq_fkey": (
            f"FOREIGN KEY (dead_letter) REFERENCES {q}.queue (name) ON DELETE RESTRICT{tail}"
        ),
        "job_key_strict_fifo_singleton_key_check": f"CHECK ({_FIFO_CHECK})",
    }


def job_table_name(backend: Backend, queue: str, *, partition: bool = False) -> str:
    """The physical job table of a queue: ``j`` + SHA-224 hex of the name for a partitioned
    queue, ``job_common`` otherwise; ``job`` for every queue in the single-table shape."""
    if not backend.schema.partitioned:
        return "job"
    if partition:
        return "j" + hashlib.sha224(queue.encode()).hexdigest()
    return "job_common"


# --------------------------------------------------------------------------- helpers


def _literal(text: str) -> str:
    """A standard SQL string literal (the texts given here hold no backslashes)."""
    if "\\" in text:
        raise ValueError("a literal built here may not contain a backslash")
    return "'" + text.replace("'", "''") + "'"


# Whether constraint ``name`` exists on the table (a qualified, quoted ``table``).
_constraint_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint"
    " WHERE conrelid = to_regclass($1) AND conname = $2) AS present",
    ("table", "name"),
)

# Whether type ``name`` (qualified, quoted) exists.
_type_exists = Statement("SELECT to_regtype($1) IS NOT NULL AS present", ("name",))

# Whether the table (qualified, quoted) is attached as a partition.
_is_partition = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits"
    " WHERE inhrelid = to_regclass($1)) AS present",
    ("table",),
)


# --------------------------------------------------------------------------- statements


def create_schema_if_missing(schema: str) -> str:
    """The schema itself (skipped with create_schema=False); the same on every backend."""
    return f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}"


def _job_state(schema: str) -> DDL:
    # CREATE TYPE has no IF NOT EXISTS: a catalog probe makes it idempotent everywhere
    labels = ", ".join(_literal(s) for s in JOB_STATES)
    sql = f"CREATE TYPE {quote(schema)}.job_state AS ENUM ({labels})"
    return DDL(sql, (_type_exists, {"name": f"{quote(schema)}.job_state"}))


def _job_now(q: str) -> str:
    # the one clock every statement reads (a test clock may replace the body); same everywhere
    return (
        f"CREATE OR REPLACE FUNCTION {q}.job_now() RETURNS timestamptz"
        " LANGUAGE sql STABLE AS $qcore$ SELECT now() $qcore$"
    )


def _job_table_format(q: str) -> str:
    # partitioned shape only: points a command written for <schema>.job / job_iN at a partition
    body = (
        "SELECT regexp_replace("
        "regexp_replace(command, '\\.job\\M', '.' || quote_ident(table_name), 'g'),"
        " '\\mjob_i([0-9]+)\\M', table_name || '_i\\1', 'g')"
    )
    return (
        f"CREATE OR REPLACE FUNCTION {q}.job_table_format(command text, table_name text)"
        f" RETURNS text LANGUAGE sql IMMUTABLE AS $qcore$ {body} $qcore$"
    )


def _job_table_run(q: str) -> str:
    # partitioned shape only (dynamic SQL): runs a command on one job table or on all of them
    return f"""CREATE OR REPLACE FUNCTION {q}.job_table_run(
  command text, tbl_name text DEFAULT NULL, queue_name text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $qcore$
DECLARE
  target text := tbl_name;
  each_table text;
BEGIN
  IF queue_name IS NOT NULL THEN
    SELECT q.table_name INTO target FROM {q}.queue q WHERE q.name = queue_name;
  END IF;
  IF target IS NOT NULL THEN
    EXECUTE {q}.job_table_format(command, target);
    RETURN;
  END IF;
  FOR each_table IN
    SELECT 'job_common'::text
    UNION ALL
    (SELECT q.table_name FROM {q}.queue q WHERE q.partition ORDER BY q.created_on, q.name)
  LOOP
    EXECUTE {q}.job_table_format(command, each_table);
  END LOOP;
END
$qcore$"""


def _job_table_run_async(q: str) -> str:
    # partitioned shape only: queues the same per-table commands as background migration rows
    return f"""CREATE OR REPLACE FUNCTION {q}.job_table_run_async(
  command_name text, version integer, command text,
  tbl_name text DEFAULT NULL, queue_name text DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $qcore$
DECLARE
  target text := tbl_name;
BEGIN
  IF queue_name IS NOT NULL THEN
    SELECT q.table_name INTO target FROM {q}.queue q WHERE q.name = queue_name;
  END IF;
  IF target IS NOT NULL THEN
    INSERT INTO {q}.bam (name, version, status, queue, table_name, command)
    VALUES (command_name, version, 'pending', queue_name, target,
            {q}.job_table_format(command, target));
    RETURN;
  END IF;
  INSERT INTO {q}.bam (name, version, status, queue, table_name, command)
  SELECT command_name, version, 'pending', t.queue, t.table_name,
         {q}.job_table_format(command, t.table_name)
  FROM (
    SELECT NULL::text AS queue, 'job_common'::text AS table_name, 0 AS ord,
           NULL::timestamptz AS created_on
    UNION ALL
    SELECT q.name, q.table_name, 1, q.created_on FROM {q}.queue q WHERE q.partition
  ) t
  ORDER BY t.ord, t.created_on, t.queue;
END
$qcore$"""


_QUEUE_INSERT_COLUMNS = (
    "name, policy, retry_limit, retry_delay, retry_backoff, retry_delay_max,"
    " expire_seconds, retention_seconds, deletion_seconds, warning_queued, dead_letter,"
    " partition, table_name, heartbeat_seconds, notify, created_on, updated_on"
)


_NOTIFY_OPTION = "COALESCE((options->>'notify')::boolean, false)"


def _queue_values(q: str, *, partition: str, table: str, notify: str) -> str:
    """The VALUES row of create_queue: each option key, else the queue default."""
    return f"""(
    queue_name,
    COALESCE(options->>'policy', 'standard'),
    COALESCE((options->>'retryLimit')::integer, 2),
    COALESCE((options->>'retryDelay')::integer, 0),
    COALESCE((options->>'retryBackoff')::boolean, false),
    (options->>'retryDelayMax')::integer,
    COALESCE((options->>'expireInSeconds')::integer, 900),
    COALESCE((options->>'retentionSeconds')::integer, 1209600),
    COALESCE((options->>'deleteAfterSeconds')::integer, 604800),
    COALESCE((options->>'warningQueueSize')::integer, 0),
    options->>'deadLetter',
    {partition},
    {table},
    (options->>'heartbeatSeconds')::integer,
    {notify},
    {q}.job_now(),
    {q}.job_now()
  )"""


def _partition_commands(
    backend: Backend, schema: str
) -> tuple[list[tuple[str | None, str]], dict[str, list[tuple[str | None, str]]]]:
    """Commands (for job_table_format) that give a fresh copy of ``job`` its key,
    constraints and indexes: the ones every partition gets, and the extra ones per policy.
    Each comes with the name of the constraint it adds (``{table}`` for the table's name)."""
    q = quote(schema)
    constraints = _job_constraint_defs(backend, q)
    common: list[tuple[str | None, str]] = [
        ("{table}_pkey", f"ALTER TABLE {q}.job ADD PRIMARY KEY (name, id)"),
        ("q_fkey", f"ALTER TABLE {q}.job ADD CONSTRAINT q_fkey {constraints['q_fkey']}"),
        ("dlq_fkey", f"ALTER TABLE {q}.job ADD CONSTRAINT dlq_fkey {constraints['dlq_fkey']}"),
        *((None, job_index(backend, schema, n)) for n in BASE_INDEXES),
    ]
    by_policy: dict[str, list[tuple[str | None, str]]] = {
        policy: [(None, job_index(backend, schema, n)) for n in numbers]
        for policy, numbers in POLICY_INDEXES.items()
    }
    check = "job_key_strict_fifo_singleton_key_check"
    by_policy["key_strict_fifo"].append(
        (check, f"ALTER TABLE {q}.job ADD CONSTRAINT {check} {constraints[check]}")
    )
    return common, by_policy


def _create_queue_partitioned(backend: Backend, schema: str) -> str:
    # partitioned shape: the queue row, then (partition => true) a list partition of its own
    q = quote(schema)
    common, by_policy = _partition_commands(backend, schema)

    def run_all(commands: list[tuple[str | None, str]], indent: str) -> str:
        return "\n".join(
            f"{indent}EXECUTE {q}.job_table_format({_literal(c)}, tbl);" for _, c in commands
        )

    branches: list[str] = []
    for policy, commands in by_policy.items():
        if commands:
            keyword = "IF" if not branches else "ELSIF"
            branches.append(
                f"  {keyword} options->>'policy' = {_literal(policy)} THEN\n"
                + run_all(commands, "    ")
            )
    policy_block = "\n".join(branches) + "\n  END IF;"
    values = _queue_values(q, partition="own_table", table="tbl", notify=_NOTIFY_OPTION)
    create_table = _literal(f"CREATE TABLE {q}.%I (LIKE {q}.job INCLUDING DEFAULTS)")
    add_check = _literal(f"ALTER TABLE {q}.%I ADD CONSTRAINT cjc CHECK (name = %L)")
    attach = _literal(f"ALTER TABLE {q}.job ATTACH PARTITION {q}.%I FOR VALUES IN (%L)")
    return f"""CREATE OR REPLACE FUNCTION {q}.create_queue(queue_name text, options jsonb)
RETURNS void LANGUAGE plpgsql AS $qcore$
DECLARE
  own_table boolean := COALESCE(options->>'partition' = 'true', false);
  tbl text;
BEGIN
  IF own_table THEN
    tbl := 'j' || encode(sha224(queue_name::bytea), 'hex');
  ELSE
    tbl := 'job_common';
  END IF;

  INSERT INTO {q}.queue ({_QUEUE_INSERT_COLUMNS})
  VALUES {values}
  ON CONFLICT DO NOTHING;

  -- an existing queue keeps its settings and its table
  IF NOT FOUND OR NOT own_table THEN
    RETURN;
  END IF;

  EXECUTE format({create_table}, tbl);
{run_all(common, "  ")}
{policy_block}
  EXECUTE format({add_check}, tbl, queue_name);
  EXECUTE format({attach}, tbl, queue_name);
END
$qcore$"""


def _create_queue_single(schema: str) -> str:
    # single-table shape: only the queue row (partition and notify options are ignored)
    q = quote(schema)
    values = _queue_values(q, partition="false", table="'job'", notify="false")
    return f"""CREATE OR REPLACE FUNCTION {q}.create_queue(queue_name text, options jsonb)
RETURNS void LANGUAGE plpgsql AS $qcore$
BEGIN
  INSERT INTO {q}.queue ({_QUEUE_INSERT_COLUMNS})
  VALUES {values}
  ON CONFLICT DO NOTHING;
END
$qcore$"""


def _delete_queue_partitioned(schema: str) -> str:
    # partitioned shape: drop the queue's own partition, or delete its rows from job_common
    q = quote(schema)
    drop = _literal(f"DROP TABLE IF EXISTS {q}.%I")
    delete = _literal(f"DELETE FROM {q}.%I WHERE name = $1")
    return f"""CREATE OR REPLACE FUNCTION {q}.delete_queue(queue_name text)
RETURNS void LANGUAGE plpgsql AS $qcore$
DECLARE
  tbl text;
  own_table boolean;
BEGIN
  SELECT q.table_name, q.partition INTO tbl, own_table
  FROM {q}.queue q WHERE q.name = queue_name;
  IF FOUND THEN
    IF own_table THEN
      EXECUTE format({drop}, tbl);
    ELSE
      EXECUTE format({delete}, tbl) USING queue_name;
    END IF;
  END IF;
  DELETE FROM {q}.queue WHERE name = queue_name;
END
$qcore$"""


def _delete_queue_single(schema: str) -> str:
    # single-table shape: static statements only (no EXECUTE), one mutation per statement
    q = quote(schema)
    return f"""CREATE OR REPLACE FUNCTION {q}.delete_queue(queue_name text)
RETURNS void LANGUAGE plpgsql AS $qcore$
BEGIN
  DELETE FROM {q}.job WHERE name = queue_name;
  DELETE FROM {q}.queue WHERE name = queue_name;
END
$qcore$"""


def queue_stats_partition_name(day: dt.date) -> str:
    """The daily partition of ``queue_stats`` for a UTC day: ``queue_stats_YYYYMMDD``."""
    return f"queue_stats_{day:%Y%m%d}"


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
        steps.insert(0, DDL(create_schema_if_missing(schema)))
    steps.append(DDL(create_lock_table(schema)))
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
        DDL(
            _create_table(
                q,
                "queue_stats",
                _QUEUE_STATS,
                ["CONSTRAINT queue_stats_pkey PRIMARY KEY (id, captured_on)"],
                " PARTITION BY RANGE (captured_on)",
            )
        ),
        DDL(_queue_stats_index(backend, schema)),
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
        DDL(
            _create_table(
                q,
                "queue_stats",
                _QUEUE_STATS,
                ["CONSTRAINT queue_stats_pkey PRIMARY KEY (id)"],
            )
        ),
        DDL(_queue_stats_index(backend, schema)),
        DDL(f"CREATE INDEX IF NOT EXISTS queue_stats_i2 ON {q}.queue_stats (captured_on, id)"),
    ]
    steps += _dependency_and_instance(schema)
    steps += [DDL(_create_queue_single(schema)), DDL(_delete_queue_single(schema))]
    return steps


# --------------------------------------------------------------------------- probes


# Whether ``schema`` holds a version table (pg-boss's "installed"); every backend. Reads
# pg_class rather than calling to_regclass: inside a transaction that has just waited for
# the install lock, to_regclass may still answer from a catalog cache older than the
# install another instance committed meanwhile.
version_table_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = $1 AND c.relname = 'version' AND c.relkind IN ('r', 'p'))"
    " AS present",
    ("schema",),
)


@lru_cache(maxsize=16)
def select_version(schema: str) -> Statement:
    """The installed version (NULL when the table is empty); every backend."""
    return Statement(f"SELECT max(version) AS version FROM {quote(schema)}.version")


@lru_cache(maxsize=16)
def update_version(schema: str) -> Statement:
    """Move the version row from ``from_version`` to ``to_version``; a row comes back only
    if it was at ``from_version``. The same on every backend."""
    return Statement(
        f"UPDATE {quote(schema)}.version SET version = $1::integer"
        " WHERE version = $2::integer RETURNING version",
        ("to_version", "from_version"),
    )


# Whether a schema of exactly the stored name ``schema`` exists; every backend.
schema_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1) AS present",
    ("schema",),
)

# Other schemas whose names differ from ``schema`` only by letter case and that hold a
# version table (an install); every backend.
case_variants = Statement(
    "SELECT n.nspname AS name FROM pg_catalog.pg_namespace n"
    " JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid"
    " AND c.relname = 'version' AND c.relkind IN ('r', 'p')"
    " WHERE lower(n.nspname) = lower($1) AND n.nspname <> $1"
    " ORDER BY n.nspname",
    ("schema",),
)

# The server's current UTC date as YYYY-MM-DD text (names the first queue_stats
# partition; text so that every adapter returns the same type); every backend.
server_today = Statement("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS today")

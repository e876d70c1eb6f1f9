"""The schema's PL/pgSQL functions: the clock, the retargeting helpers, queue create/delete.

The clock every statement reads, the helpers that retarget a command to a queue's table,
and ``create_queue`` / ``delete_queue`` for both shapes (pg-boss calls them too, so their
signatures are pg-boss's).
"""

from __future__ import annotations

from qcore.backend import Backend
from qcore.identifiers import quote
from qcore.sql.catalog import (
    BASE_INDEXES,
    DEFAULT_DELETION_SECONDS,
    DEFAULT_EXPIRE_SECONDS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_RETRY_LIMIT,
    POLICY_INDEXES,
    job_constraint_defs,
    job_index,
    literal,
)


def job_now(q: str, ahead_seconds: float = 0.0) -> str:
    # the one clock every statement reads; same everywhere
    body = (
        "now()" if not ahead_seconds else f"now() + {float(ahead_seconds)!r} * interval '1 second'"
    )
    return (
        f"CREATE OR REPLACE FUNCTION {q}.job_now() RETURNS timestamptz"
        f" LANGUAGE sql STABLE AS $qcore$ SELECT {body} $qcore$"
    )


def set_clock(q: str, ahead_seconds: float) -> str:
    """Make the schema's clock run ``ahead_seconds`` ahead of the server's (0: back to it).

    The schema's clock is ``job_now()``, which every qcore and pg-boss statement reads;
    0 sets it back to the server's. The controllable clock of tests that are about time.
    """
    return job_now(q, ahead_seconds)


def job_table_format(q: str) -> str:
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


def job_table_run(q: str) -> str:
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


def job_table_run_async(q: str) -> str:
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
    COALESCE((options->>'retryLimit')::integer, {DEFAULT_RETRY_LIMIT}),
    COALESCE((options->>'retryDelay')::integer, 0),
    COALESCE((options->>'retryBackoff')::boolean, false),
    (options->>'retryDelayMax')::integer,
    COALESCE((options->>'expireInSeconds')::integer, {DEFAULT_EXPIRE_SECONDS}),
    COALESCE((options->>'retentionSeconds')::integer, {DEFAULT_RETENTION_SECONDS}),
    COALESCE((options->>'deleteAfterSeconds')::integer, {DEFAULT_DELETION_SECONDS}),
    COALESCE((options->>'warningQueueSize')::integer, 0),
    options->>'deadLetter',
    {partition},
    {table},
    (options->>'heartbeatSeconds')::integer,
    {notify},
    {q}.job_now(),
    {q}.job_now()
  )"""


def partition_commands(
    backend: Backend, schema: str, without: frozenset[int] = frozenset(), table: str | None = None
) -> tuple[list[tuple[str | None, str]], dict[str, list[tuple[str | None, str]]]]:
    """Commands (for job_table_format) that give a fresh copy of ``job`` its key and the rest.

    Its key, constraints and indexes (but the index numbers in ``without``): the ones every
    partition gets, and the extra ones per policy. Each comes with the name of the
    constraint it adds (``{table}`` for the table's name), ``None`` for an index. With
    ``table``, the commands as ``job_table_format`` retargets them to that job table.
    """
    q = quote(schema)
    ref = f"{q}.job" if table is None else f"{q}.{quote(table)}"
    constraints = job_constraint_defs(backend, q)
    common: list[tuple[str | None, str]] = [
        ("{table}_pkey", f"ALTER TABLE {ref} ADD PRIMARY KEY (name, id)"),
        ("q_fkey", f"ALTER TABLE {ref} ADD CONSTRAINT q_fkey {constraints['q_fkey']}"),
        ("dlq_fkey", f"ALTER TABLE {ref} ADD CONSTRAINT dlq_fkey {constraints['dlq_fkey']}"),
        *((None, job_index(backend, schema, n, table)) for n in BASE_INDEXES if n not in without),
    ]
    by_policy: dict[str, list[tuple[str | None, str]]] = {
        policy: [(None, job_index(backend, schema, n, table)) for n in numbers]
        for policy, numbers in POLICY_INDEXES.items()
    }
    check = "job_key_strict_fifo_singleton_key_check"
    by_policy["key_strict_fifo"].append(
        (check, f"ALTER TABLE {ref} ADD CONSTRAINT {check} {constraints[check]}")
    )
    return common, by_policy


def create_queue_partitioned(
    backend: Backend, schema: str, without: frozenset[int] = frozenset()
) -> str:
    # partitioned shape: the queue row, then (partition => true) a list partition of its own
    # (``without``: index numbers a partition does not get, as at an older schema version)
    q = quote(schema)
    common, by_policy = partition_commands(backend, schema, without)

    def run_all(commands: list[tuple[str | None, str]], indent: str) -> str:
        return "\n".join(
            f"{indent}EXECUTE {q}.job_table_format({literal(c)}, tbl);" for _, c in commands
        )

    branches: list[str] = []
    for policy, commands in by_policy.items():
        if commands:
            keyword = "IF" if not branches else "ELSIF"
            branches.append(
                f"  {keyword} options->>'policy' = {literal(policy)} THEN\n"
                + run_all(commands, "    ")
            )
    policy_block = "\n".join(branches) + "\n  END IF;"
    values = _queue_values(q, partition="own_table", table="tbl", notify=_NOTIFY_OPTION)
    create_table = literal(f"CREATE TABLE {q}.%I (LIKE {q}.job INCLUDING DEFAULTS)")
    add_check = literal(f"ALTER TABLE {q}.%I ADD CONSTRAINT cjc CHECK (name = %L)")
    attach = literal(f"ALTER TABLE {q}.job ATTACH PARTITION {q}.%I FOR VALUES IN (%L)")
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


def create_queue_single(schema: str) -> str:
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


def delete_queue_partitioned(schema: str) -> str:
    # partitioned shape: drop the queue's own partition, or delete its rows from job_common
    q = quote(schema)
    drop = literal(f"DROP TABLE IF EXISTS {q}.%I")
    delete = literal(f"DELETE FROM {q}.%I WHERE name = $1")
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


def delete_queue_single(schema: str) -> str:
    # single-table shape: static statements only (no EXECUTE), one mutation per statement
    q = quote(schema)
    return f"""CREATE OR REPLACE FUNCTION {q}.delete_queue(queue_name text)
RETURNS void LANGUAGE plpgsql AS $qcore$
BEGIN
  DELETE FROM {q}.job WHERE name = queue_name;
  DELETE FROM {q}.queue WHERE name = queue_name;
END
$qcore$"""

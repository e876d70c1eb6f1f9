"""What every job statement shares: columns, pg-boss's job defaults and the small clauses.

The job table's columns (in table order, with their recordset types), the claim's
columns, pg-boss's job defaults, and the small clauses (queue guard, table choice,
targets) the builders compose.
"""

from __future__ import annotations

from collections.abc import Mapping

from qcore.identifiers import quote
from qcore.job import LAZY_DATA_COLUMN
from qcore.sql._statement import Params
from qcore.sql.catalog import (
    JOB_COLUMN_TYPES,
)

JOB_COLUMNS: tuple[str, ...] = tuple(JOB_COLUMN_TYPES)


#: what a failed job keeps when it is deleted and inserted again: all but upsert_by_key
REINSERT_COLUMNS: tuple[str, ...] = JOB_COLUMNS[:-1]


#: what fetch returns without include_metadata (a worker's needs, and the sort keys;
#: retry_limit and dead_letter say, when a handler fails, whether retries are exhausted
#: and where the job goes then)
FETCH_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "priority",
    "data",
    "created_on",
    "retry_count",
    "retry_limit",
    "dead_letter",
    "expire_seconds",
    "heartbeat_seconds",
    "group_id",
    "group_tier",
)


#: the options a send or insert record may carry, with their recordset types
SEND_RECORD: Mapping[str, str] = {
    "id": "uuid",
    "data": "jsonb",
    "priority": "integer",
    "start_after": "timestamptz",
    "start_after_seconds": "float8",
    "singleton_key": "text",
    "singleton_seconds": "integer",
    # a slot named outright (the timekeeper files an occurrence in its minute); never
    # a send option
    "singleton_slot": "timestamp",
    "retry_limit": "integer",
    "retry_delay": "integer",
    "retry_backoff": "boolean",
    "retry_delay_max": "integer",
    "expire_in_seconds": "integer",
    "retention_seconds": "integer",
    "delete_after_seconds": "integer",
    "heartbeat_seconds": "integer",
    "dead_letter": "text",
    "group_id": "text",
    "group_tier": "text",
}


#: a flow job's record: a send record and its place in the graph
FLOW_RECORD: Mapping[str, str] = {
    **SEND_RECORD,
    "blocked": "boolean",
    "blocking": "boolean",
    "pending_dependencies": "integer",
}


def job_now(q: str) -> str:
    return f"{q}.job_now()"


def job_ended(q: str) -> str:
    """The schema's clock at this statement, for a job settled in the transaction that claimed it.

    ``job_now()`` is the transaction's start, when the job started.
    """
    return f"({job_now(q)} + (statement_timestamp() - now()))"


#: a claim's retry_count (of row ``j``): an attempt counted when the job ran before
ATTEMPT_COUNT = "CASE WHEN j.started_on IS NULL THEN j.retry_count ELSE j.retry_count + 1 END"


def held_as_running(q: str) -> dict[str, str]:
    """How a locked claim's row ``j`` (still queued) reads as the job running.

    The columns a claim would set, with their values.
    """
    now = job_now(q)
    return {
        "state": f"'active'::{q}.job_state",
        "retry_count": ATTEMPT_COUNT,
        "started_on": now,
        "heartbeat_on": now,
    }


def recordset(p: Params, param: str, columns: Mapping[str, str], alias: str = "r") -> str:
    """``jsonb_to_recordset($n) AS alias(col type, ...)``: a JSON array parameter as rows."""
    spec = ", ".join(f"{name} {kind}" for name, kind in columns.items())
    return f"jsonb_to_recordset({p(param)}::jsonb) AS {alias}({spec})"


def returning_columns(
    columns: tuple[str, ...],
    alias: str,
    *,
    lazy_data: bool = False,
    values: Mapping[str, str] | None = None,
) -> str:
    """``alias.col, ...``, the payload optionally as JSON text, some columns as expressions.

    With ``lazy_data`` the payload comes as its JSON text (``data_text``), which
    :class:`qcore.job.Job` decodes only when ``data`` is read; ``values`` gives some
    columns as expressions instead.
    """
    values = values or {}

    def one(c: str) -> str:
        if c in values:
            return f"{values[c]} AS {c}"
        if lazy_data and c == "data":
            return f"{alias}.data::text AS {LAZY_DATA_COLUMN}"
        return f"{alias}.{c}"

    return ", ".join(one(c) for c in columns)


def in_state(alias: str, state: str) -> str:
    """``alias`` is in ``state``, compared as text, for the commands on jobs by id.

    So they reach their jobs by primary key whatever the table's statistics. Written
    ``state = '...'`` the condition leads into the partial index i14 (name, state, ...),
    which a planner that counts few jobs in that state (statistics older than a burst
    of claims or failures) prefers, reading every job of the queue in that state per
    command: 14 ms to complete 10 jobs at 100,000 active, linear in them.
    """
    return f"{alias}.state::text = '{state}'"


def among_ids(p: Params, alias: str) -> str:
    """``alias`` is one of the jobs ``ids``.

    Written after the queue's name test, so ``queue`` is a statement's first parameter
    and ``ids`` its second.

    The ids come through ``ARRAY(SELECT unnest(...))``, which the planner cannot see into:
    it costs a custom plan as it costs the generic one (ten ids), so a prepared command
    keeps its generic plan. Given plainly, a settle of one job (the batch-1 worker's)
    looked far cheaper planned for its one id than generically, and was planned afresh on
    every call. (``ANY (SELECT ...)`` without ``ARRAY`` would compare with each row of
    the subquery instead: the constructor keeps the meaning plain on every backend.)"""
    return f"{alias}.id = ANY(ARRAY(SELECT unnest({p('ids')}::uuid[])))"


def target_jobs(p: Params, alias: str, fenced: bool) -> str:
    """The jobs a command acts on: the queue's jobs among ``ids``.

    With ``fenced``, those given as a Job only while still active in the attempt they
    were fetched in.
    """
    where = f"{alias}.name = {p('queue')}::text AND {among_ids(p, alias)}"
    if fenced:
        where += (
            f" AND ({alias}.id = ANY({p('plain_ids')}::uuid[])"
            f" OR ({in_state(alias, 'active')}"
            f" AND ({alias}.id, {alias}.retry_count) IN (SELECT * FROM"
            f" unnest({p('fence_ids')}::uuid[], {p('fence_counts')}::int[]))))"
        )
    return where


def queue_cte(
    q: str, p: Params, columns: str = "name", table: str | None = None, policy: bool = False
) -> str:
    """``q``: the queue's row, only while it still has the ``policy`` and ``table`` built for.

    ``policy`` is a parameter; ``table`` counts when the statement was built for them.
    """
    where = f"name = {p('queue')}::text"
    if policy:
        where += f" AND policy = {p('policy')}::text"
    return f"q AS (SELECT {columns} FROM {q}.queue WHERE {where}{table_check(p, table)})"


def job_table(q: str, table: str | None) -> str:
    """The table a statement addresses: the queue's own job table when known, else ``job``.

    The queue's own physical job table when the caller knows it (as pg-boss does: no
    partition routing, no other partition planned or locked), else ``job``
    (partitioned: PostgreSQL routes by name).
    """
    return f"{q}.{quote(table)}" if table else f"{q}.job"


def table_check(p: Params, table: str | None, alias: str = "") -> str:
    """With a known table: the queue row must still name it.

    Else the statement finds no queue, and the caller reads the route again.
    """
    return f" AND {alias}table_name = {p('table')}::text" if table else ""


def settling_command(q: str, p: Params, mutation: str, table: str | None = None) -> str:
    """A command CTE returning ``id`` wrapped in the queue guard, for the settles of every batch.

    One row ``queue, settled``, ``settled`` NULL when the command changed every job of
    ``ids`` (the usual case, so a batch's ids are not sent back), else the ids it
    changed; no row when the queue is gone.
    """
    every = f"cardinality({p('ids')}::uuid[])"
    return (
        f"WITH {queue_cte(q, p, table=table)}, done AS ({mutation})"
        f" SELECT q.name AS queue, CASE WHEN (SELECT count(*) FROM done) = {every} THEN NULL"
        " ELSE ARRAY(SELECT id FROM done) END AS settled FROM q"
    )


def command_cte(
    q: str, p: Params, mutation: str, result: str = "id", table: str | None = None
) -> str:
    """A command CTE wrapped in the queue guard: rows ``queue, <result columns>``."""
    cols = ", ".join(f"done.{c}" for c in result.split(", "))
    return (
        f"WITH {queue_cte(q, p, table=table)}, done AS ({mutation})"
        f" SELECT q.name AS queue, {cols} FROM q LEFT JOIN done ON true"
    )

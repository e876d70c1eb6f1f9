"""SQL for the queue verbs: create, update, delete, read, bulk job deletes, blocked keys.

Pure builders of the quoted schema ``q`` (``Context.q``) and flags, each
returning a :class:`Statement`; values only as parameters. Creating and
deleting a queue go through the installed schema's own
``create_queue(text, jsonb)`` and ``delete_queue(text)`` functions, which
differ per schema shape (partition or shared table) while the call does not.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.stats import gauge_columns

__all__ = [
    "QUEUE_COLUMNS",
    "UPDATABLE_COLUMNS",
    "call_create_queue",
    "call_delete_queue",
    "dead_letter_references",
    "delete_jobs_batch",
    "delete_unfinished_bam",
    "get_queues",
    "get_queues_live",
    "lock_job_tables",
    "queue_names",
    "reduce_cached_counts",
    "select_blocked_keys",
    "table_exists",
    "truncate_table",
    "update_queue",
    "zero_cached_counts",
]

#: the queue row's columns that ``Queue`` holds
QUEUE_COLUMNS: tuple[str, ...] = (
    "name",
    "policy",
    "retry_limit",
    "retry_delay",
    "retry_backoff",
    "retry_delay_max",
    "expire_seconds",
    "retention_seconds",
    "deletion_seconds",
    "dead_letter",
    "partition",
    "table_name",
    "warning_queued",
    "heartbeat_seconds",
    "notify",
    "created_on",
    "updated_on",
    "deferred_count",
    "blocked_count",
    "queued_count",
    "ready_count",
    "active_count",
    "failed_count",
    "total_count",
    "retained_count",
    "ready_oldest_seconds",
    "singletons_active",
    "ready_history",
    "monitor_on",
)

#: the counts a live read counts again (the rest of a queue row is read as it is)
_COUNTED = {
    "deferred_count": "COALESCE(c.deferred, 0)",
    "blocked_count": "COALESCE(c.blocked, 0)",
    "queued_count": "COALESCE(c.queued, 0)",
    "ready_count": "COALESCE(c.ready, 0)",
    "active_count": "COALESCE(c.active, 0)",
    "failed_count": "COALESCE(c.failed, 0)",
    "total_count": "COALESCE(c.total, 0)",
    "retained_count": "COALESCE(c.retained, 0)",
    "ready_oldest_seconds": "COALESCE(c.ready_oldest, 0)",
    "singletons_active": "c.singletons",
}

#: update_queue's options -> the queue column each sets
UPDATABLE_COLUMNS: dict[str, str] = {
    "retry_limit": "retry_limit",
    "retry_delay": "retry_delay",
    "retry_backoff": "retry_backoff",
    "retry_delay_max": "retry_delay_max",
    "expire_in_seconds": "expire_seconds",
    "retention_seconds": "retention_seconds",
    "delete_after_seconds": "deletion_seconds",
    "warning_queue_size": "warning_queued",
    "heartbeat_seconds": "heartbeat_seconds",
    "notify": "notify",
    "dead_letter": "dead_letter",
}

_COLUMN_TYPES = {
    "retry_limit": "integer",
    "retry_delay": "integer",
    "retry_backoff": "boolean",
    "retry_delay_max": "integer",
    "expire_seconds": "integer",
    "retention_seconds": "integer",
    "deletion_seconds": "integer",
    "warning_queued": "integer",
    "heartbeat_seconds": "integer",
    "notify": "boolean",
    "dead_letter": "text",
}

#: the predicate of each bulk delete
_WHICH = {"queued": "j.state < 'active'", "stored": "j.state > 'active'", "all": "true"}


def _column(name: str) -> str:
    return '"partition"' if name == "partition" else name


@lru_cache(maxsize=8)
def call_create_queue(q: str) -> Statement:
    """Create a queue with the schema's ``create_queue(name, options)``.

    It inserts the row (nothing if it exists) and, in the partitioned shape with
    ``partition``, the queue's own table. Same call on every backend; the function is
    shape-specific.
    """
    p = Params()
    return p.statement(
        f"SELECT {q}.create_queue({p('name')}::text, {p('options')}::jsonb) IS NULL AS done"
    )


@lru_cache(maxsize=8)
def call_delete_queue(q: str) -> Statement:
    """Delete a queue with the schema's ``delete_queue(name)``: its jobs (or table) and its row.

    Its jobs, or its own table. Same call on every backend.
    """
    p = Params()
    return p.statement(f"SELECT {q}.delete_queue({p('name')}::text) IS NULL AS done")


def _counts_age(q: str, monitor_on: str) -> str:
    return f"extract(epoch FROM ({q}.job_now() - {monitor_on}))::float8 AS counts_age_seconds"


@lru_cache(maxsize=8)
def get_queues(q: str, *, by_name: bool = False, paged: bool = False) -> Statement:
    """Queue rows ordered by name, all or those named in ``names`` (a plain read).

    With the counts the monitor cached and their age on the schema's clock
    (``counts_age_seconds``, null if never counted). ``paged``: at most ``limit``, the
    names after ``after`` (NULL: from the first).
    """
    p = Params()
    conditions = [f"name = ANY({p('names')}::text[])"] if by_name else []
    conditions += [_after_name(p, "name")] if paged else []
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    columns = ", ".join(_column(c) for c in QUEUE_COLUMNS)
    return p.statement(
        f"SELECT {columns}, {_counts_age(q, 'monitor_on')} FROM {q}.queue{where} ORDER BY name"
        + _page_limit(p, paged)
    )


def _after_name(p: Params, column: str) -> str:
    """Rows after ``after`` by ``column`` (every row while it is NULL)."""
    return f"({p('after')}::text IS NULL OR {column} > {p('after')}::text)"


def _page_limit(p: Params, paged: bool) -> str:
    return f" LIMIT {p('limit')}::int" if paged else ""


@lru_cache(maxsize=8)
def get_queues_live(q: str, *, by_name: bool = False, paged: bool = False) -> Statement:
    """Queue rows as :func:`get_queues` reads them, but with the counts counted now.

    Counted from the job table (the monitor's own expressions:
    :func:`qcore.sql.stats.gauge_columns`), ``monitor_on`` now and
    ``counts_age_seconds`` 0. Nothing is written: the cache stays the monitor's.

    Why a second read: the cached counts are as old as the last monitor pass (up to a
    minute by default), so a queue sent to a moment ago reads empty while its jobs are
    listed. A person's one-off read (the command line, one queue's page) can afford the
    count; it scans the queues' jobs, finished ones included (``total_count``), so reads
    repeated for many queues (an overview, every scrape) keep the cached counts and show
    their age instead. ``paged`` as for :func:`get_queues`."""
    p = Params()
    names = f"{p('names')}::text[]" if by_name else ""
    conditions = [f"r.name = ANY({names})"] if by_name else []
    conditions += [_after_name(p, "r.name")] if paged else []
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    job_where = f" WHERE j.name = ANY({names})" if by_name else ""
    counted = (
        f"SELECT j.name, {gauge_columns(q)},"
        " count(*) FILTER (WHERE j.state IN ('completed', 'cancelled'))::int AS retained,"
        f" count(*)::int AS total FROM {q}.job j{job_where} GROUP BY j.name"
    )
    columns = []
    for c in QUEUE_COLUMNS:
        if c in _COUNTED:
            columns.append(f"{_COUNTED[c]} AS {c}")
        elif c == "monitor_on":
            columns.append(f"{q}.job_now() AS monitor_on")
        else:
            columns.append(f"r.{_column(c)}")
    return p.statement(
        f"WITH c AS ({counted}) SELECT {', '.join(columns)}, 0::float8 AS counts_age_seconds"
        f" FROM {q}.queue r LEFT JOIN c ON c.name = r.name{where}"
        " ORDER BY r.name" + _page_limit(p, paged)
    )


@lru_cache(maxsize=8)
def queue_names(q: str) -> Statement:
    """Which of ``names`` are queues (a plain read)."""
    p = Params()
    return p.statement(f"SELECT name FROM {q}.queue WHERE name = ANY({p('names')}::text[])")


@lru_cache(maxsize=128)
def update_queue(q: str, columns: tuple[str, ...]) -> Statement:
    """Set some of a queue's settings and ``updated_on``; existing jobs keep theirs.

    ``columns`` are named as in the queue table. Rows: the queue's policy and partition
    flag as they stand (none for an unknown queue).
    """
    p = Params()
    sets = [f"{c} = {p(c)}::{_COLUMN_TYPES[c]}" for c in columns]
    sets.append(f"updated_on = {q}.job_now()")
    return p.statement(
        f"UPDATE {q}.queue SET {', '.join(sets)} WHERE name = {p('name')}::text"
        ' RETURNING name, policy, "partition"'
    )


@lru_cache(maxsize=8)
def dead_letter_references(q: str) -> Statement:
    """What still names a queue as its dead letter queue: other queues, and their jobs.

    Other queues, and jobs of other queues (a plain read; run before deleting a queue in
    a shared table).
    """
    p = Params()
    name = f"{p('name')}::text"
    return p.statement(
        f"SELECT ARRAY(SELECT name FROM {q}.queue WHERE dead_letter = {name} ORDER BY name)"
        f" AS queues, EXISTS (SELECT 1 FROM {q}.job WHERE dead_letter = {name}"
        f" AND name <> {name}) AS jobs"
    )


@lru_cache(maxsize=16)
def delete_jobs_batch(q: str, which: str) -> Statement:
    """Delete up to ``limit`` of a queue's jobs (``which``: queued, stored or all).

    Lowest ids first; callers repeat until a batch comes back short. One DELETE on every
    backend. Rows: how many went, and how many of those the queue's cached
    ``retained_count`` held.
    """
    if which not in _WHICH:
        raise ValueError(f"which must be one of {', '.join(_WHICH)}, got {which!r}")
    p = Params()
    name = f"{p('name')}::text"
    sql = f"""WITH batch AS (
  SELECT j.id FROM {q}.job j WHERE j.name = {name} AND {_WHICH[which]}
  ORDER BY j.id LIMIT {p("limit")}::int
),
gone AS (
  DELETE FROM {q}.job j USING batch WHERE j.name = {name} AND j.id = batch.id
  RETURNING j.state, j.completed_on
)
SELECT count(*)::int AS deleted,
  (count(*) FILTER (WHERE state IN ('completed', 'cancelled') AND completed_on <=
    (SELECT retained_on FROM {q}.queue WHERE name = {name})))::int AS retained
FROM gone"""
    return p.statement(sql)


@lru_cache(maxsize=8)
def reduce_cached_counts(q: str) -> Statement:
    """Take jobs a delete or resume moved out of a queue's cached counts off them now.

    Rather than at the next monitor pass: ``retained`` off retained_count (unless it is
    not counted yet) and ``total`` off total_count.
    """
    p = Params()
    return p.statement(
        f"UPDATE {q}.queue SET retained_count = CASE WHEN retained_count IS NULL THEN NULL"
        f" ELSE GREATEST(retained_count - {p('retained')}::int, 0) END,"
        f" total_count = GREATEST(total_count - {p('total')}::int, 0)"
        f" WHERE name = {p('name')}::text"
    )


@lru_cache(maxsize=8)
def zero_cached_counts(q: str, *, one: bool = True) -> Statement:
    """A queue's cached counts after its jobs were truncated: all zero.

    Counted from ten seconds ago (the monitor's lag). ``one=False``: every queue.
    """
    p = Params()
    now = f"{q}.job_now()"
    where = f" WHERE name = {p('name')}::text" if one else ""
    return p.statement(
        f"UPDATE {q}.queue SET deferred_count = 0, blocked_count = 0, queued_count = 0,"
        " ready_count = 0, active_count = 0, failed_count = 0, total_count = 0,"
        f" retained_count = 0, retained_on = {now} - interval '10 seconds',"
        f" singletons_active = NULL, monitor_on = {now}{where}"
    )


def truncate_table(q: str, table: str) -> Statement:
    """Empty a job table at once.

    ``table`` is already quoted: the queue's own partition, or the whole job table.
    """
    return Statement(f"TRUNCATE {q}.{table}")


@lru_cache(maxsize=8)
def table_exists(q: str) -> Statement:
    """Whether a relation exists; ``name`` is its quoted, schema-qualified name."""
    p = Params()
    return p.statement(f"SELECT to_regclass({p('name')}::text) IS NOT NULL AS present")


def lock_job_tables(q: str, table: str) -> Statement:
    """Partitioned shape only: lock the job tables before dropping a queue's partition.

    Lock ``job_common``, a queue's own partition ``table`` (quoted) and ``job`` before
    dropping the partition, without waiting (55P03 if busy), in the order every job
    statement takes them, so the drop cannot deadlock.
    """
    return Statement(
        f"LOCK TABLE {q}.job_common, {q}.{table}, {q}.job IN ACCESS EXCLUSIVE MODE NOWAIT"
    )


@lru_cache(maxsize=8)
def delete_unfinished_bam(q: str) -> Statement:
    """Drop the pending background-migration commands of a dropped queue table."""
    p = Params()
    return p.statement(
        f"DELETE FROM {q}.bam WHERE table_name = {p('table')}::text AND status <> 'completed'"
    )


@lru_cache(maxsize=8)
def select_blocked_keys(q: str) -> Statement:
    """A page of the singleton keys of a key_strict_fifo queue that a failed job blocks.

    Blocked until it is retried or deleted; at most ``limit``, in order, the keys after
    ``after`` (NULL: from the first). Rows ``queue, key``: none for an unknown queue, one
    with a NULL key when nothing is blocked.
    """
    p = Params()
    name = f"{p('name')}::text"
    return p.statement(
        f"WITH q AS (SELECT name FROM {q}.queue WHERE name = {name})"
        " SELECT q.name AS queue, k.singleton_key AS key FROM q LEFT JOIN"
        f" (SELECT DISTINCT singleton_key FROM {q}.job WHERE name = {name}"
        " AND state = 'failed' AND policy = 'key_strict_fifo'"
        f" AND {_after_name(p, 'singleton_key')}"
        f" ORDER BY singleton_key LIMIT {p('limit')}::int) k ON true"
        " ORDER BY k.singleton_key"
    )

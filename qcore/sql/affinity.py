"""Job affinity and attribution, in qcore's own tables (pg-boss neither has nor reads them).

The tables hold the pattern of each job added with one, and the instance key of the server
that claimed each job. Plain statements on every backend; the claim's part is a branch and
a column (:func:`split_by_affinity`, :func:`patterned_column`) built into the claim
statements, and on engines that take several mutations in one statement the attribution is
a CTE of the claim (:func:`record_processed_cte`), elsewhere its own statement in the
claim's transaction.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import DDL, Params, Statement
from qcore.sql.probes import table_in_schema

__all__ = [
    "JOB_PATTERN_TABLE",
    "JOB_PROCESSED_TABLE",
    "affinity_condition",
    "create_job_pattern_index",
    "create_job_pattern_table",
    "create_job_processed_table",
    "insert_patterns",
    "notify_patterned",
    "pattern_backlog",
    "patterned_column",
    "prune_patterns",
    "record_processed",
    "record_processed_cte",
    "sweep_processed",
    "waiting_patterns",
]

#: a job's affinity pattern, while the job may still be claimed
JOB_PATTERN_TABLE = "qcore_job_pattern"
#: the instance key of the server that claimed a job (a plain string, no foreign key)
JOB_PROCESSED_TABLE = "qcore_job_processed"


def _patterns(q: str) -> str:
    return f"{q}.{quote(JOB_PATTERN_TABLE)}"


def _processed(q: str) -> str:
    return f"{q}.{quote(JOB_PROCESSED_TABLE)}"


def create_job_pattern_table(schema: str) -> DDL:
    """The patterns, keyed like the job table (queue, id). Idempotent, on every backend."""
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(JOB_PATTERN_TABLE)} ("
        " name text NOT NULL, id uuid NOT NULL, pattern text NOT NULL,"
        " PRIMARY KEY (name, id))",
        skip_if=(table_in_schema, {"schema": schema, "name": JOB_PATTERN_TABLE}),
    )


def create_job_pattern_index(schema: str) -> DDL:
    """(queue, pattern), for reading a queue's distinct patterns.

    On every backend (one statement per step: a caller's ``db=`` may prepare each).
    """
    return DDL(
        "CREATE INDEX IF NOT EXISTS qcore_job_pattern_i1"
        f" ON {quote(schema)}.{quote(JOB_PATTERN_TABLE)} (name, pattern)"
    )


def create_job_processed_table(schema: str) -> DDL:
    """Who claimed each job, keyed like the job table. Idempotent, on every backend."""
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(JOB_PROCESSED_TABLE)} ("
        " name text NOT NULL, id uuid NOT NULL, instance_key text NOT NULL,"
        " PRIMARY KEY (name, id))",
        skip_if=(table_in_schema, {"schema": schema, "name": JOB_PROCESSED_TABLE}),
    )


def patterned_column(q: str, p: Params) -> str:
    """The claim's queue-row column ``patterned``: whether any job of the queue has a pattern.

    One probe of the pattern table's key; the claim's filter reads it once.
    """
    return f"EXISTS (SELECT 1 FROM {_patterns(q)} WHERE name = {p('queue')}::text) AS patterned"


def affinity_condition(q: str, p: Params, patterned: bool) -> str:
    """The claim's ``AND ...`` condition on a candidate ``j`` for affinity.

    The plain branch: no job of the queue has a pattern (the queue row's ``patterned``, a
    one-time filter), so a queue without patterned jobs is claimed from as it was without
    affinity, and on one with patterned jobs the claim takes nothing and says so (the
    server then claims on the other branch). The ``patterned`` branch: the job has no
    pattern or one of ``matching`` (the patterns the claiming server's key matches,
    judged in Python), one probe of the pattern table's key per candidate. One query
    with both in an OR would charge every claim the probe's cost in the planner's
    sight and tempt it into sorting the backlog.
    """
    if not patterned:
        return " AND NOT (SELECT patterned FROM q)"
    return (
        f" AND NOT EXISTS (SELECT 1 FROM {_patterns(q)} a WHERE a.name = j.name"
        f" AND a.id = j.id AND a.pattern <> ALL({p('matching')}::text[]))"
    )


def record_processed_cte(q: str, p: Params, claimed: str = "claimed") -> str:
    """The claim's CTE ``recorded``: the claiming server's key for every job claimed.

    The jobs are those of the CTE ``claimed``.
    """
    return (
        f"recorded AS (INSERT INTO {_processed(q)} (name, id, instance_key)"
        f" SELECT {p('queue')}::text, c.id, {p('instance_key')}::text FROM {claimed} c"
        " ON CONFLICT (name, id) DO UPDATE SET instance_key = EXCLUDED.instance_key)"
    )


@lru_cache(maxsize=8)
def record_processed(q: str) -> Statement:
    """The claiming server's key for the jobs ``ids`` of ``queue``.

    The attribution on engines that split mutations (run in the claim's transaction).
    """
    p = Params()
    return p.statement(
        f"INSERT INTO {_processed(q)} (name, id, instance_key)"
        f" SELECT {p('queue')}::text, i, {p('instance_key')}::text"
        f" FROM unnest({p('ids')}::uuid[]) AS i"
        " ON CONFLICT (name, id) DO UPDATE SET instance_key = EXCLUDED.instance_key"
    )


@lru_cache(maxsize=8)
def insert_patterns(q: str) -> Statement:
    """The patterns of jobs just added to ``queue``, in the transaction that added them.

    ``ids`` and ``patterns`` are aligned arrays.
    """
    p = Params()
    return p.statement(
        f"INSERT INTO {_patterns(q)} (name, id, pattern)"
        f" SELECT {p('queue')}::text, r.id, r.pattern"
        f" FROM unnest({p('ids')}::uuid[], {p('patterns')}::text[]) AS r(id, pattern)"
        " ON CONFLICT (name, id) DO UPDATE SET pattern = EXCLUDED.pattern"
    )


@lru_cache(maxsize=8)
def notify_patterned(q: str) -> Statement:
    """The wake-ups of patterned jobs: each ``payloads`` entry on ``channel``.

    Sent when ``queue`` has ``notify`` (at commit, like a send's own).
    """
    p = Params()
    return p.statement(
        f"SELECT count(pg_notify({p('channel')}::text, x)) AS sent"
        f" FROM unnest({p('payloads')}::text[]) AS x"
        f" WHERE EXISTS (SELECT 1 FROM {q}.queue WHERE name = {p('queue')}::text AND notify)"
    )


@lru_cache(maxsize=8)
def waiting_patterns(q: str) -> Statement:
    """The distinct patterns of ``queue``'s jobs after ``after``, in order, at most ``limit``.

    ``after`` NULL: from the first. A walk of the (name, pattern) index from one pattern
    to the next, one probe per pattern, however many jobs share each (every backend takes
    WITH RECURSIVE).
    """
    p = Params()
    t = _patterns(q)
    name = f"{p('queue')}::text"
    after = p("after")
    return p.statement(
        "WITH RECURSIVE walk AS ("
        f" (SELECT pattern FROM {t} WHERE name = {name}"
        f" AND ({after}::text IS NULL OR pattern > {after}::text) ORDER BY pattern LIMIT 1)"
        f" UNION ALL SELECT (SELECT t.pattern FROM {t} t WHERE t.name = {name}"
        " AND t.pattern > walk.pattern ORDER BY t.pattern LIMIT 1)"
        " FROM walk WHERE walk.pattern IS NOT NULL)"
        f" SELECT pattern FROM walk WHERE pattern IS NOT NULL LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=8)
def pattern_backlog(q: str) -> Statement:
    """The waiting jobs with a pattern of ``queues``, by queue and pattern, most first.

    Columns: ``queue``, ``pattern``, ``waiting`` (created or retrying), ``oldest_ready``
    (the earliest ``start_after`` already passed; NULL while none is) and
    ``ready_seconds`` (how long ago, by the database's clock); at most ``limit`` rows. A
    join of qcore's pattern table onto the job table, the same everywhere.
    """
    p = Params()
    ready = f"min(CASE WHEN j.start_after <= {q}.job_now() THEN j.start_after END)"
    return p.statement(
        f"SELECT pt.name AS queue, pt.pattern, count(*) AS waiting, {ready} AS oldest_ready,"
        f" extract(epoch FROM {q}.job_now() - {ready}) AS ready_seconds"
        f" FROM {_patterns(q)} pt JOIN {q}.job j ON j.name = pt.name AND j.id = pt.id"
        f" WHERE pt.name = ANY({p('queues')}::text[]) AND j.state < 'active'"
        f" GROUP BY pt.name, pt.pattern ORDER BY count(*) DESC, pt.name, pt.pattern"
        f" LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=8)
def prune_patterns(q: str) -> Statement:
    """Forget the patterns of up to ``limit`` jobs that can no longer be claimed.

    Those jobs ended, or are gone. Row ``removed``.
    """
    p = Params()
    t = _patterns(q)
    return p.statement(
        f"WITH stale AS (SELECT a.name, a.id FROM {t} a WHERE NOT EXISTS (SELECT 1"
        f" FROM {q}.job j WHERE j.name = a.name AND j.id = a.id AND j.state < 'completed')"
        f" LIMIT {p('limit')}::int),"
        f" removed AS (DELETE FROM {t} a USING stale s WHERE a.name = s.name AND a.id = s.id"
        " RETURNING 1)"
        " SELECT count(*) AS removed FROM removed"
    )


@lru_cache(maxsize=8)
def sweep_processed(q: str) -> Statement:
    """One step of the walk over the attribution table, deleting rows whose job is gone.

    Of the ``limit`` rows after (``name``, ``id``) (from the start when both are NULL),
    delete those whose job is gone. Row: ``last_name``, ``last_id`` (where the next step
    starts), ``scanned`` (fewer than ``limit``: the walk reached the end) and ``removed``.
    """
    p = Params()
    t = _processed(q)
    cursor = (
        f" WHERE {p('name')}::text IS NULL OR (r.name, r.id) > ({p('name')}::text, {p('id')}::uuid)"
    )
    return p.statement(
        f"WITH batch AS (SELECT r.name, r.id FROM {t} r{cursor}"
        f" ORDER BY r.name, r.id LIMIT {p('limit')}::int),"
        f" removed AS (DELETE FROM {t} r USING batch b WHERE r.name = b.name AND r.id = b.id"
        f" AND NOT EXISTS (SELECT 1 FROM {q}.job j WHERE j.name = b.name AND j.id = b.id)"
        " RETURNING 1),"
        " last AS (SELECT name, id FROM batch ORDER BY name DESC, id DESC LIMIT 1)"
        " SELECT (SELECT name FROM last) AS last_name, (SELECT id FROM last) AS last_id,"
        " (SELECT count(*) FROM batch) AS scanned, (SELECT count(*) FROM removed) AS removed"
    )

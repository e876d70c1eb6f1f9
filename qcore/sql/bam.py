"""Async migrations (BAM): the ``bam`` table's commands, claimed, run and marked.

Commands are claimed one at a time across qcore and pg-boss instances, run, and marked;
this module also builds their summary and pages.

A command runs with pg-boss's tag (``/* pgboss bam <id> */``) in front, so either side
can find it in ``pg_stat_activity`` to cancel it. An ``in_progress`` row is stale, and
claimable again, after :data:`BAM_STALE_SECONDS`; on engines whose catalog shows a
running index build (``index_build_progress``), already after
:data:`BAM_LIVENESS_GRACE_SECONDS` when no build holds its table's
``ShareUpdateExclusiveLock`` (``pg_locks`` sees every role's builds).
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.probes import claim_interval

__all__ = [
    "BAM_LIVENESS_GRACE_SECONDS",
    "BAM_STALE_SECONDS",
    "CLAIM_LOCK",
    "bam_entries",
    "bam_entry_exists",
    "bam_status",
    "cancel_bam_command",
    "claim_bam_command",
    "claim_bam_pass",
    "command_tag",
    "index_validity",
    "mark_bam_completed",
    "mark_bam_failed",
]

#: seconds after which an in_progress row is claimable again, whatever runs it
BAM_STALE_SECONDS = 24 * 3600
#: seconds a claimed index build gets to show up before its absence counts as dead
BAM_LIVENESS_GRACE_SECONDS = 300
#: the suffix of pg-boss's advisory lock around a claim (the same key on both sides)
CLAIM_LOCK = "bamClaim"


def command_tag(entry_id: object) -> str:
    """The comment a command runs behind (pg-boss's spelling: either side can cancel it)."""
    return f"/* pgboss bam {entry_id} */"


def claim_bam_pass(q: str) -> Statement:
    """Take this interval's BAM pass (pg-boss's ``bam_on`` gate on the version row).

    A row back when this instance has it.
    """
    return claim_interval(q, "bam_on")


def _stale(q: str, row: str, liveness: bool) -> str:
    timeout = f"{row}.started_on < {q}.job_now() - interval '{BAM_STALE_SECONDS} seconds'"
    if not liveness:
        return f"({timeout})"
    live_build = (
        "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'relation' AND l.granted"
        " AND l.mode = 'ShareUpdateExclusiveLock'"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        f" AND l.relation = to_regclass({_schema_literal(q)} || '.'"
        f" || quote_ident({row}.table_name)))"
    )
    grace = f"{row}.started_on < {q}.job_now() - interval '{BAM_LIVENESS_GRACE_SECONDS} seconds'"
    return f"(({grace} AND NOT {live_build}) OR {timeout})"


def _schema_literal(q: str) -> str:
    """``q`` (a quoted identifier) as a SQL literal of the same quoted text."""
    return "'" + q.replace("'", "''") + "'"


@lru_cache(maxsize=16)
def claim_bam_command(
    q: str, *, pending_only: bool, liveness: bool, skip_locked: bool
) -> Statement:
    """Claim the next command and mark it in progress (run under pg-boss's ``bamClaim`` lock).

    Pending rows first, oldest first, then (unless ``pending_only``) failed and stale
    in-progress ones; a command waits while an earlier one of its migration on its table
    has not completed, and nothing is claimed while another command runs (rows queued at
    the same instant are ordered by id, so one of them always waits). Marks it in
    progress; row: ``id``, ``name``, ``version``, ``queue``, ``table_name``, ``command``,
    ``reattempt`` (it ran before: a build may need healing). ``skip_locked`` where the
    engine has it well (PostgreSQL).

    Each condition is computed once per statement, never per candidate row: the first
    unfinished command of each migration and table in one sorted pass (the staleness
    test on those alone), and "another command runs" on the in-progress rows alone.
    Correlated, the planner priced the statement in the millions, above PostgreSQL's
    ``jit_above_cost``, and compiled it on every pass: a third of a second of the
    server's CPU on a table of a few rows, more as completed commands accumulate.
    """
    status = (
        "f.status = 'pending'"
        if pending_only
        else f"(f.status IN ('pending', 'failed') OR (f.status = 'in_progress'"
        f" AND {_stale(q, 'f', liveness)}))"
    )
    lock = " FOR UPDATE OF c SKIP LOCKED" if skip_locked else ""
    sql = (
        "WITH candidate AS ("
        f" SELECT c.id, c.status AS prior_status FROM {q}.bam c"
        " WHERE c.status <> 'completed' AND c.id IN (SELECT f.id FROM ("
        "SELECT DISTINCT ON (h.version, h.table_name) h.id, h.status, h.table_name,"
        f" h.started_on FROM {q}.bam h WHERE h.status <> 'completed'"
        f" ORDER BY h.version, h.table_name, h.created_on, h.id) f WHERE {status})"
        # OFFSET 0: the liveness test is priced on the in-progress rows only
        f" AND NOT EXISTS (SELECT 1 FROM (SELECT g.table_name, g.started_on FROM {q}.bam g"
        f" WHERE g.status = 'in_progress' OFFSET 0) g WHERE NOT {_stale(q, 'g', liveness)})"
        " ORDER BY (c.status = 'pending') DESC, c.created_on, c.id LIMIT 1" + lock + ")"
        f" UPDATE {q}.bam b SET status = 'in_progress', started_on = {q}.job_now(),"
        " completed_on = NULL FROM candidate WHERE b.id = candidate.id"
        " RETURNING b.id, b.name, b.version, b.queue, b.table_name, b.command,"
        " candidate.prior_status <> 'pending' AS reattempt"
    )
    return Statement(sql)


@lru_cache(maxsize=16)
def mark_bam_completed(q: str) -> Statement:
    """Row ``id`` ran to its end."""
    p = Params()
    return p.statement(
        f"UPDATE {q}.bam SET status = 'completed', completed_on = {q}.job_now(), error = NULL"
        f" WHERE id = {p('id')}::uuid"
    )


@lru_cache(maxsize=16)
def mark_bam_failed(q: str) -> Statement:
    """Row ``id`` failed with ``error`` (it holds its successors until a retry succeeds)."""
    p = Params()
    return p.statement(
        f"UPDATE {q}.bam SET status = 'failed', error = {p('error')}::text"
        f" WHERE id = {p('id')}::uuid"
    )


@lru_cache(maxsize=1)
def cancel_bam_command() -> Statement:
    """Cancel the backend running the statement with ``tag`` (not this session).

    Row per backend found, ``cancelled``.
    """
    p = Params()
    return p.statement(
        "SELECT pg_cancel_backend(pid) AS cancelled FROM pg_stat_activity"
        " WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
        f" AND position({p('tag')}::text IN query) > 0"
    )


@lru_cache(maxsize=1)
def index_validity() -> Statement:
    """Whether index ``name`` of schema ``schema`` exists and is valid.

    No row when absent, else ``valid``.
    """
    p = Params()
    return p.statement(
        "SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        f" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = {p('schema')}::text"
        f" AND c.relname = {p('name')}::text"
    )


@lru_cache(maxsize=16)
def bam_status(q: str) -> Statement:
    """Per status: ``status``, ``count``, ``last_created_on``."""
    return Statement(
        "SELECT status, count(*)::int AS count, max(created_on) AS last_created_on"
        f" FROM {q}.bam GROUP BY status ORDER BY status"
    )


@lru_cache(maxsize=16)
def bam_entries(q: str) -> Statement:
    """Up to ``limit`` entries, oldest version first (then creation), after entry ``after``.

    ``after`` NULL: from the first.
    """
    p = Params()
    after = p("after")
    return p.statement(
        "SELECT id, name, version, status, queue, table_name, command, error, created_on,"
        f" started_on, completed_on FROM {q}.bam b WHERE {after}::uuid IS NULL OR"
        f" (b.version, b.created_on, b.id) > (SELECT a.version, a.created_on, a.id"
        f" FROM {q}.bam a WHERE a.id = {after}::uuid)"
        f" ORDER BY version, created_on, id LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=16)
def bam_entry_exists(q: str) -> Statement:
    """Whether entry ``id`` exists (``present``)."""
    p = Params()
    return p.statement(
        f"SELECT EXISTS (SELECT 1 FROM {q}.bam WHERE id = {p('id')}::uuid) AS present"
    )

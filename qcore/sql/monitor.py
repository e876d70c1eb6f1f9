"""SQL for the monitor pass: the queues to look at, the per-queue claim, the finished stamp.

Which queues to look at, the per-queue monitor claim, and the stamp a finished pass leaves.

The claim is pg-boss's (reference 6.13, 6.14): every instance tries it on its own
timer, and the conditional UPDATE lets one of them per ``monitorIntervalSeconds``
do a queue's work, whichever runtime it is (qcore or pg-boss). The expiry batches
the pass runs for the claimed queues are in :mod:`qcore.sql.jobs`, next to the fail
statement they share.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement

__all__ = [
    "CLAIM_CHUNK_SIZE",
    "MONITOR_BACKOFF_CAP_SECONDS",
    "MONITOR_BACKOFF_MAX_SECONDS",
    "MONITOR_PIN_BUDGET_RATIO",
    "claim_monitor",
    "claim_queues",
    "counts_deferred",
    "defer_counts",
    "monitor_queues",
    "queue_row_lock",
    "stamp_monitored",
    "utc_text",
]

#: queue names per claim statement (pg-boss's chunk)
CLAIM_CHUNK_SIZE = 100
#: the share of ``autovacuum_naptime`` a pass's counting may hold the vacuum horizon
#: before the next counting is deferred (pg-boss's: 6 s at the default minute)
MONITOR_PIN_BUDGET_RATIO = 0.1
#: the longest deferral a pass's own counting time asks for, and the longest in all
MONITOR_BACKOFF_MAX_SECONDS = 600
MONITOR_BACKOFF_CAP_SECONDS = 3600


@lru_cache(maxsize=4)
def monitor_queues(q: str, *, by_name: bool = False) -> Statement:
    """The queues a pass covers, each with its physical job table, in table then name order.

    With ``by_name`` only the queue ``name``. Rows ``name, table_name``.
    """
    p = Params()
    where = f" WHERE name = {p('name')}::text" if by_name else ""
    return p.statement(f"SELECT name, table_name FROM {q}.queue{where} ORDER BY table_name, name")


def utc_text(column: str) -> str:
    """A timestamp as UTC ISO text: read back the same whatever a session's TimeZone."""
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


def queue_row_lock(skip_locked: bool) -> str:
    """How every multi-row writer of the queue table locks.

    In name order (no deadlock between instances), ``FOR NO KEY UPDATE`` (``FOR UPDATE``
    would block the key-share lock a job insert takes through the queue foreign key),
    with ``skip_locked`` skipping rows another claim holds.
    """
    return "ORDER BY name FOR NO KEY UPDATE" + (" SKIP LOCKED" if skip_locked else "")


@lru_cache(maxsize=16)
def claim_queues(
    q: str, column: str, since: tuple[str, ...], *, gated: bool, skip_locked: bool
) -> Statement:
    """pg-boss's per-queue claim of a step: stamp ``column`` = now on the queues ``names``.

    And return them, rows ``name, claimed_on`` (UTC text). ``gated`` (a background pass)
    claims only queues whose first non-null of the ``since`` columns (none: a week ago,
    so a new queue is due at once) is at least ``seconds`` old, so instances sharing the
    schema do the step once per interval between them; an explicit pass claims every
    named queue. Rows locked by :func:`queue_row_lock`.
    """
    p = Params()
    now = f"{q}.job_now()"
    due = ""
    if gated:
        last = ", ".join((*since, f"{now} - interval '1 week'"))
        due = f" AND extract(epoch FROM ({now} - COALESCE({last}))) >= {p('seconds')}::float8"
    sql = (
        f"WITH due AS (SELECT name FROM {q}.queue WHERE name = ANY({p('names')}::text[]){due}"
        f" {queue_row_lock(skip_locked)})"
        f" UPDATE {q}.queue SET {column} = {now} FROM due WHERE queue.name = due.name"
        f" RETURNING queue.name, {utc_text(f'queue.{column}')} AS claimed_on"
    )
    return p.statement(sql)


def claim_monitor(q: str, *, gated: bool = True, skip_locked: bool = False) -> Statement:
    """Claim the queues ``names`` for one monitor pass.

    :func:`claim_queues` on ``monitor_claim_on``; never claimed, a queue is due from its
    last finished pass, ``monitor_on``. Without ``gated`` (an explicit ``supervise()``)
    the stamp still spares the other instances' background passes.
    """
    since = ("monitor_claim_on", "monitor_on")
    return claim_queues(q, "monitor_claim_on", since, gated=gated, skip_locked=skip_locked)


@lru_cache(maxsize=4)
def stamp_monitored(q: str) -> Statement:
    """Record that the queues ``names`` were monitored: ``monitor_on`` = now."""
    p = Params()
    sql = f"UPDATE {q}.queue SET monitor_on = {q}.job_now() WHERE name = ANY({p('names')}::text[])"
    return p.statement(sql)


@lru_cache(maxsize=4)
def counts_deferred(q: str) -> Statement:
    """Whether counting is deferred now (``version.monitor_backoff_on`` ahead), as pg-boss
    reads it: ``deferred``. The same on every backend."""
    return Statement(
        f"SELECT EXISTS (SELECT 1 FROM {q}.version WHERE monitor_backoff_on > {q}.job_now())"
        " AS deferred"
    )


@lru_cache(maxsize=4)
def defer_counts(q: str) -> Statement:
    """Defer the next counting when a pass's counting held the vacuum horizon ``seconds``,
    more than :data:`MONITOR_PIN_BUDGET_RATIO` of the server's ``autovacuum_naptime``.

    By twice the naptime, or as long as the counting took (at most
    :data:`MONITOR_BACKOFF_MAX_SECONDS`), never past :data:`MONITOR_BACKOFF_CAP_SECONDS`;
    a deadline already further out stays (instances measure their own passes). A row
    only when it defers: ``naptime_seconds``, ``backoff_seconds`` (left on the deadline in
    force), ``backoff_until``. pg-boss's statement; PostgreSQL's setting.
    """
    p = Params()
    seconds = f"{p('seconds')}::float8"
    return p.statement(
        "WITH budget AS (SELECT naptime, LEAST(GREATEST(2 * naptime,"
        f" LEAST({seconds}, {MONITOR_BACKOFF_MAX_SECONDS})), {MONITOR_BACKOFF_CAP_SECONDS})"
        " AS backoff FROM (SELECT EXTRACT(EPOCH FROM"
        " current_setting('autovacuum_naptime')::interval)::float8 AS naptime) n)"
        f" UPDATE {q}.version v SET monitor_backoff_on = GREATEST("
        f"COALESCE(v.monitor_backoff_on, {q}.job_now()),"
        f" {q}.job_now() + make_interval(secs => b.backoff))"
        f" FROM budget b WHERE {seconds} > {MONITOR_PIN_BUDGET_RATIO} * b.naptime"
        " RETURNING b.naptime AS naptime_seconds,"
        f" EXTRACT(EPOCH FROM (v.monitor_backoff_on - {q}.job_now()))::float8"
        " AS backoff_seconds, v.monitor_backoff_on AS backoff_until"
    )

"""Settling a locked claim's jobs in the transaction that claimed them (``fetch_jobs``
with ``hold``): the rows are still queued and locked by that transaction, so each is
written once, straight to how it ended. Only on SKIP LOCKED engines that take several
mutations in one statement (the fail's delete and inserts are one CTE)."""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.jobs.columns import (
    ATTEMPT_COUNT,
    JOB_COLUMNS,
    _command,
    _ended,
    _job_table,
    _now,
    _queue_cte,
    held_as_running,
)
from qcore.sql.jobs.fail import _fail_removed

#: the jobs a held settle may touch: the queue's, among ``ids``, still queued (the
#: claiming transaction holds their locks, so nobody else has moved them)
_HELD = "j.name = {queue}::text AND j.id = ANY({ids}::uuid[]) AND j.state < 'active'"


def _held(p: Params) -> str:
    return _HELD.format(queue=p("queue"), ids=p("ids"))


@lru_cache(maxsize=256)
def complete_held(q: str, *, table: str | None = None) -> Statement:
    """Complete held jobs with ``output``: started when the transaction began (the
    claim), the attempt counted as a claim counts it, completed at this statement.
    One UPDATE of the queue's own ``table`` (see ``_job_table``); rows ``queue, id``."""
    p = Params()
    now = _now(q)
    mutation = (
        f"UPDATE {_job_table(q, table)} j SET state = 'completed', started_on = {now},"
        f" heartbeat_on = {now}, retry_count = {ATTEMPT_COUNT}, completed_on = {_ended(q)},"
        f" output = {p('output')}::jsonb WHERE {_held(p)} RETURNING j.id"
    )
    return p.statement(_command(q, p, mutation, table=table))


@lru_cache(maxsize=8)
def fail_held(q: str, *, terminal: bool = False) -> Statement:
    """Fail held jobs with ``output`` as :func:`qcore.sql.jobs.fail.fail_jobs` fails
    running ones (retry after the delay, else failed and dead-lettered; ``terminal``:
    no retry), each first read as the claim would have left it. One statement; rows
    ``queue, id``."""
    p = Params()
    running = held_as_running(q)
    as_claimed = ", ".join(f"{running.get(c, 'j.' + c)} AS {c}" for c in JOB_COLUMNS)
    sql = f"""WITH {_queue_cte(q, p)},
taken AS (DELETE FROM {q}.job j WHERE {_held(p)} RETURNING j.*),
removed AS (SELECT {as_claimed} FROM taken j),
{_fail_removed(q, p, f"{p('output')}::jsonb", terminal, _ended(q))}
SELECT q.name AS queue, settled.id FROM q LEFT JOIN settled ON true"""
    return p.statement(sql)

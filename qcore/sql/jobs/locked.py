"""Locked claims: jobs locked, not marked, by the claiming transaction, and settled in it.

The rows are still queued, so each is written once, straight to how it ended. Only on
SKIP LOCKED engines that take several mutations in one statement (the fail's delete and
inserts are one CTE).
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement, row_limit
from qcore.sql.affinity import record_processed_cte
from qcore.sql.jobs.claim import (
    claim_extra_columns,
    claim_keys,
    claim_queue_columns,
    ready_filter,
)
from qcore.sql.jobs.columns import (
    ATTEMPT_COUNT,
    FETCH_COLUMNS,
    JOB_COLUMNS,
    among_ids,
    held_as_running,
    job_ended,
    job_now,
    job_table,
    queue_cte,
    returning_columns,
    settling_command,
)
from qcore.sql.jobs.fail import fail_removed_ctes
from qcore.sql.jobs.spec import DEFAULT_FETCH, FetchSpec


@lru_cache(maxsize=1024)
def claim_held(
    q: str,
    *,
    spec: FetchSpec = DEFAULT_FETCH,
    policy: str = "standard",
    table: str | None = None,
    affinity: bool = True,
    patterned: bool = False,
    keyed: bool = False,
    limit: int = 1,
) -> Statement:
    """A locked claim: lock up to ``limit`` ready jobs of the queue and return them as running.

    In the fetch index's order, as ``fetch_jobs`` picks them (the same ``spec``; no
    policy that counts active jobs), returned unchanged but read as running (this
    attempt counted; with ``include_metadata`` active and started now). They stay
    queued, held by this transaction until :func:`complete_held` or :func:`fail_held`
    settles them or its end releases them. The statement also bounds the transaction's
    idle time to the queue's expiry plus ``hold_grace`` seconds (``held_for``, in ms),
    so the server frees the jobs of a client that froze. Rows come in index order (ties
    unordered); no row when the queue is gone, one of NULLs when none is ready.
    ``affinity``, ``patterned`` and ``keyed`` as in ``fetch_jobs`` (a keyed claim always
    records its key: the held transaction commits it with the settle, or rolls it back).
    """
    if policy in ("singleton", "stately"):
        raise ValueError(f"the {policy} policy counts active jobs: no locked claim")
    p = Params()
    jobs = job_table(q, table)
    keys = claim_keys(spec.priority, spec.order_by_created_on)
    order = f" ORDER BY {', '.join('j.' + k for k in keys)}" if keys else ""
    ready = ready_filter(
        q,
        p,
        jobs,
        policy=policy,
        ignore_start_after=spec.ignore_start_after,
        min_priority=spec.min_priority is not None,
        max_priority=spec.max_priority is not None,
        ignore_groups=bool(spec.ignore_groups),
        affinity=affinity,
        patterned=patterned,
    )
    columns = JOB_COLUMNS if spec.include_metadata else FETCH_COLUMNS
    picked = returning_columns(columns, "j", lazy_data=True, values=held_as_running(q))
    ms = f"(expire_seconds + {p('hold_grace')}::int) * 1000"
    # a materialized CTE computes every column: the setting is made once, with the row
    held_for = (
        f"{ms} AS held_for,"
        f" set_config('idle_in_transaction_session_timeout', ({ms})::text, true) AS setting"
    )
    queue_columns = claim_queue_columns(q, p, affinity, f"name, {held_for}")
    recorded = f",\n{record_processed_cte(q, p, 'candidates')}" if keyed else ""
    extra = claim_extra_columns(p, affinity, keyed)
    query = f"""
  SELECT {picked}
  FROM {jobs} j
  WHERE EXISTS (SELECT 1 FROM q) AND j.name = {p("queue")}::text AND j.state < 'active'
    AND NOT j.blocked{ready}
  {order} LIMIT {row_limit(limit)} FOR UPDATE OF j SKIP LOCKED
"""
    sql = f"""WITH {queue_cte(q, p, queue_columns, table, policy=True)},
candidates AS ({query}){recorded}
SELECT c.*, q.held_for{extra} FROM q LEFT JOIN candidates c ON true"""
    return p.statement(sql)


@lru_cache(maxsize=1)
def hold_longer() -> Statement:
    """Raise the held transaction's idle limit to ``ms``.

    For a batch holding a job whose own expiry is longer than its queue's.
    """
    p = Params()
    sql = (
        "SELECT set_config('idle_in_transaction_session_timeout',"
        f" {p('ms')}::int::text, true) AS held_for"
    )
    return p.statement(sql)


def _held(p: Params) -> str:
    """The jobs a held settle may touch: the queue's, among ``ids``, still queued.

    The claiming transaction holds their locks, so nobody else has moved them.
    """
    return f"j.name = {p('queue')}::text AND {among_ids(p, 'j')} AND j.state < 'active'"


@lru_cache(maxsize=256)
def complete_held(q: str, *, table: str | None = None) -> Statement:
    """Complete held jobs with ``output``, in one UPDATE of the queue's own ``table``.

    Started when the transaction began (the claim), the attempt counted as a claim counts
    it, completed at this statement. One UPDATE of the queue's own ``table`` (see
    ``job_table``); its row as :func:`settling_command`'s (the transaction holds the jobs:
    all are completed).
    """
    p = Params()
    now = job_now(q)
    mutation = (
        f"UPDATE {job_table(q, table)} j SET state = 'completed', started_on = {now},"
        f" heartbeat_on = {now}, retry_count = {ATTEMPT_COUNT}, completed_on = {job_ended(q)},"
        f" output = {p('output')}::jsonb WHERE {_held(p)} RETURNING j.id"
    )
    return p.statement(settling_command(q, p, mutation, table))


@lru_cache(maxsize=1)
def lock_released(q: str) -> Statement:
    """Lock again, in a transaction of its own, the jobs of a rolled-back locked claim.

    The jobs of a locked claim whose transaction rolled back: those still queued and not
    taken meanwhile by another claim (SKIP LOCKED: a job another worker holds is that
    worker's now), for :func:`fail_held`. Rows ``id``.
    """
    p = Params()
    sql = f"SELECT j.id FROM {q}.job j WHERE {_held(p)} ORDER BY j.id FOR UPDATE OF j SKIP LOCKED"
    return p.statement(sql)


@lru_cache(maxsize=8)
def fail_held(q: str, *, terminal: bool = False) -> Statement:
    """Fail held jobs with ``output`` as :func:`qcore.sql.jobs.fail.fail_jobs` fails running ones.

    Retry after the delay, else failed and dead-lettered; ``terminal``: no retry. Each is
    first read as the claim would have left it. One statement; rows ``queue, id``.
    """
    p = Params()
    as_claimed = returning_columns(JOB_COLUMNS, "j", values=held_as_running(q))
    sql = f"""WITH {queue_cte(q, p)},
taken AS (DELETE FROM {q}.job j WHERE {_held(p)} RETURNING j.*),
removed AS (SELECT {as_claimed} FROM taken j),
{fail_removed_ctes(q, p, f"{p('output')}::jsonb", terminal, job_ended(q))}
SELECT q.name AS queue, settled.id FROM q LEFT JOIN settled ON true"""
    return p.statement(sql)

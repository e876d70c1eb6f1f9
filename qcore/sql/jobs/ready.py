"""The shared idle poll's statement: which of several queues have a job to claim."""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.jobs.columns import job_now


@lru_cache(maxsize=16)
def ready_queues(q: str) -> Statement:
    """For each name of ``queues`` (text[]): ``ready``, whether a claim could find a job.

    Ready: queued, unblocked and due (due or not for the names also in ``anytime``,
    workers that ignore ``start_after``); and the queue's ``notify`` (NULL: no such
    queue). A name with no queue is ready: its worker's claim then reports the missing
    queue. A superset of what a claim takes (policies, priority bounds, groups and
    affinity are left to the claim), so a worker told nothing is ready could not have
    claimed anything.

    Same text on every backend: one read, no lock and no write. Each queue's look is
    ordered as the fetch index is and stops at its first row, so it reads that index
    whatever the statistics say (a plain EXISTS may scan the whole shared table from
    its oldest row when they are stale); in the partitioned shape PostgreSQL prunes
    ``job`` to the queue's partition at run time.
    """
    p = Params()
    due = f"(j.start_after <= {job_now(q)} OR n.name = ANY({p('anytime')}::text[]))"
    first = (
        f"SELECT true FROM {q}.job j WHERE j.name = n.name AND j.state < 'active'"
        f" AND NOT j.blocked AND {due} ORDER BY j.priority DESC, j.created_on LIMIT 1"
    )
    sql = (
        f"SELECT n.name, (w.name IS NULL OR COALESCE(({first}), false)) AS ready, w.notify"
        f" FROM unnest({p('queues')}::text[]) AS n(name)"
        f" LEFT JOIN {q}.queue w ON w.name = n.name"
    )
    return p.statement(sql)

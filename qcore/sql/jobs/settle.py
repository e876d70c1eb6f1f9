"""Commands on jobs by id: complete, cancel, resume, retry, delete, restore, touch."""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.jobs.columns import (
    command_cte,
    in_state,
    job_now,
    job_table,
    queue_cte,
    recordset,
    settling_command,
    target_jobs,
)


@lru_cache(maxsize=256)
def complete_jobs(
    q: str, *, fenced: bool = False, include_queued: bool = False, table: str | None = None
) -> Statement:
    """Mark active jobs completed with an output (same on every backend: one UPDATE).

    ``include_queued`` also completes queued jobs and releases flow-blocked ones.
    ``table``: see :func:`job_table`. Its row as :func:`settling_command`'s.
    """
    p = Params()
    mutation = complete_update(q, p, fenced=fenced, include_queued=include_queued, table=table)
    return p.statement(settling_command(q, p, mutation, table))


def complete_update(
    q: str, p: Params, *, fenced: bool, include_queued: bool = False, table: str | None
) -> str:
    """The UPDATE of :func:`complete_jobs`: the targeted jobs completed with ``output``.

    Also the settling half of the worker's settle-and-claim statement. Rows: their ids.
    """
    where = target_jobs(p, "j", fenced)  # first: the ids are the leading parameters
    state = "j.state < 'completed'" if include_queued else in_state("j", "active")
    release = ", blocked = false, pending_dependencies = 0" if include_queued else ""
    return (
        f"UPDATE {job_table(q, table)} j SET state = 'completed', completed_on = {job_now(q)},"
        f" output = {p('output')}::jsonb{release}"
        f" WHERE {where} AND {state} RETURNING j.id"
    )


@lru_cache(maxsize=256)
def complete_each(q: str, *, table: str | None = None) -> Statement:
    """Complete active jobs each with its own output, from the JSON array ``outputs``.

    ``outputs`` holds ``{id, output}`` (a per-job results batch: one statement whatever
    the batch size), fenced as :func:`complete_jobs` is. One UPDATE on every backend.
    """
    p = Params()
    where = target_jobs(p, "j", True)
    outputs = recordset(p, "outputs", {"id": "uuid", "output": "jsonb"})
    mutation = (
        f"UPDATE {job_table(q, table)} j SET state = 'completed', completed_on = {job_now(q)},"
        f" output = r.output FROM {outputs}"
        f" WHERE {where} AND j.id = r.id AND {in_state('j', 'active')} RETURNING j.id"
    )
    return p.statement(command_cte(q, p, mutation, table=table))


@lru_cache(maxsize=256)
def cancel_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Cancel jobs not yet settled (one UPDATE on every backend)."""
    p = Params()
    mutation = (
        f"UPDATE {job_table(q, table)} j SET state = 'cancelled', completed_on = {job_now(q)}"
        f" WHERE {target_jobs(p, 'j', fenced)} AND j.state < 'completed' RETURNING j.id"
    )
    return p.statement(command_cte(q, p, mutation, table=table))


@lru_cache(maxsize=256)
def resume_jobs(q: str, *, table: str | None = None) -> Statement:
    """Bring cancelled jobs back to created, no earlier than now (one UPDATE everywhere).

    Rows also tell whether each resumed job was in the queue's cached
    ``retained_count`` (finished by its ``retained_on``), from the completion
    time it had before.
    """
    p = Params()
    now = job_now(q)
    where = target_jobs(p, "c", False)
    jobs = job_table(q, table)
    mutation = (
        f"UPDATE {jobs} j SET state = 'created', completed_on = NULL, upsert_by_key = NULL,"
        f" start_after = GREATEST(j.start_after, {now})"
        f" FROM (SELECT c.id, c.completed_on FROM {jobs} c WHERE {where}"
        " AND c.state = 'cancelled') was"
        f" WHERE j.name = {p('queue')}::text AND j.id = was.id AND j.state = 'cancelled'"
        f" RETURNING j.id, was.completed_on <= (SELECT retained_on FROM {q}.queue"
        f" WHERE name = {p('queue')}::text) AS retained"
    )
    return p.statement(command_cte(q, p, mutation, "id, retained", table))


@lru_cache(maxsize=256)
def retry_jobs(q: str, *, notify: bool = False, table: str | None = None) -> Statement:
    """Give failed jobs one more attempt: back to retry with retry_limit + 1 (one UPDATE).

    Unless retry_limit is the integer's largest value already.

    ``notify`` (where LISTEN/NOTIFY exists) also sends pg_notify(channel, queue) in
    the same statement when the queue has ``notify`` and a retried job is ready now, so
    idle workers wake at once (pg-boss's retry does not notify; a pg-boss listener
    simply fetches once more). Rows ``queue, id``.
    """
    p = Params()
    now = job_now(q)
    mutation = (
        f"UPDATE {job_table(q, table)} j SET state = 'retry',"
        f" retry_limit = j.retry_limit + (j.retry_limit < 2147483647)::int,"
        f" completed_on = NULL, start_after = GREATEST(j.start_after, {now})"
        f" WHERE {target_jobs(p, 'j', False)} AND {in_state('j', 'failed')}"
        " RETURNING j.id, j.start_after"
    )
    if not notify:
        return p.statement(command_cte(q, p, mutation, table=table))
    # an uncorrelated scalar subquery runs once; pg_notify inside count() always runs
    notified = (
        f"(SELECT count(pg_notify({p('channel')}::text, n.name)) FROM q n WHERE n.notify"
        f" AND EXISTS (SELECT 1 FROM done WHERE done.start_after <= {now}))::int AS notified"
    )
    sql = (
        f"WITH {queue_cte(q, p, 'name, notify', table)}, done AS ({mutation})"
        f" SELECT q.name AS queue, done.id, {notified} FROM q LEFT JOIN done ON true"
    )
    return p.statement(sql)


@lru_cache(maxsize=256)
def delete_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Delete jobs by id, whatever their state (one DELETE on every backend).

    Rows tell whether each deleted job was in the queue's cached ``retained_count``.
    """
    p = Params()
    mutation = (
        f"DELETE FROM {job_table(q, table)} j WHERE {target_jobs(p, 'j', fenced)}"
        " RETURNING j.id, (j.state IN ('completed', 'cancelled') AND j.completed_on <="
        f" (SELECT retained_on FROM {q}.queue WHERE name = {p('queue')}::text)) AS retained"
    )
    return p.statement(command_cte(q, p, mutation, "id, retained", table))


@lru_cache(maxsize=256)
def restore_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Hand active jobs back unstarted: created, with no ``started_on``.

    So the next claim does not count an attempt (pg-boss's restore, which a worker over
    its local group limit uses; one UPDATE on every backend). Only active jobs, fenced on
    the attempts given, so a claim that lapsed cannot hand back another worker's.
    """
    p = Params()
    mutation = (
        f"UPDATE {job_table(q, table)} j SET state = 'created', started_on = NULL,"
        " heartbeat_on = NULL, upsert_by_key = NULL"
        f" WHERE {target_jobs(p, 'j', fenced)} AND {in_state('j', 'active')} RETURNING j.id"
    )
    return p.statement(command_cte(q, p, mutation, table=table))


@lru_cache(maxsize=256)
def touch_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Refresh the heartbeat of active jobs (one UPDATE on every backend)."""
    p = Params()
    mutation = (
        f"UPDATE {job_table(q, table)} j SET heartbeat_on = {job_now(q)}"
        f" WHERE {target_jobs(p, 'j', fenced)} AND {in_state('j', 'active')} RETURNING j.id"
    )
    return p.statement(command_cte(q, p, mutation, table=table))

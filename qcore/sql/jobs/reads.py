"""Reading jobs: one by id, or by singleton key, data containment and state."""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement, before_keyset
from qcore.sql.affinity import JOB_PATTERN_TABLE, JOB_PROCESSED_TABLE
from qcore.sql.jobs.columns import JOB_COLUMNS, queue_cte, returning_columns


def _attribution(q: str, attributed: bool) -> tuple[str, str]:
    """With ``attributed``: who claimed the job and its affinity pattern, joined onto ``j``.

    The columns ``processed_on_instance_key`` and ``preferred_instance_key_pattern``;
    ``attributed``: qcore's attribution and pattern tables exist (installed together).
    """
    if not attributed:
        return "", ""
    table = f"{q}.{quote(JOB_PROCESSED_TABLE)}"
    patterns = f"{q}.{quote(JOB_PATTERN_TABLE)}"
    return (
        ", r.instance_key AS processed_on_instance_key,"
        " pt.pattern AS preferred_instance_key_pattern",
        f" LEFT JOIN {table} r ON r.name = j.name AND r.id = j.id"
        f" LEFT JOIN {patterns} pt ON pt.name = j.name AND pt.id = j.id",
    )


@lru_cache(maxsize=8)
def get_job(q: str, *, attributed: bool = True) -> Statement:
    """One job by id, every column, and who claimed it (a plain read on every backend)."""
    p = Params()
    column, joined = _attribution(q, attributed)
    sql = (
        f"WITH {queue_cte(q, p)} SELECT q.name AS queue,"
        f" {returning_columns(JOB_COLUMNS, 'j')}{column}"
        f" FROM q LEFT JOIN {q}.job j ON j.name = q.name AND j.id = {p('id')}::uuid{joined}"
    )
    return p.statement(sql)


@lru_cache(maxsize=32)
def find_jobs(
    q: str,
    *,
    by_id: bool = False,
    by_key: bool = False,
    by_data: bool = False,
    queued: bool = False,
    by_states: bool = False,
    limited: bool = False,
    attributed: bool = True,
    after: bool = False,
) -> Statement:
    """A queue's jobs matching an id, a singleton key or data, each with who claimed it.

    Matching an id, a singleton key, data containing a JSON value (``@>``), only queued
    ones and/or one of ``states`` (text), each with who claimed it; oldest first, at most
    ``limit`` when ``limited`` (a plain read everywhere). ``after``: the jobs after job
    ``after`` of the queue, and ``anchored`` on every row, whether that job still exists.
    """
    p = Params()
    column, joined = _attribution(q, attributed)
    conditions = ["j.name = q.name"]
    anchor, anchored = "", ""
    if after:
        anchor = (
            f", a AS (SELECT created_on, id FROM {q}.job WHERE name = {p('queue')}::text"
            f" AND id = {p('after')}::uuid)"
        )
        anchored = ", EXISTS (SELECT 1 FROM a) AS anchored"
        conditions.append("j.created_on >= (SELECT created_on FROM a)")
        conditions.append("(j.created_on, j.id) > ((SELECT created_on FROM a), (SELECT id FROM a))")
    if by_id:
        conditions.append(f"j.id = {p('id')}::uuid")
    if by_key:
        conditions.append(f"j.singleton_key = {p('key')}::text")
    if by_data:
        conditions.append(f"j.data @> {p('data')}::jsonb")
    if queued:
        conditions.append("j.state < 'active'")
    if by_states:
        conditions.append(f"j.state::text = ANY({p('states')}::text[])")
    limit = f" LIMIT {p('limit')}::int" if limited else ""
    sql = (
        f"WITH {queue_cte(q, p)}{anchor} SELECT q.name AS queue,"
        f" {returning_columns(JOB_COLUMNS, 'j')}{column}{anchored}"
        f" FROM q LEFT JOIN {q}.job j ON {' AND '.join(conditions)}{joined}"
        f" ORDER BY j.created_on, j.id{limit}"
    )
    return p.statement(sql)


@lru_cache(maxsize=8)
def browse_jobs(
    q: str,
    *,
    by_states: bool,
    paged: bool,
    by_key: bool = False,
    by_data: bool = False,
    attributed: bool = True,
) -> Statement:
    """A page of a queue's jobs, newest first, after the previous page's last job.

    Optionally in one of ``states``, with a singleton ``key`` and/or ``data`` containing a
    JSON value, after the keyset ``(before_created, before_id)`` of the previous page's
    last job: a walk down ``(name, created_on)`` (``job_i15``, on every job table) that
    stops at ``limit``, ties on ``created_on`` put in order by id as they come, so a page
    costs the same on the first page and the thousandth (no OFFSET). A plain read on
    every backend.
    """
    p = Params()
    column, joined = _attribution(q, attributed)
    conditions = [f"j.name = {p('queue')}::text"]
    if by_states:
        conditions.append(f"j.state::text = ANY({p('states')}::text[])")
    if by_key:
        conditions.append(f"j.singleton_key = {p('key')}::text")
    if by_data:  # no index serves it: the walk reads on until the page is full
        conditions.append(f"j.data @> {p('data')}::jsonb")
    if paged:
        conditions.append(before_keyset(p, "j."))
    sql = (
        f"SELECT j.name AS queue, {returning_columns(JOB_COLUMNS, 'j')}{column}"
        f" FROM {q}.job j{joined} WHERE {' AND '.join(conditions)}"
        f" ORDER BY j.created_on DESC, j.id DESC LIMIT {p('limit')}::int"
    )
    return p.statement(sql)

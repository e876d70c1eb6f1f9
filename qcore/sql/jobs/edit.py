"""Editing queued jobs in place and moving jobs out of a dead letter queue.

Editing in place: ``update``, ``upsert``'s update; moving out of a dead letter queue:
``redrive``.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.jobs.columns import SEND_RECORD, job_now, job_table, queue_cte

#: a record key of an update, and the column (and value) it sets; the start and the
#: retention are special (both move ``keep_until``)
_SET_COLUMNS: dict[str, tuple[str, str]] = {
    "data": ("data", "r.data"),
    "priority": ("priority", "r.priority"),
    "retry_limit": ("retry_limit", "r.retry_limit"),
    "retry_delay": ("retry_delay", "r.retry_delay"),
    "retry_backoff": ("retry_backoff", "r.retry_backoff"),
    "retry_delay_max": ("retry_delay_max", "r.retry_delay_max"),
    "expire_in_seconds": ("expire_seconds", "r.expire_in_seconds"),
    "delete_after_seconds": ("deletion_seconds", "r.delete_after_seconds"),
    "heartbeat_seconds": ("heartbeat_seconds", "r.heartbeat_seconds"),
    "dead_letter": ("dead_letter", "r.dead_letter"),
    "group_id": ("group_id", "r.group_id"),
    "group_tier": ("group_tier", "r.group_tier"),
}

#: what an update may carry: the columns above, the start and the retention
UPDATABLE: frozenset[str] = frozenset(
    {*_SET_COLUMNS, "start_after", "start_after_seconds", "retention_seconds"}
)

#: the order of ``update_jobs``'s ``match`` for a singleton key
_MATCH_ORDER = {"newest": "DESC", "oldest": "ASC", "all": ""}


@lru_cache(maxsize=256)
def update_jobs(
    q: str,
    fields: frozenset[str],
    *,
    by_key: bool,
    match: str = "newest",
    notify: bool = False,
    table: str | None = None,
) -> Statement:
    """Set ``fields`` on the queue's queued jobs with id ``id`` or with singleton key ``key``.

    ``fields`` are keys of an update record, the JSON object ``job``; queued jobs are
    created or retry; by key (``by_key``): the newest, the oldest or ``all`` of them.
    Columns not given keep their value; a new start moves ``keep_until`` with it (by the
    job's retention window, or by ``retention_seconds`` when given), so a job pulled
    forward or pushed back is never deleted early.

    Same on every backend: one UPDATE, which checks the state again on the row it
    locked (a worker may claim a target between the read and the write; such a job is
    left alone). ``notify`` (where LISTEN/NOTIFY exists): pg_notify(channel, queue)
    when the queue has ``notify`` and an edited job is ready now. Rows ``queue, id``
    (no row: no such queue or table; a NULL id: nothing matched).
    """
    unknown = fields - UPDATABLE
    assert not unknown, f"not an update field: {sorted(unknown)}"
    p = Params()
    now = job_now(q)
    jobs = job_table(q, table)
    spec = ", ".join(f"{name} {kind}" for name, kind in SEND_RECORD.items())
    if by_key:
        order = _MATCH_ORDER[match]
        pick = f"j.singleton_key = {p('key')}::text"
        limit = f" ORDER BY j.created_on {order}, j.id {order} LIMIT 1" if order else ""
    else:
        pick, limit = f"j.id = {p('id')}::uuid", ""
    sets = [f"{column} = {value}" for key, (column, value) in _SET_COLUMNS.items() if key in fields]
    moved = bool(fields & {"start_after", "start_after_seconds"})
    start = (
        f"COALESCE(r.start_after, {now} + COALESCE(r.start_after_seconds, 0) * interval '1 second')"
        if moved
        else "j.start_after"
    )
    if moved:
        sets.append(f"start_after = {start}")
    if "retention_seconds" in fields:
        sets.append(f"keep_until = {start} + r.retention_seconds * interval '1 second'")
    elif moved:
        sets.append(f"keep_until = {start} + (j.keep_until - j.start_after)")
    assert sets, "an update sets at least one column"
    target = (
        f"SELECT j.id FROM {jobs} j WHERE j.name = {p('queue')}::text AND j.state < 'active'"
        f" AND {pick}{limit}"
    )
    mutation = (
        f"UPDATE {jobs} j SET {', '.join(sets)}"
        f" FROM jsonb_to_record({p('job')}::jsonb) AS r({spec})"
        f" WHERE j.name = {p('queue')}::text AND j.id IN (SELECT id FROM target)"
        " AND j.state < 'active' RETURNING j.id, j.start_after"
    )
    ctes = [
        queue_cte(q, p, "name, notify", table),
        f"target AS ({target})",
        f"done AS ({mutation})",
    ]
    select = ["q.name AS queue", "done.id"]
    if notify:
        # an uncorrelated scalar subquery runs once; pg_notify inside count() always runs
        select.append(
            f"(SELECT count(pg_notify({p('channel')}::text, n.name)) FROM q n WHERE n.notify"
            f" AND EXISTS (SELECT 1 FROM done WHERE done.start_after <= {now}))::int AS notified"
        )
    return p.statement(
        f"WITH {', '.join(ctes)} SELECT {', '.join(select)} FROM q LEFT JOIN done ON true"
    )


# -- redrive --------------------------------------------------------------------------------

#: the columns a redriven job is created with (the rest take the table's defaults)
_REDRIVE_COLUMNS = (
    "id, name, data, priority, retry_limit, retry_backoff, retry_delay, retry_delay_max,"
    " expire_seconds, start_after, created_on, keep_until, deletion_seconds, policy,"
    " singleton_key, group_id, group_tier, heartbeat_seconds, dead_letter, source_root_id,"
    " trace_context"
)


def _redrive_values(q: str, new_id: str, destination: bool, p: Params) -> str:
    """A redriven job from its dead letter row ``m`` and its destination queue ``d``.

    A fresh job (new id, created, no attempts, no output) with the destination queue's
    settings as they are now, keeping what identifies the job (data, priority, key,
    group) and the root of its dead letter chain.
    """
    now = job_now(q)
    into = f"{p('destination')}::text" if destination else "m.source_name"
    return (
        f"{new_id}, {into}, m.data, m.priority, d.retry_limit, d.retry_backoff, d.retry_delay,"
        f" d.retry_delay_max, d.expire_seconds, {now}, {now},"
        f" {now} + d.retention_seconds * interval '1 second', d.deletion_seconds, d.policy,"
        " m.singleton_key, m.group_id, m.group_tier, d.heartbeat_seconds, d.dead_letter,"
        " COALESCE(m.source_root_id, m.source_id), m.trace_context"
    )


def _redrive_where(
    q: str, p: Params, filters: frozenset[str], destination: bool, *, routable: bool = True
) -> str:
    """The dead letter jobs a redrive moves: queued, filtered, routable and not held back.

    Queued (a job the dead letter queue's own worker has taken stays), narrowed by the
    ``filters`` given, routable (a ``destination``, or a source queue that still
    exists; not asked with ``routable`` False), and not behind a key_strict_fifo job of
    the same key that holds its key (it waits, as a fetch would).
    """
    into = f"{p('destination')}::text" if destination else "j.source_name"
    where = [
        f"j.name = {p('queue')}::text",
        "j.state < 'active'",
        *([f"EXISTS (SELECT 1 FROM {q}.queue d WHERE d.name = {into})"] if routable else []),
        f"NOT (j.policy = 'key_strict_fifo' AND EXISTS (SELECT 1 FROM {q}.job k"
        " WHERE k.name = j.name AND k.singleton_key = j.singleton_key"
        " AND k.policy = 'key_strict_fifo' AND k.state IN ('active', 'retry', 'failed')))",
    ]
    if "source_name" in filters:
        where.append(f"j.source_name = {p('source_name')}::text")
    if "data" in filters:
        where.append(f"j.data @> {p('data')}::jsonb")
    if "created_before" in filters:
        where.append(f"j.created_on < {p('created_before')}::timestamptz")
    if "ids" in filters:
        where.append(f"j.id = ANY({p('ids')}::uuid[])")
    return " AND ".join(where)


#: what a dead letter job that could not be moved becomes: failed in place, the reason
#: its output (a waiting job would be a candidate again on every call, and a drain loop
#: would never end); what output it had is kept as its source_output
_NOT_REDRIVEN = (
    "state = 'failed', completed_on = {now}, source_output = COALESCE(j.source_output, j.output),"
    " output = jsonb_build_object('message', 'Not redriven: queue ' || d.name || CASE"
    " WHEN j.singleton_key IS NULL THEN ' already has a job this one conflicts with'"
    " ELSE ' already has a job with singletonKey ' || j.singleton_key END"
    " || ' under its ' || COALESCE(d.policy, 'standard') || ' policy',"
    " 'reason', 'redrive_conflict', 'destination', d.name, 'policy', d.policy,"
    " 'singletonKey', j.singleton_key)"
)


def _failable(q: str, table: str | None, refused: str) -> str:
    """Of the refused rows (``refused``: a predicate on ``m.id``), those that may be failed.

    Failed in place: all but, of two key_strict_fifo jobs of one key, the younger (two
    failed jobs of one key would break that policy's index; the younger waits).
    """
    return (
        "(j.policy IS DISTINCT FROM 'key_strict_fifo' OR j.singleton_key IS NULL OR j.id IN ("
        f"SELECT DISTINCT ON (m.singleton_key) m.id FROM {job_table(q, table)} m"
        f" WHERE {refused} AND m.policy = 'key_strict_fifo'"
        " ORDER BY m.singleton_key, m.created_on, m.id))"
    )


@lru_cache(maxsize=64)
def redrive_jobs(
    q: str,
    filters: frozenset[str],
    *,
    destination: bool,
    skip_locked: bool = True,
    table: str | None = None,
) -> Statement:
    """Move up to ``limit`` jobs, oldest first, out of the dead letter queue ``queue``.

    Each is created again, fresh, in its source queue (or ``destination``) and deleted
    here. One whose destination's policy refuses it (ON CONFLICT: a key already held)
    is failed in place with the reason. One statement of data-modifying CTEs (each
    candidate gets its new id up front, so the insert's RETURNING says which were
    created); engines without such CTEs on one table run :func:`redrive_candidates`,
    :func:`insert_redriven`, a delete and :func:`fail_not_redriven` in one transaction.
    Row: ``moved``.
    """
    p = Params()
    jobs = job_table(q, table)
    lock = "FOR UPDATE OF j SKIP LOCKED" if skip_locked else "FOR UPDATE OF j"
    candidates = (
        f"SELECT j.id, gen_random_uuid() AS new_id FROM {jobs} j"
        f" WHERE {_redrive_where(q, p, filters, destination)} ORDER BY j.created_on, j.id"
        f" LIMIT {p('limit')}::int {lock}"
    )
    into = f"{p('destination')}::text" if destination else "m.source_name"
    inserted = (
        f"INSERT INTO {q}.job ({_REDRIVE_COLUMNS})"
        f" SELECT {_redrive_values(q, 'c.new_id', destination, p)}"
        f" FROM c JOIN {jobs} m ON m.name = {p('queue')}::text AND m.id = c.id"
        f" JOIN {q}.queue d ON d.name = {into} ORDER BY m.created_on, m.id"
        " ON CONFLICT DO NOTHING RETURNING id"
    )
    refused = "m.id IN (SELECT id FROM settled WHERE NOT moved)"
    into_failed = f"{p('destination')}::text" if destination else "j.source_name"
    sql = (
        f"WITH c AS ({candidates}), ins AS ({inserted}),"
        " settled AS (SELECT c.id, i.id IS NOT NULL AS moved FROM c LEFT JOIN ins i"
        " ON i.id = c.new_id),"
        f" removed AS (DELETE FROM {jobs} WHERE name = {p('queue')}::text"
        " AND id IN (SELECT id FROM settled WHERE moved)),"
        f" failed AS (UPDATE {jobs} j SET {_NOT_REDRIVEN.format(now=job_now(q))}"
        f" FROM settled s, {q}.queue d WHERE j.name = {p('queue')}::text AND j.id = s.id"
        f" AND NOT s.moved AND d.name = {into_failed}"
        f" AND {_failable(q, table, refused)})"
        " SELECT count(*)::int AS moved FROM ins"
    )
    return p.statement(sql)


@lru_cache(maxsize=64)
def preview_redrive(
    q: str, filters: frozenset[str], *, destination: bool, table: str | None = None
) -> Statement:
    """What :func:`redrive_jobs` would do, read only: up to ``limit`` of the jobs it would
    move, each with its ``destination``, and up to ``limit`` it would leave in place (no
    queue to go to), each with a NULL one. The same predicate, so the two cannot disagree.
    """
    p = Params()
    into = f"{p('destination')}::text" if destination else "j.source_name"
    read = (
        f"SELECT d.name AS destination FROM {job_table(q, table)} j"
        f" LEFT JOIN {q}.queue d ON d.name = {into}"
        f" WHERE {_redrive_where(q, p, filters, destination, routable=False)}"
    )
    limit = f"LIMIT {p('limit')}::int"
    return p.statement(
        f"({read} AND d.name IS NOT NULL {limit}) UNION ALL ({read} AND d.name IS NULL {limit})"
    )


@lru_cache(maxsize=64)
def redrive_candidates(
    q: str, filters: frozenset[str], *, destination: bool, table: str | None = None
) -> Statement:
    """The split redrive's first step: lock the jobs :func:`redrive_jobs` would move.

    Same predicate, order and limit; each gets its new id. Rows ``id, new_id``.
    """
    p = Params()
    sql = (
        f"SELECT j.id, gen_random_uuid() AS new_id FROM {job_table(q, table)} j"
        f" WHERE {_redrive_where(q, p, filters, destination)} ORDER BY j.created_on, j.id"
        f" LIMIT {p('limit')}::int FOR UPDATE"
    )
    return p.statement(sql)


@lru_cache(maxsize=16)
def insert_redriven(q: str, *, destination: bool, table: str | None = None) -> Statement:
    """The split redrive's second step: create the candidates ``ids`` again.

    With their ``new_ids`` (same order). Rows: the ``id`` of each job created.
    """
    p = Params()
    into = f"{p('destination')}::text" if destination else "m.source_name"
    sql = (
        f"INSERT INTO {q}.job ({_REDRIVE_COLUMNS})"
        f" SELECT {_redrive_values(q, 'c.new_id', destination, p)}"
        f" FROM unnest({p('ids')}::uuid[], {p('new_ids')}::uuid[]) AS c(id, new_id)"
        f" JOIN {job_table(q, table)} m ON m.name = {p('queue')}::text AND m.id = c.id"
        f" JOIN {q}.queue d ON d.name = {into} ORDER BY m.created_on, m.id"
        " ON CONFLICT DO NOTHING RETURNING id"
    )
    return p.statement(sql)


@lru_cache(maxsize=16)
def fail_not_redriven(q: str, *, destination: bool, table: str | None = None) -> Statement:
    """The split redrive's last step: fail in place the candidates that were not created again.

    The candidates are ``ids``; each is failed with the reason (see :func:`redrive_jobs`).
    """
    p = Params()
    into = f"{p('destination')}::text" if destination else "j.source_name"
    refused = f"m.name = {p('queue')}::text AND m.id = ANY({p('ids')}::uuid[])"
    sql = (
        f"UPDATE {job_table(q, table)} j SET {_NOT_REDRIVEN.format(now=job_now(q))}"
        f" FROM {q}.queue d WHERE j.name = {p('queue')}::text AND j.id = ANY({p('ids')}::uuid[])"
        f" AND d.name = {into} AND {_failable(q, table, refused)}"
    )
    return p.statement(sql)

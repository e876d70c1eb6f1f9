"""SQL for the job verbs: send/insert, fetch, complete, fail, cancel, resume, retry,
delete, touch and the job reads; and the monitor's expiry batches, which fail jobs
exactly as fail does.

Every builder is a pure function of the quoted schema (``q``, from
``Context.q``) and a few flags; it returns a :class:`Statement` whose
``params`` name the ``$n`` values in order. Values only ever travel as
parameters. Builders are cached: the same flags give the same text, so
drivers can reuse their prepared statements.

Statements address the job table ``<schema>.job``: in the partitioned shape
PostgreSQL routes each row to the queue's partition (or ``job_common``), in
the single-table shape it is the table itself (the expiry batches pick from one
physical table, as pg-boss's do). Every timestamp is
``<schema>.job_now()``, pg-boss's one clock.

Most verbs begin with ``q``, the queue's row, and end by selecting from ``q
LEFT JOIN <result>``: no row back means the queue does not exist, a row with
NULLs means it exists and nothing matched. So one round trip both does the
work and tells an unknown queue apart, and nothing is written for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement

__all__ = [
    "FETCH_COLUMNS",
    "JOB_COLUMNS",
    "JOB_COLUMN_TYPES",
    "REINSERT_COLUMNS",
    "cancel_jobs",
    "complete_jobs",
    "delete_jobs",
    "expire_jobs",
    "expire_remove",
    "fail_jobs",
    "fail_reinsert_failed",
    "fail_reinsert_retry",
    "fail_remove",
    "fetch_jobs",
    "find_jobs",
    "get_job",
    "insert_jobs",
    "resume_jobs",
    "retry_jobs",
    "send_job",
    "touch_jobs",
]

#: the job table's columns in table order, with the type each has in a JSON recordset
JOB_COLUMN_TYPES: Mapping[str, str] = {
    "id": "uuid",
    "name": "text",
    "priority": "integer",
    "data": "jsonb",
    "state": "text",  # the enum travels as text and is cast where it is written
    "retry_limit": "integer",
    "retry_count": "integer",
    "retry_delay": "integer",
    "retry_backoff": "boolean",
    "retry_delay_max": "integer",
    "expire_seconds": "integer",
    "deletion_seconds": "integer",
    "singleton_key": "text",
    "singleton_on": "timestamp",
    "group_id": "text",
    "group_tier": "text",
    "start_after": "timestamptz",
    "created_on": "timestamptz",
    "started_on": "timestamptz",
    "completed_on": "timestamptz",
    "keep_until": "timestamptz",
    "output": "jsonb",
    "dead_letter": "text",
    "policy": "text",
    "heartbeat_on": "timestamptz",
    "heartbeat_seconds": "integer",
    "blocked": "boolean",
    "blocking": "boolean",
    "pending_dependencies": "integer",
    "source_name": "text",
    "source_id": "uuid",
    "source_created_on": "timestamptz",
    "source_retry_count": "integer",
    "source_output": "jsonb",
    "source_root_id": "uuid",
    "trace_context": "jsonb",
    "upsert_by_key": "boolean",
}
JOB_COLUMNS: tuple[str, ...] = tuple(JOB_COLUMN_TYPES)
#: what a failed job keeps when it is deleted and inserted again: all but upsert_by_key
REINSERT_COLUMNS: tuple[str, ...] = JOB_COLUMNS[:-1]
#: what fetch returns without include_metadata (a worker's needs, and the sort keys)
FETCH_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "priority",
    "data",
    "created_on",
    "retry_count",
    "expire_seconds",
    "heartbeat_seconds",
    "group_id",
    "group_tier",
)

#: the options a send or insert record may carry, with their recordset types
_SEND_RECORD: Mapping[str, str] = {
    "id": "uuid",
    "data": "jsonb",
    "priority": "integer",
    "start_after": "timestamptz",
    "start_after_seconds": "float8",
    "singleton_key": "text",
    "singleton_seconds": "integer",
    "retry_limit": "integer",
    "retry_delay": "integer",
    "retry_backoff": "boolean",
    "retry_delay_max": "integer",
    "expire_in_seconds": "integer",
    "retention_seconds": "integer",
    "delete_after_seconds": "integer",
    "heartbeat_seconds": "integer",
    "dead_letter": "text",
    "group_id": "text",
    "group_tier": "text",
}

# Queue defaults (pg-boss's), used only if a queue row ever lacks a value.
_DEFAULT_RETRY_LIMIT = 2
_DEFAULT_EXPIRE_SECONDS = 900
_DEFAULT_RETENTION_SECONDS = 1_209_600
_DEFAULT_DELETION_SECONDS = 604_800


def _now(q: str) -> str:
    return f"{q}.job_now()"


def _recordset(p: Params, param: str, columns: Mapping[str, str], alias: str = "r") -> str:
    """``jsonb_to_recordset($n) AS alias(col type, ...)``: a JSON array parameter as rows."""
    spec = ", ".join(f"{name} {kind}" for name, kind in columns.items())
    return f"jsonb_to_recordset({p(param)}::jsonb) AS {alias}({spec})"


def _returning(columns: tuple[str, ...], alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in columns)


def _targets(p: Params, alias: str, fenced: bool) -> str:
    """The jobs a command acts on: the queue's jobs among ``ids``; with ``fenced``, those
    given as a Job only while still active in the attempt they were fetched in."""
    where = f"{alias}.name = {p('queue')}::text AND {alias}.id = ANY({p('ids')}::uuid[])"
    if fenced:
        where += (
            f" AND ({alias}.id = ANY({p('plain_ids')}::uuid[])"
            f" OR ({alias}.state = 'active'"
            f" AND ({alias}.id::text || ':' || {alias}.retry_count::text)"
            f" = ANY({p('fences')}::text[])))"
        )
    return where


def _queue_cte(
    q: str, p: Params, columns: str = "name", table: str | None = None, policy: bool = False
) -> str:
    """``q``: the queue's row, only while it still has ``policy`` (a parameter) and
    ``table`` when the statement was built for them."""
    where = f"name = {p('queue')}::text"
    if policy:
        where += f" AND policy = {p('policy')}::text"
    return f"q AS (SELECT {columns} FROM {q}.queue WHERE {where}{_table_check(p, table)})"


def _job_table(q: str, table: str | None) -> str:
    """The table a statement addresses: the queue's own physical job table when the
    caller knows it (as pg-boss does: no partition routing, no other partition
    planned or locked), else ``job`` (partitioned: PostgreSQL routes by name)."""
    return f"{q}.{quote(table)}" if table else f"{q}.job"


def _table_check(p: Params, table: str | None, alias: str = "") -> str:
    """With a known table: the queue row must still name it (else the statement finds
    no queue, and the caller reads the route again)."""
    return f" AND {alias}table_name = {p('table')}::text" if table else ""


# --------------------------------------------------------------------------- insert


def _new_job(q: str, *, next_slot: bool, created_on: str) -> tuple[str, dict[str, str]]:
    """A new job's column values from a send record ``r`` and its queue's row ``q``:
    the ``start_after`` expression (given to the row as ``t.start_after``) and
    every column's expression. ``next_slot`` is debounce's second attempt: the
    next throttle slot, starting about a second after that slot begins."""
    now = _now(q)
    epoch = f"extract(epoch FROM {now})::float8"
    if next_slot:
        offset = "r.singleton_seconds"
        # one second into the next slot (pg-boss: seconds left in this slot, plus 1 if s > 1)
        start_after = (
            f"{now} + (r.singleton_seconds - floor({epoch}"
            f" - r.singleton_seconds * floor({epoch} / r.singleton_seconds))"
            " + CASE WHEN r.singleton_seconds > 1 THEN 1 ELSE 0 END) * interval '1 second'"
        )
    else:
        offset = "0"
        start_after = (
            f"COALESCE(r.start_after, {now}"
            " + COALESCE(r.start_after_seconds, 0) * interval '1 second')"
        )
    slot = (
        "CASE WHEN r.singleton_seconds IS NOT NULL THEN to_timestamp((r.singleton_seconds"
        f" * floor(({epoch} + {offset}) / r.singleton_seconds))::float8) AT TIME ZONE 'UTC' END"
    )
    return start_after, {
        "id": "COALESCE(r.id, gen_random_uuid())",
        "name": "q.name",
        "priority": "COALESCE(r.priority, 0)",
        "data": "r.data",
        "retry_limit": f"COALESCE(r.retry_limit, q.retry_limit, {_DEFAULT_RETRY_LIMIT})",
        "retry_delay": "COALESCE(r.retry_delay, q.retry_delay, 0)",
        "retry_backoff": "COALESCE(r.retry_backoff, q.retry_backoff, false)",
        "retry_delay_max": "COALESCE(r.retry_delay_max, q.retry_delay_max)",
        "expire_seconds": (
            f"COALESCE(r.expire_in_seconds, q.expire_seconds, {_DEFAULT_EXPIRE_SECONDS})"
        ),
        "deletion_seconds": (
            f"COALESCE(r.delete_after_seconds, q.deletion_seconds, {_DEFAULT_DELETION_SECONDS})"
        ),
        "singleton_key": "r.singleton_key",
        "singleton_on": slot,
        "group_id": "r.group_id",
        "group_tier": "r.group_tier",
        "start_after": "t.start_after",
        "created_on": created_on,
        "keep_until": (
            "t.start_after + COALESCE(r.retention_seconds, q.retention_seconds,"
            f" {_DEFAULT_RETENTION_SECONDS}) * interval '1 second'"
        ),
        "dead_letter": "COALESCE(r.dead_letter, q.dead_letter)",
        "policy": "q.policy",
        "heartbeat_seconds": "COALESCE(r.heartbeat_seconds, q.heartbeat_seconds)",
    }


def _conflicts(drop: bool) -> str:
    return " ON CONFLICT DO NOTHING" if drop else ""


@lru_cache(maxsize=64)
def insert_jobs(
    q: str,
    *,
    notify: bool = False,
    check_dead_letters: bool = False,
    next_slot: bool = False,
    drop_conflicts: bool = True,
    table: str | None = None,
    payloads: bool = False,
) -> Statement:
    """Insert a batch of jobs given as one JSON array, unset options taken from the queue.

    Same on every backend: one INSERT ... SELECT from ``jsonb_to_recordset``,
    ON CONFLICT DO NOTHING so a policy or throttle index silently drops a job.
    With ``payloads`` the array holds each job's ``data`` alone and every option
    comes from the queue: the server expands it with ``jsonb_array_elements``,
    no per-row record to build (the bulk case, a tenth less server time).
    Without ``drop_conflicts`` a conflict raises instead (cheaper where none is
    expected: a standard queue, no throttle, so only a duplicate id could).
    ``notify`` adds pg_notify(channel, queue) when the queue has ``notify`` and
    a row is ready now (only where LISTEN/NOTIFY exists). ``check_dead_letters``
    inserts nothing if a job names a dead letter queue that does not exist, and
    reports it. ``next_slot``: see :func:`_new_job`. ``table``: see :func:`_job_table`.

    Result (one row): ``queues`` (0 = unknown queue), ``ids`` (those inserted, in
    input order; the server makes the ids not given),
    ``missing_dead_letters``, ``notified``.
    """
    p = Params()
    now = _now(q)
    queue = _queue_cte(
        q,
        p,
        "name, policy, retry_limit, retry_delay, retry_backoff, retry_delay_max, expire_seconds,"
        " retention_seconds, deletion_seconds, dead_letter, heartbeat_seconds, notify",
        table,
    )
    if payloads:
        assert not (check_dead_letters or next_slot), "a payload alone names no such option"
        unset = ", ".join(f"NULL::{kind} AS {n}" for n, kind in _SEND_RECORD.items() if n != "data")
        # a JSON null payload is stored as SQL NULL, as the recordset reads {"data": null}
        rows = (
            f"SELECT NULLIF(e.value, 'null'::jsonb) AS data, {unset}, e.ordinal"
            f" FROM jsonb_array_elements({p('jobs')}::jsonb) WITH ORDINALITY AS e(value, ordinal)"
        )
    else:
        rows = (
            f"SELECT *, row_number() OVER () AS ordinal FROM {_recordset(p, 'jobs', _SEND_RECORD)}"
        )
    # rows of one insert are created a microsecond apart, in input order: claim order
    # (priority, created_on) is then insertion order, and the fetch index serves it
    created_on = f"{now} + (r.ordinal - 1) * interval '1 microsecond'"
    start_after, columns = _new_job(q, next_slot=next_slot, created_on=created_on)
    ctes = [queue, f"r AS ({rows})"]
    guard = ""
    if check_dead_letters:
        ctes.append(
            "missing AS (SELECT DISTINCT r.dead_letter FROM r WHERE r.dead_letter IS NOT NULL"
            f" AND NOT EXISTS (SELECT 1 FROM {q}.queue d WHERE d.name = r.dead_letter))"
        )
        guard = "WHERE NOT EXISTS (SELECT 1 FROM missing)"
    ctes.append(
        f"added AS (INSERT INTO {_job_table(q, table)} ({', '.join(columns)})"
        f" SELECT {', '.join(columns.values())}"
        f" FROM r CROSS JOIN q CROSS JOIN LATERAL (SELECT {start_after} AS start_after) t"
        f" {guard}{_conflicts(drop_conflicts)} RETURNING id, start_after, created_on)"
    )
    select = [
        "(SELECT count(*) FROM q)::int AS queues",
        # created_on is distinct per row and follows the input: the ids in input order
        "COALESCE((SELECT array_agg(id ORDER BY created_on) FROM added), ARRAY[]::uuid[]) AS ids",
    ]
    if check_dead_letters:
        select.append("(SELECT array_agg(dead_letter) FROM missing) AS missing_dead_letters")
    if notify:
        # pg_notify runs inside count(): an aggregate's argument is always evaluated
        select.append(
            f"(SELECT count(pg_notify({p('channel')}::text, q.name)) FROM q WHERE q.notify"
            f" AND EXISTS (SELECT 1 FROM added WHERE added.start_after <= {now}))::int"
            " AS notified"
        )
    return p.statement(f"WITH {', '.join(ctes)} SELECT {', '.join(select)}")


@lru_cache(maxsize=32)
def send_job(
    q: str,
    *,
    notify: bool = False,
    next_slot: bool = False,
    drop_conflicts: bool = True,
    table: str | None = None,
) -> Statement:
    """Insert one job given as a JSON object, unset options taken from the queue.

    The single-row form of :func:`insert_jobs` (same on every backend): a plain
    INSERT ... SELECT from the queue row and ``jsonb_to_record``, no CTEs, so
    the server does a third less work for a send. ``notify`` calls pg_notify in
    the row's filter, where the queue row is at hand (a RETURNING subquery would
    read it again: a tenth of a send's server time). Rows: ``id`` of the job
    inserted; none when the queue does not exist (or no longer has ``table``) or
    a policy or throttle index dropped the job (a ready job then still notified).
    """
    p = Params()
    now = _now(q)
    start_after, columns = _new_job(q, next_slot=next_slot, created_on=now)
    spec = ", ".join(f"{name} {kind}" for name, kind in _SEND_RECORD.items())
    where = f"q.name = {p('queue')}::text{_table_check(p, table, 'q.')}"
    if notify:
        # CASE, not OR: evaluated in order, so only a ready job of a notify queue notifies
        where += (
            f" AND CASE WHEN q.notify AND t.start_after <= {now}"
            f" THEN pg_notify({p('channel')}::text, q.name) IS NOT NULL ELSE true END"
        )
    sql = (
        f"INSERT INTO {_job_table(q, table)} AS j ({', '.join(columns)})"
        f" SELECT {', '.join(columns.values())}"
        f" FROM {q}.queue q CROSS JOIN jsonb_to_record({p('job')}::jsonb) AS r({spec})"
        f" CROSS JOIN LATERAL (SELECT {start_after} AS start_after) t"
        f" WHERE {where}{_conflicts(drop_conflicts)} RETURNING j.id"
    )
    return p.statement(sql)


# --------------------------------------------------------------------------- fetch


@lru_cache(maxsize=256)
def fetch_jobs(
    q: str,
    *,
    skip_locked: bool,
    policy: str = "standard",
    priority: bool = True,
    order_by_created_on: bool = True,
    ignore_start_after: bool = False,
    min_priority: bool = False,
    max_priority: bool = False,
    include_metadata: bool = False,
    table: str | None = None,
) -> Statement:
    """Claim up to ``limit`` ready jobs of a queue with ``policy`` (in ``table``, see
    :func:`_job_table`): mark them active and return them.

    One statement, built for one policy so the server plans only what that policy
    needs (a queue's policy never changes; the statement checks it). ``skip_locked``
    (FetchStrategy.SKIP_LOCKED) locks the candidates FOR UPDATE SKIP LOCKED, so
    concurrent claimers take disjoint rows; without it (ATOMIC_UPDATE, for
    engines without SKIP LOCKED) the candidates are read unlocked and the UPDATE
    rechecks ``state < 'active'``, so a row two claimers both picked goes to one
    of them and the other simply gets fewer. key_strict_fifo takes only the head
    of each key and nothing from a key with a job active, in retry or failed;
    singleton and stately skip keys with an active job and take one job per key
    per batch.

    Claim order: ``priority DESC`` (unless ``priority=False``), then ``created_on``
    (unless ``order_by_created_on=False``): exactly the order of the fetch index
    (i11), so the default claim reads the index up to its LIMIT and sorts nothing,
    whatever the backlog and however stale the table's statistics. Rows sharing a
    ``created_on`` (a pg-boss batch, sends in one transaction) are claimed in the
    index's order, as pg-boss claims them; qcore's own batches give each row its own
    ``created_on`` (see :func:`insert_jobs`), so one insert is claimed as given. The
    claimed rows come back sorted by the same keys, then ``id``.

    Rows: the claimed jobs (``FETCH_COLUMNS`` or, with ``include_metadata``,
    every column) in claim order; one row of NULLs when none; no row, and nothing
    claimed, when the queue does not exist or has another policy or table.
    """
    p = Params()
    now = _now(q)
    jobs = _job_table(q, table)
    due = "" if ignore_start_after else f" AND j.start_after <= {now}"
    bounds = ""
    if min_priority:
        bounds += f" AND j.priority >= {p('min_priority')}::int"
    if max_priority:
        bounds += f" AND j.priority <= {p('max_priority')}::int"
    keys = (["priority DESC"] if priority else []) + (["created_on"] if order_by_created_on else [])
    order = f" ORDER BY {', '.join('j.' + k for k in keys)}" if keys else ""
    returned = ", ".join("claimed." + k for k in [*keys, "id"])
    if policy == "key_strict_fifo":
        other_due = "" if ignore_start_after else f" AND o.start_after <= {now}"
        shape = (
            f" AND NOT EXISTS (SELECT 1 FROM {jobs} o WHERE o.name = {p('queue')}::text"
            " AND o.singleton_key = j.singleton_key AND o.id <> j.id"
            " AND (o.state IN ('retry', 'active', 'failed')"
            " OR (j.state = 'created' AND o.state = 'created' AND NOT o.blocked"
            f"{other_due} AND (o.created_on, o.id) < (j.created_on, j.id))))"
        )
    elif policy in ("singleton", "stately"):
        shape = (
            f" AND NOT EXISTS (SELECT 1 FROM {jobs} a WHERE a.name = {p('queue')}::text"
            " AND a.state = 'active' AND a.policy = j.policy"
            " AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, ''))"
        )
    else:
        shape = ""
    lock = " FOR UPDATE OF j SKIP LOCKED" if skip_locked else ""
    recheck = "" if skip_locked else " AND j.state < 'active'"
    columns = JOB_COLUMNS if include_metadata else FETCH_COLUMNS
    ctes = [
        _queue_cte(q, p, table=table, policy=True),
        f"""candidates AS (
  SELECT j.id, j.singleton_key, j.priority, j.created_on
  FROM {jobs} j
  WHERE EXISTS (SELECT 1 FROM q) AND j.name = {p("queue")}::text AND j.state < 'active'
    AND NOT j.blocked{due}{bounds}{shape}
  {order} LIMIT {p("limit")}::int{lock}
)""",
    ]
    chosen = "candidates"
    if policy in ("singleton", "stately"):
        # one job per key per batch: the first of each key in claim order
        key_order = ", ".join(["COALESCE(singleton_key, '')", *keys, "id"])
        ctes.append(
            "chosen AS (SELECT DISTINCT ON (COALESCE(singleton_key, '')) id FROM candidates"
            f" ORDER BY {key_order})"
        )
        chosen = "chosen"
    ctes.append(
        f"""claimed AS (
  UPDATE {jobs} j SET state = 'active', started_on = {now}, heartbeat_on = {now},
    retry_count = CASE WHEN j.started_on IS NULL THEN j.retry_count ELSE j.retry_count + 1 END
  FROM {chosen} c
  WHERE j.name = {p("queue")}::text AND j.id = c.id{recheck}
  RETURNING {_returning(columns, "j")}
)"""
    )
    select = f"SELECT claimed.* FROM q LEFT JOIN claimed ON true ORDER BY {returned}"
    return p.statement(f"WITH {', '.join(ctes)}\n{select}")


# --------------------------------------------------------------------------- settle


def _command(q: str, p: Params, mutation: str, result: str = "id", table: str | None = None) -> str:
    """A command CTE wrapped in the queue guard: rows ``queue, <result columns>``."""
    cols = ", ".join(f"done.{c}" for c in result.split(", "))
    return (
        f"WITH {_queue_cte(q, p, table=table)}, done AS ({mutation})"
        f" SELECT q.name AS queue, {cols} FROM q LEFT JOIN done ON true"
    )


@lru_cache(maxsize=256)
def complete_jobs(
    q: str, *, fenced: bool = False, include_queued: bool = False, table: str | None = None
) -> Statement:
    """Mark active jobs completed with an output (same on every backend: one UPDATE).

    ``include_queued`` also completes queued jobs and releases flow-blocked ones.
    ``table``: see :func:`_job_table`.
    """
    p = Params()
    now = _now(q)
    where = _targets(p, "j", fenced)
    state = "j.state < 'completed'" if include_queued else "j.state = 'active'"
    release = ", blocked = false, pending_dependencies = 0" if include_queued else ""
    mutation = (
        f"UPDATE {_job_table(q, table)} j SET state = 'completed', completed_on = {now},"
        f" output = {p('output')}::jsonb{release}"
        f" WHERE {where} AND {state} RETURNING j.id"
    )
    return p.statement(_command(q, p, mutation, table=table))


@lru_cache(maxsize=256)
def cancel_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Cancel jobs not yet settled (one UPDATE on every backend)."""
    p = Params()
    mutation = (
        f"UPDATE {_job_table(q, table)} j SET state = 'cancelled', completed_on = {_now(q)}"
        f" WHERE {_targets(p, 'j', fenced)} AND j.state < 'completed' RETURNING j.id"
    )
    return p.statement(_command(q, p, mutation, table=table))


@lru_cache(maxsize=256)
def resume_jobs(q: str, *, table: str | None = None) -> Statement:
    """Bring cancelled jobs back to created, no earlier than now (one UPDATE everywhere).

    Rows also tell whether each resumed job was in the queue's cached
    ``retained_count`` (finished by its ``retained_on``), from the completion
    time it had before.
    """
    p = Params()
    now = _now(q)
    where = _targets(p, "c", False)
    jobs = _job_table(q, table)
    mutation = (
        f"UPDATE {jobs} j SET state = 'created', completed_on = NULL, upsert_by_key = NULL,"
        f" start_after = GREATEST(j.start_after, {now})"
        f" FROM (SELECT c.id, c.completed_on FROM {jobs} c WHERE {where}"
        " AND c.state = 'cancelled') was"
        f" WHERE j.name = {p('queue')}::text AND j.id = was.id AND j.state = 'cancelled'"
        f" RETURNING j.id, was.completed_on <= (SELECT retained_on FROM {q}.queue"
        f" WHERE name = {p('queue')}::text) AS retained"
    )
    return p.statement(_command(q, p, mutation, "id, retained", table))


@lru_cache(maxsize=256)
def retry_jobs(q: str, *, notify: bool = False, table: str | None = None) -> Statement:
    """Give failed jobs one more attempt: back to retry with retry_limit + 1 (one UPDATE).

    ``notify`` (where LISTEN/NOTIFY exists) also sends pg_notify(channel, queue) in
    the same statement when the queue has ``notify`` and a retried job is ready now, so
    idle workers wake at once (pg-boss's retry does not notify; a pg-boss listener
    simply fetches once more). Rows ``queue, id``.
    """
    p = Params()
    now = _now(q)
    mutation = (
        f"UPDATE {_job_table(q, table)} j SET state = 'retry', retry_limit = j.retry_limit + 1,"
        f" completed_on = NULL, start_after = GREATEST(j.start_after, {now})"
        f" WHERE {_targets(p, 'j', False)} AND j.state = 'failed' RETURNING j.id, j.start_after"
    )
    if not notify:
        return p.statement(_command(q, p, mutation, table=table))
    # an uncorrelated scalar subquery runs once; pg_notify inside count() always runs
    notified = (
        f"(SELECT count(pg_notify({p('channel')}::text, n.name)) FROM q n WHERE n.notify"
        f" AND EXISTS (SELECT 1 FROM done WHERE done.start_after <= {now}))::int AS notified"
    )
    sql = (
        f"WITH {_queue_cte(q, p, 'name, notify', table)}, done AS ({mutation})"
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
        f"DELETE FROM {_job_table(q, table)} j WHERE {_targets(p, 'j', fenced)}"
        " RETURNING j.id, (j.state IN ('completed', 'cancelled') AND j.completed_on <="
        f" (SELECT retained_on FROM {q}.queue WHERE name = {p('queue')}::text)) AS retained"
    )
    return p.statement(_command(q, p, mutation, "id, retained", table))


@lru_cache(maxsize=256)
def touch_jobs(q: str, *, fenced: bool = False, table: str | None = None) -> Statement:
    """Refresh the heartbeat of active jobs (one UPDATE on every backend)."""
    p = Params()
    mutation = (
        f"UPDATE {_job_table(q, table)} j SET heartbeat_on = {_now(q)}"
        f" WHERE {_targets(p, 'j', fenced)} AND j.state = 'active' RETURNING j.id"
    )
    return p.statement(_command(q, p, mutation, table=table))


# --------------------------------------------------------------------------- fail


def _retry_delay(alias: str) -> str:
    """Seconds until a failed attempt runs again: retry_delay, or with retry_backoff a
    random delay in [d*2^k, d*2^(k+1)) for attempt k (exponent at most 16, d at least 1),
    capped by retry_delay_max (LEAST ignores a NULL cap)."""
    a = alias
    exp = f"2 ^ LEAST(16, {a}.retry_count + 1)"
    return (
        f"CASE WHEN NOT {a}.retry_backoff THEN {a}.retry_delay::float8"
        f" ELSE LEAST({a}.retry_delay_max, GREATEST({a}.retry_delay, 1)"
        f" * ({exp} / 2 + {exp} / 2 * random())) END"
    )


def _failed_copy(q: str, src: str, output: str) -> dict[str, str]:
    """A deleted job inserted again as failed: completed now, everything else kept."""
    values = {c: f"{src}.{c}" for c in REINSERT_COLUMNS}
    values.update(
        state=f"'failed'::{q}.job_state",
        completed_on=_now(q),
        output=output,
        heartbeat_on="NULL::timestamptz",
    )
    return values


def _dead_letter_copy(q: str, src: str, dlq: str, output: str) -> dict[str, str]:
    """A new job in the dead letter queue ``dlq`` for the failed job ``src``: its payload,
    the dead letter queue's settings, and ``source_*`` saying where it came from. Columns
    pg-boss leaves at their defaults are given those defaults."""
    now = _now(q)
    return {
        "id": "gen_random_uuid()",
        "name": f"{dlq}.name",
        "priority": f"{src}.priority",
        "data": f"{src}.data",
        "state": f"'created'::{q}.job_state",
        "retry_limit": f"{dlq}.retry_limit",
        "retry_count": "0",
        "retry_delay": f"{dlq}.retry_delay",
        "retry_backoff": f"{dlq}.retry_backoff",
        "retry_delay_max": "NULL::integer",
        "expire_seconds": f"{dlq}.expire_seconds",
        "deletion_seconds": f"{dlq}.deletion_seconds",
        "singleton_key": f"{src}.singleton_key",
        "singleton_on": "NULL::timestamp",
        "group_id": f"{src}.group_id",
        "group_tier": f"{src}.group_tier",
        "start_after": now,
        "created_on": now,
        "started_on": "NULL::timestamptz",
        "completed_on": "NULL::timestamptz",
        "keep_until": f"{now} + {dlq}.retention_seconds * interval '1 second'",
        "output": "NULL::jsonb",
        "dead_letter": "NULL::text",
        "policy": "NULL::text",
        "heartbeat_on": "NULL::timestamptz",
        "heartbeat_seconds": f"{dlq}.heartbeat_seconds",
        "blocked": "false",
        "blocking": "false",
        "pending_dependencies": "0",
        "source_name": f"{src}.name",
        "source_id": f"{src}.id",
        "source_created_on": f"{src}.created_on",
        "source_retry_count": f"{src}.retry_count",
        "source_output": output,
        "source_root_id": f"COALESCE({src}.source_root_id, {src}.id)",
        "trace_context": f"{src}.trace_context",
    }


def _insert(q: str, values: Mapping[str, str]) -> str:
    return f"INSERT INTO {q}.job ({', '.join(values)}) SELECT {', '.join(values.values())}"


def _fail_removed(q: str, p: Params, output: str) -> str:
    """The CTEs that fail the jobs a preceding ``removed`` CTE deleted (``RETURNING j.*``):
    each is inserted again with the same id as retry (after its delay) or, out of retries,
    as failed; a re-insert a policy index refuses becomes failed too; every failed job
    with an existing dead letter queue gets a copy there. Ends with ``settled``: the ids
    inserted again. Shared by :func:`fail_jobs` and :func:`expire_jobs`."""
    now = _now(q)
    retried = {c: f"x.{c}" for c in REINSERT_COLUMNS}
    retried.update(
        state=(
            f"CASE WHEN x.retry_count < x.retry_limit THEN 'retry'::{q}.job_state"
            f" ELSE 'failed'::{q}.job_state END"
        ),
        start_after=(
            "CASE WHEN x.retry_count = x.retry_limit THEN x.start_after"
            f" ELSE {now} + ({_retry_delay('x')}) * interval '1 second' END"
        ),
        completed_on=f"CASE WHEN x.retry_count < x.retry_limit THEN NULL ELSE {now} END",
        output=output,
        heartbeat_on="NULL::timestamptz",
    )
    keep = ", ".join(REINSERT_COLUMNS)
    return f"""again AS (
  {_insert(q, retried)} FROM removed x
  ON CONFLICT DO NOTHING
  RETURNING {keep}
),
refused AS (
  {_insert(q, _failed_copy(q, "x", output))} FROM removed x
  WHERE x.id NOT IN (SELECT id FROM again)
  RETURNING {keep}
),
ended AS (
  SELECT * FROM again WHERE state = 'failed' UNION ALL SELECT * FROM refused
),
lettered AS (
  {_insert(q, _dead_letter_copy(q, "e", "dq", output))}
  FROM ended e JOIN {q}.queue dq ON dq.name = e.dead_letter
  RETURNING id
),
settled AS (SELECT id FROM again UNION ALL SELECT id FROM refused)"""


@lru_cache(maxsize=8)
def fail_jobs(q: str, *, fenced: bool = False) -> Statement:
    """Fail jobs in one statement (MutationStrategy.CTE): delete them, then fail what was
    deleted as :func:`_fail_removed` does (retry, failed, dead letter copy).

    Rows ``queue, id``: the ids of the jobs inserted again (retry or failed).
    """
    p = Params()
    sql = f"""WITH {_queue_cte(q, p)},
removed AS (
  DELETE FROM {q}.job j WHERE {_targets(p, "j", fenced)} AND j.state < 'completed'
  RETURNING j.*
),
{_fail_removed(q, p, f"{p('output')}::jsonb")}
SELECT q.name AS queue, settled.id FROM q LEFT JOIN settled ON true"""
    return p.statement(sql)


def _expired(q: str, p: Params, alias: str, heartbeat: bool) -> str:
    """Active jobs of the queues ``names`` past their expiry (``expire_seconds`` after
    they started) or, with ``heartbeat``, whose heartbeat is older than
    ``heartbeat_seconds``."""
    a, now = alias, _now(q)
    where = f"{a}.name = ANY({p('names')}::text[]) AND {a}.state = 'active'"
    if heartbeat:
        return (
            f"{where} AND {a}.heartbeat_seconds IS NOT NULL"
            f" AND {a}.heartbeat_on + {a}.heartbeat_seconds * interval '1 second' < {now}"
        )
    return f"{where} AND {a}.started_on + {a}.expire_seconds * interval '1 second' < {now}"


def _expired_batch(q: str, p: Params, table: str, heartbeat: bool) -> str:
    """At most ``limit`` expired jobs of one physical job table, unordered (nothing
    indexes the predicate, and a failed job no longer matches it, so the next batch
    cannot pick it again)."""
    return (
        f"SELECT e.name, e.id FROM {q}.{quote(table)} e"
        f" WHERE {_expired(q, p, 'e', heartbeat)} LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=64)
def expire_jobs(q: str, table: str, *, heartbeat: bool = False) -> Statement:
    """One expiry batch in one statement (MutationStrategy.CTE): pick at most ``limit``
    expired jobs of the queues ``names`` in the physical job table ``table``
    (``job_common``, ``j<hash>`` or ``job``), delete those still expired (the predicate
    is checked again, so a job settled meanwhile is left alone) and fail them with
    ``output`` as :func:`fail_jobs` fails jobs.

    One row: ``picked`` (the batch was full when it equals ``limit``), ``failed``.
    """
    p = Params()
    sql = f"""WITH picked AS ({_expired_batch(q, p, table, heartbeat)}),
removed AS (
  DELETE FROM {q}.{quote(table)} j
  WHERE (j.name, j.id) IN (SELECT name, id FROM picked) AND {_expired(q, p, "j", heartbeat)}
  RETURNING j.*
),
{_fail_removed(q, p, f"{p('output')}::jsonb")}
SELECT (SELECT count(*) FROM picked)::int AS picked,
  (SELECT count(*) FROM settled)::int AS failed"""
    return p.statement(sql)


@lru_cache(maxsize=64)
def expire_remove(q: str, table: str, *, heartbeat: bool = False) -> Statement:
    """Split expiry, step 1 (MutationStrategy.SPLIT): delete at most ``limit`` expired
    jobs of the queues ``names`` in ``table`` and return them whole; the client then
    fails them as a split fail does (:func:`fail_reinsert_retry`,
    :func:`fail_reinsert_failed`). Rows: every job column."""
    p = Params()
    sql = (
        f"DELETE FROM {q}.{quote(table)} j WHERE (j.name, j.id) IN"
        f" ({_expired_batch(q, p, table, heartbeat)}) AND {_expired(q, p, 'j', heartbeat)}"
        f" RETURNING {_returning(JOB_COLUMNS, 'j')}"
    )
    return p.statement(sql)


@lru_cache(maxsize=8)
def fail_remove(q: str, *, fenced: bool = False) -> Statement:
    """Split fail, step 1 (MutationStrategy.SPLIT, one table mutation per statement):
    delete the jobs to fail and return them whole, so the client can decide each one's
    fate and insert it again. Rows ``queue, <every job column>``."""
    p = Params()
    mutation = (
        f"DELETE FROM {q}.job j WHERE {_targets(p, 'j', fenced)} AND j.state < 'completed'"
        f" RETURNING {_returning(JOB_COLUMNS, 'j')}"
    )
    return p.statement(_command(q, p, mutation, ", ".join(JOB_COLUMNS)))


def _row_columns(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    columns = {c: JOB_COLUMN_TYPES[c] for c in REINSERT_COLUMNS}
    columns.update(extra or {})
    return columns


@lru_cache(maxsize=8)
def fail_reinsert_retry(q: str) -> Statement:
    """Split fail, step 2: insert the jobs with retries left again as retry, each
    ``delay`` seconds (computed by the client) from now; a row a policy index refuses
    is skipped. Rows: the ids inserted."""
    p = Params()
    values = {c: f"r.{c}" for c in REINSERT_COLUMNS}
    values.update(
        state=f"'retry'::{q}.job_state",
        start_after=f"{_now(q)} + r.delay * interval '1 second'",
        completed_on="NULL::timestamptz",
        output=f"{p('output')}::jsonb",
        heartbeat_on="NULL::timestamptz",
    )
    records = _recordset(p, "rows", _row_columns({"delay": "float8"}))
    sql = f"{_insert(q, values)} FROM {records} ON CONFLICT DO NOTHING RETURNING id"
    return p.statement(sql)


@lru_cache(maxsize=8)
def fail_reinsert_failed(q: str) -> Statement:
    """Split fail, step 3: insert the jobs out of retries (or refused as retry) again as
    failed, and a copy of each in its dead letter queue, as one INSERT (one mutation of
    the job table). A row's ``delay`` moves its start_after as a retry's would (NULL
    keeps it). Rows ``id, name``: a failed job keeps its queue's name."""
    p = Params()
    output = f"{p('output')}::jsonb"
    failed = _failed_copy(q, "r", output)
    failed["start_after"] = f"COALESCE({_now(q)} + r.delay * interval '1 second', r.start_after)"
    copies = _dead_letter_copy(q, "r", "dq", output)
    # the same parameter, expanded once in each branch of the UNION
    records = _recordset(p, "rows", _row_columns({"delay": "float8"}))
    sql = (
        f"INSERT INTO {q}.job ({', '.join(REINSERT_COLUMNS)})"
        f" SELECT {', '.join(failed[c] for c in REINSERT_COLUMNS)} FROM {records}"
        f" UNION ALL SELECT {', '.join(copies[c] for c in REINSERT_COLUMNS)}"
        f" FROM {records} JOIN {q}.queue dq ON dq.name = r.dead_letter"
        " RETURNING id, name"
    )
    return p.statement(sql)


# --------------------------------------------------------------------------- reads


@lru_cache(maxsize=8)
def get_job(q: str) -> Statement:
    """One job by id, every column (a plain read on every backend)."""
    p = Params()
    sql = (
        f"WITH {_queue_cte(q, p)} SELECT q.name AS queue, {_returning(JOB_COLUMNS, 'j')}"
        f" FROM q LEFT JOIN {q}.job j ON j.name = q.name AND j.id = {p('id')}::uuid"
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
) -> Statement:
    """A queue's jobs matching an id, a singleton key, data containing a JSON value
    (``@>``), and/or only queued ones; oldest first (a plain read everywhere)."""
    p = Params()
    conditions = ["j.name = q.name"]
    if by_id:
        conditions.append(f"j.id = {p('id')}::uuid")
    if by_key:
        conditions.append(f"j.singleton_key = {p('key')}::text")
    if by_data:
        conditions.append(f"j.data @> {p('data')}::jsonb")
    if queued:
        conditions.append("j.state < 'active'")
    sql = (
        f"WITH {_queue_cte(q, p)} SELECT q.name AS queue, {_returning(JOB_COLUMNS, 'j')}"
        f" FROM q LEFT JOIN {q}.job j ON {' AND '.join(conditions)}"
        " ORDER BY j.created_on, j.id"
    )
    return p.statement(sql)

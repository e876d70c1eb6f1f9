"""Queueing jobs: ``send`` (one) and ``insert`` (a batch).

Each job inherits the queue's options where it gives none, and a policy index decides
what is dropped.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.catalog import (
    DEFAULT_DELETION_SECONDS,
    DEFAULT_EXPIRE_SECONDS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_RETRY_LIMIT,
)
from qcore.sql.jobs.columns import (
    FLOW_RECORD,
    SEND_RECORD,
    job_now,
    job_table,
    queue_cte,
    recordset,
    table_check,
)


def _new_job(q: str, *, next_slot: bool, created_on: str) -> tuple[str, dict[str, str]]:
    """A new job's column values from a send record ``r`` and its queue's row ``q``.

    The ``start_after`` expression (given to the row as ``t.start_after``) and every
    column's expression. ``next_slot`` is debounce's second attempt: the next throttle
    slot, starting about a second after that slot begins.
    """
    now = job_now(q)
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
        "CASE WHEN r.singleton_slot IS NOT NULL THEN r.singleton_slot"
        " WHEN r.singleton_seconds IS NOT NULL THEN to_timestamp((r.singleton_seconds"
        f" * floor(({epoch} + {offset}) / r.singleton_seconds))::float8) AT TIME ZONE 'UTC' END"
    )
    return start_after, {
        "id": "COALESCE(r.id, gen_random_uuid())",
        "name": "q.name",
        "priority": "COALESCE(r.priority, 0)",
        "data": "r.data",
        "retry_limit": f"COALESCE(r.retry_limit, q.retry_limit, {DEFAULT_RETRY_LIMIT})",
        "retry_delay": "COALESCE(r.retry_delay, q.retry_delay, 0)",
        "retry_backoff": "COALESCE(r.retry_backoff, q.retry_backoff, false)",
        "retry_delay_max": "COALESCE(r.retry_delay_max, q.retry_delay_max)",
        "expire_seconds": (
            f"COALESCE(r.expire_in_seconds, q.expire_seconds, {DEFAULT_EXPIRE_SECONDS})"
        ),
        "deletion_seconds": (
            f"COALESCE(r.delete_after_seconds, q.deletion_seconds, {DEFAULT_DELETION_SECONDS})"
        ),
        "singleton_key": "r.singleton_key",
        "singleton_on": slot,
        "group_id": "r.group_id",
        "group_tier": "r.group_tier",
        "start_after": "t.start_after",
        "created_on": created_on,
        "keep_until": (
            "t.start_after + COALESCE(r.retention_seconds, q.retention_seconds,"
            f" {DEFAULT_RETENTION_SECONDS}) * interval '1 second'"
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
    flow: bool = False,
    upsert_by_key: bool = False,
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
    reports it. ``next_slot``: see :func:`_new_job`. ``table``: see :func:`job_table`.
    ``flow``: the records also say where each job is in a flow (``blocked``,
    ``blocking``, ``pending_dependencies``). ``upsert_by_key``: the jobs are
    ``upsert``'s, by their key (pg-boss's upsert index holds one queued per key).

    Result (one row): ``queues`` (0 = unknown queue), ``ids`` (those inserted, in
    input order; the server makes the ids not given),
    ``missing_dead_letters``, ``notified``.
    """
    p = Params()
    now = job_now(q)
    queue = queue_cte(
        q,
        p,
        "name, policy, retry_limit, retry_delay, retry_backoff, retry_delay_max, expire_seconds,"
        " retention_seconds, deletion_seconds, dead_letter, heartbeat_seconds, notify",
        table,
    )
    if payloads:
        assert not (check_dead_letters or next_slot), "a payload alone names no such option"
        unset = ", ".join(f"NULL::{kind} AS {n}" for n, kind in SEND_RECORD.items() if n != "data")
        # a JSON null payload is stored as SQL NULL, as the recordset reads {"data": null}
        rows = (
            f"SELECT NULLIF(e.value, 'null'::jsonb) AS data, {unset}, e.ordinal"
            f" FROM jsonb_array_elements({p('jobs')}::jsonb) WITH ORDINALITY AS e(value, ordinal)"
        )
    else:
        record = FLOW_RECORD if flow else SEND_RECORD
        rows = f"SELECT *, row_number() OVER () AS ordinal FROM {recordset(p, 'jobs', record)}"
    # rows of one insert are created a microsecond apart, in input order: claim order
    # (priority, created_on) is then insertion order, and the fetch index serves it
    created_on = f"{now} + (r.ordinal - 1) * interval '1 microsecond'"
    start_after, columns = _new_job(q, next_slot=next_slot, created_on=created_on)
    if flow:
        columns.update(
            blocked="COALESCE(r.blocked, false)",
            blocking="COALESCE(r.blocking, false)",
            pending_dependencies="COALESCE(r.pending_dependencies, 0)",
        )
    if upsert_by_key:
        columns["upsert_by_key"] = "true"
    ctes = [queue, f"r AS ({rows})"]
    guard = ""
    if check_dead_letters:
        ctes.append(
            "missing AS (SELECT DISTINCT r.dead_letter FROM r WHERE r.dead_letter IS NOT NULL"
            f" AND NOT EXISTS (SELECT 1 FROM {q}.queue d WHERE d.name = r.dead_letter))"
        )
        guard = "WHERE NOT EXISTS (SELECT 1 FROM missing)"
    ctes.append(
        f"added AS (INSERT INTO {job_table(q, table)} ({', '.join(columns)})"
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
    upsert_by_key: bool = False,
) -> Statement:
    """Insert one job given as a JSON object, unset options taken from the queue.

    The single-row form of :func:`insert_jobs` (same on every backend): a plain
    INSERT ... SELECT from the queue row and ``jsonb_to_record``, no CTEs, so
    the server does a third less work for a send. ``notify`` calls pg_notify in
    the row's filter, where the queue row is at hand (a RETURNING subquery would
    read it again: a tenth of a send's server time). Rows: ``id`` of the job
    inserted; none when the queue does not exist (or no longer has ``table``) or
    a policy or throttle index dropped the job (a ready job then still notified).
    ``upsert_by_key``: see :func:`insert_jobs`.
    """
    p = Params()
    now = job_now(q)
    start_after, columns = _new_job(q, next_slot=next_slot, created_on=now)
    if upsert_by_key:
        columns["upsert_by_key"] = "true"
    spec = ", ".join(f"{name} {kind}" for name, kind in SEND_RECORD.items())
    where = f"q.name = {p('queue')}::text{table_check(p, table, 'q.')}"
    if notify:
        # CASE, not OR: evaluated in order, so only a ready job of a notify queue notifies
        where += (
            f" AND CASE WHEN q.notify AND t.start_after <= {now}"
            f" THEN pg_notify({p('channel')}::text, q.name) IS NOT NULL ELSE true END"
        )
    sql = (
        f"INSERT INTO {job_table(q, table)} AS j ({', '.join(columns)})"
        f" SELECT {', '.join(columns.values())}"
        f" FROM {q}.queue q CROSS JOIN jsonb_to_record({p('job')}::jsonb) AS r({spec})"
        f" CROSS JOIN LATERAL (SELECT {start_after} AS start_after) t"
        f" WHERE {where}{_conflicts(drop_conflicts)} RETURNING j.id"
    )
    return p.statement(sql)

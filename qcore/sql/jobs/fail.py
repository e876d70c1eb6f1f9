"""Failing jobs: retry with backoff, else failed with a dead letter copy; and expiry.

Retry with backoff while retries are left, else failed with a copy to the dead letter
queue; and expiry, the monitor's failing of jobs past their time.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement
from qcore.sql.catalog import JOB_COLUMN_TYPES
from qcore.sql.jobs.columns import (
    JOB_COLUMNS,
    REINSERT_COLUMNS,
    command_cte,
    job_now,
    queue_cte,
    recordset,
    returning_columns,
    target_jobs,
)

#: The longest a failed attempt waits for its retry, in seconds (about 68 years).
#:
#: With ``retry_backoff`` the delay doubles with every attempt up to 2^16 times the
#: base, and with a large ``retry_delay`` and no ``retry_delay_max`` that product
#: leaves the range of a PostgreSQL interval (or of a timestamp once added to now):
#: the statement failing the job would raise, so the job would stay active, and the
#: monitor's expiry of a shared job table would raise on every pass, for every queue
#: in it. Every statement that turns a delay into a ``start_after`` caps it here.
#:
#: Why this value: it is the longest delay a queue or job can be given, as both
#: ``retry_delay`` and ``retry_delay_max`` are integer columns, so a NULL
#: ``retry_delay_max`` behaves as the largest one a user could have set, and no delay
#: a user chose is ever shortened. 68 years is "never" for any deployment, yet the
#: resulting date stays far inside what a timestamp, a Python ``datetime`` (year 9999)
#: and a JavaScript ``Date`` can hold, so the row stays readable by every client.
#: Below the cap the delay is exactly pg-boss's; above it pg-boss's own statement
#: fails or writes a date decades to millennia away (past year 9999 a Python driver
#: cannot read the row back).
MAX_RETRY_DELAY_SECONDS = 2**31 - 1


def _capped(seconds: str) -> str:
    """A delay in seconds, never above :data:`MAX_RETRY_DELAY_SECONDS`.

    A NULL delay gives the cap: LEAST ignores NULLs.
    """
    return f"LEAST({seconds}, {MAX_RETRY_DELAY_SECONDS}::float8)"


def _retry_delay(alias: str) -> str:
    """Seconds until a failed attempt runs again: retry_delay, or a capped random backoff.

    retry_delay, or with retry_backoff a random delay in [d*2^k, d*2^(k+1)) for attempt k
    (exponent at most 16, d at least 1), capped by retry_delay_max (LEAST ignores a NULL
    cap), and whatever the row holds by :data:`MAX_RETRY_DELAY_SECONDS`. The exponent is
    bounded before the increment, so not even a retry_count at the integer maximum can
    overflow it.
    """
    a = alias
    exp = f"2 ^ (LEAST(15, {a}.retry_count) + 1)"
    return _capped(
        f"CASE WHEN NOT {a}.retry_backoff THEN {a}.retry_delay::float8"
        f" ELSE LEAST({a}.retry_delay_max, GREATEST({a}.retry_delay, 1)"
        f" * ({exp} / 2 + {exp} / 2 * random())) END"
    )


def _failed_copy(q: str, src: str, output: str, now: str | None = None) -> dict[str, str]:
    """A deleted job inserted again as failed, everything else kept.

    Completed now (``now``: the clock, by default ``job_now()``), everything else kept.
    """
    values = {c: f"{src}.{c}" for c in REINSERT_COLUMNS}
    values.update(
        state=f"'failed'::{q}.job_state",
        completed_on=now or job_now(q),
        output=output,
        heartbeat_on="NULL::timestamptz",
    )
    return values


def _dead_letter_copy(
    q: str, src: str, dlq: str, output: str, now: str | None = None
) -> dict[str, str]:
    """A new job in the dead letter queue ``dlq`` for the failed job ``src``.

    Its payload, the dead letter queue's settings, and ``source_*`` saying where it came
    from. Columns pg-boss leaves at their defaults are given those defaults.
    """
    now = now or job_now(q)
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


def fail_removed_ctes(
    q: str, p: Params, output: str, terminal: bool = False, now: str | None = None
) -> str:
    """The CTEs that fail the jobs a preceding ``removed`` CTE deleted (``RETURNING j.*``).

    Each is inserted again with the same id as retry (after its delay) or, out of retries,
    as failed; a re-insert a policy index refuses becomes failed too; every failed job
    with an existing dead letter queue gets a copy there. Ends with ``settled``: the ids
    inserted again. Shared by :func:`fail_jobs` and :func:`expire_jobs`. ``terminal``:
    no job is retried, whatever its retries left (each is failed and dead-lettered).
    ``now``: the clock the failure is stamped with (by default ``job_now()``).
    """
    now = now or job_now(q)
    left = "false" if terminal else "x.retry_count < x.retry_limit"
    spent = "true" if terminal else "x.retry_count = x.retry_limit"
    retried = {c: f"x.{c}" for c in REINSERT_COLUMNS}
    retried.update(
        state=(f"CASE WHEN {left} THEN 'retry'::{q}.job_state ELSE 'failed'::{q}.job_state END"),
        start_after=(
            f"CASE WHEN {spent} THEN x.start_after"
            f" ELSE {now} + ({_retry_delay('x')}) * interval '1 second' END"
        ),
        completed_on=f"CASE WHEN {left} THEN NULL ELSE {now} END",
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
  {_insert(q, _failed_copy(q, "x", output, now))} FROM removed x
  WHERE x.id NOT IN (SELECT id FROM again)
  RETURNING {keep}
),
ended AS (
  SELECT * FROM again WHERE state = 'failed' UNION ALL SELECT * FROM refused
),
lettered AS (
  {_insert(q, _dead_letter_copy(q, "e", "dq", output, now))}
  FROM ended e JOIN {q}.queue dq ON dq.name = e.dead_letter
  RETURNING id
),
settled AS (SELECT id FROM again UNION ALL SELECT id FROM refused)"""


@lru_cache(maxsize=8)
def fail_jobs(q: str, *, fenced: bool = False, terminal: bool = False) -> Statement:
    """Fail jobs in one statement (MutationStrategy.CTE): delete them, then fail what was deleted.

    What was deleted is failed as :func:`fail_removed_ctes` does (retry, failed, dead
    letter copy; with ``terminal`` failed and dead-lettered without a retry).

    Rows ``queue, id``: the ids of the jobs inserted again (retry or failed).
    """
    p = Params()
    sql = f"""WITH {queue_cte(q, p)},
removed AS (
  DELETE FROM {q}.job j WHERE {target_jobs(p, "j", fenced)} AND j.state < 'completed'
  RETURNING j.*
),
{fail_removed_ctes(q, p, f"{p('output')}::jsonb", terminal)}
SELECT q.name AS queue, settled.id FROM q LEFT JOIN settled ON true"""
    return p.statement(sql)


def _expired(q: str, p: Params, alias: str, heartbeat: bool) -> str:
    """Active jobs of the queues ``names`` past their expiry or, with ``heartbeat``, silent.

    Past their expiry: ``expire_seconds`` after they started; with ``heartbeat``, those
    whose heartbeat is older than ``heartbeat_seconds``.
    """
    a, now = alias, job_now(q)
    where = f"{a}.name = ANY({p('names')}::text[]) AND {a}.state = 'active'"
    if heartbeat:
        return (
            f"{where} AND {a}.heartbeat_seconds IS NOT NULL"
            f" AND {a}.heartbeat_on + {a}.heartbeat_seconds * interval '1 second' < {now}"
        )
    return f"{where} AND {a}.started_on + {a}.expire_seconds * interval '1 second' < {now}"


def _expired_batch(q: str, p: Params, table: str, heartbeat: bool) -> str:
    """At most ``limit`` expired jobs of one physical job table, unordered.

    Nothing indexes the predicate, and a failed job no longer matches it, so the next
    batch cannot pick it again.
    """
    return (
        f"SELECT e.name, e.id FROM {q}.{quote(table)} e"
        f" WHERE {_expired(q, p, 'e', heartbeat)} LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=64)
def expire_jobs(q: str, table: str, *, heartbeat: bool = False) -> Statement:
    """One expiry batch in one statement (MutationStrategy.CTE): pick, delete and fail.

    Pick at most ``limit`` expired jobs of the queues ``names`` in the physical job table
    ``table`` (``job_common``, ``j<hash>`` or ``job``), delete those still expired (the
    predicate is checked again, so a job settled meanwhile is left alone) and fail them
    with ``output`` as :func:`fail_jobs` fails jobs.

    One row: ``picked`` (the batch was full when it equals ``limit``), ``failed``.
    """
    p = Params()
    sql = f"""WITH picked AS ({_expired_batch(q, p, table, heartbeat)}),
removed AS (
  DELETE FROM {q}.{quote(table)} j
  WHERE (j.name, j.id) IN (SELECT name, id FROM picked) AND {_expired(q, p, "j", heartbeat)}
  RETURNING j.*
),
{fail_removed_ctes(q, p, f"{p('output')}::jsonb")}
SELECT (SELECT count(*) FROM picked)::int AS picked,
  (SELECT count(*) FROM settled)::int AS failed"""
    return p.statement(sql)


@lru_cache(maxsize=64)
def expire_remove(q: str, table: str, *, heartbeat: bool = False) -> Statement:
    """Split expiry, step 1 (MutationStrategy.SPLIT): delete expired jobs and return them whole.

    At most ``limit`` expired jobs of the queues ``names`` in ``table``; the client then
    fails them as a split fail does (:func:`fail_reinsert_retry`,
    :func:`fail_reinsert_failed`). Rows: every job column.
    """
    p = Params()
    sql = (
        f"DELETE FROM {q}.{quote(table)} j WHERE (j.name, j.id) IN"
        f" ({_expired_batch(q, p, table, heartbeat)}) AND {_expired(q, p, 'j', heartbeat)}"
        f" RETURNING {returning_columns(JOB_COLUMNS, 'j')}"
    )
    return p.statement(sql)


@lru_cache(maxsize=8)
def fail_remove(q: str, *, fenced: bool = False) -> Statement:
    """Split fail, step 1 (MutationStrategy.SPLIT): delete the jobs to fail, return them whole.

    One table mutation per statement; returning them whole lets the client decide each
    one's fate and insert it again. Rows ``queue, <every job column>``.
    """
    p = Params()
    mutation = (
        f"DELETE FROM {q}.job j WHERE {target_jobs(p, 'j', fenced)} AND j.state < 'completed'"
        f" RETURNING {returning_columns(JOB_COLUMNS, 'j')}"
    )
    return p.statement(command_cte(q, p, mutation, ", ".join(JOB_COLUMNS)))


def _row_columns(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    columns = {c: JOB_COLUMN_TYPES[c] for c in REINSERT_COLUMNS}
    columns.update(extra or {})
    return columns


@lru_cache(maxsize=8)
def fail_reinsert_retry(q: str) -> Statement:
    """Split fail, step 2: insert the jobs with retries left again as retry.

    Each ``delay`` seconds (computed by the client, capped here as the one-statement fail
    caps it) from now; a row a policy index refuses is skipped. Rows: the ids inserted.
    """
    p = Params()
    values = {c: f"r.{c}" for c in REINSERT_COLUMNS}
    values.update(
        state=f"'retry'::{q}.job_state",
        start_after=f"{job_now(q)} + {_capped('r.delay')} * interval '1 second'",
        completed_on="NULL::timestamptz",
        output=f"{p('output')}::jsonb",
        heartbeat_on="NULL::timestamptz",
    )
    records = recordset(p, "rows", _row_columns({"delay": "float8"}))
    sql = f"{_insert(q, values)} FROM {records} ON CONFLICT DO NOTHING RETURNING id"
    return p.statement(sql)


@lru_cache(maxsize=8)
def fail_reinsert_failed(q: str) -> Statement:
    """Split fail, step 3: insert the jobs out of retries again as failed, with dead letter copies.

    The jobs out of retries (or refused as retry) go in again as failed, and a copy of
    each in its dead letter queue, as one INSERT (one mutation of the job table). A row's
    ``delay`` moves its start_after as a retry's would (capped the same way; NULL keeps
    it). Rows ``id, name``: a failed job keeps its queue's name.
    """
    p = Params()
    output = f"{p('output')}::jsonb"
    failed = _failed_copy(q, "r", output)
    failed["start_after"] = (
        f"CASE WHEN r.delay IS NULL THEN r.start_after"
        f" ELSE {job_now(q)} + {_capped('r.delay')} * interval '1 second' END"
    )
    copies = _dead_letter_copy(q, "r", "dq", output)
    # the same parameter, expanded once in each branch of the UNION
    records = recordset(p, "rows", _row_columns({"delay": "float8"}))
    sql = (
        f"INSERT INTO {q}.job ({', '.join(REINSERT_COLUMNS)})"
        f" SELECT {', '.join(failed[c] for c in REINSERT_COLUMNS)} FROM {records}"
        f" UNION ALL SELECT {', '.join(copies[c] for c in REINSERT_COLUMNS)}"
        f" FROM {records} JOIN {q}.queue dq ON dq.name = r.dead_letter"
        " RETURNING id, name"
    )
    return p.statement(sql)

"""SQL for cron schedules and the timekeeper: schedules, the cron claim, the clock.

The ``schedule`` table as pg-boss writes it, the ``cron_on`` claim that picks one
instance per interval, and the database's clock.

The same on every backend: single statements on fixed tables (the claim is one UPDATE
of the ``version`` row, which engines without advisory locks take as well).
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement

__all__ = [
    "SCHEDULE_COLUMNS",
    "claim_cron_pass",
    "database_time",
    "delete_schedule",
    "get_schedules",
    "set_last_job_ids",
    "upsert_schedule",
]

#: a schedule row as :class:`qcore.verbs.schedules.Schedule` holds it
SCHEDULE_COLUMNS = (
    "name, key, kind, cron, COALESCE(timezone, 'UTC') AS timezone, data, options,"
    " created_on, updated_on, last_job_id"
)


@lru_cache(maxsize=16)
def upsert_schedule(q: str) -> Statement:
    """Create or replace schedule (name, key), as pg-boss's ``schedule()`` does.

    Kept ``created_on``, a new ``updated_on``; fails on the queue's foreign key if the
    queue does not exist.
    """
    p = Params()
    return p.statement(
        f"INSERT INTO {q}.schedule (name, key, kind, cron, timezone, data, options,"
        " created_on, updated_on)"
        f" VALUES ({p('name')}::text, {p('key')}::text, 'cron', {p('cron')}::text,"
        f" {p('tz')}::text, {p('data')}::jsonb, {p('options')}::jsonb, {q}.job_now(),"
        f" {q}.job_now())"
        " ON CONFLICT (name, key) DO UPDATE SET kind = EXCLUDED.kind, cron = EXCLUDED.cron,"
        " timezone = EXCLUDED.timezone, data = EXCLUDED.data, options = EXCLUDED.options,"
        f" updated_on = {q}.job_now()"
    )


@lru_cache(maxsize=16)
def delete_schedule(q: str) -> Statement:
    """Remove schedule (name, key); its name back when there was one."""
    p = Params()
    return p.statement(
        f"DELETE FROM {q}.schedule WHERE name = {p('name')}::text"
        f" AND COALESCE(key, '') = {p('key')}::text RETURNING name"
    )


@lru_cache(maxsize=64)
def get_schedules(q: str, *, by_name: bool, by_key: bool, after: bool, limited: bool) -> Statement:
    """Schedules in (name, key) order, optionally filtered, after a point and limited.

    Of one queue (``by_name``), one of them (``by_key``), after a (name, key)
    (``after``), at most ``limit`` (``limited``).
    """
    p = Params()
    where = []
    if by_name:
        where.append(f"name = {p('name')}::text")
    if by_key:
        where.append(f"COALESCE(key, '') = {p('key')}::text")
    if after:
        where.append(f"(name, key) > ({p('after_name')}::text, {p('after_key')}::text)")
    sql = f"SELECT {SCHEDULE_COLUMNS} FROM {q}.schedule"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY name, key"
    if limited:
        sql += f" LIMIT {p('limit')}::int"
    return p.statement(sql)


@lru_cache(maxsize=16)
def claim_cron_pass(q: str) -> Statement:
    """Take this interval's cron pass: move ``version.cron_on`` to now when it is due.

    Due when it is at least ``seconds`` old (pg-boss's claim, so qcore and pg-boss
    instances share one pass per interval). Answers either way: ``claimed``, the stamp
    it replaced (``prior_cron_on``: when a pass last ran), its age in seconds
    (``elapsed``), the database's ``now``, which the pass judges every schedule against,
    and whether cron is in use at all (``in_use``: a schedule exists or an occurrence
    waits on the ``send_it`` queue; every instance learns it, so a forwarder idles while
    it is not).
    """
    p = Params()
    seconds = p("seconds")
    return p.statement(
        f"WITH prior AS (SELECT cron_on, EXTRACT(EPOCH FROM ({q}.job_now() - cron_on))::float8"
        f" AS elapsed FROM {q}.version),"
        f" claim AS (UPDATE {q}.version SET cron_on = {q}.job_now()"
        f" WHERE EXTRACT(EPOCH FROM ({q}.job_now() - COALESCE(cron_on, {q}.job_now()"
        f" - interval '1 week'))) >= {seconds}::float8 RETURNING true)"
        " SELECT prior.cron_on AS prior_cron_on, prior.elapsed,"
        f" EXISTS (SELECT 1 FROM claim) AS claimed, {q}.job_now() AS now,"
        f" (EXISTS (SELECT 1 FROM {q}.schedule) OR EXISTS (SELECT 1 FROM {q}.job"
        f" WHERE name = {p('send_it')}::text AND state < 'active')) AS in_use FROM prior"
    )


@lru_cache(maxsize=16)
def set_last_job_ids(q: str) -> Statement:
    """Record the job each schedule last produced.

    One row per (name, key) given, as a JSON array of {name, key, jobId}; ``updated_on``
    stays: the definition did not change.
    """
    p = Params()
    return p.statement(
        f'UPDATE {q}.schedule s SET last_job_id = x."jobId"'
        f' FROM jsonb_to_recordset({p("fired")}::jsonb) AS x (name text, key text, "jobId" uuid)'
        " WHERE s.name = x.name AND COALESCE(s.key, '') = x.key"
    )


@lru_cache(maxsize=16)
def database_time(q: str) -> Statement:
    """The schema's clock (``job_now()``) in milliseconds since the epoch.

    As pg-boss reads it for its clock-skew check.
    """
    return Statement(f"SELECT round(date_part('epoch', {q}.job_now()) * 1000)::float8 AS time")

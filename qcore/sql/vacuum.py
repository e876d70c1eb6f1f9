"""SQL for the vacuum checks: the job tables' dead rows, and who holds the horizon back.

The dead rows of the job tables against the point where PostgreSQL itself would vacuum
them, and who holds the MVCC horizon back.

PostgreSQL's statistics views only (``pg_stat_user_tables``, ``pg_stat_activity``,
``pg_replication_slots``, ``pg_stat_replication``, ``pg_prepared_xacts``): backends
without the ``vacuum_stats`` capability never run these.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement
from qcore.sql.probes import job_tables

__all__ = ["HORIZON_SOURCES", "horizon", "job_table_garbage"]


@lru_cache(maxsize=4)
def job_table_garbage(q: str) -> Statement:
    """Per job table of schema ``schema`` (``job`` or its partitions): dead rows and vacuums.

    Live and dead rows, the epoch seconds of its last vacuum (manual or auto; null:
    never) and how long ago, and the vacuum threshold it is measured against, the
    table's own storage parameters over the server's settings (``threshold +
    scale_factor × live``).
    """
    p = Params()

    def option(name: str, cast: str, default: str) -> str:
        return (
            f"COALESCE((SELECT option_value::{cast} FROM pg_options_to_table(t.reloptions)"
            f" WHERE option_name = '{name}'), {default})"
        )

    threshold = option(
        "autovacuum_vacuum_threshold", "int", "current_setting('autovacuum_vacuum_threshold')::int"
    )
    scale = option(
        "autovacuum_vacuum_scale_factor",
        "float8",
        "current_setting('autovacuum_vacuum_scale_factor')::float8",
    )
    enabled = option("autovacuum_enabled", "boolean", "true")
    sql = (
        "SELECT t.relname AS table_name, s.n_live_tup::bigint AS live,"
        " s.n_dead_tup::bigint AS dead,"
        " extract(epoch FROM GREATEST(s.last_autovacuum, s.last_vacuum))::float8 AS last_vacuum,"
        " extract(epoch FROM (now() - GREATEST(s.last_autovacuum, s.last_vacuum)))::int"
        " AS vacuum_age_seconds,"
        f" {threshold} AS threshold, {scale} AS scale_factor, {enabled} AS autovacuum_enabled"
        " FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace"
        " JOIN pg_stat_user_tables s ON s.relid = t.oid"
        f" WHERE n.nspname = {p('schema')}::text AND t.relkind = 'r'"
        f" AND {job_tables(q, 't.relname')}"
    )
    return p.statement(sql)


#: the backends that can hold a job table's horizon back: those connected to its database
#: (the server computes a table's horizon from them alone; a standby's feedback and the
#: slots are the other sources), whose transaction was open before ``since`` (the failed
#: vacuum) or began at a time this role may not see
_HOLDING = (
    "FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND datname = current_database()"
    " AND (xact_start IS NULL OR xact_start < to_timestamp({since}::float8))"
    " AND pid <> pg_backend_pid()"
)

#: who can hold the horizon back, each as the age (in transactions) of its oldest xmin
HORIZON_SOURCES = {
    "backends": "SELECT max(age(backend_xmin)) " + _HOLDING,
    "slots": "SELECT max(age(xmin)) FROM pg_replication_slots WHERE xmin IS NOT NULL",
    "slots_catalog": (
        "SELECT max(age(catalog_xmin)) FROM pg_replication_slots WHERE catalog_xmin IS NOT NULL"
    ),
    "standbys": "SELECT max(age(backend_xmin)) FROM pg_stat_replication"
    " WHERE backend_xmin IS NOT NULL",
    "prepared": "SELECT max(age(transaction)) FROM pg_prepared_xacts",
}


@lru_cache(maxsize=32)
def horizon(sources: tuple[str, ...]) -> Statement:
    """The age of each of ``sources``' oldest xmin (null: none holds it), and its backend.

    With ``backends``, the oldest such backend (pid, application name, role, state, how
    long its transaction has run: never its query text, which may hold secrets).
    """
    p = Params()
    since = p("since")
    columns = [f"({HORIZON_SOURCES[s].format(since=since)}) AS {s}" for s in sources]
    if "backends" in sources:
        columns.append(
            "(SELECT to_jsonb(h) FROM (SELECT pid, application_name, usename::text AS user_name,"
            " state, age(backend_xmin) AS age,"
            " extract(epoch FROM (now() - xact_start))::int AS transaction_seconds "
            + _HOLDING.format(since=since)
            + " ORDER BY age(backend_xmin) DESC LIMIT 1) h) AS holder"
        )
    return p.statement("SELECT " + ", ".join(columns))

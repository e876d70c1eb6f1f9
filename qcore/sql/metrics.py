"""The metrics history's statements: its own tables (never pg-boss's), the counts it
reads from the job tables, and the additive writes of a snapshot.

Every table is named ``<prefix><name>`` in the store's schema. One row per
(namespace, queue, tier, bucket) carries every counter of that bucket, so a busy
minute costs one row, not one per metric; ``queue`` ``__global__`` is the rollup
across queues. Buckets are UTC indexes: minutes, hours or days since the epoch. The
statements are the same on every backend (plain upserts, no multi-statement CTE),
because a snapshot is read, diffed in Python and written inside one transaction.
"""

from __future__ import annotations

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement

__all__ = [
    "GLOBAL",
    "METRICS_LAYOUT_VERSION",
    "TIERS",
    "add_counts",
    "create_tables",
    "finished_per_minute",
    "prune_tier",
    "read_layout_version",
    "read_series",
    "stored_minutes",
    "write_layout_version",
]

#: the layout this qcore writes (the meta table's ``schema_version``)
METRICS_LAYOUT_VERSION = 1

#: the rollup across queues
GLOBAL = "__global__"

#: tier letter -> minutes per bucket
TIERS = {"m": 1, "h": 60, "d": 1440}


def _table(schema: str, prefix: str, name: str) -> str:
    return f"{quote(schema)}.{quote(prefix + name)}"


def create_tables(schema: str, prefix: str) -> list[str]:
    """The store's tables, idempotent (the schema itself is created by the caller if
    missing)."""
    meta, series = _table(schema, prefix, "meta"), _table(schema, prefix, "series")
    return [
        f"CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {series} ("
        " namespace text NOT NULL, queue text NOT NULL, tier text NOT NULL,"
        " bucket bigint NOT NULL, completed bigint NOT NULL DEFAULT 0,"
        " failed bigint NOT NULL DEFAULT 0,"
        " PRIMARY KEY (namespace, queue, tier, bucket))",
    ]


def read_layout_version(schema: str, prefix: str) -> Statement:
    """The layout version a store was written with (no row: never migrated)."""
    return Statement(
        f"SELECT value FROM {_table(schema, prefix, 'meta')} WHERE key = 'schema_version'"
    )


def write_layout_version(schema: str, prefix: str) -> Statement:
    """Record the layout version (only ever raised, never lowered)."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_table(schema, prefix, 'meta')} (key, value)"
        f" VALUES ('schema_version', {p('version')}) ON CONFLICT (key) DO NOTHING"
    )


def recorded_queues(q: str) -> Statement:
    """Every queue of the job schema, by name (the recorder's sources on each tick)."""
    return Statement(f"SELECT name FROM {q}.queue ORDER BY name")


def finished_per_minute(q: str) -> Statement:
    """Completed and failed jobs of one queue per UTC minute of ``completed_on``, for the
    minutes ``first`` (inclusive) to ``last`` (exclusive); served by ``job_i16``
    ``(name, completed_on)``."""
    p = Params()
    return p.statement(
        "SELECT floor(extract(epoch FROM completed_on) / 60)::bigint AS minute,"
        " count(*) FILTER (WHERE state = 'completed') AS completed,"
        " count(*) FILTER (WHERE state = 'failed') AS failed"
        f" FROM {q}.job WHERE name = {p('queue')} AND completed_on IS NOT NULL"
        f" AND completed_on >= to_timestamp({p('first')} * 60)"
        f" AND completed_on < to_timestamp({p('last')} * 60)"
        " AND state IN ('completed', 'failed') GROUP BY 1"
    )


def closed_minute(q: str) -> Statement:
    """The first minute not yet closed on the database clock, ``margin`` seconds back
    (late commits land before it)."""
    p = Params()
    return p.statement(
        f"SELECT floor((extract(epoch FROM {q}.job_now()) - {p('margin')}) / 60)::bigint AS minute"
    )


def database_minute() -> Statement:
    """The current UTC minute on the database's own clock (what a board reads by)."""
    return Statement("SELECT floor(extract(epoch FROM now()) / 60)::bigint AS minute")


def stored_minutes(schema: str, prefix: str) -> Statement:
    """A queue's stored minute rows among ``buckets``, locked for the snapshot."""
    p = Params()
    return p.statement(
        f"SELECT bucket, completed, failed FROM {_table(schema, prefix, 'series')}"
        f" WHERE namespace = {p('namespace')} AND queue = {p('queue')} AND tier = 'm'"
        f" AND bucket = ANY({p('buckets')}::bigint[]) FOR UPDATE"
    )


def newest_minute(schema: str, prefix: str) -> Statement:
    """The newest minute stored for a queue (where a restarted recorder resumes)."""
    p = Params()
    return p.statement(
        f"SELECT max(bucket) AS minute FROM {_table(schema, prefix, 'series')}"
        f" WHERE namespace = {p('namespace')} AND queue = {p('queue')} AND tier = 'm'"
    )


def add_counts(schema: str, prefix: str) -> Statement:
    """Add counts to rows (queue, tier, bucket) of a namespace, creating them: the
    arrays are parallel, one entry per row, no row twice."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_table(schema, prefix, 'series')} AS s"
        " (namespace, queue, tier, bucket, completed, failed)"
        f" SELECT {p('namespace')}, t.queue, t.tier, t.bucket, t.completed, t.failed"
        f" FROM unnest({p('queues')}::text[], {p('tiers')}::text[], {p('buckets')}::bigint[],"
        f" {p('completed')}::bigint[], {p('failed')}::bigint[])"
        " AS t(queue, tier, bucket, completed, failed)"
        " ON CONFLICT (namespace, queue, tier, bucket) DO UPDATE SET"
        " completed = s.completed + excluded.completed, failed = s.failed + excluded.failed"
    )


def prune_tier(schema: str, prefix: str) -> Statement:
    """Delete one tier's rows older than ``before`` (a bucket index of that tier)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_table(schema, prefix, 'series')}"
        f" WHERE tier = {p('tier')} AND bucket < {p('before')}"
    )


def read_series(schema: str, prefix: str) -> Statement:
    """One queue's (or the rollup's) rows of a tier from bucket ``first`` on, oldest
    first."""
    p = Params()
    return p.statement(
        f"SELECT bucket, completed, failed FROM {_table(schema, prefix, 'series')}"
        f" WHERE namespace = {p('namespace')} AND queue = {p('queue')} AND tier = {p('tier')}"
        f" AND bucket >= {p('first')} ORDER BY bucket"
    )

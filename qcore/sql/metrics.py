"""The metrics history's statements: its own tables (never pg-boss's), what it reads
from the job tables, and the additive writes of a snapshot.

Every table is named ``<prefix><name>`` in the store's schema. One ``series`` row per
(queue key, tier, bucket) carries every measure of that bucket: completed and failed
counts, both latency histograms packed in one ``integer[]`` (wait time, then run time,
``SLOTS`` each) and the queue-age gauge, so a busy minute costs one row. A queue key is
its source's namespace and the queue's name (``pgboss:<schema>:<queue>``); the
namespace's ``__global__`` key is the rollup across its queues. Buckets are UTC
indexes: minutes, hours or days since the epoch. The statements are the same on every
backend (plain upserts over ``unnest``ed arrays), because a snapshot is read, diffed in
Python and written inside one transaction; the sizes come from ``pg_total_relation_size``
where the backend has it.
"""

from __future__ import annotations

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement

__all__ = [
    "METRICS_LAYOUT_VERSION",
    "add_ages",
    "add_measures",
    "clock",
    "completed_index",
    "create_tables",
    "database_minute",
    "finished_per_minute",
    "has_job_now",
    "latency_samples",
    "newest_minute",
    "oldest_waiting",
    "prune_tier",
    "purge_keys",
    "queue_tables",
    "read_layout_version",
    "read_series",
    "recorded_queues",
    "release_leases",
    "series_usage",
    "stored_minutes",
    "subtract_from_rollup",
    "table_bytes",
    "take_leases",
    "upgrade_from_1",
    "usable_completed_index",
    "write_layout_version",
]

#: the layout this qcore writes (the meta table's ``schema_version``)
METRICS_LAYOUT_VERSION = 2

#: a histogram slot's ceiling (``integer``): a sum past it stays there
_SLOT_MAX = 2_147_483_647


def _table(schema: str, prefix: str, name: str) -> str:
    return f"{quote(schema)}.{quote(prefix + name)}"


def create_tables(schema: str, prefix: str) -> list[str]:
    """The store's tables, idempotent (the schema itself is created by the caller if
    missing)."""
    meta, series = _table(schema, prefix, "meta"), _table(schema, prefix, "series")
    lease = _table(schema, prefix, "lease")
    return [
        f"CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {series} ("
        " queue text NOT NULL, tier text NOT NULL, bucket integer NOT NULL,"
        " completed bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0,"
        " latency integer[], age real, PRIMARY KEY (queue, tier, bucket))",
        f"CREATE TABLE IF NOT EXISTS {lease} ("
        " queue text PRIMARY KEY, holder text NOT NULL, until timestamptz NOT NULL)",
    ]


def upgrade_from_1(schema: str, prefix: str, namespace: str) -> list[str]:
    """Layout 1 (a ``namespace`` column, bare queue names, counts only) to 2: the rows
    copied under their source's key prefix ``namespace``, the old table dropped (instead
    of :func:`create_tables`)."""
    series = _table(schema, prefix, "series")
    old = prefix + "series_v1"
    namespace = namespace.replace("'", "''")
    return [
        f"ALTER TABLE {series} RENAME TO {quote(old)}",
        f"ALTER INDEX {quote(schema)}.{quote(prefix + 'series_pkey')}"
        f" RENAME TO {quote(old + '_pkey')}",
        *create_tables(schema, prefix),
        f"INSERT INTO {series} (queue, tier, bucket, completed, failed)"
        f" SELECT '{namespace}' || queue, tier, bucket, sum(completed), sum(failed)"
        f" FROM {quote(schema)}.{quote(old)} GROUP BY queue, tier, bucket",
        f"DROP TABLE {quote(schema)}.{quote(old)}",
    ]


def read_layout_version(schema: str, prefix: str) -> Statement:
    """The layout version a store was written with (no row: never migrated)."""
    return Statement(
        f"SELECT value FROM {_table(schema, prefix, 'meta')} WHERE key = 'schema_version'"
    )


def write_layout_version(schema: str, prefix: str) -> Statement:
    """Record the layout version (raised, never lowered)."""
    p = Params()
    meta = _table(schema, prefix, "meta")
    return p.statement(
        f"INSERT INTO {meta} AS m (key, value) VALUES ('schema_version', {p('version')})"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        " WHERE m.value::integer < excluded.value::integer"
    )


def recorded_queues(q: str) -> Statement:
    """Every queue of the job schema, by name (the recorder's sources on each tick)."""
    return Statement(f"SELECT name FROM {q}.queue ORDER BY name")


def clock(now: str) -> Statement:
    """The schema's clock (``now``: qcore's ``job_now()``, or ``now()`` in a schema pg-boss
    installed) as minutes: the first minute not yet closed ``margin`` seconds back (late
    commits land before it), and the current one."""
    p = Params()
    return p.statement(
        f"SELECT floor((extract(epoch FROM {now}) - {p('margin')}) / 60)::bigint"
        f" AS closed, floor(extract(epoch FROM {now}) / 60)::bigint AS current"
    )


def has_job_now(q: str) -> Statement:
    """Whether the schema has qcore's clock function (pg-boss's own install has not)."""
    return Statement(
        "SELECT to_regprocedure('" + f"{q}.job_now()".replace("'", "''") + "') IS NOT NULL"
        " AS present"
    )


def database_minute() -> Statement:
    """The current UTC minute on the database's own clock (what a board reads by)."""
    return Statement("SELECT floor(extract(epoch FROM now()) / 60)::bigint AS minute")


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


def latency_samples(q: str) -> Statement:
    """Wait and run times of one queue's jobs finished in each of ``minutes``, counted per
    histogram slot (``bounds`` in milliseconds): each minute is read in ``slices[i]``
    equal parts, at most ``per_slice[i]`` jobs from each, in ``completed_on`` order on
    ``job_i16``, so a sample is spread over the minute and costs the same however busy
    it was. Wait time counts first attempts only (``retry_count = 0``: a retried job's
    ``started_on`` is its last attempt's); run time counts every finished job."""
    p = Params()
    return p.statement(
        "SELECT m.minute, s.metric, width_bucket(s.ms, "
        f"{p('bounds')}::float8[]) AS slot, count(*) AS n, max(m.taken) AS taken"
        f" FROM unnest({p('minutes')}::bigint[], {p('slices')}::integer[],"
        f" {p('per_slice')}::integer[]) AS m(minute, slices, taken)"
        " CROSS JOIN LATERAL generate_series(0, m.slices - 1) AS k(i)"
        " CROSS JOIN LATERAL (SELECT j.created_on, j.started_on, j.completed_on,"
        f" j.retry_count FROM {q}.job j WHERE j.name = {p('queue')}"
        " AND j.completed_on IS NOT NULL"
        " AND j.completed_on >= to_timestamp(m.minute * 60 + k.i * 60.0 / m.slices)"
        " AND j.completed_on < to_timestamp(m.minute * 60 + (k.i + 1) * 60.0 / m.slices)"
        " AND j.state IN ('completed', 'failed') AND j.started_on IS NOT NULL"
        " ORDER BY j.completed_on LIMIT m.taken) AS j"
        " CROSS JOIN LATERAL (VALUES"
        " ('wait', CASE WHEN j.retry_count = 0"
        " THEN extract(epoch FROM j.started_on - j.created_on) * 1000 END),"
        " ('run', extract(epoch FROM j.completed_on - j.started_on) * 1000)) AS s(metric, ms)"
        " WHERE s.ms IS NOT NULL GROUP BY m.minute, s.metric, slot"
    )


def oldest_waiting(q: str, now: str) -> Statement:
    """Per queue of ``queues``, seconds since the oldest waiting job was created (ready,
    not blocked; null when none waits), from a few probes on the fetch index
    ``job_i11`` ``(name, priority DESC, created_on)``: the distinct priorities by a
    skip scan (at most ``levels``), then the oldest job of each. Never a backlog scan."""
    p = Params()
    ready = "j.name = n.name AND j.state < 'active' AND NOT j.blocked"
    return p.statement(
        f"SELECT n.name, (SELECT extract(epoch FROM {now} - min(o.created_on))"
        " FROM (WITH RECURSIVE level(priority, depth) AS ("
        f" (SELECT j.priority, 1 FROM {q}.job j WHERE {ready}"
        " ORDER BY j.priority DESC LIMIT 1)"
        f" UNION ALL SELECT (SELECT j.priority FROM {q}.job j WHERE {ready}"
        " AND j.priority < level.priority ORDER BY j.priority DESC LIMIT 1), level.depth + 1"
        f" FROM level WHERE level.priority IS NOT NULL AND level.depth < {p('levels')})"
        " SELECT priority FROM level WHERE priority IS NOT NULL) AS l"
        f" CROSS JOIN LATERAL (SELECT j.created_on FROM {q}.job j WHERE {ready}"
        f" AND j.priority = l.priority AND j.start_after <= {now}"
        " ORDER BY j.created_on LIMIT 1) AS o) AS age"
        f" FROM unnest({p('queues')}::text[]) AS n(name)"
    )


def usable_completed_index(q: str) -> Statement:
    """Per queue, whether a valid btree index leads with ``(name, completed_on)`` on its
    own job table or on ``job``, with no predicate or ``completed_on IS NOT NULL``
    (both keep completed and failed jobs): what the counts and the latency scan need.
    Catalog only; ``schema`` is the stored (unquoted) schema name."""
    p = Params()
    return p.statement(
        "SELECT qu.name, EXISTS (SELECT 1 FROM pg_index i"
        " JOIN pg_class t ON t.oid = i.indrelid"
        " JOIN pg_namespace s ON s.oid = t.relnamespace"
        " JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam"
        " JOIN pg_attribute a1 ON a1.attrelid = t.oid AND a1.attnum = i.indkey[0]"
        " JOIN pg_attribute a2 ON a2.attrelid = t.oid AND a2.attnum = i.indkey[1]"
        f" WHERE s.nspname = {p('schema')} AND t.relname IN (qu.table_name, 'job')"
        " AND am.amname = 'btree' AND i.indisvalid AND i.indnatts >= 2"
        " AND a1.attname = 'name' AND a2.attname = 'completed_on'"
        " AND (i.indpred IS NULL OR regexp_replace(pg_get_expr(i.indpred, i.indrelid),"
        " '[() ]', '', 'g') = 'completed_onISNOTNULL')) AS usable"
        f" FROM {q}.queue qu ORDER BY qu.name"
    )


def queue_tables(q: str) -> Statement:
    """The job table of each of ``queues``."""
    p = Params()
    return p.statement(
        f"SELECT name, table_name FROM {q}.queue WHERE name = ANY({p('queues')}::text[])"
    )


def completed_index(q: str, table: str) -> str:
    """pg-boss's own ``job_i16`` on one job table, built without blocking writes (run
    outside a transaction); named as pg-boss names it there, so the drift report sees
    its own index."""
    name = "job_i16" if table == "job" else f"{table}_i16"
    return (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(name)} ON {q}.{quote(table)}"
        " (name, completed_on) WHERE completed_on IS NOT NULL"
    )


def take_leases(schema: str, prefix: str) -> Statement:
    """The sampling lease of each of ``queues`` for ``holder`` until ``seconds`` from now
    on the database clock, taken where it is free, expired or already the holder's;
    returns the keys held."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_table(schema, prefix, 'lease')} AS l (queue, holder, until)"
        f" SELECT k, {p('holder')}, now() + {p('seconds')} * interval '1 second'"
        f" FROM unnest({p('queues')}::text[]) AS k"
        " ON CONFLICT (queue) DO UPDATE SET holder = excluded.holder, until = excluded.until"
        " WHERE l.until < now() OR l.holder = excluded.holder RETURNING l.queue"
    )


def release_leases(schema: str, prefix: str) -> Statement:
    """Drop ``holder``'s sampling leases of ``queues`` (a recorder stopping cleanly)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_table(schema, prefix, 'lease')}"
        f" WHERE holder = {p('holder')} AND queue = ANY({p('queues')}::text[])"
    )


def stored_minutes(schema: str, prefix: str) -> Statement:
    """A queue's stored minute rows among ``buckets``, locked for the snapshot."""
    p = Params()
    return p.statement(
        f"SELECT bucket, completed, failed, latency FROM {_table(schema, prefix, 'series')}"
        f" WHERE queue = {p('queue')} AND tier = 'm'"
        f" AND bucket = ANY({p('buckets')}::integer[]) FOR UPDATE"
    )


def newest_minute(schema: str, prefix: str) -> Statement:
    """The newest minute holding finished jobs stored for a queue (where a restarted
    recorder resumes)."""
    p = Params()
    return p.statement(
        f"SELECT max(bucket) AS minute FROM {_table(schema, prefix, 'series')}"
        f" WHERE queue = {p('queue')} AND tier = 'm' AND (completed > 0 OR failed > 0)"
    )


def _rows(p: Params, *columns: tuple[str, str]) -> str:
    """``unnest`` of parallel arrays, one entry per row: queue, tier, bucket, then
    ``columns`` (name, SQL type)."""
    arrays = ", ".join(f"{p(name)}::{kind}[]" for name, kind in columns)
    names = ", ".join(name for name, _ in columns)
    return (
        f" FROM unnest({p('queues')}::text[], {p('tiers')}::text[], {p('buckets')}::integer[],"
        f" {arrays}) AS t(queue, tier, bucket, {names})"
    )


def _array_sum(a: str, b: str, sign: str = "+") -> str:
    """Slot-wise ``a sign b`` of two histogram arrays (a missing one counts as zeros),
    held within ``0..integer max``."""
    return (
        f"ARRAY(SELECT least(greatest(coalesce(x, 0)::bigint {sign} coalesce(y, 0), 0),"
        f" {_SLOT_MAX})::integer FROM unnest({a}, {b}) WITH ORDINALITY AS u(x, y, i)"
        " ORDER BY i)"
    )


def add_measures(schema: str, prefix: str) -> Statement:
    """Add completed and failed counts and histograms (``latency``: array literals, null
    for none) to rows (queue, tier, bucket), creating them: one write per row."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_table(schema, prefix, 'series')} AS s"
        " (queue, tier, bucket, completed, failed, latency)"
        " SELECT t.queue, t.tier, t.bucket, t.completed, t.failed, t.latency::integer[]"
        + _rows(p, ("completed", "bigint"), ("failed", "bigint"), ("latency", "text"))
        + " ON CONFLICT (queue, tier, bucket) DO UPDATE SET"
        " completed = s.completed + excluded.completed, failed = s.failed + excluded.failed,"
        " latency = CASE WHEN excluded.latency IS NULL THEN s.latency ELSE "
        + _array_sum("s.latency", "excluded.latency")
        + " END"
    )


def add_ages(schema: str, prefix: str) -> Statement:
    """Raise the queue-age gauge (seconds, the bucket's maximum) of rows (queue, tier,
    bucket), creating them."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_table(schema, prefix, 'series')} AS s (queue, tier, bucket, age)"
        " SELECT t.queue, t.tier, t.bucket, t.age"
        + _rows(p, ("age", "real"))
        + " ON CONFLICT (queue, tier, bucket) DO UPDATE SET age = greatest(s.age, excluded.age)"
    )


def prune_tier(schema: str, prefix: str) -> Statement:
    """Delete one tier's rows older than ``before`` (a bucket index of that tier)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_table(schema, prefix, 'series')}"
        f" WHERE tier = {p('tier')} AND bucket < {p('before')}"
    )


def read_series(schema: str, prefix: str) -> Statement:
    """One queue key's rows of a tier from bucket ``first`` to ``last``, oldest first."""
    p = Params()
    return p.statement(
        f"SELECT bucket, completed, failed, latency, age FROM {_table(schema, prefix, 'series')}"
        f" WHERE queue = {p('queue')} AND tier = {p('tier')}"
        f" AND bucket BETWEEN {p('first')} AND {p('last')} ORDER BY bucket"
    )


def _ends_before(p: Params, alias: str) -> str:
    """Rows (of table ``alias``) whose bucket ends by the minute ``before`` (null: every
    bucket)."""
    return (
        f"({p('before')}::bigint IS NULL OR ({alias}.bucket + 1)::bigint * CASE {alias}.tier"
        f" WHEN 'm' THEN 1 WHEN 'h' THEN 60 ELSE 1440 END <= {p('before')}::bigint)"
    )


def _in_namespace(p: Params, alias: str) -> str:
    """Rows (of table ``alias``) whose key starts with ``namespace``."""
    return f"left({alias}.queue, length({p('namespace')})) = {p('namespace')}"


def subtract_from_rollup(schema: str, prefix: str) -> Statement:
    """Take the rows of key ``queue`` (its buckets ending before ``before``) out of the
    rollup key ``rollup``: counts and histograms subtracted (the age gauge, a maximum,
    cannot be)."""
    p = Params()
    series = _table(schema, prefix, "series")
    return p.statement(
        f"UPDATE {series} AS g SET completed = greatest(g.completed - s.completed, 0),"
        " failed = greatest(g.failed - s.failed, 0),"
        " latency = CASE WHEN s.latency IS NULL THEN g.latency ELSE "
        + _array_sum("g.latency", "s.latency", "-")
        + f" END FROM {series} AS s WHERE g.queue = {p('rollup')} AND s.queue = {p('queue')}"
        f" AND g.tier = s.tier AND g.bucket = s.bucket AND {_ends_before(p, 's')}"
    )


def purge_keys(schema: str, prefix: str) -> Statement:
    """Delete the rows of key ``queue`` (null: every key of ``namespace``) whose bucket
    ends before the minute ``before`` (null: all of them)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_table(schema, prefix, 'series')} AS s"
        f" WHERE ({p('queue')}::text IS NULL OR s.queue = {p('queue')})"
        f" AND {_in_namespace(p, 's')} AND {_ends_before(p, 's')}"
    )


def series_usage(schema: str, prefix: str) -> Statement:
    """Per key of ``namespace`` and tier: rows, their bytes (``pg_column_size`` of the
    row) and the oldest and newest bucket."""
    p = Params()
    return p.statement(
        "SELECT queue, tier, count(*) AS rows, sum(pg_column_size(s.*)) AS row_bytes,"
        " min(bucket) AS oldest, max(bucket) AS newest"
        f" FROM {_table(schema, prefix, 'series')} AS s"
        f" WHERE {_in_namespace(p, 's')} GROUP BY queue, tier"
    )


def table_bytes(schema: str, prefix: str) -> Statement:
    """The store's tables on disk, indexes and TOAST included."""
    return Statement(
        "SELECT pg_total_relation_size('"
        + _table(schema, prefix, "series").replace("'", "''")
        + "'::regclass) AS bytes"
    )

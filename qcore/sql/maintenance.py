"""SQL for maintenance: the retention claim and walk, and the pruning of old rows.

The per-queue retention claim, the retention walk, and the pruning of warnings and
queue-stat snapshots.

The claim is pg-boss's (``maintain_on`` on the queue row, gated by
``maintenanceIntervalSeconds``), so qcore and pg-boss instances on one schema delete
each queue's expired jobs once per interval between them. The walk deletes one
batch of primary keys at a time (pg-boss's shape: bounded by keys covered, not rows
deleted), so no transaction holds more than a batch of row locks and workers keep
claiming while it runs. The same text on every backend; only the partitioned shape
has daily ``queue_stats`` partitions to create and drop.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement, before_keyset
from qcore.sql.monitor import claim_queues, queue_row_lock

__all__ = [
    "EDGE_SIDES",
    "RETENTION_BATCH_SIZE",
    "claim_maintenance",
    "drop_old_queue_stats_partitions",
    "ensure_queue_stats_partitions",
    "insert_warning",
    "orphan_edges_batch",
    "prune_queue_stats",
    "prune_warnings",
    "recent_warnings",
    "reduce_counts",
    "release_maintenance",
    "retention_batch",
]

#: primary keys one retention batch covers (pg-boss's DELETION_BATCH_SIZE)
RETENTION_BATCH_SIZE = 10_000
#: the largest uuid: the walk's upper bound when fewer than a batch of keys are left
_MAX_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
#: the finished states the queue's ``retained_count`` counts
_RETAINED = "state IN ('completed', 'cancelled')"


def claim_maintenance(q: str, *, gated: bool = True, skip_locked: bool = False) -> Statement:
    """Claim the queues ``names`` for a retention pass.

    :func:`claim_queues` on ``maintain_on``, pg-boss's deletion claim; ``claimed_on`` is
    what :func:`release_maintenance` hands back.
    """
    return claim_queues(q, "maintain_on", ("maintain_on",), gated=gated, skip_locked=skip_locked)


@lru_cache(maxsize=4)
def release_maintenance(q: str, *, skip_locked: bool = False) -> Statement:
    """Hand back the claim on queues ``names`` a pass did not finish (stopped or failed).

    So the next pass takes them; a claim another instance made since (a different
    ``claimed_on``) stays.
    """
    p = Params()
    sql = (
        f"UPDATE {q}.queue SET maintain_on = NULL FROM (SELECT name FROM {q}.queue"
        f" WHERE name = ANY({p('names')}::text[]) AND maintain_on = {p('claimed_on')}::timestamptz"
        f" {queue_row_lock(skip_locked)}) r WHERE queue.name = r.name"
    )
    return p.statement(sql)


@lru_cache(maxsize=64)
def retention_batch(q: str, table: str, *, after: bool) -> Statement:
    """Delete queue ``name``'s jobs past retention among its next ``batch`` primary keys.

    After the cursor ``after`` when given: finished jobs ``deletion_seconds`` after they
    finished, and jobs never started once ``keep_until`` has passed. One row:
    ``walk_cursor`` (the batch's last key, null when the queue is done), ``deleted``,
    and ``deleted_retained`` (of those, how many the queue's ``retained_count`` held).
    """
    p = Params()
    t = f"{q}.{quote(table)}"
    now = f"{q}.job_now()"
    name = p("name")
    cursor = f" AND id > {p('after')}::uuid" if after else ""
    edge = (
        f"SELECT id FROM {t} WHERE name = {name}::text{cursor}"
        f" ORDER BY id OFFSET {p('batch')}::int - 1 LIMIT 1"
    )
    expired = (
        f"((deletion_seconds > 0 AND completed_on + deletion_seconds * interval '1s' < {now})"
        f" OR (state < 'active' AND keep_until < {now}))"
    )
    held = (
        f"{_RETAINED} AND completed_on <= (SELECT retained_on FROM {q}.queue"
        f" WHERE name = {name}::text)"
    )
    sql = (
        f"WITH edge AS ({edge}),"
        f" removed AS (DELETE FROM {t} WHERE name = {name}::text{cursor}"
        f" AND id <= COALESCE((SELECT id FROM edge), '{_MAX_UUID}'::uuid) AND {expired}"
        " RETURNING state, completed_on)"
        " SELECT (SELECT id FROM edge) AS walk_cursor,"
        " (SELECT count(*) FROM removed)::int AS deleted,"
        f" (SELECT count(*) FROM removed WHERE {held})::int AS deleted_retained"
    )
    return p.statement(sql)


#: the sides of a ``job_dependency`` edge, each walked by its own index (the primary key
#: leads with the child, ``job_dep_parent_idx`` with the parent)
EDGE_SIDES = ("child", "parent")


@lru_cache(maxsize=64)
def orphan_edges_batch(q: str, table: str, side: str, *, after: bool) -> Statement:
    """Delete queue ``name``'s flow edges whose job on ``side`` is gone, a batch of keys at a time.

    An edge whose job on either side retention (or anyone) deleted only grows the table:
    each queue's edges are walked from each side, over the next ``batch`` job ids of that
    side past ``after``, probing ``table`` for each. One row: ``walk_cursor`` (null when
    the queue is done) and ``deleted``. The same on every backend.
    """
    if side not in EDGE_SIDES:
        raise ValueError(f"side must be one of {EDGE_SIDES}, got {side!r}")
    p = Params()
    name, column = p("name"), f"{side}_id"
    edges = f"{q}.job_dependency"
    mine = f"{side}_name = {name}::text" + (f" AND {column} > {p('after')}::uuid" if after else "")
    return p.statement(
        f"WITH edge AS (SELECT {column} AS id FROM {edges} WHERE {mine}"
        f" ORDER BY {column} OFFSET {p('batch')}::int - 1 LIMIT 1),"
        f" removed AS (DELETE FROM {edges} d WHERE {mine}"
        f" AND {column} <= COALESCE((SELECT id FROM edge), '{_MAX_UUID}'::uuid)"
        f" AND NOT EXISTS (SELECT 1 FROM {q}.{quote(table)} j"
        f" WHERE j.name = {name}::text AND j.id = d.{column}) RETURNING 1)"
        " SELECT (SELECT id FROM edge) AS walk_cursor,"
        " (SELECT count(*) FROM removed)::int AS deleted"
    )


@lru_cache(maxsize=4)
def reduce_counts(q: str) -> Statement:
    """Take what a retention walk deleted off queue ``name``'s cached counts at once.

    ``retained`` off ``retained_count`` (when it is counted), ``deleted`` off
    ``total_count``, as pg-boss does, rather than wait for the next stats pass.
    """
    p = Params()
    sql = (
        f"UPDATE {q}.queue SET retained_count = CASE WHEN retained_count IS NULL THEN NULL"
        f" ELSE GREATEST(retained_count - {p('retained')}::int, 0) END,"
        f" total_count = GREATEST(total_count - {p('deleted')}::int, 0)"
        f" WHERE name = {p('name')}::text"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def insert_warning(q: str) -> Statement:
    """Persist one warning: ``type``, ``message``, ``data`` (jsonb), created now."""
    p = Params()
    sql = (
        f"INSERT INTO {q}.warning (type, message, data, created_on)"
        f" VALUES ({p('type')}::text, {p('message')}::text, {p('data')}::jsonb, {q}.job_now())"
    )
    return p.statement(sql)


@lru_cache(maxsize=8)
def recent_warnings(q: str, *, paged: bool) -> Statement:
    """Persisted warnings, newest first, after the keyset ``(before_created, before_id)``.

    The keyset of the previous page (``warning_i1`` serves the order; a plain read
    everywhere).
    """
    p = Params()
    where = f" WHERE {before_keyset(p)}" if paged else ""
    sql = (
        f"SELECT id, type, message, data, created_on FROM {q}.warning{where}"
        f" ORDER BY created_on DESC, id DESC LIMIT {p('limit')}::int"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def prune_warnings(q: str) -> Statement:
    """Delete persisted warnings older than ``days`` days (same on every backend)."""
    p = Params()
    sql = (
        f"DELETE FROM {q}.warning"
        f" WHERE created_on < {q}.job_now() - {p('days')}::int * interval '1 day'"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def prune_queue_stats(q: str) -> Statement:
    """Delete at most ``batch`` queue-stat snapshots older than ``days`` days, oldest first.

    The single-table shape, where no daily partition can be dropped. Rows ``deleted``: a
    full batch means there may be more.
    """
    p = Params()
    sql = (
        f"WITH batch AS (SELECT id FROM {q}.queue_stats"
        f" WHERE captured_on < {q}.job_now() - {p('days')}::int * interval '1 day'"
        f" ORDER BY captured_on, id LIMIT {p('batch')}::int),"
        f" removed AS (DELETE FROM {q}.queue_stats WHERE id IN (SELECT id FROM batch) RETURNING 1)"
        " SELECT (SELECT count(*) FROM removed)::int AS deleted"
    )
    return p.statement(sql)


def _partitions_of_queue_stats(schema: str) -> str:
    # the daily partitions, by name (queue_stats_YYYYMMDD, the name pg-boss gives them)
    return (
        "SELECT c.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
        " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = p.relnamespace"
        f" WHERE n.nspname = {literal(schema)} AND p.relname = 'queue_stats'"
    )


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@lru_cache(maxsize=8)
def ensure_queue_stats_partitions(q: str, schema: str) -> str:
    """Create the ``queue_stats`` partitions of today and tomorrow when missing.

    Days on the database clock (UTC days); the partitioned shape only; one DO block.
    """
    return (
        "DO $qcore$ DECLARE d date; part text; BEGIN"
        " FOR i IN 0..1 LOOP"
        f" d := ({q}.job_now() AT TIME ZONE 'UTC')::date + i;"
        " part := 'queue_stats_' || to_char(d, 'YYYYMMDD');"
        f" IF NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        f" WHERE n.nspname = {literal(schema)} AND c.relname = part) THEN"
        f" EXECUTE format('CREATE TABLE {q}.%I PARTITION OF {q}.queue_stats"
        " FOR VALUES FROM (%L) TO (%L)', part, to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',"
        " to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');"
        " END IF; END LOOP; END $qcore$"
    )


@lru_cache(maxsize=8)
def drop_old_queue_stats_partitions(q: str, schema: str, days: int) -> str:
    """Drop the daily ``queue_stats`` partitions of days more than ``days`` before today.

    Days on the database clock; the partitioned shape only; one DO block.
    """
    return (
        "DO $qcore$ DECLARE r record; part_day date; BEGIN"
        f" FOR r IN {_partitions_of_queue_stats(schema)} LOOP"
        " IF substring(r.relname FROM 'queue_stats_(.*)$') ~ '^[0-9]{8}$' THEN"
        " part_day := to_date(substring(r.relname FROM 'queue_stats_(.*)$'), 'YYYYMMDD');"
        f" IF part_day < ({q}.job_now() AT TIME ZONE 'UTC')::date - {int(days)} THEN"
        f" EXECUTE 'DROP TABLE IF EXISTS {q}.' || quote_ident(r.relname);"
        " END IF; END IF; END LOOP; END $qcore$"
    )

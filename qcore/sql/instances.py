"""SQL for the instance registry: pg-boss's ``instance`` table, one row per ``Boss`` object.

Each row is written by the object itself at start(), on each heartbeat and at stop().

The rows mean what pg-boss's mean, so a fleet of both lists together: live while not
stopped and heard from within ``INSTANCE_QUIET_BEATS`` heartbeats; deleted once the
heartbeat has not moved for ``INSTANCE_RETENTION_DAYS``; dead rows (stopped or quiet)
bounded per name at registration and overall in maintenance. Every statement is the
same on every backend but the prunes, which lock with ``SKIP LOCKED`` where the engine
has it.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import DDL, Params, Statement
from qcore.sql.catalog import INSTANCE_COLUMN_TYPES
from qcore.sql.instance_notices import written_with
from qcore.sql.probes import column_in_table, table_in_schema

__all__ = [
    "INSTANCE_DEAD_KEPT",
    "INSTANCE_DEAD_KEPT_PER_NAME",
    "INSTANCE_KEY_TABLE",
    "INSTANCE_QUIET_BEATS",
    "INSTANCE_RETENTION_DAYS",
    "acknowledge_instance_pause",
    "add_jobs_processed_column",
    "add_pause_acknowledged_column",
    "beat_instance_key",
    "count_crash_restarts",
    "count_instances",
    "crash_recount_at",
    "create_instance_key_table",
    "delete_old_instances",
    "get_instances",
    "heartbeat_instance",
    "instance_counts",
    "instance_exists",
    "list_instances",
    "live_instance_keys",
    "prune_instance_lives",
    "read_instance_pause",
    "register_instance",
    "remove_instance_key",
    "set_instance_paused",
    "stop_instance",
    "trim_dead_instances",
]

#: heartbeats an instance may miss and still be live (pg-boss's)
INSTANCE_QUIET_BEATS = 3
#: days a row is kept after its heartbeat last moved
INSTANCE_RETENTION_DAYS = 7
#: dead rows kept per name (per host, unnamed) when an instance registers
INSTANCE_DEAD_KEPT_PER_NAME = 20
#: dead rows kept in all by maintenance
INSTANCE_DEAD_KEPT = 1000

#: the columns a registration or a heartbeat writes, in the order of their parameters
_WRITTEN = (
    "id",
    "name",
    "host",
    "pid",
    "version",
    "node_version",
    "heartbeat_seconds",
    "supervise",
    "schedule",
    "migrate",
    "persist_queue_stats",
    "persist_warnings",
    "pool_max",
    "pool_total",
    "pool_idle",
    "pool_waiting",
    "workers",
    "metrics",
    "config",
)
#: what a heartbeat refreshes of a row that is there
_BEAT = (
    "pool_max",
    "pool_total",
    "pool_idle",
    "pool_waiting",
    "workers",
    "metrics",
    "heartbeat_on",
)


def _now(q: str) -> str:
    return f"{q}.job_now()"


def _quiet(q: str, alias: str = "") -> str:
    """The row's heartbeat is older than its ``INSTANCE_QUIET_BEATS`` heartbeats."""
    a = f"{alias}." if alias else ""
    return (
        f"{a}heartbeat_on < {_now(q)} - {a}heartbeat_seconds * {INSTANCE_QUIET_BEATS}"
        " * interval '1 second'"
    )


def _dead(q: str) -> str:
    """Stopped, or quiet: the complement of ``live``."""
    return f"(stopped_on IS NOT NULL OR {_quiet(q)})"


def _upsert(q: str, p: Params, started_on: str, on_conflict: str) -> str:
    values = [f"{p(column)}::{INSTANCE_COLUMN_TYPES[column]}" for column in _WRITTEN]
    columns = ", ".join([*_WRITTEN, "application_name", "started_on", "heartbeat_on"])
    return (
        f"INSERT INTO {q}.instance ({columns})"
        f" VALUES ({', '.join(values)}, current_setting('application_name'), {started_on},"
        f" {_now(q)}) ON CONFLICT (id) DO UPDATE SET {on_conflict}"
    )


@lru_cache(maxsize=16)
def register_instance(q: str) -> Statement:
    """Write this instance's row as new. Row: ``started_on``.

    A restart after stop() reads as a new life: a new ``started_on``, not stopped, no
    crash restarts yet.
    """
    p = Params()
    replaced = [c for c in _WRITTEN if c != "id"] + ["application_name", "started_on"]
    sets = [f"{c} = EXCLUDED.{c}" for c in replaced if c not in _BEAT]
    sets += ["stopped_on = NULL", "crash_restarts = 0", "crash_restarts_since = NULL"]
    sets += [f"{c} = EXCLUDED.{c}" for c in _BEAT]
    sql = _upsert(q, p, _now(q), ", ".join(sets)) + " RETURNING started_on"
    return p.statement(sql)


@lru_cache(maxsize=16)
def heartbeat_instance(q: str) -> Statement:
    """Refresh the row's pool, workers, metrics and heartbeat.

    A row pruned meanwhile (a process asleep past the retention) comes back with the
    ``started_on`` it had.
    """
    p = Params()
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in _BEAT)
    return p.statement(_upsert(q, p, f"{p('started_on')}::timestamptz", sets))


@lru_cache(maxsize=16)
def stop_instance(q: str) -> Statement:
    """Mark the row stopped (a graceful stop; a crash leaves it to go quiet)."""
    p = Params()
    return p.statement(f"UPDATE {q}.instance SET stopped_on = {_now(q)} WHERE id = {p('id')}::uuid")


def _prune_dead(q: str, where: str, keep: int, skip_locked: bool) -> str:
    """Delete the dead rows ``where`` selects past the ``keep`` newest (by start).

    They are ranked before they are locked; with ``skip_locked`` (where the engine has it)
    locked with SKIP LOCKED, so two prunes at once neither deadlock nor delete a row the
    other's ranking kept (without it, the second prune waits and finds the rows gone).
    """
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else ""
    return (
        f"DELETE FROM {q}.instance WHERE id IN (SELECT id FROM {q}.instance WHERE id IN"
        " (SELECT id FROM (SELECT id, row_number() OVER (ORDER BY started_on DESC, id DESC)"
        f" AS n FROM {q}.instance WHERE {where} AND {_dead(q)}) ranked WHERE n > {keep})"
        f"{lock})"
    )


@lru_cache(maxsize=16)
def prune_instance_lives(q: str, *, skip_locked: bool) -> Statement:
    """After a registration: the dead rows of the same name past the newest kept.

    Same name (same host, unnamed), past the ``INSTANCE_DEAD_KEPT_PER_NAME`` newest.
    """
    p = Params()
    mine = (
        f"id <> {p('id')}::uuid AND (CASE WHEN {p('name')}::text IS NULL"
        f" THEN name IS NULL AND host = {p('host')}::text ELSE name = {p('name')}::text END)"
    )
    return p.statement(_prune_dead(q, mine, INSTANCE_DEAD_KEPT_PER_NAME, skip_locked))


@lru_cache(maxsize=16)
def trim_dead_instances(q: str, *, skip_locked: bool) -> Statement:
    """Maintenance: the dead rows past the ``INSTANCE_DEAD_KEPT`` newest."""
    return Params().statement(_prune_dead(q, "true", INSTANCE_DEAD_KEPT, skip_locked))


@lru_cache(maxsize=16)
def delete_old_instances(q: str) -> Statement:
    """Maintenance: rows whose heartbeat has not moved for ``INSTANCE_RETENTION_DAYS``.

    A live row never qualifies: its heartbeat keeps moving.
    """
    return Params().statement(
        f"DELETE FROM {q}.instance"
        f" WHERE heartbeat_on < {_now(q)} - interval '{INSTANCE_RETENTION_DAYS} days'"
    )


def _crash_streak(q: str, p: Params) -> str:
    """The CTEs ``slot`` and ``streak`` of this instance's name and host.

    ``slot``, the lives before this one that were not heard from after it started
    (neither siblings still beating nor another ``Boss`` of this process); ``streak``,
    those after the last one stopped.
    """
    return (
        f"me AS (SELECT id, started_on FROM {q}.instance WHERE id = {p('id')}::uuid),"
        f" slot AS (SELECT i.* FROM {q}.instance i, me WHERE i.id <> me.id"
        f" AND i.host = {p('host')}::text"
        f" AND (i.name = {p('name')}::text OR (i.name IS NULL AND {p('name')}::text IS NULL))"
        " AND i.started_on < me.started_on AND i.heartbeat_on <= me.started_on"
        f" AND NOT (i.pid = {p('pid')}::int"
        f" AND i.started_on >= {p('process_start')}::timestamptz)),"
        " boundary AS (SELECT max(started_on) AS at FROM slot WHERE stopped_on IS NOT NULL),"
        " streak AS (SELECT s.* FROM slot s, boundary b WHERE s.stopped_on IS NULL"
        " AND (b.at IS NULL OR s.started_on > b.at))"
    )


def _crashed(q: str, p: Params) -> str:
    """A life of the streak that ended: quiet, or of this pid from before this process started.

    A container restart reuses pid 1.
    """
    return (
        f"({_quiet(q)} OR (pid = {p('pid')}::int"
        f" AND heartbeat_on < {p('process_start')}::timestamptz))"
    )


@lru_cache(maxsize=16)
def count_crash_restarts(q: str) -> Statement:
    """Number the crashed lives of the streak and write each later life's count and this one's.

    Numbered from the earliest kept (whose count stands for any pruned before it); each
    later life's count and this instance's are written, so the counts stay exact as the
    pruning moves past the earliest rows.
    """
    p = Params()
    sql = (
        f"WITH {_crash_streak(q, p)},"
        " crashed AS (SELECT id, crash_restarts, crash_restarts_since, heartbeat_on,"
        " row_number() OVER (ORDER BY started_on, id) AS n, count(*) OVER () AS k"
        f" FROM streak WHERE {_crashed(q, p)}),"
        " head AS (SELECT crash_restarts AS base,"
        " COALESCE(crash_restarts_since, heartbeat_on) AS since, k FROM crashed WHERE n = 1),"
        " counts AS (SELECT c.id, h.base + c.n - 1 AS restarts, h.since"
        " FROM crashed c, head h WHERE c.n > 1"
        " UNION ALL SELECT me.id, COALESCE(h.base + h.k, 0), h.since FROM me"
        " LEFT JOIN head h ON true)"
        f" UPDATE {q}.instance i SET crash_restarts = counts.restarts::int,"
        " crash_restarts_since = counts.since FROM counts WHERE i.id = counts.id"
    )
    return p.statement(sql)


@lru_cache(maxsize=16)
def crash_recount_at(q: str) -> Statement:
    """When the lives this count could not judge yet (still reading live) go quiet.

    The registry counts again then. Row ``recount_at``, NULL when there are none.
    """
    p = Params()
    sql = (
        f"WITH {_crash_streak(q, p)} SELECT max(heartbeat_on + heartbeat_seconds"
        f" * {INSTANCE_QUIET_BEATS} * interval '1 second') AS recount_at"
        f" FROM streak WHERE NOT {_crashed(q, p)}"
    )
    return p.statement(sql)


def _key_columns(q: str, keys: bool) -> tuple[str, str]:
    """The key columns of a registry row, and the join that gives them.

    A keyed server records its key in its row's ``config`` (``instanceKey``), so every
    life of a key shows it, its pause and its count; ``keys=False`` (the schema has no key
    table, an install pg-boss made that qcore never migrated) gives every row none.
    """
    if not keys:
        return (
            "NULL::text AS instance_key, false AS paused, 0 AS jobs_processed,"
            " NULL::timestamptz AS pause_changed_on, NULL::timestamptz AS pause_acknowledged_on,"
            " NULL::timestamptz AS key_seen_on",
            "",
        )
    return (
        "k.instance_key, COALESCE(k.paused, false) AS paused,"
        " COALESCE(k.jobs_processed, 0) AS jobs_processed,"
        " k.changed_on AS pause_changed_on, k.acknowledged_on AS pause_acknowledged_on,"
        " k.seen_on AS key_seen_on",
        f" LEFT JOIN {_keys(q)} k ON k.instance_key = i.config ->> 'instanceKey'",
    )


def _registry_rows(q: str, keys: bool) -> str:
    """Every registry row with ``live`` and its key's columns, as a subquery."""
    key_columns, joined = _key_columns(q, keys)
    return (
        f"(SELECT i.*, i.stopped_on IS NULL AND NOT ({_quiet(q, 'i')}) AS live, {key_columns}"
        f" FROM {q}.instance i{joined}) r"
    )


@lru_cache(maxsize=16)
def get_instances(
    q: str, *, after: bool = False, offset: bool = False, keys: bool = True
) -> Statement:
    """The rows, oldest start first, at most ``limit``, each with ``live`` and ``total``.

    pg-boss's order and paging. ``total`` is the registry's row count; a keyed server's
    rows also carry its ``instance_key``, ``paused`` and ``jobs_processed``; with
    ``after``, those past the row of the instance id ``after``; with ``offset``, after
    the first ``offset`` rows.
    """
    p = Params()
    where = ""
    if after:
        where = (
            f" WHERE (r.started_on, r.id) > ((SELECT started_on FROM {q}.instance"
            f" WHERE id = {p('after')}::uuid), {p('after')}::uuid)"
        )
    skip = f" OFFSET {p('offset')}::int" if offset else ""
    sql = (
        f"SELECT r.*, (SELECT count(*) FROM {q}.instance) AS total"
        f" FROM {_registry_rows(q, keys)}{where} ORDER BY r.started_on, r.id"
        f" LIMIT {p('limit')}::int{skip}"
    )
    return p.statement(sql)


def _fleet_filter(p: Params) -> str:
    """The operator's filters, each NULL for "any".

    ``live``, ``keyed`` (has an instance key), ``paused``, and ``search``: a
    case-insensitive piece of the key, name or host.
    """
    return (
        f"({p('live')}::boolean IS NULL OR r.live = {p('live')}::boolean)"
        f" AND ({p('keyed')}::boolean IS NULL"
        f" OR (r.instance_key IS NOT NULL) = {p('keyed')}::boolean)"
        f" AND ({p('paused')}::boolean IS NULL OR r.paused = {p('paused')}::boolean)"
        f" AND ({p('search')}::text IS NULL OR strpos(lower(concat_ws(' ', r.instance_key,"
        f" r.name, r.host)), lower({p('search')}::text)) > 0)"
    )


@lru_cache(maxsize=16)
def list_instances(q: str, *, after: bool, keys: bool = True) -> Statement:
    """The operator's page of the registry: live rows first, then the most recently heard.

    Filtered by :func:`_fleet_filter`, at most ``limit``; with ``after``, past the
    previous page's last ``(after_dead, after_heard, after_id)`` (``after_dead`` 0 for a
    live row, 1 for a dead one). The same on every backend: the registry is small (dead
    rows are bounded by maintenance), so the page reads it whole and sorts.
    """
    p = Params()
    rank = "CASE WHEN r.live THEN 0 ELSE 1 END"
    past = ""
    if after:
        dead, heard, last = p("after_dead"), p("after_heard"), p("after_id")
        past = (
            f" AND ({rank} > {dead}::int OR ({rank} = {dead}::int"
            f" AND (r.heartbeat_on < {heard}::timestamptz"
            f" OR (r.heartbeat_on = {heard}::timestamptz AND r.id > {last}::uuid))))"
        )
    return p.statement(
        f"SELECT r.* FROM {_registry_rows(q, keys)} WHERE {_fleet_filter(p)}{past}"
        f" ORDER BY {rank}, r.heartbeat_on DESC, r.id LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=16)
def instance_counts(q: str, *, keys: bool = True) -> Statement:
    """The registry's counts in one pass: every row, and the live, keyed and paused ones.

    One row: ``total``, ``live``, ``keyed``, ``keyed_live``, ``anonymous_live``,
    ``paused`` (live and paused). Sums of CASE rather than FILTER, which not every
    engine parses.
    """

    def count(condition: str) -> str:
        return f"COALESCE(sum(CASE WHEN {condition} THEN 1 ELSE 0 END), 0)::int"

    return Statement(
        f"SELECT count(*)::int AS total, {count('r.live')} AS live,"
        f" {count('r.instance_key IS NOT NULL')} AS keyed,"
        f" {count('r.live AND r.instance_key IS NOT NULL')} AS keyed_live,"
        f" {count('r.live AND r.instance_key IS NULL')} AS anonymous_live,"
        f" {count('r.live AND r.paused')} AS paused"
        f" FROM {_registry_rows(q, keys)}"
    )


@lru_cache(maxsize=16)
def count_instances(q: str) -> Statement:
    """Row ``total``: the registry's row count."""
    return Statement(f"SELECT count(*) AS total FROM {q}.instance")


@lru_cache(maxsize=16)
def instance_exists(q: str) -> Statement:
    """Row ``present`` for the instance id ``id``."""
    p = Params()
    return p.statement(
        f"SELECT EXISTS (SELECT 1 FROM {q}.instance WHERE id = {p('id')}::uuid) AS present"
    )


#: qcore's table of instance keys (pg-boss has no such thing and ignores it)
INSTANCE_KEY_TABLE = "qcore_instance_key"


def _keys(q: str) -> str:
    return f"{q}.{quote(INSTANCE_KEY_TABLE)}"


def create_instance_key_table(schema: str) -> DDL:
    """qcore's instance keys: whether each is paused, and when a server with it was last seen.

    Paused (since when, and when its server acknowledged that); last seen (its instance's
    id). Idempotent (skipped where it exists), on every backend.
    """
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(INSTANCE_KEY_TABLE)} ("
        " instance_key text PRIMARY KEY,"
        " paused boolean NOT NULL DEFAULT false,"
        " changed_on timestamptz,"
        " seen_on timestamptz,"
        " instance_id uuid,"
        " jobs_processed bigint NOT NULL DEFAULT 0,"
        " acknowledged_on timestamptz"  # last, where an older install's ALTER puts it
        ")",
        skip_if=(table_in_schema, {"schema": schema, "name": INSTANCE_KEY_TABLE}),
    )


def _add_key_column(schema: str, column: str, definition: str) -> DDL:
    """A column the key table gained after it first shipped, skipped where it is."""
    return DDL(
        f"ALTER TABLE {quote(schema)}.{quote(INSTANCE_KEY_TABLE)}"
        f" ADD COLUMN IF NOT EXISTS {column} {definition}",
        skip_if=(
            column_in_table,
            {"schema": schema, "table": INSTANCE_KEY_TABLE, "column": column},
        ),
    )


def add_jobs_processed_column(schema: str) -> DDL:
    """The key table's count of jobs claimed (added after the table first shipped)."""
    return _add_key_column(schema, "jobs_processed", "bigint NOT NULL DEFAULT 0")


def add_pause_acknowledged_column(schema: str) -> DDL:
    """The key table's moment its server acknowledged the last pause or resume (added later)."""
    return _add_key_column(schema, "acknowledged_on", "timestamptz")


#: what a keyed server reads of its key: the pause, when it was asked, when acknowledged
_PAUSE_STATE = "k.paused, k.changed_on, k.acknowledged_on"


@lru_cache(maxsize=16)
def live_instance_keys(q: str) -> Statement:
    """The distinct keys (``key``) of the live keyed servers, from their rows; everywhere alike."""
    return Statement(
        "SELECT DISTINCT i.config ->> 'instanceKey' AS key"
        f" FROM {q}.instance i WHERE i.stopped_on IS NULL AND NOT ({_quiet(q, 'i')})"
        " AND i.config ->> 'instanceKey' IS NOT NULL"
    )


@lru_cache(maxsize=16)
def beat_instance_key(q: str) -> Statement:
    """A keyed server's heartbeat: its key seen now by instance ``id``; its pause state.

    The server claimed ``claimed`` jobs since its last beat. Row: ``paused``,
    ``changed_on`` (when it was last paused or resumed), ``acknowledged_on``.
    """
    p = Params()
    return p.statement(
        f"INSERT INTO {_keys(q)} AS k (instance_key, seen_on, instance_id, jobs_processed)"
        f" VALUES ({p('key')}::text, {_now(q)}, {p('id')}::uuid, {p('claimed')}::bigint)"
        " ON CONFLICT (instance_key) DO UPDATE SET seen_on = EXCLUDED.seen_on,"
        " instance_id = EXCLUDED.instance_id,"
        " jobs_processed = k.jobs_processed + EXCLUDED.jobs_processed"
        f" RETURNING {_PAUSE_STATE}"
    )


@lru_cache(maxsize=16)
def read_instance_pause(q: str) -> Statement:
    """The pause state of ``key`` between heartbeats (no row: never seen nor paused).

    Row: ``paused``, ``changed_on``, ``acknowledged_on``; a primary-key read, the same
    everywhere.
    """
    p = Params()
    return p.statement(
        f"SELECT {_PAUSE_STATE} FROM {_keys(q)} k WHERE k.instance_key = {p('key')}::text"
    )


@lru_cache(maxsize=16)
def acknowledge_instance_pause(q: str) -> Statement:
    """The server with ``key`` follows the pause or resume stored at ``changed_on``.

    A change stored since (another pause or resume) is left unacknowledged. The same
    everywhere.
    """
    p = Params()
    return p.statement(
        f"UPDATE {_keys(q)} SET acknowledged_on = {_now(q)}"
        f" WHERE instance_key = {p('key')}::text"
        f" AND changed_on = {p('changed_on')}::timestamptz"
    )


@lru_cache(maxsize=64)
def set_instance_paused(q: str, *, create: bool, own: bool, notify: bool, tell: bool) -> Statement:
    """Pause (``paused`` true) or resume the server with ``key``.

    With ``create``, a key never seen is paused ahead of its server. ``own``: the server
    itself asks, so the change is acknowledged as it is stored; otherwise the server
    acknowledges it when it reads it. ``notify`` (where LISTEN/NOTIFY exists) also sends
    ``payload`` on ``channel`` in the same statement, so a listening server reads it at
    once; ``tell`` writes the notice (``by``) for servers that hear no NOTIFY. Rows: the
    key changed (none: unknown).
    """
    p = Params()
    acknowledged = _now(q) if own else "NULL::timestamptz"
    if create:
        change = (
            f"INSERT INTO {_keys(q)} AS k (instance_key, paused, changed_on, acknowledged_on)"
            f" VALUES ({p('key')}::text, {p('paused')}::boolean, {_now(q)}, {acknowledged})"
            " ON CONFLICT (instance_key) DO UPDATE SET paused = EXCLUDED.paused,"
            " changed_on = EXCLUDED.changed_on, acknowledged_on = EXCLUDED.acknowledged_on"
            " RETURNING k.instance_key"
        )
    else:
        change = (
            f"UPDATE {_keys(q)} SET paused = {p('paused')}::boolean, changed_on = {_now(q)},"
            f" acknowledged_on = {acknowledged}"
            f" WHERE instance_key = {p('key')}::text RETURNING instance_key"
        )
    told = ""
    if tell:
        action = f"CASE WHEN {p('paused')}::boolean THEN 'paused' ELSE 'resumed' END"
        rows = f"SELECT instance_key, {action}, {p('by')}::text FROM changed"
        told = written_with(q, rows)
    notified = (
        f", pg_notify({p('channel')}::text, {p('payload')}::text) IS NOT NULL AS notified"
        if notify
        else ""
    )
    return p.statement(
        f"WITH changed AS ({change}){told} SELECT c.instance_key{notified} FROM changed c"
    )


@lru_cache(maxsize=32)
def remove_instance_key(q: str, *, tell: bool) -> Statement:
    """Forget ``key`` and delete its servers' registry rows, unless one was seen lately.

    Seen: the key's last beat or any of its rows' heartbeats, within ``minutes``. Jobs
    are never touched (they name a server by its key, as text). ``tell`` writes the
    removal's notice (``by``) when it is done. Row: ``found`` (the key or a row of it
    exists), ``seen_minutes_ago``, ``removed``, ``rows_removed``.
    """
    p = Params()
    key, now = p("key"), _now(q)
    removal = "SELECT {key}::text, 'removed', {by}::text WHERE (SELECT ok FROM allowed)"
    told = written_with(q, removal.format(key=key, by=p("by"))) if tell else ""
    return p.statement(
        f"WITH k AS (SELECT seen_on FROM {_keys(q)} WHERE instance_key = {key}::text),"
        f" lives AS (SELECT heartbeat_on FROM {q}.instance"
        f" WHERE config ->> 'instanceKey' = {key}::text),"
        " seen AS (SELECT max(t) AS at FROM (SELECT seen_on AS t FROM k"
        " UNION ALL SELECT heartbeat_on FROM lives) s),"
        " allowed AS (SELECT (EXISTS (SELECT 1 FROM k) OR EXISTS (SELECT 1 FROM lives))"
        f" AND ((SELECT at FROM seen) IS NULL OR (SELECT at FROM seen) < {now}"
        f" - {p('minutes')}::int * interval '1 minute') AS ok),"
        f" gone AS (DELETE FROM {_keys(q)} WHERE instance_key = {key}::text"
        " AND (SELECT ok FROM allowed) RETURNING instance_key),"
        f" gone_rows AS (DELETE FROM {q}.instance WHERE config ->> 'instanceKey' = {key}::text"
        " AND (SELECT ok FROM allowed) RETURNING id)"
        + told
        + " SELECT EXISTS (SELECT 1 FROM k) OR EXISTS (SELECT 1 FROM lives) AS found,"
        f" (EXTRACT(EPOCH FROM ({now} - (SELECT at FROM seen))) / 60)::float8"
        " AS seen_minutes_ago, (SELECT ok FROM allowed) AS removed,"
        " (SELECT count(*) FROM gone_rows)::int AS rows_removed"
    )

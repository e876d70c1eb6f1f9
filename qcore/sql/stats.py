"""SQL for the counts cached on each queue row, their snapshots, and the series read back.

The counts cached on each queue row, their snapshots in ``queue_stats``, and the series
``get_queue_stats`` reads back.

The cached columns mean what pg-boss 12.38 gives them, so either runtime's readers
(pg-boss's dashboard included) see one set of numbers:

- gauges, from the live jobs (created, retry, active, failed): ``deferred_count``
  (waiting for ``start_after``), ``blocked_count`` (waiting on a flow parent),
  ``ready_count``, ``queued_count`` (the three together), ``active_count``,
  ``failed_count``; ``singletons_active``; ``ready_oldest_seconds``;
  ``ready_history`` (the newest 60 ready counts, newest first);
- ``retained_count``: completed and cancelled jobs that finished by ``retained_on``,
  a watermark :data:`DELTA_LAG_SECONDS` behind the pass; ``total_count`` = live +
  retained + those that finished since;
- with ``persist_queue_stats`` (the throughput window, from the queue's ``delta_on``
  to the same watermark): ``created_delta``, ``completed_delta``, ``failed_delta``,
  ``delta_seconds``, and the wait/run histograms ``wait_bins``/``run_bins`` (48
  slots: under 10 ms, then bins growing by √2, then the rest).

The aggregate takes pg-boss's ``queue-stats`` advisory key with *try* (a second
instance skips rather than scanning again, and hands its monitor claim back); a
lease backend has no such key and relies on the monitor claim alone.
"""

from __future__ import annotations

import math
from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement
from qcore.sql.locks import lock_key_expression
from qcore.sql.monitor import queue_row_lock

__all__ = [
    "AGGREGATES",
    "DELTA_LAG_SECONDS",
    "LATENCY_SLOTS",
    "READY_HISTORY_SIZE",
    "STATS_LOCK",
    "cache_queue_stats",
    "gauge_columns",
    "insert_queue_stats",
    "queue_stats_bucketed",
    "queue_stats_cache",
    "queue_stats_extent",
    "queue_stats_history",
]

#: the throughput window and the retained watermark end this far behind the pass, so a
#: job stamped by a transaction that commits a little later is still counted (pg-boss's)
DELTA_LAG_SECONDS = 10
#: a window that would start further back than this starts afresh (counting was off)
DELTA_RESET_MAX_SECONDS = 2 * 60 * 60
#: the wait/run histogram: slot 0 under 10 ms, 46 bins growing by √2, one slot past them
LATENCY_SLOTS = 48
LATENCY_MIN_SECONDS = 0.01
#: the ready counts kept on the queue row for a sparkline
READY_HISTORY_SIZE = 60
#: pg-boss's key suffix of the stats aggregate's try-lock
STATS_LOCK = "queue-stats"
#: how ``get_queue_stats`` may collapse a bucket's gauges
AGGREGATES = ("max", "min", "avg")

#: a finished job's wait (from when it could start) and run time, in seconds
_WAIT_SECONDS = "date_part('epoch', j.started_on - GREATEST(j.created_on, j.start_after))"
_RUN_SECONDS = "date_part('epoch', j.completed_on - j.started_on)"
_LIVE = "state IN ('created', 'retry', 'active', 'failed')"
_RETAINED = "state IN ('completed', 'cancelled')"


def _bin(seconds: str) -> str:
    # the histogram slot of a duration: ln(t / 10 ms) / ln(√2) + 1, clamped to the slots
    lo = math.log(LATENCY_MIN_SECONDS)
    width = math.log(2) / 2
    raw = f"floor((ln(GREATEST(({seconds})::float8, 0.001)) - ({lo})) / {width})::int + 1"
    return f"LEAST(GREATEST({raw}, 0), {LATENCY_SLOTS - 1})"


def _histogram(t: str, seconds: str, window: str) -> str:
    # one histogram: the count of finished jobs per slot, every slot, null where none
    return (
        "(SELECT array_agg(c.n ORDER BY s.slot)"
        f" FROM generate_series(0, {LATENCY_SLOTS - 1}) AS s(slot) LEFT JOIN"
        f" (SELECT {_bin(seconds)} AS slot, count(*)::int AS n FROM {t} j"
        f" WHERE j.name = q.name AND {window} AND j.state IN ('completed', 'failed')"
        " AND j.started_on IS NOT NULL GROUP BY 1) c ON c.slot = s.slot)"
    )


def gauge_columns(q: str) -> str:
    """The gauges of one queue's jobs ``j`` (in a query grouped by queue), as cached.

    As the cached columns mean them: ``deferred``, ``blocked``, ``ready``, ``queued``,
    ``active``, ``failed``, ``ready_oldest`` (seconds, null when nothing is ready) and
    ``singletons``. Shared by the monitor's count and the live read of
    :func:`qcore.sql.queues.get_queues_live`, so both count alike.
    """
    now = f"{q}.job_now()"
    queued = "j.state < 'active'"
    waiting = f"{queued} AND NOT j.blocked AND j.start_after"
    return (
        f"count(*) FILTER (WHERE {waiting} > {now})::int AS deferred,"
        f" count(*) FILTER (WHERE {queued} AND j.blocked)::int AS blocked,"
        f" count(*) FILTER (WHERE {waiting} <= {now})::int AS ready,"
        f" count(*) FILTER (WHERE {queued})::int AS queued,"
        " count(*) FILTER (WHERE j.state = 'active')::int AS active,"
        " count(*) FILTER (WHERE j.state = 'failed')::int AS failed,"
        f" round(extract(epoch FROM ({now} - min(GREATEST(j.created_on, j.start_after)) FILTER"
        f" (WHERE {waiting} <= {now}))))::int AS ready_oldest,"
        " array_agg(j.singleton_key) FILTER (WHERE j.state = 'active'"
        " AND j.policy IN ('singleton', 'stately')) AS singletons"
    )


@lru_cache(maxsize=64)
def cache_queue_stats(
    q: str, table: str, *, throughput: bool, try_lock: bool, sample: bool = True
) -> Statement:
    """Count the queues ``names`` of job table ``table`` and write the counts on their rows.

    ``monitor_on`` = now. Rows ``name, queued_count, warning_queued`` per queue written;
    none when ``try_lock`` and another instance holds the stats key (its monitor claim
    is then handed back). ``throughput`` also counts the window (``reset_seconds``: a
    window starting further back starts afresh); ``sample`` (the monitor's pass, not a
    read's refresh) adds the ready count to ``ready_history``.
    """
    p = Params()
    t = f"{q}.{quote(table)}"
    now = f"{q}.job_now()"
    end = f"({now} - interval '{DELTA_LAG_SECONDS} seconds')"
    names = f"{p('names')}::text[]"
    lock_cte = guard = release = ""
    if try_lock:
        lock_cte = (
            f"lock AS (SELECT pg_try_advisory_xact_lock({lock_key_expression(p('key'))}) AS got), "
        )
        guard = " AND (SELECT got FROM lock)"
        release = (
            f"released AS (UPDATE {q}.queue SET monitor_claim_on = NULL FROM (SELECT name"
            f" FROM {q}.queue WHERE name = ANY({names}) AND NOT (SELECT got FROM lock)"
            f" {queue_row_lock(False)}) r WHERE queue.name = r.name), "
        )
    live = (
        f"SELECT j.name, {gauge_columns(q)}, count(*)::int AS live"
        f" FROM {t} j WHERE j.name = ANY({names}) AND j.{_LIVE} GROUP BY 1"
    )
    finished = (
        f"SELECT count(*) FILTER (WHERE j.completed_on <= {end})::int AS retained,"
        f" count(*) FILTER (WHERE j.completed_on > {end})::int AS recent"
        f" FROM {t} j WHERE j.name = q.name AND j.{_RETAINED}"
    )
    select_window = window_set = ""
    if throughput:
        start = (
            f"(CASE WHEN q.delta_on > {end} - {p('reset_seconds')}::int * interval '1 second'"
            " THEN q.delta_on END)"
        )
        in_window = f"j.completed_on >= {start} AND j.completed_on < {end}"
        select_window = (
            f", (SELECT count(*)::int FROM {t} j WHERE j.name = q.name"
            f" AND j.created_on >= {start} AND j.created_on < {end}) AS created_delta,"
            f" (SELECT count(*)::int FROM {t} j WHERE j.name = q.name AND {in_window}"
            " AND j.state = 'completed') AS completed_delta,"
            f" (SELECT count(*)::int FROM {t} j WHERE j.name = q.name AND {in_window}"
            " AND j.state = 'failed') AS failed_delta,"
            f" round(extract(epoch FROM ({end} - {start})))::int AS delta_seconds,"
            f" {_histogram(t, _WAIT_SECONDS, in_window)} AS wait_bins,"
            f" {_histogram(t, _RUN_SECONDS, in_window)} AS run_bins"
        )
        window_set = (
            " created_delta = s.created_delta, completed_delta = s.completed_delta,"
            " failed_delta = s.failed_delta,"
            " delta_seconds = CASE WHEN s.delta_seconds < 0 THEN 0 ELSE s.delta_seconds END,"
            f" delta_on = GREATEST(queue.delta_on, {end}),"
            " wait_bins = s.wait_bins, run_bins = s.run_bins,"
        )
    stats = (
        f"SELECT q.name, COALESCE(l.deferred, 0) AS deferred, COALESCE(l.blocked, 0) AS blocked,"
        " COALESCE(l.ready, 0) AS ready, COALESCE(l.queued, 0) AS queued,"
        " COALESCE(l.active, 0) AS active, COALESCE(l.failed, 0) AS failed,"
        " COALESCE(l.live, 0) AS live, l.ready_oldest, l.singletons,"
        f" f.retained, f.recent{select_window}"
        f" FROM {q}.queue q LEFT JOIN live l ON l.name = q.name"
        f" LEFT JOIN LATERAL ({finished}) f ON true"
        f" WHERE q.name = ANY({names}){guard}"
    )
    history = (
        "(SELECT COALESCE(array_agg(v ORDER BY ord), '{}'::int[]) FROM (SELECT v, ord FROM"
        " (SELECT s.ready AS v, 0::bigint AS ord UNION ALL SELECT h.v, h.ord FROM"
        " unnest(COALESCE(queue.ready_history, '{}'::int[])) WITH ORDINALITY AS h(v, ord)) m"
        f" ORDER BY ord LIMIT {READY_HISTORY_SIZE}) capped)"
    )
    sql = (
        f"WITH {lock_cte}{release}live AS ({live}), stats AS ({stats})"
        f" UPDATE {q}.queue SET deferred_count = s.deferred, blocked_count = s.blocked,"
        " queued_count = s.queued, ready_count = s.ready, active_count = s.active,"
        " failed_count = s.failed, retained_count = s.retained,"
        f" retained_on = {end}, total_count = s.live + s.retained + s.recent,{window_set}"
        " ready_oldest_seconds = COALESCE(s.ready_oldest, 0),"
        f" singletons_active = s.singletons, monitor_on = {now}"
        + (f", ready_history = {history}" if sample else "")
        + f" FROM (SELECT name FROM {q}.queue WHERE name = ANY({names}){guard}"
        f" AND (SELECT count(*) FROM stats) >= 0 {queue_row_lock(False)}) r"
        " JOIN stats s ON s.name = r.name WHERE queue.name = r.name"
        " RETURNING queue.name, queue.queued_count, queue.warning_queued"
    )
    return p.statement(sql)


#: the counts a snapshot holds (a queue row's cached ones, and a ``queue_stats`` row's)
_COUNTS = (
    "deferred_count, queued_count, ready_count, active_count, failed_count, total_count,"
    " created_delta, completed_delta, failed_delta, delta_seconds, delta_on,"
    " wait_bins, run_bins, ready_oldest_seconds"
)
#: a snapshot as ``get_queue_stats`` returns it
_SERIES = f"{_COUNTS}, captured_on"


@lru_cache(maxsize=4)
def queue_stats_cache(q: str) -> Statement:
    """Queue ``name``'s cached counts, their age in seconds, and its job table.

    ``captured_on`` = ``monitor_on``, null if never counted; no row for a missing queue.
    """
    p = Params()
    sql = (
        f"SELECT {_COUNTS}, monitor_on AS captured_on, table_name,"
        f" extract(epoch FROM ({q}.job_now() - monitor_on))::float8 AS age_seconds"
        f" FROM {q}.queue WHERE name = {p('name')}::text"
    )
    return p.statement(sql)


_SNAPSHOT_COLUMNS = f"name, {_COUNTS}"


@lru_cache(maxsize=4)
def insert_queue_stats(q: str) -> Statement:
    """A ``queue_stats`` snapshot of each queue ``names`` from its cached counts, captured now.

    pg-boss's row: its ``getQueueStats`` reads qcore's snapshots.
    """
    p = Params()
    sql = (
        f"INSERT INTO {q}.queue_stats ({_SNAPSHOT_COLUMNS}, captured_on)"
        f" SELECT {_SNAPSHOT_COLUMNS}, {q}.job_now() FROM {q}.queue"
        f" WHERE name = ANY({p('names')}::text[])"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def queue_stats_history(q: str) -> Statement:
    """Queue ``name``'s snapshots captured between ``from_`` and ``to``, newest first.

    Each bound may be null; at most ``limit``.
    """
    p = Params()
    sql = (
        f"SELECT {_SERIES} FROM {q}.queue_stats WHERE name = {p('name')}::text"
        f" AND ({p('from_')}::timestamptz IS NULL OR captured_on >= {p('from_')}::timestamptz)"
        f" AND ({p('to')}::timestamptz IS NULL OR captured_on <= {p('to')}::timestamptz)"
        f" ORDER BY captured_on DESC LIMIT {p('limit')}::int"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def queue_stats_extent(q: str) -> Statement:
    """The first and last ``captured_on`` of queue ``name``'s snapshots (``lo``, ``hi``)."""
    p = Params()
    sql = (
        "SELECT min(captured_on) AS lo, max(captured_on) AS hi"
        f" FROM {q}.queue_stats WHERE name = {p('name')}::text"
    )
    return p.statement(sql)


@lru_cache(maxsize=16)
def queue_stats_bucketed(q: str, aggregate: str) -> Statement:
    """Queue ``name``'s snapshots grouped in buckets of ``seconds``, newest first.

    Buckets are aligned to the Unix epoch; at most ``limit``: each gauge collapsed with
    ``aggregate`` (one of :data:`AGGREGATES`), the counters and their seconds summed (a
    counter is a number of jobs, never averaged), the histograms added slot by slot.
    Gauges are bucketed by ``captured_on``, counters by the window end ``delta_on`` they
    count.
    """
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}")
    p = Params()
    agg = {"max": "max({})::int", "min": "min({})::int", "avg": "round(avg({}))::int"}[aggregate]

    def bucket(column: str) -> str:
        width = f"{p('seconds')}::float8"
        return f"to_timestamp(floor(extract(epoch FROM {column})::float8 / {width}) * {width})"

    in_range = (
        f" AND ({p('from_')}::timestamptz IS NULL OR {{c}} >= {p('from_')}::timestamptz)"
        f" AND ({p('to')}::timestamptz IS NULL OR {{c}} <= {p('to')}::timestamptz)"
    )
    name = f"name = {p('name')}::text"
    gauges = ", ".join(
        f"{agg.format(c)} AS {c}"
        for c in (
            "deferred_count",
            "queued_count",
            "ready_count",
            "active_count",
            "failed_count",
            "total_count",
        )
    )
    sql = (
        f"WITH g AS (SELECT {bucket('captured_on')} AS bucket, {gauges}"
        f" FROM {q}.queue_stats WHERE {name}{in_range.format(c='captured_on')} GROUP BY 1),"
        f" c AS (SELECT {bucket('delta_on')} AS bucket, sum(created_delta)::int AS created_delta,"
        " sum(completed_delta)::int AS completed_delta, sum(failed_delta)::int AS failed_delta,"
        " sum(delta_seconds)::int AS delta_seconds, max(delta_on) AS delta_on,"
        " max(ready_oldest_seconds)::int AS ready_oldest_seconds"
        f" FROM {q}.queue_stats WHERE {name} AND delta_on IS NOT NULL"
        f"{in_range.format(c='delta_on')} GROUP BY 1),"
        f" h AS (SELECT {bucket('delta_on')} AS bucket, u.slot,"
        " COALESCE(sum(u.w), 0)::int AS w, COALESCE(sum(u.r), 0)::int AS r"
        f" FROM {q}.queue_stats, unnest(wait_bins, run_bins) WITH ORDINALITY AS u(w, r, slot)"
        f" WHERE {name} AND delta_on IS NOT NULL AND wait_bins IS NOT NULL"
        f"{in_range.format(c='delta_on')} GROUP BY 1, 2),"
        " hb AS (SELECT bucket, array_agg(w ORDER BY slot) AS wait_bins,"
        " array_agg(r ORDER BY slot) AS run_bins FROM h GROUP BY 1)"
        " SELECT COALESCE(g.bucket, c.bucket) AS captured_on, g.deferred_count, g.queued_count,"
        " g.ready_count, g.active_count, g.failed_count, g.total_count, c.created_delta,"
        " c.completed_delta, c.failed_delta, c.delta_seconds, c.delta_on,"
        " c.ready_oldest_seconds, hb.wait_bins, hb.run_bins"
        " FROM g FULL JOIN c ON c.bucket = g.bucket"
        " LEFT JOIN hb ON hb.bucket = COALESCE(g.bucket, c.bucket)"
        f" ORDER BY 1 DESC LIMIT {p('limit')}::int"
    )
    return p.statement(sql)

"""``/metrics``: the board's numbers in the Prometheus text format.

So an existing Grafana sees qcore.

Every scrape reads the queues' cached counts (one statement: the counts the supervise
pass keeps on each queue row, never a count over the job table) and the registry; with
a metrics history, each queue's finished-job counters and latency histograms over the
history's 90 days (one read of the store per queue). The counters are sums over what
the history keeps, so they drop when old days are pruned: Prometheus reads a drop as a
counter reset, which ``rate()`` and ``increase()`` handle.

=====================================  =======  =========================================
metric                                 type     labels
=====================================  =======  =========================================
``qcore_queue_jobs``                   gauge    queue, state (queued, active, deferred,
                                                failed, total)
``qcore_queue_oldest_ready_seconds``   gauge    queue
``qcore_queue_counts_age_seconds``     gauge    queue (how old its cached counts are;
                                                absent until the monitor counts it)
``qcore_instances``                    gauge    live (true, false)
``qcore_jobs_finished_total``          counter  queue, outcome (completed, failed)
``qcore_job_wait_seconds``             histo    queue
``qcore_job_run_seconds``              histo    queue
=====================================  =======  =========================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from qcore.errors import ConfigError
from qcore.metrics import BOUNDS_MS, MetricsHistoryProvider

if TYPE_CHECKING:
    from qcore.web.board import Board

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: the window the counters and histograms cover
WINDOW = "90d"


class _Gathered:
    """A collector over metric families read beforehand.

    Collectors are synchronous; the reads are not.
    """

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def _buckets(counts: list[int]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (seconds) of a histogram in ``BOUNDS_MS`` slots, and a sum.

    The sum is estimated: each slot's samples at its middle; the open slot at its bound.
    """
    cumulative, running, total = [], 0, 0.0
    low = 0.0
    for bound, n in zip(BOUNDS_MS, counts, strict=False):
        running += n
        total += n * (low + bound) / 2000
        cumulative.append((f"{bound / 1000:g}", float(running)))
        low = bound
    running += counts[-1]
    total += counts[-1] * BOUNDS_MS[-1] / 1000
    cumulative.append(("+Inf", float(running)))
    return cumulative, total


async def exposition(board: Board) -> bytes:
    """The current figures, as the text a Prometheus scrape reads."""
    queues = await board.boss.get_queues()
    jobs = GaugeMetricFamily(
        "qcore_queue_jobs", "Jobs by state (cached counts)", labels=["queue", "state"]
    )
    oldest = GaugeMetricFamily(
        "qcore_queue_oldest_ready_seconds",
        "How long the oldest job ready to run has waited (cached)",
        labels=["queue"],
    )
    age = GaugeMetricFamily(
        "qcore_queue_counts_age_seconds",
        "How old the cached counts are (seconds since the monitor counted the queue)",
        labels=["queue"],
    )
    for q in queues:
        if q.counts_age_seconds is not None:
            age.add_metric([q.name], q.counts_age_seconds)
        for state, n in (
            ("queued", q.queued_count),
            ("active", q.active_count),
            ("deferred", q.deferred_count),
            ("failed", q.failed_count),
            ("total", q.total_count),
        ):
            jobs.add_metric([q.name, state], n)
        oldest.add_metric([q.name], q.ready_oldest_seconds or 0)
    counts = await board.boss.instance_counts()
    live = GaugeMetricFamily("qcore_instances", "Registered instances", labels=["live"])
    live.add_metric(["true"], counts.live)
    live.add_metric(["false"], counts.total - counts.live)
    families: list[Metric] = [jobs, oldest, age, live]
    if board.history is not None:
        families += await _history(board.history, [q.name for q in queues])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Gathered(families))
    return generate_latest(registry)


async def _history(history: MetricsHistoryProvider, names: list[str]) -> list[Metric]:
    """The finished-job counters and latency histograms per queue.

    None while the store does not exist (a read-only board never creates it).
    """
    finished = CounterMetricFamily(
        "qcore_jobs_finished",
        f"Jobs finished over the metrics history ({WINDOW})",
        labels=["queue", "outcome"],
    )
    wait = HistogramMetricFamily(
        "qcore_job_wait_seconds",
        "Time from created to started (first attempts)",
        labels=["queue"],
    )
    run = HistogramMetricFamily(
        "qcore_job_run_seconds", "Time from started to finished", labels=["queue"]
    )
    try:
        every = await history.totals_of(names, window=WINDOW)
    except ConfigError:
        return []
    for totals in every:
        finished.add_metric([totals.queue, "completed"], totals.completed)
        finished.add_metric([totals.queue, "failed"], totals.failed)
        for family, counts in ((wait, totals.wait_histogram), (run, totals.run_histogram)):
            buckets, total = _buckets(counts)
            family.add_metric([totals.queue], buckets, total)
    return [finished, wait, run]

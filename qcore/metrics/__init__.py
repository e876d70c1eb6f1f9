"""Metrics history: its store, recorder, sources, provider and admin.

It sits above the core and uses it only through public verbs and ``qcore.sql`` builders;
nothing in the core imports it (an import-linter contract says so).

>>> store = PostgresMetricsStore(dsn)                       # tables in schema pgboss
>>> PostgresMetricsStore(dsn, schema="metrics", queue_schema="pgboss")  # or apart
>>> recorder = MetricsRecorder(store, PgBossQueues(ctx))    # counts finished jobs
>>> await recorder.start()
>>> await MetricsHistoryProvider(store).throughput("emails", window="7d")
>>> await record_metrics(boss)                              # or: inside a running Boss
"""

from qcore.metrics.admin import MetricsHistoryAdmin, TierUsage, Usage
from qcore.metrics.histogram import BOUNDS_MS
from qcore.metrics.history import (
    LatencyPoint,
    MetricsHistoryProvider,
    Percentiles,
    QueueTotals,
    ThroughputPoint,
    WindowHistory,
)
from qcore.metrics.postgres_store import PostgresMetricsStore, migrate_metrics
from qcore.metrics.recorder import MetricsRecorder, record_metrics
from qcore.metrics.redis_store import RedisMetricsStore
from qcore.metrics.sources import PgBossQueues, namespace_of
from qcore.metrics.store import Bucket, KeyUsage, MetricsStore, Retention

__all__ = [
    "BOUNDS_MS",
    "Bucket",
    "KeyUsage",
    "LatencyPoint",
    "MetricsHistoryAdmin",
    "MetricsHistoryProvider",
    "MetricsRecorder",
    "MetricsStore",
    "Percentiles",
    "PgBossQueues",
    "PostgresMetricsStore",
    "QueueTotals",
    "RedisMetricsStore",
    "Retention",
    "ThroughputPoint",
    "TierUsage",
    "Usage",
    "WindowHistory",
    "migrate_metrics",
    "namespace_of",
    "record_metrics",
]

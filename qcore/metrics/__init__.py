"""Metrics history: its store, recorder, sources and provider. It sits above the core
and uses it only through public verbs and ``qcore.sql`` builders; nothing in the core
imports it (an import-linter contract says so).

>>> store = PostgresMetricsStore(dsn)                       # tables in schema pgboss
>>> recorder = MetricsRecorder(store, PgBossQueues(ctx))    # counts finished jobs
>>> await recorder.start()
>>> await MetricsHistoryProvider(store).throughput("emails", window="7d")
"""

from qcore.metrics.history import MetricsHistoryProvider, ThroughputPoint
from qcore.metrics.recorder import MetricsRecorder, PgBossQueues
from qcore.metrics.store import PostgresMetricsStore, Retention, migrate_metrics

__all__ = [
    "MetricsHistoryProvider",
    "MetricsRecorder",
    "PgBossQueues",
    "PostgresMetricsStore",
    "Retention",
    "ThroughputPoint",
    "migrate_metrics",
]

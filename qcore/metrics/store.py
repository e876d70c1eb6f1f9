"""What every metrics store keeps and answers.

:class:`MetricsStore`, the contract the recorder writes through and the provider and
admin read through, the three tiers, the rollup key, and :class:`Retention`.

A store holds buckets of queue keys (``pgboss:<schema>:<queue>``, and each namespace's
``__global__`` rollup) at three tiers: ``m`` (minutes), ``h`` (hours) and ``d`` (days),
bucket numbers counted in that tier's units since the epoch (UTC). A bucket carries the
completed and failed counts, both latency histograms (wait, then run, ``SLOTS`` each)
and the queue-age gauge. Two stores ship: :class:`~qcore.metrics.PostgresMetricsStore`
(tables in the queues' database) and :class:`~qcore.metrics.RedisMetricsStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from qcore.errors import ValidationError
from qcore.metrics.sources import Counts, Latency

__all__ = ["GLOBAL", "TIERS", "Bucket", "KeyUsage", "MetricsStore", "Retention", "Snapshot"]

#: the rollup across a namespace's queues
GLOBAL = "__global__"

#: tier letter -> minutes per bucket
TIERS = {"m": 1, "h": 60, "d": 1440}

MINUTES_PER_DAY = 1440


@dataclass(frozen=True)
class Retention:
    """How long each tier is kept, in days: minute rows 7, hour and day rows 90."""

    minutes: int = 7
    hours: int = 90
    days: int = 90

    def __post_init__(self) -> None:
        for name in ("minutes", "hours", "days"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 3650:
                raise ValidationError(
                    f"Retention.{name} must be a whole number of days from 1 to 3650, got {value!r}"
                )

    @classmethod
    def of_days(cls, days: int) -> Retention:
        """``retention_days=N``: hours and days kept N days, minutes at their default.

        So a long window never asks for months of minute rows.
        """
        return cls(hours=days, days=days)

    def keeps(self, tier: str) -> int:
        """Days kept of a tier (``m``, ``h`` or ``d``)."""
        return {"m": self.minutes, "h": self.hours, "d": self.days}[tier]

    def oldest(self, tier: str, minute: int) -> int:
        """The oldest bucket of ``tier`` still kept when the clock reads ``minute``."""
        return (minute - self.keeps(tier) * MINUTES_PER_DAY) // TIERS[tier]


@dataclass(frozen=True)
class Bucket:
    """One stored bucket.

    Counts, the packed histograms (None: no sample) and the age of the oldest waiting
    job in seconds (None: none waited).
    """

    completed: int = 0
    failed: int = 0
    latency: list[int] | None = None
    age: float | None = None


@dataclass(frozen=True)
class KeyUsage:
    """The footprint of one key's tier: rows (buckets), bytes, oldest and newest bucket."""

    key: str
    tier: str
    rows: int
    bytes: int
    oldest: int
    newest: int


@dataclass(frozen=True)
class Snapshot:
    """What a tick read of one queue.

    Its key and its namespace's rollup key, the counts and histograms of closed minutes,
    and the clock (the current minute) it was read by.
    """

    key: str
    rollup: str
    counts: Counts
    latency: Latency
    minute: int
    retention: Retention


class MetricsStore(Protocol):
    """A place the history lives.

    Writes are additive and idempotent: a snapshot adds, to every tier of the queue and
    of the rollup, only what its minutes hold beyond the minutes already stored,
    atomically.
    """

    #: the key prefix readers show by default (``pgboss:<schema>:`` of one job schema)
    default_namespace: str

    async def ready(self, *, writing: bool = True) -> None:
        """Check (and, where allowed, create) the store.

        A store of a newer layout is refused to writers
        (:class:`~qcore.errors.SchemaVersionError`), read by readers.
        """

    async def now_minute(self) -> int:
        """The current UTC minute on the store's own clock (what a board reads by)."""

    async def take_leases(self, keys: list[str], *, holder: str, seconds: float) -> set[str]:
        """Of ``keys``, those whose sampling lease ``holder`` holds for ``seconds`` more.

        The lease is taken where free, expired or already its own, on the store's clock.
        """

    async def release_leases(self, keys: list[str], *, holder: str) -> None:
        """Give up ``holder``'s leases of ``keys`` (another recorder takes them at once)."""

    async def newest_minute(self, key: str) -> int | None:
        """The newest minute holding finished jobs stored for ``key``."""

    async def add_snapshot(self, snapshot: Snapshot) -> int:
        """Add what ``snapshot`` holds beyond the stored minutes, in one atomic step.

        Returns the number of minutes whose counts changed.
        """

    async def add_ages(self, ages: dict[str, float], *, minute: int, retention: Retention) -> None:
        """Raise the age gauge of each key's buckets covering ``minute`` to its value."""

    async def prune(self, retention: Retention, *, minute: int) -> None:
        """Drop the buckets past each tier's retention when the clock reads ``minute``."""

    async def read_series(
        self, keys: list[str], tier: str, first: int, last: int
    ) -> dict[str, dict[int, Bucket]]:
        """The buckets of ``tier`` from bucket ``first`` to ``last`` of every one of ``keys``.

        Oldest first, in one read whatever their number; a key without any is left out.
        """

    async def keys(self, namespace: str) -> list[str]:
        """Every key under ``namespace`` holding buckets."""

    async def usage(self, namespace: str) -> tuple[list[KeyUsage], bool]:
        """The footprint of every key and tier under ``namespace``, and whether bytes are estimated.

        The parts add up to the store's real size where it can say.
        """

    async def purge(self, namespace: str, key: str | None, before: int | None) -> int:
        """Delete the buckets of ``key`` that ended by minute ``before``; how many went.

        ``key`` None: every key of ``namespace``; ``before`` None: all. One key's are first
        subtracted from its rollup (whose buckets are not counted as deleted). The count
        is the store's own (the rows, or hash fields, it removed).
        """

    async def close(self) -> None:
        """Close what the store opened itself."""

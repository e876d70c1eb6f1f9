"""``work()``'s options, validated on construction (seconds throughout)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from qcore.errors import ValidationError
from qcore.options import (
    FETCH_OPTIONS,
    GroupConcurrency,
    GroupLimits,
    check_count,
    check_flag,
    check_int,
    check_seconds,
    fetch_options,
    group_limits,
)

#: pg-boss's floor for ``pollingIntervalSeconds``
MIN_POLLING_INTERVAL_SECONDS = 0.5
#: the relaxed poll while a NOTIFY would wake the worker: at least this long
DEFAULT_NOTIFY_POLLING_INTERVAL_SECONDS = 30.0
MAX_LOCAL_CONCURRENCY = 1000
MAX_BATCH_SIZE = 100_000


@dataclass(frozen=True)
class WorkOptions:
    """The options of ``Boss.work``, validated on construction (seconds throughout)."""

    batch_size: int = 1
    local_concurrency: int = 1
    polling_interval_seconds: float = 2.0
    include_metadata: bool = False
    priority: bool = True
    order_by_created_on: bool = True
    min_priority: int | None = None
    max_priority: int | None = None
    ignore_start_after: bool = False
    heartbeat_refresh_seconds: float | None = None
    notify_polling_interval_seconds: float | None = None
    group_concurrency: int | GroupConcurrency | GroupLimits | None = None
    ignore_groups: Collection[str] | None = None
    local_group_concurrency: int | GroupConcurrency | GroupLimits | None = None
    per_job_results: bool = False
    burst_when_ready_exceeds: int | None = None
    burst_when_batch_full: bool = True
    locked_fetch: bool = False

    def __post_init__(self) -> None:
        checked = fetch_options({name: getattr(self, name) for name in FETCH_OPTIONS})
        for name in ("group_concurrency", "ignore_groups"):  # kept in their checked form
            object.__setattr__(self, name, checked[name])
        check_count("batch_size", self.batch_size, MAX_BATCH_SIZE)
        check_count("local_concurrency", self.local_concurrency, MAX_LOCAL_CONCURRENCY)
        check_seconds(
            "polling_interval_seconds", self.polling_interval_seconds, MIN_POLLING_INTERVAL_SECONDS
        )
        if self.heartbeat_refresh_seconds is not None:
            check_seconds(
                "heartbeat_refresh_seconds", self.heartbeat_refresh_seconds, 0, inclusive=False
            )
        if self.notify_polling_interval_seconds is not None:
            check_seconds(
                "notify_polling_interval_seconds",
                self.notify_polling_interval_seconds,
                MIN_POLLING_INTERVAL_SECONDS,
            )
        if self.local_group_concurrency is not None:
            self._check_local_groups()
        check_flag("per_job_results", self.per_job_results)
        check_flag("burst_when_batch_full", self.burst_when_batch_full)
        check_flag("locked_fetch", self.locked_fetch)
        if self.locked_fetch:
            self._check_locked()
        if self.burst_when_ready_exceeds is not None:
            check_int("burst_when_ready_exceeds", self.burst_when_ready_exceeds)

    def _check_local_groups(self) -> None:
        """Check ``local_group_concurrency``.

        It is exclusive with ``group_concurrency``, and no limit may be above
        ``local_concurrency`` (the handlers this worker can run at once).
        """
        if self.group_concurrency is not None:
            raise ValidationError(
                "group_concurrency (enforced in the database) and local_group_concurrency"
                " (enforced in this process) cannot both be given: choose one"
            )
        limits = group_limits("local_group_concurrency", self.local_group_concurrency)
        object.__setattr__(self, "local_group_concurrency", limits)
        if limits.largest > self.local_concurrency:
            raise ValidationError(
                f"local_group_concurrency allows {limits.largest} jobs of a group at once,"
                f" more than local_concurrency ({self.local_concurrency}) can run"
            )

    def _check_locked(self) -> None:
        """Check ``locked_fetch`` against the group limits, which it cannot honour.

        The group limits count active jobs (a locked claim's stay queued) or hand jobs
        back (nothing to hand back: the transaction holds them).
        """
        for name in ("group_concurrency", "local_group_concurrency"):
            if getattr(self, name) is not None:
                raise ValidationError(
                    f"locked_fetch cannot be combined with {name}: a locked claim's jobs"
                    " stay queued while they run, and group limits count active jobs"
                )

    @property
    def fetch(self) -> dict[str, Any]:
        """The options its fetches take, but the batch size (the loops share fetches)."""
        return {name: getattr(self, name) for name in FETCH_OPTIONS if name != "batch_size"}

    @property
    def relaxed_polling_interval_seconds(self) -> float:
        """The poll interval while a NOTIFY would wake the worker.

        pg-boss's default: at least 30 s, and never shorter than the polling interval.
        """
        if self.notify_polling_interval_seconds is not None:
            return float(self.notify_polling_interval_seconds)
        return max(DEFAULT_NOTIFY_POLLING_INTERVAL_SECONDS, float(self.polling_interval_seconds))

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults (for status reports)."""
        defaults = WorkOptions()
        return {
            name: getattr(self, name)
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(defaults, name)
        }

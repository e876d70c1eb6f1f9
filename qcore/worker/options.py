"""``work()``'s options, validated on construction (seconds throughout)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qcore.errors import (
    ValidationError,
)
from qcore.options import priority_bounds

#: pg-boss's floor for ``pollingIntervalSeconds``
MIN_POLLING_INTERVAL_SECONDS = 0.5


#: the relaxed poll while a NOTIFY would wake the worker: at least this long
DEFAULT_NOTIFY_POLLING_INTERVAL_SECONDS = 30.0


MAX_LOCAL_CONCURRENCY = 1000


MAX_BATCH_SIZE = 100_000


def _seconds(option: str, value: object, minimum: float, *, inclusive: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value >= minimum if inclusive else value > minimum):  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    bound = f">= {minimum}" if inclusive else f"> {minimum}"
    raise ValidationError(f"{option} must be a number of seconds {bound}, got {value!r}")


def _count(option: str, value: object, maximum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise ValidationError(f"{option} must be an integer from 1 to {maximum}, got {value!r}")


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

    def __post_init__(self) -> None:
        _count("batch_size", self.batch_size, MAX_BATCH_SIZE)
        _count("local_concurrency", self.local_concurrency, MAX_LOCAL_CONCURRENCY)
        _seconds(
            "polling_interval_seconds", self.polling_interval_seconds, MIN_POLLING_INTERVAL_SECONDS
        )
        for option in ("include_metadata", "priority", "order_by_created_on", "ignore_start_after"):
            if not isinstance(getattr(self, option), bool):
                raise ValidationError(
                    f"{option} must be True or False, got {getattr(self, option)!r}"
                )
        priority_bounds(self.min_priority, self.max_priority)
        if self.heartbeat_refresh_seconds is not None:
            _seconds(
                "heartbeat_refresh_seconds", self.heartbeat_refresh_seconds, 0, inclusive=False
            )
        if self.notify_polling_interval_seconds is not None:
            _seconds(
                "notify_polling_interval_seconds",
                self.notify_polling_interval_seconds,
                MIN_POLLING_INTERVAL_SECONDS,
            )

    @property
    def relaxed_polling_interval_seconds(self) -> float:
        """The poll interval while a NOTIFY would wake the worker (pg-boss's default:
        at least 30 s, and never shorter than the polling interval)."""
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

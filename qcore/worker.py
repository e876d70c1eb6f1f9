"""Workers: the loops that fetch jobs of one queue and run a handler on them.

SCAFFOLD — interface only; being implemented.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qcore.context import Context
from qcore.events import Events

__all__ = ["WorkOptions", "Worker"]


@dataclass(frozen=True)
class WorkOptions:
    """The options of ``Boss.work``, validated on construction."""

    batch_size: int = 1
    local_concurrency: int = 1
    polling_interval_seconds: float = 2.0
    include_metadata: bool = False
    priority: bool = True
    min_priority: int | None = None
    max_priority: int | None = None
    ignore_start_after: bool = False
    heartbeat_refresh_seconds: float | None = None
    notify_polling_interval_seconds: float | None = None


class Worker:
    """``local_concurrency`` loops fetching from queue ``name`` and running ``handler``."""

    def __init__(
        self,
        name: str,
        handler: Callable[..., Any],
        options: WorkOptions,
        *,
        context: Callable[[], Context],  # raises NotStartedError until the Boss is started
        events: Events,
    ) -> None:
        raise NotImplementedError

    id: str
    name: str

    def start(self) -> None:
        """Start the loops (they emit ``error`` on each poll while the Boss is not started)."""
        raise NotImplementedError

    def wake(self) -> None:
        """A job may be ready now: an idle loop fetches at once instead of sleeping."""
        raise NotImplementedError

    async def stop(self, *, graceful: bool = True, timeout: float | None = 30.0) -> None:
        """Stop fetching; let handlers finish within ``timeout`` (None: no limit; at once
        when not graceful); fail the jobs still held."""
        raise NotImplementedError

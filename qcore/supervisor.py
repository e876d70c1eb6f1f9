"""The monitor pass and its background loop. SCAFFOLD — being implemented."""

from __future__ import annotations

from collections.abc import Callable

from qcore.context import Context
from qcore.events import Events

__all__ = ["Supervisor", "supervise"]


async def supervise(ctx: Context, name: str | None = None) -> None:
    """One monitor pass now: fail active jobs past expiry or heartbeat."""
    raise NotImplementedError


class Supervisor:
    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        *,
        interval_seconds: float,
        monitor_interval_seconds: float,
    ) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

"""The LISTEN/NOTIFY listener that wakes idle workers. SCAFFOLD — being implemented."""

from __future__ import annotations

from collections.abc import Callable

from qcore.context import Context
from qcore.events import Events

__all__ = ["Notifier"]


class Notifier:
    def __init__(
        self,
        ctx: Context,
        events: Events,
        *,
        on_queue: Callable[[str], None],
        on_reconnect: Callable[[], None],
    ) -> None:
        raise NotImplementedError

    async def start(self) -> bool:
        """Listen; False (after one ``listen_notify_unavailable`` warning) when it cannot."""
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

"""Events a ``Boss`` emits: ``error``, ``warning``, ``wip``, ``stopped``.

Callbacks may be plain functions or coroutines. A callback that raises is
logged and never breaks the emitter: background loops report through here
and must keep running.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcore.errors import JobFailedError, ValidationError

__all__ = ["EVENTS", "Events", "WarningEvent"]

log = logging.getLogger("qcore")

EVENTS = (
    "error",
    "warning",
    "wip",
    "stopped",
    "flow",
    "bam",
    "instance_paused",
    "instance_resumed",
    "instance_removed",
    "instance_limited",
    "instance_unlimited",
)


@dataclass(frozen=True)
class WarningEvent:
    """The payload of a ``warning`` event."""

    type: str  # start_retry, listen_notify_unavailable, slow_query, ...
    message: str
    data: dict[str, Any] = field(default_factory=dict)


class Events:
    """A small event emitter with sync and async callbacks."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callable[..., Any]]] = {name: [] for name in EVENTS}
        self._pending: set[asyncio.Task[None]] = set()

    def on(self, event: str, callback: Callable[..., Any]) -> Callable[[], None]:
        """Call ``callback(payload)`` on each ``event``; returns a function that unsubscribes."""
        if not isinstance(event, str) or event not in self._callbacks:
            raise ValidationError(f"unknown event {event!r}; events: {', '.join(EVENTS)}")
        if not callable(callback):
            raise ValidationError(f"callback for {event!r} must be callable, got {callback!r}")
        self._callbacks[event].append(callback)
        return lambda: self._callbacks[event].remove(callback)

    def emit(self, event: str, payload: Any = None) -> None:
        """Deliver ``payload`` to every callback; async ones run as tasks.

        It also logs errors and warnings on the ``qcore`` logger (but a handler's failed
        attempt, which the worker logs itself, rate-limited, on ``qcore.worker``).
        """
        if event == "error" and isinstance(payload, JobFailedError):
            pass
        elif event == "error":
            log.error(
                "%s", payload, exc_info=payload if isinstance(payload, BaseException) else None
            )
        elif event == "warning":
            log.warning("%s", payload.message if isinstance(payload, WarningEvent) else payload)
        for callback in list(self._callbacks[event]):
            try:
                result = callback(payload)
            except Exception:
                log.exception("%s callback failed", event)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(_guarded(event, result))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    def warn(self, type: str, message: str, **data: Any) -> None:
        """Emit a ``warning`` of a given type."""
        self.emit("warning", WarningEvent(type, message, data))

    async def drain(self) -> None:
        """Wait for async callbacks still running."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


async def _guarded(event: str, awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("%s callback failed", event)

"""The reconnecting LISTEN loop shared by the drivers that can listen.

A driver supplies ``open_session()``: it connects a dedicated connection,
issues LISTEN, and returns a session whose ``run()`` delivers notifications
and checks the connection with a heartbeat query, returning or raising when
the connection is gone. This loop reopens it with backoff and tells the
caller through ``on_reconnect`` so it can re-poll for what it missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from qcore.db._base import Listener, ListenOptions, OnMessage, OnReconnect, call
from qcore.errors import ConnectionLostError
from qcore.tasks import cancel_and_wait

__all__ = ["HeartbeatSession", "ListenSession", "ReconnectingListener"]

log = logging.getLogger("qcore")


class ListenSession(Protocol):
    async def run(self, on_message: OnMessage) -> None: ...

    async def close(self) -> None: ...


class HeartbeatSession:
    """A listening session of one dedicated connection that checks it still listens.

    When no notification came for ``heartbeat_seconds`` (pg-boss's
    notifyHeartbeatIntervalMs, 10 s by default), it checks within
    ``heartbeat_timeout_seconds`` (notifyHeartbeatTimeoutMs, 5 s) that it still listens
    on the channel, and ends (to be reopened) if not: both from its
    :class:`~qcore.db.ListenOptions`. A driver supplies :meth:`still_listening`, running
    :func:`still_listening_sql` its own way.
    """

    def __init__(self, channel: str, options: ListenOptions) -> None:
        self._channel = channel
        self.heartbeat_seconds = options.heartbeat_seconds
        self.heartbeat_timeout_seconds = options.heartbeat_timeout_seconds

    async def still_listening(self) -> bool:
        raise NotImplementedError

    async def heartbeat(self) -> None:
        """Raise :class:`ConnectionLostError` unless the session still listens."""
        if not await asyncio.wait_for(self.still_listening(), self.heartbeat_timeout_seconds):
            raise ConnectionLostError(f"the session no longer listens on {self._channel}")


def still_listening_sql(placeholder: str) -> str:
    """The heartbeat query: whether this session listens on channel ``placeholder``."""
    return f"SELECT EXISTS (SELECT 1 FROM pg_listening_channels() c WHERE c = {placeholder}::text)"


class ReconnectingListener(Listener):
    def __init__(
        self,
        open_session: Callable[[], Awaitable[ListenSession]],
        on_message: OnMessage,
        on_reconnect: OnReconnect | None,
        *,
        max_backoff_seconds: float = 5.0,
    ) -> None:
        self._open = open_session
        self._on_message = on_message
        self._on_reconnect = on_reconnect
        self._max_backoff = max_backoff_seconds
        self._task: asyncio.Task[None] | None = None
        self._session: ListenSession | None = None

    async def start(self) -> ReconnectingListener:
        """Open the first session (errors propagate), then keep it alive in a task."""
        self._session = await self._open()
        self._task = asyncio.create_task(self._loop(), name="qcore-listener")
        return self

    async def _loop(self) -> None:
        backoff = 0.1
        while True:
            session = self._session
            if session is not None:
                try:
                    await session.run(self._on_message)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("LISTEN connection lost: %s", exc)
                finally:
                    self._session = None
                    await _quietly_close(session)
            try:
                self._session = await self._open()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN reconnect failed, retrying in %.1fs: %s", backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff = 0.1
            if self._on_reconnect is not None:
                try:
                    await call(self._on_reconnect)
                except Exception:
                    log.exception("on_reconnect callback failed")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        if self._session is not None:
            await _quietly_close(self._session)
            self._session = None


async def _quietly_close(session: ListenSession) -> None:
    try:
        await session.close()
    except Exception:  # the connection is already gone
        pass


async def deliver(on_message: OnMessage, channel: str, payload: str) -> None:
    """Run a notification callback; its errors are logged, never break the listener."""
    try:
        await call(on_message, channel, payload)
    except Exception:
        log.exception("notification callback failed")

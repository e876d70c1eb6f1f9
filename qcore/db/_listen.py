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

from qcore.db._base import Listener, OnMessage, OnReconnect, call
from qcore.tasks import cancel_and_wait

__all__ = ["ListenSession", "ReconnectingListener"]

log = logging.getLogger("qcore")


class ListenSession(Protocol):
    async def run(self, on_message: OnMessage) -> None: ...

    async def close(self) -> None: ...


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

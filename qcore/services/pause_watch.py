"""A keyed server's watch on its own pause: an operator's pause is honoured within a poll.

An operator pauses a server by its instance key from any process
(:func:`qcore.verbs.instances.pause_instance`); the key's row says so. The registry reads
it at every heartbeat, which may be 30 seconds away. This watch reads it sooner:

- where LISTEN/NOTIFY reaches the server, the pause sends a notice on the schema's
  channel and the watch reads the row at once (:meth:`PauseWatch.poke`); a listener
  that reconnects reads it too, a notice may have been lost meanwhile;
- elsewhere, every polling interval of the server's workers (the shortest), and only
  while it has workers: a server that claims nothing has nothing to pause.

Whoever reads a change applies it and acknowledges it in the row, so the board tells
"pause requested" from "paused, acknowledged at ...".
"""

from __future__ import annotations

from collections.abc import Callable

from qcore.context import Context
from qcore.events import Events
from qcore.periodic import Periodic
from qcore.verbs import instances as instance_ops
from qcore.verbs.instances import PauseState

__all__ = ["DEFAULT_WATCH_SECONDS", "PauseWatch", "follow_pause"]

#: how often the watch reads while no worker says otherwise (work()'s default polling)
DEFAULT_WATCH_SECONDS = 2.0


async def follow_pause(
    ctx: Context, key: str, state: PauseState, on_paused: Callable[[bool], None]
) -> None:
    """Apply ``state`` to this server (``on_paused``), then acknowledge it in its row."""
    on_paused(state.paused)
    await instance_ops.acknowledge_pause(ctx, key, state)


class PauseWatch(Periodic):
    """Reads the pause state of ``key`` between heartbeats and applies it.

    ``intervals()`` gives the polling intervals of the server's workers (empty: none
    works, nothing to read); ``listening()`` whether a notice would reach it (then the
    heartbeat is the fallback, and no polling read is made).
    """

    name = "pause_watch"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        *,
        key: str,
        intervals: Callable[[], list[float]],
        listening: Callable[[], bool],
        on_paused: Callable[[bool], None],
    ) -> None:
        super().__init__(events, DEFAULT_WATCH_SECONDS, detached=True)
        self._context = context
        self.key = key
        self._intervals = intervals
        self._listening = listening
        self._on_paused = on_paused

    def next_delay(self) -> float:
        """The shortest polling interval of the server's workers."""
        return min(self._intervals(), default=DEFAULT_WATCH_SECONDS)

    async def run_pass(self) -> None:
        if self._intervals() and not self._listening():
            await self.check()

    async def check(self) -> None:
        """Read the key's pause state now and follow it."""
        ctx = self._context()
        state = await instance_ops.read_pause(ctx, self.key)
        await follow_pause(ctx, self.key, state, self._on_paused)

    def poke(self) -> None:
        """A notice said the key changed: read it at once (after a read in flight)."""
        self.soon(self.check)

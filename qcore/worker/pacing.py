"""When a worker's loops poll next: the interval, relaxed or backing off, and bursts.

A worker polls every polling interval, counted from its last fetch (or the Boss's
shared poll's last answer for it); a relaxed interval while a NOTIFY would wake it; a
longer and longer one while its queue does not exist. After a full batch it may fetch
again at once (a burst). :class:`Pacing` holds that arithmetic and the queue row it
reads for it, so the worker's loops only ask.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

from qcore.context import Context
from qcore.events import Events
from qcore.job import Queue
from qcore.verbs import queues as queue_ops
from qcore.worker.options import WorkOptions
from qcore.worker.poll import Poller, SharedPoll

__all__ = ["MISSING_QUEUE_MAX_POLL_SECONDS", "Pacing"]

log = logging.getLogger("qcore.worker")

#: a worker whose queue does not exist (deleted while it runs) polls every polling
#: interval, doubled at each poll that finds it still missing, up to this many seconds
MISSING_QUEUE_MAX_POLL_SECONDS = 30.0


class Pacing:
    """The polling pace of one worker (``owner``, on queue ``name``).

    ``listening(queue)`` says whether a NOTIFY for the queue would reach the worker;
    ``poll`` is the Boss's shared poll, which may answer for an idle worker.
    """

    def __init__(
        self,
        name: str,
        options: WorkOptions,
        *,
        owner: Poller,
        context: Callable[[], Context],
        events: Events,
        listening: Callable[[str], bool] | None,
        poll: SharedPoll | None,
    ) -> None:
        self.name = name
        self.options = options
        self._owner = owner
        self._context = context
        self._events = events
        self._listening = listening
        self._poll = poll
        #: loop time of the last poll by any of the worker's loops (a claim, or a poll
        #: that failed or rested: each puts the next a polling interval away)
        self.last_poll = -math.inf
        #: while the queue does not exist: the seconds between polls (None: it exists)
        self.missing_interval: float | None = None
        self._queue_row: tuple[float, Queue | None] | None = None  # (read at, the row)

    def polled(self) -> None:
        """A poll happened now."""
        self.last_poll = asyncio.get_running_loop().time()

    async def delay(self) -> float:
        """How long an idle loop sleeps before it polls.

        The polling interval (relaxed, while NOTIFY would wake the worker; longer and
        longer while the queue does not exist), counted from the last poll or the shared
        poll's last answer.
        """
        interval = self.options.polling_interval_seconds
        if self.missing_interval is not None:
            interval = self.missing_interval  # the queue does not exist: backing off
        elif await self.relaxed():
            interval = self.options.relaxed_polling_interval_seconds
        since = self.last_poll
        if self._poll is not None:
            since = max(since, self._poll.answered_at(self._owner))
        return since + interval - asyncio.get_running_loop().time()

    async def relaxed(self) -> bool:
        """Whether a NOTIFY would wake the worker.

        It would when the Boss listens and the queue has ``notify`` set (as the last
        claim read it; before any, looked up once per relaxed interval).
        """
        if self._listening is None or not self._listening(self.name):
            return False
        seen = self._context().notify_seen.get(self.name)
        if seen is not None:
            return seen
        try:
            queue = await self.queue(self.options.relaxed_polling_interval_seconds)
        except Exception:
            return False  # the fetch that follows reports what is wrong
        return queue is not None and queue.notify

    async def bursting(self) -> bool:
        """After a full batch, whether to fetch again at once.

        The alternative is to wait out the polling interval. It fetches at once always
        with ``burst_when_batch_full`` (the default); else while the queue's ready count
        (its cached stats, read once per polling interval) exceeds
        ``burst_when_ready_exceeds``.
        """
        if self.options.burst_when_batch_full:
            return True
        threshold = self.options.burst_when_ready_exceeds
        if threshold is None:
            return False
        queue = await self.queue(self.options.polling_interval_seconds)
        return (queue.ready_count if queue is not None else 0) > threshold

    async def queue(self, max_age: float) -> Queue | None:
        """The queue's row (its settings and cached counts), cached for ``max_age`` seconds.

        It is read again once the copy is older than ``max_age`` seconds; the relaxed
        poll and the burst check share it.
        """
        now = asyncio.get_running_loop().time()
        read = self._queue_row
        if read is None or now - read[0] >= max_age:
            read = (now, await queue_ops.get_queue(self._context(), self.name))
            self._queue_row = read
        return read[1]

    def queue_missing(self, worker: str) -> None:
        """The queue does not exist (deleted while the worker runs): poll less and less often.

        The first time, one ``queue_missing`` warning (and a WARNING line); then each
        poll that finds it still missing doubles the wait, up to
        :data:`MISSING_QUEUE_MAX_POLL_SECONDS`. A claim that finds it again resumes.
        """
        interval = self.options.polling_interval_seconds
        ceiling = max(interval, MISSING_QUEUE_MAX_POLL_SECONDS)
        if self.missing_interval is None:
            self.missing_interval = interval
            self._events.warn(
                "queue_missing",
                f"queue {self.name!r} does not exist (deleted?); its worker polls less often"
                f" (up to every {ceiling:.0f} s) until it is created again, with"
                f" create_queue({self.name!r})",
                queue=self.name,
                worker=worker,
            )
        else:
            self.missing_interval = min(self.missing_interval * 2, ceiling)

    def queue_found(self) -> None:
        """A claim found the queue: after it was missing, the worker polls as before."""
        if self.missing_interval is not None:
            self.missing_interval = None
            log.info("queue %r exists again: its worker resumes", self.name)

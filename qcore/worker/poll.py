"""Idle workers share one poll, and only those with a job claim.

One statement tells every idle worker of a Boss whether its queue has a job to claim, and
only those claim.

Without it each idle worker claims once a polling interval, an UPDATE that finds
nothing: ten idle queues, ten statements every two seconds. With it, the first worker
whose poll falls due asks for every worker of the Boss that is idle then (one read,
:func:`qcore.verbs.jobs.ready_queues`); a worker whose queue has a job is woken to claim it,
the others count the answer as their poll and sleep a polling interval from it. So the
idle workers fall into step, and a Boss's idle cost is one statement an interval
whatever the number of queues. A worker alone claims as before: its claim is its poll.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable
from typing import Protocol

from qcore.context import Context
from qcore.verbs import jobs as job_ops


class Poller(Protocol):
    """What the shared poll needs of a worker."""

    id: str
    name: str

    @property
    def polling(self) -> bool:
        """Idle: a loop sleeps out the polling interval, nothing paused or stopping."""

    @property
    def anytime(self) -> bool:
        """Its claims ignore ``start_after``."""

    def wake(self) -> None:
        """Claim now."""


class SharedPoll:
    """The poll the idle workers of one Boss share (``workers()``: those to consider)."""

    def __init__(self, workers: Callable[[], Iterable[Poller]]) -> None:
        self._workers = workers
        #: worker id -> loop time of the poll that found nothing for it
        self._answered: dict[str, float] = {}
        #: the statement in flight: the workers it answers for, and their answers
        self._asking: tuple[frozenset[str], asyncio.Future[dict[str, bool]]] | None = None

    def answered_at(self, worker: Poller) -> float:
        """When a shared poll last found nothing for ``worker``.

        In loop time; -inf: never. The worker's next poll is due a polling interval after
        it.
        """
        return self._answered.get(worker.id, -math.inf)

    def forget(self, worker: Poller) -> None:
        """``worker`` stopped."""
        self._answered.pop(worker.id, None)

    async def ready(self, ctx: Context, worker: Poller) -> bool:
        """``worker``'s poll is due: whether it should claim.

        Alone it should (its claim is the poll); else one statement answers for it and
        for every other idle worker, waking those with a job. After a failed statement
        every one of them claims (and reports what is wrong), as each would have without
        the shared poll.
        """
        asking = self._asking
        if asking is not None and worker.id in asking[0]:
            answers = await asyncio.shield(asking[1])
            return answers.get(worker.name, True)
        others = [w for w in self._workers() if w is not worker and w.polling]
        if not others:
            return True
        covered = [worker, *others]
        loop = asyncio.get_running_loop()
        at = loop.time()
        future: asyncio.Future[dict[str, bool]] = loop.create_future()
        self._asking = (frozenset(w.id for w in covered), future)
        names = sorted({w.name for w in covered})
        anytime = sorted({w.name for w in covered if w.anytime})
        try:
            answers = await job_ops.ready_queues(ctx, names, anytime)
        except Exception:
            answers = {}  # everyone claims, and the claims report what is wrong
        except BaseException:
            future.set_result({})
            raise
        finally:
            if self._asking is not None and self._asking[1] is future:
                self._asking = None
        future.set_result(answers)
        for other in others:
            if answers.get(other.name, True):
                if other.polling:  # else it claims already (woken, or its own poll joined)
                    other.wake()
            else:
                self._answered[other.id] = at
        found = answers.get(worker.name, True)
        if not found:
            self._answered[worker.id] = at
        return found

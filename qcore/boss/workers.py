"""The workers of ``Boss``: ``work()``, its handlers and their stop.

A mixin over :class:`WorkerParts` (the verbs' :class:`~qcore.boss.verbs.parts.BossParts`
and what the workers keep on ``Boss``): ``work()`` starts a :class:`~qcore.worker.Worker`,
``off_work()`` and ``stop()`` end them, and the notifier wakes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from typing_extensions import Unpack

from qcore.arguments import verb
from qcore.boss.verbs.parts import BossParts
from qcore.context import Context
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.job import Job
from qcore.options import WORK_OPTIONS, WorkArguments, known_only, queue_name
from qcore.verbs import queues as queue_ops
from qcore.verbs.jobs.locked import check_locked_claims
from qcore.worker import SharedPoll, WipReporter, Worker, WorkerStatus, WorkOptions
from qcore.worker.failures import FailureLog

__all__ = ["Handler", "WorkerParts", "WorkerVerbs"]

log = logging.getLogger("qcore.worker")


@dataclass(frozen=True)
class Handler:
    """A handler registered with :meth:`Boss.handler`.

    Its queue, its function and the ``work()`` options it runs with.
    """

    queue: str
    function: Callable[[list[Job]], Any]
    options: dict[str, Any]


class WorkerParts(BossParts, Protocol):
    """The parts of a ``Boss`` its workers use, besides the verbs' own."""

    #: whether an operator paused this server (its workers claim nothing meanwhile)
    paused: bool
    limited: str | None
    #: handlers registered with handler(), run by work_handlers()
    handlers: list[Handler]
    _ctx: Context | None
    #: the running workers, by id
    _workers: dict[str, Worker]
    #: one statement a polling interval for all the idle workers
    _poll: SharedPoll
    #: emits ``wip`` for this instance's workers
    _wip: WipReporter
    #: the failure lines of this instance's workers, rate-limited per queue
    _failures: FailureLog
    _halting: list[Worker]
    _unsettled: list[Job]
    _retiring: dict[str, tuple[Worker, asyncio.Future[None]]] | None

    async def work(
        self, name: str, handler: Callable[[list[Job]], Any], **options: Unpack[WorkArguments]
    ) -> str: ...

    def _worker(
        self, name: str, handler: Callable[[list[Job]], Any], **options: Unpack[WorkArguments]
    ) -> Worker: ...

    def _notices_reach(self) -> bool: ...

    async def _register_late(self) -> None: ...


class WorkerVerbs:
    """The workers of this instance: start, register, wake and stop them."""

    #: workers a stop() is stopping (a stop(graceful=False) meanwhile ends their wait)
    _halting: list[Worker] = []  # noqa: RUF012 (replaced, never mutated)
    _unsettled: list[Job] = []  # noqa: RUF012 (replaced, never mutated)
    #: workers stopped by ``off_work`` still finishing their handlers, with their stop()
    _retiring: dict[str, tuple[Worker, asyncio.Future[None]]] | None = None

    @verb(WorkArguments)
    async def work(
        self: WorkerParts,
        name: str,
        handler: Callable[[list[Job]], Any],
        **options: Unpack[WorkArguments],
    ) -> str:
        """Run ``handler(jobs)`` for jobs of queue ``name``; the worker's id.

        ``handler`` may be ``async def`` or a plain function (run on a thread of its
        own). Returning completes the batch (the value is stored as output when the
        batch is one job); raising fails it with the error serialised into output
        (``name``, ``message``, ``stack``). A handler runs at most the batch's
        ``expire_in_seconds``: then the batch is failed, an async handler cancelled,
        and every job's ``cancelled`` event set (a plain function polls it). Jobs with
        ``heartbeat_seconds`` are touched every ``heartbeat_refresh_seconds`` (default
        half of it) while the handler runs.

        ``local_concurrency`` loops run the handler side by side; a loop that gets a
        full batch fetches again at once, idle loops share one poll every
        ``polling_interval_seconds`` (``notify_polling_interval_seconds``, default
        max(30, polling interval), while a NOTIFY would wake them). A loop holds a
        connection only for one statement at a time (but with ``locked_fetch``), so any
        concurrency works with any pool size ``max``. A worker registered before
        ``start()`` succeeds emits ``error`` on each poll and takes jobs once it does.
        Once started, a queue that does not exist raises ``QueueNotFoundError`` here; one
        deleted while the worker runs is reported once (a ``queue_missing`` warning) and
        polled less and less often until it is created again.

        ``burst_when_batch_full=False`` makes a loop that got a full batch wait out the
        polling interval like any other (pg-boss's default), unless the queue's ready
        count exceeds ``burst_when_ready_exceeds``. ``group_concurrency`` limits the
        jobs of a group active at once across every worker (see ``fetch``);
        ``local_group_concurrency`` (the same forms, exclusive with it, no limit above
        ``local_concurrency``) limits them in this worker only, handing a group's
        surplus back unstarted (no attempt spent). With ``per_job_results=True`` the
        handler returns one :class:`~qcore.JobResult` (or ``{"id", "status",
        "output"}``) per job and each job is settled as its result says; a job it
        leaves out is failed (retried while retries are left).

        ``locked_fetch=True`` claims each batch in a transaction its loop holds while
        the handler runs and settles it there (see :meth:`locked_fetch`): one write per
        job instead of two, no heartbeats (the transaction holds the jobs), a pooled
        connection per loop while it runs a batch; not with group limits, nor on
        singleton or stately queues.
        """
        worker = self._worker(name, handler, **options)
        if self._ctx is not None:
            if worker.options.locked_fetch:
                check_locked_claims(self._ctx)  # the backend and adapter: refused now
            await _check_queues(self._ctx, [name])
        self._workers[worker.id] = worker
        worker.start()
        await self._register_late()
        return worker.id

    def _worker(
        self: WorkerParts,
        name: str,
        handler: Callable[[list[Job]], Any],
        **options: Unpack[WorkArguments],
    ) -> Worker:
        """A worker of this instance, not started.

        It is ``work()``'s, or a service's own (the timekeeper's forwarder, which is no
        user's worker: not in ``worker_statuses``).
        """
        return Worker(
            name,
            handler,
            WorkOptions(**options),
            context=self.context,
            events=self.events,
            # the listener is up; the worker checks that its queue itself notifies
            listening=lambda _queue: self._notices_reach(),
            paused=lambda: self.paused or self.limited is not None,
            on_change=self._wip.changed,
            poll=self._poll,
            failures=self._failures,
        )

    def handler(
        self: WorkerParts, name: str, **options: Unpack[WorkArguments]
    ) -> Callable[[Callable[[list[Job]], Any]], Callable[[list[Job]], Any]]:
        """Register the decorated function as the handler of queue ``name``.

        It takes ``work()``'s options; nothing runs until :meth:`work_handlers` (which
        ``qcore work module:boss`` calls after ``start()``). The options are checked
        now: a mistake fails at import, not in production.

        >>> @boss.handler("email", batch_size=10)
        ... async def send_email(jobs): ...
        """
        queue_name(name)
        known_only("work", options, WORK_OPTIONS)
        WorkOptions(**options)

        def register(function: Callable[[list[Job]], Any]) -> Callable[[list[Job]], Any]:
            if not callable(function):
                raise ValidationError(f"handler must be callable, got {function!r}")
            self.handlers.append(Handler(name, function, dict(options)))
            return function

        return register

    @verb()
    async def work_handlers(
        self: WorkerParts, queues: list[str] | None = None, *, local_concurrency: int | None = None
    ) -> list[str]:
        """``work()`` every handler registered with :meth:`handler`; returns the worker ids.

        Only those of ``queues``, when given; ``local_concurrency`` overrides each one's.
        Once started, ``QueueNotFoundError`` (its ``queues`` naming every one missing)
        when a handler's queue does not exist; no worker is started then.
        """
        chosen = self.handlers
        if queues is not None:
            if isinstance(queues, (str, bytes)) or not isinstance(queues, (list, tuple)):
                raise ValidationError(f"queues must be a list of queue names, got {queues!r:.80}")
            queues = [queue_name(q) for q in queues]
            unknown = sorted(set(queues) - {h.queue for h in self.handlers})
            if unknown:
                raise ValidationError(
                    f"no handler is registered for {', '.join(unknown)}; registered:"
                    f" {', '.join(sorted({h.queue for h in self.handlers})) or 'none'}"
                )
            chosen = [h for h in self.handlers if h.queue in queues]
        if self._ctx is not None:  # every missing queue named at once, nothing started
            await _check_queues(self._ctx, sorted({h.queue for h in chosen}))
        ids = []
        for registered in chosen:
            options: WorkArguments = {**registered.options}  # type: ignore[typeddict-item]
            if local_concurrency is not None:
                options["local_concurrency"] = local_concurrency
            ids.append(await self.work(registered.queue, registered.function, **options))
        return ids

    @verb()
    async def off_work(
        self: WorkerParts, name: str | None = None, *, id: str | None = None, wait: bool = True
    ) -> None:
        """Stop the workers of a queue, or the one with ``id``.

        They fetch no more, and their active handlers run to the end; with ``wait``,
        this waits until they have. ``stop()`` also waits for (and bounds by its
        timeout) workers still finishing this way.
        """
        if name is None and id is None:
            raise ValidationError("off_work needs a queue name or a worker id")
        chosen = [
            w
            for w in self._workers.values()
            if (id is None or w.id == id) and (name is None or w.name == name)
        ]
        retiring = self._retiring
        if retiring is None:
            retiring = self._retiring = {}
        stopping = []
        for worker in chosen:
            del self._workers[worker.id]
            task = asyncio.ensure_future(worker.stop(graceful=True, timeout=None))
            retiring[worker.id] = (worker, task)

            def forget(_: asyncio.Future[None], key: str = worker.id) -> None:
                retiring.pop(key, None)

            task.add_done_callback(forget)
            stopping.append(task)
        if chosen:
            self._wip.changed()
        if wait and stopping:
            await asyncio.gather(*stopping)

    @verb()
    def notify_worker(self: WorkerParts, id: str) -> bool:
        """Wake worker ``id`` so that it fetches now; whether a running worker has that id.

        The id is one from :meth:`work`: an idle loop of it fetches now instead of
        waiting out its polling interval. One stopped or of another instance: False,
        nothing happens.
        """
        if not isinstance(id, str):
            raise ValidationError(f"a worker id is a string (from work()), got {id!r:.80}")
        worker = self._workers.get(id)
        if worker is None:
            return False
        worker.wake()
        return True

    def worker_statuses(self: WorkerParts) -> list[WorkerStatus]:
        """What each running worker is doing (also the payload of the ``wip`` event)."""
        return [w.status() for w in self._workers.values()]

    async def _stop_workers(self: WorkerParts, *, graceful: bool, timeout: float) -> None:
        workers = [*self._workers.values(), *(w for w, _ in (self._retiring or {}).values())]
        held = sum(w.running_jobs for w in workers)
        if graceful and held:  # else the stop would be silent for up to the timeout
            log.warning(
                "stopping: waiting up to %s for %d running job%s to finish",
                f"{timeout:.0f} s" if timeout >= 1 else f"{timeout:g} s",
                held,
                "" if held == 1 else "s",
            )
        self._workers.clear()
        self._halting = workers
        try:
            await asyncio.gather(*(w.stop(graceful=graceful, timeout=timeout) for w in workers))
        finally:
            self._halting = []
        self._failures.close()
        self._unsettled = [job for worker in workers for job in worker.unsettled]
        if workers:
            self._wip.flush([w.status() for w in workers])

    def _wake(self: WorkerParts, queue: str) -> None:
        for worker in self._workers.values():
            if worker.name == queue:
                worker.wake()

    def _wake_all(self: WorkerParts) -> None:
        for worker in self._workers.values():
            worker.wake()


async def _check_queues(ctx: Context, names: list[str]) -> None:
    """Raise ``QueueNotFoundError`` naming every queue of ``names`` that does not exist."""
    found = {q.name for q in await queue_ops.get_queues(ctx, names)}
    missing = tuple(n for n in names if n not in found)
    if not missing:
        return
    listed = ", ".join(repr(n) for n in missing)
    create = "; ".join(f"create_queue({n!r})" for n in missing)
    noun = "queue" if len(missing) == 1 else "queues"
    verb = "does" if len(missing) == 1 else "do"
    raise QueueNotFoundError(
        f"{noun} {listed} {verb} not exist; create {'it' if len(missing) == 1 else 'them'}"
        f" first with {create}",
        queues=missing,
    )

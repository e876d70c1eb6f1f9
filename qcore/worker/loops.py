"""The worker: ``local_concurrency`` loops that fetch, run the handler and settle."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from qcore.backend import FetchStrategy, MutationStrategy
from qcore.coalescer import Coalescer
from qcore.context import Context
from qcore.errors import (
    DatabaseError,
    QueueNotFoundError,
    UniqueViolation,
    ValidationError,
)
from qcore.events import Events
from qcore.job import Job
from qcore.options import GroupLimits, queue_name
from qcore.sql.jobs.spec import FetchSpec
from qcore.verbs import jobs as job_ops
from qcore.worker.failures import FailureLog, events_of, failures_of
from qcore.worker.gate import Gate
from qcore.worker.groups import LocalGroups
from qcore.worker.handlers import (
    HANDLER_LOOP,
    Orphans,
    Slot,
    consume,
    is_async,
)
from qcore.worker.lanes import SPLIT_CHAIN_MAX_BATCH, claim_lanes, complete_lanes
from qcore.worker.options import WorkOptions
from qcore.worker.pacing import Pacing
from qcore.worker.poll import SharedPoll
from qcore.worker.running import HandlerRunner
from qcore.worker.settle import Settler
from qcore.worker.settlement import Settlement, transient
from qcore.worker.status import WorkerStatus, utc

log = logging.getLogger("qcore.worker")

#: settling while stopping: how long past the stop's deadline the settles may take in
#: all (a database that does not answer would otherwise hold the stop for a connection
#: timeout per try); what is still unsettled then is left to expire and retry
STOP_SETTLE_SECONDS = 2.0


class Worker(HandlerRunner):
    """``local_concurrency`` loops fetching from queue ``name`` and running ``handler``.

    ``listening(queue)`` says whether a NOTIFY for the queue would reach this worker
    (the Boss's notifier is up); ``on_change()`` is called when its status changes;
    while ``paused()`` the loops claim nothing (an operator paused the server); with
    ``poll``, a poll that falls due asks the Boss's shared poll before claiming;
    ``failures`` logs the handler's failed attempts (the Boss's, shared by its workers).
    """

    def __init__(
        self,
        name: str,
        handler: Callable[..., Any],
        options: WorkOptions,
        *,
        context: Callable[[], Context],  # raises NotStartedError until the Boss is started
        events: Events,
        listening: Callable[[str], bool] | None = None,
        on_change: Callable[[], None] | None = None,
        paused: Callable[[], bool] | None = None,
        poll: SharedPoll | None = None,
        failures: FailureLog | None = None,
    ) -> None:
        queue_name(name)
        if not callable(handler):
            raise ValidationError(f"handler must be callable, got {handler!r}")
        self.id = str(uuid.uuid4())
        self.name = name
        self.handler = handler
        self.options = options
        self._context = context
        self._events = events
        self._on_change = on_change
        self._paused = paused
        self._poll = poll
        #: where failed attempts are logged (a Boss shares one among its workers)
        self._failures = failures if failures is not None else FailureLog()
        #: a service's own reason to claim nothing for now, asked before each poll (the
        #: timekeeper's forwarder while cron is not in use); ``wake()`` ends a wait early
        self.dormant: Callable[[], bool] | None = None
        self._async = is_async(handler)
        # the claim's options, checked once here: every claim passes this spec on
        self._spec = FetchSpec.of({**options.fetch, "batch_size": options.batch_size})
        self._sized: dict[int, FetchSpec] = {}  # the spec for n loops' claim, by n
        limits = options.local_group_concurrency
        self._groups = LocalGroups(limits) if isinstance(limits, GroupLimits) else None
        # claims that must not overlap take turns (see _claiming)
        self._claim_turns = asyncio.Lock()
        self._gate = Gate()
        # claims and completes in lanes: loops asking meanwhile share the next statement
        # (their lanes are set with the first claim: _claim_lanes)
        self._fetch: Coalescer[Context, list[Job]] = Coalescer(self._fetch_for)
        self._settle_and_claim: Coalescer[tuple[Context, list[Job]], list[Job]] = Coalescer(
            self._settle_and_claim_for
        )
        self._complete: Coalescer[tuple[Context, list[Job]], None] = Coalescer(
            self._complete_for, complete_lanes(options.local_concurrency)
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._slots: list[Slot] = []
        # plain handler threads run on past their batch: at most one per loop before the
        # loops claim nothing more (the worker never runs twice its concurrency of them)
        self._orphans = Orphans(options.local_concurrency, on_end=self._orphan_ended)
        self._state = "created"
        self._stopping = False
        self._deadline = math.inf  # loop time after which held jobs are failed
        self._held_jobs: dict[uuid.UUID, Job] = {}  # the jobs of the batches running
        self._stop_signal: asyncio.Future[None] | None = None
        self._pacing = Pacing(
            name,
            options,
            owner=self,
            context=context,
            events=events,
            listening=listening,
            poll=poll,
        )
        # how batches end in the database, and how many ended so
        self._settler = Settler(
            name,
            context=context,
            complete=self._complete,
            report=self._report,
            stopping=lambda: self._stopping,
            max_delay=options.polling_interval_seconds,
        )
        # status
        self._created_on = time.time()
        self._fetched_on: float | None = None
        self._started_on: float | None = None
        self._ended_on: float | None = None
        self._error: str | None = None
        self._error_on: float | None = None

    id: str
    name: str

    # -- public ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loops (they emit ``error`` on each poll while the Boss is not started)."""
        if self._tasks or self._stopping:
            return
        loop = asyncio.get_running_loop()
        self._stop_signal = loop.create_future()
        self._gate.wake_one(remember=True)  # the first loop fetches at once, the rest idle
        for i in range(self.options.local_concurrency):
            slot = Slot(self.name)
            self._slots.append(slot)
            self._tasks.append(
                loop.create_task(self._run(slot), name=f"qcore-work-{self.name}-{i}")
            )
        self._state = "active"
        self._changed()

    def wake(self) -> None:
        """A job may be ready now: an idle loop fetches at once instead of sleeping."""
        if not self._stopping:
            self._gate.wake_one(remember=True)

    async def stop(self, *, graceful: bool = True, timeout: float | None = 30.0) -> None:
        """Stop fetching, let handlers finish, and fail the jobs still held.

        Handlers get ``timeout`` seconds (None: no limit; none when not graceful).

        A fetch in flight is let finish: its jobs run if they arrive before the
        deadline, else they are failed without running (an attempt spent), and this
        waits for that. Past the deadline every held job is failed with
        ``{"value": SHUTDOWN_MESSAGE}``, its ``cancelled`` set, async handlers
        cancelled. Calling it again can only bring the deadline closer.

        Awaited inside one of this worker's async handlers, it returns without waiting
        for that handler (whose loop settles its batch after it returns). A plain
        handler that blocks on a stop waits for itself until the deadline: stop from
        a thread without waiting.
        """
        loop = asyncio.get_running_loop()
        if not graceful:
            deadline = loop.time()
        elif timeout is None:
            deadline = math.inf
        else:
            deadline = loop.time() + max(0.0, float(timeout))
        self._deadline = min(self._deadline, deadline)
        if not self._stopping:
            self._stopping = True
            self._state = "stopping"
            self._gate.close()
            self._changed()
        signal, self._stop_signal = self._stop_signal, loop.create_future()
        if signal is not None and not signal.done():
            signal.set_result(None)  # handlers' waits re-read the deadline
        # awaited inside one of this worker's own async handlers, do not wait for the loop
        # that waits for that handler: it settles the batch once the handler returns
        own = HANDLER_LOOP.get()
        loops = [t for t in self._tasks if t is not own]
        if loops:
            await self._wait_for_loops(loops)
        for slot in self._slots:
            slot.close()
        if self._poll is not None:
            self._poll.forget(self)
        if self._state != "stopped":
            self._state = "stopped"
            self._changed()

    async def _wait_for_loops(self, loops: list[asyncio.Task[None]]) -> None:
        """Wait for the loops to end, bounded after the deadline.

        For ever without a deadline, else until :data:`STOP_SETTLE_SECONDS` past it (the
        deadline may come closer meanwhile). Loops still settling then wait on a
        database that does not answer: they are cancelled and not waited for, and their
        batches counted in :attr:`unsettled`.
        """
        loop = asyncio.get_running_loop()
        running = set(loops)
        while running:
            bound = self._deadline + STOP_SETTLE_SECONDS - loop.time()
            if bound <= 0:
                break
            signal = self._stop_signal
            waits: set[asyncio.Future[Any]] = set(running)
            if signal is not None and not signal.done():
                waits.add(signal)  # a second stop may bring the deadline closer
            await asyncio.wait(
                waits,
                timeout=None if bound == math.inf else bound,
                return_when=asyncio.FIRST_COMPLETED,
            )
            running = {t for t in running if not t.done()}
        if running:
            self._settler.unsettled.update(self._held_jobs)
            for task in running:
                task.cancel()
                task.add_done_callback(consume)

    def status(self) -> WorkerStatus:
        """A snapshot of what the worker is doing."""
        return WorkerStatus(
            id=self.id,
            name=self.name,
            state=self._state,
            local_concurrency=self.options.local_concurrency,
            batch_size=self.options.batch_size,
            polling_interval_seconds=self.options.polling_interval_seconds,
            active=len(self._held_jobs),
            completed=self._settler.completed,
            failed=self._settler.failed,
            created_on=dt.datetime.fromtimestamp(self._created_on, dt.timezone.utc),
            last_fetched_on=utc(self._fetched_on),
            last_job_started_on=utc(self._started_on),
            last_job_ended_on=utc(self._ended_on),
            last_error=self._error,
            last_error_on=utc(self._error_on),
            orphaned_threads=self._orphans.count,
            options=self.options.changed(),
        )

    # -- the loop ----------------------------------------------------------------------

    async def _run(self, slot: Slot) -> None:
        burst = False
        while not self._stopping:
            try:
                due = False
                self._failures.flush()  # a window of suppressed failure lines ended
                if not burst:
                    due = await self._gate.idle(self._pacing.delay)
                    if self._stopping:
                        break
                if self._resting():
                    # an operator paused this server, or its service has nothing to
                    # claim: no claim, ask again next poll
                    self._pacing.polled()
                    burst = False
                    continue
                if due and not await self._poll_finds_work():
                    continue
                burst = await self._fetch_and_process(slot) and await self._pacing.bursting()
            except Exception as exc:  # never let a loop die: report and go on polling
                self._poll_failed(exc)
                burst = False

    def _resting(self) -> bool:
        """Whether the worker rests rather than claims.

        It rests when paused by an operator, dormant (a service's worker with nothing to
        claim), or holding as many orphaned handler threads as it may (until one ends).
        """
        return (
            (self._paused is not None and self._paused())
            or (self.dormant is not None and self.dormant())
            or self._orphans.full
        )

    @property
    def polling(self) -> bool:
        """Whether the worker is idle.

        Idle: a loop sleeps out the polling interval (the shared poll may answer for
        it), nothing paused or stopping.
        """
        return self._gate.polling and not self._stopping and not self._resting()

    @property
    def anytime(self) -> bool:
        """Its claims ignore ``start_after``."""
        return self._spec.ignore_start_after

    async def _poll_finds_work(self) -> bool:
        """A poll fell due: whether to claim.

        Not if the shared poll answered for this worker meanwhile (the next poll is a
        polling interval from that answer), or answers now that its queue has nothing to
        claim.
        """
        if self._poll is None:
            return True
        if await self._pacing.delay() > 0:
            return False
        return await self._poll.ready(self._context(), self)

    async def _fetch_and_process(self, slot: Slot) -> bool:
        """One fetch and its batches; whether the last was full (fetch again at once).

        A full batch that completes claims the next in the same statement
        (settle-and-claim), which this loop runs in turn.
        """
        try:
            ctx = self._context()
            if self.options.locked_fetch:
                return await self._process_locked(ctx, slot)
            self._fetch.lanes, self._settle_and_claim.lanes = claim_lanes(ctx, self.options)
            jobs: list[Job] | None = await self._fetch(ctx)
        except Exception as exc:
            self._poll_failed(exc)
            return False
        self._pacing.queue_found()
        full = False
        while jobs:
            full = len(jobs) >= self.options.batch_size
            batch = jobs
            if self._groups is not None:
                batch = await self._admit(ctx, jobs)
                if not batch:
                    return full
            try:
                chain = full and self.options.burst_when_batch_full
                jobs = await self._process(ctx, batch, slot, claim_next=chain)
            finally:
                if self._groups is not None:
                    self._groups.release(batch)
            if jobs is None:  # settled alone: the caller fetches (at once when full)
                return full
        return False

    async def _process_locked(self, ctx: Context, slot: Slot) -> bool:
        """One locked claim (``locked_fetch``); whether it was full.

        The batch is claimed, run and settled in one transaction of this loop's own. A
        database error on the way rolls it back (the jobs come back, no attempt spent) and
        is reported; one that refused how the batch ended is settled again
        (:meth:`Settler.fail_refused`).
        """
        size = self.options.batch_size
        settling: list[Job] = []
        try:
            async with job_ops.locked_claim(ctx, self.name, self._spec) as batch:
                self._pacing.queue_found()
                jobs = self._deal(batch.jobs, 1)[0]
                if not jobs:
                    return False
                with self._holding(jobs):  # no heartbeats: the open transaction holds them
                    settlement = await self._run_handler(ctx, jobs, slot, touching=False)
                    settling = jobs
                    await self._settler.settle_locked(batch, settlement)
        except DatabaseError as exc:
            if not settling or transient(exc):
                raise
            await self._settler.fail_refused(ctx, settling, exc)
        return len(settling) >= size

    async def _admit(self, ctx: Context, jobs: list[Job]) -> list[Job]:
        """The jobs ``local_group_concurrency`` lets run now; the surplus is handed back.

        The surplus (of groups at their limit here) goes back unstarted, spending no
        attempt. A hand-back that fails is reported; those jobs stay active until they
        expire.
        """
        assert self._groups is not None
        admitted, surplus = self._groups.admit(jobs)
        if surplus:
            try:
                await job_ops.restore(ctx, self.name, surplus)
            except Exception as exc:
                self._report(exc)
        return admitted

    def _claim_spec(self, callers: int) -> FetchSpec:
        """The spec of the next claim, for ``callers`` loops (``batch_size`` jobs each).

        With ``local_group_concurrency``, the groups at their limit here are left to
        other workers.
        """
        full = self._groups.full() if self._groups is not None else []
        if full:
            return self._spec.ignoring(full).sized(self.options.batch_size * callers)
        spec = self._sized.get(callers)
        if spec is None:
            spec = self._sized[callers] = self._spec.sized(self.options.batch_size * callers)
        return spec

    async def _fetch_for(self, callers: list[Context]) -> list[list[Job]]:
        """One fetch for every loop asking now: ``batch_size`` jobs each, in order."""
        spec = self._claim_spec(len(callers))
        async with self._claiming(callers[0]):
            jobs = await job_ops.claim(callers[0], self.name, spec)
        return self._deal(jobs, len(callers))

    async def _settle_and_claim_for(
        self, callers: list[tuple[Context, list[Job]]]
    ) -> list[list[Job]]:
        """One statement completing the batches of every loop asking now and claiming their next.

        It claims ``batch_size`` jobs for each, dealt out in order.
        """
        done = [j for _, batch in callers for j in batch]
        spec = self._claim_spec(len(callers))
        async with self._claiming(callers[0][0]):
            jobs = await job_ops.claim(callers[0][0], self.name, spec, done)
        self._settler.completed += len(callers)
        return self._deal(jobs, len(callers))

    def _claiming(self, ctx: Context) -> contextlib.AbstractAsyncContextManager[Any]:
        """A turn for this worker's claims where two at once would collide.

        The claims (fetches and settle-and-claims) take turns for unlocked claims (the
        second waits for the first's rows, then finds them taken, and its loops go idle
        a polling interval), and for group_concurrency's count, exact only for claims
        that do not overlap.
        """
        unlocked = ctx.backend.fetch is not FetchStrategy.SKIP_LOCKED
        if unlocked or self.options.group_concurrency is not None:
            return self._claim_turns
        return contextlib.nullcontext()

    def _deal(self, jobs: list[Job], callers: int) -> list[list[Job]]:
        """A claim's jobs, ``batch_size`` to each caller.

        When it came back full, more may be waiting: one more idle loop is brought in.
        """
        self._pacing.polled()
        self._fetched_on = time.time()
        size = self.options.batch_size
        bursts = self.options.burst_when_batch_full
        if bursts and len(jobs) >= size * callers and not self._stopping:
            self._gate.wake_one(remember=False)
        if callers == 1:
            return [jobs]
        return [jobs[i * size : (i + 1) * size] for i in range(callers)]

    async def _complete_for(self, batches: list[tuple[Context, list[Job]]]) -> list[None]:
        """One ``complete`` (no output) for the batches of every loop completing now."""
        jobs = batches[0][1] if len(batches) == 1 else [j for _, b in batches for j in b]
        await job_ops.complete(batches[0][0], self.name, jobs)
        return [None] * len(batches)

    async def _process(
        self, ctx: Context, jobs: list[Job], slot: Slot, *, claim_next: bool = False
    ) -> list[Job] | None:
        """Run the handler on a batch and settle it.

        With ``claim_next``, a batch that completes (no output) claims the next batch in
        the same statement where the backend can: returns those jobs, else None (settled
        alone). A settle-and-claim that fails claims nothing, and the batch is settled
        alone as always.
        """
        with self._holding(jobs):
            settlement = await self._run_handler(ctx, jobs, slot)
            if claim_next and self._chains(ctx, settlement):
                try:
                    return await self._settle_and_claim((ctx, jobs))
                except Exception as exc:
                    if not isinstance(exc, UniqueViolation):  # lost a policy race: no error
                        self._report(exc)
            if settlement.verb is not None:
                await self._settler.settle(ctx, jobs, settlement)
            return None

    @contextlib.contextmanager
    def _holding(self, jobs: list[Job]) -> Iterator[None]:
        """Count ``jobs`` as held (the status's ``active``) while the block runs them."""
        self._held_jobs.update((job.id, job) for job in jobs)
        self._started_on = time.time()
        self._changed()
        try:
            yield
        finally:
            for job in jobs:
                self._held_jobs.pop(job.id, None)
            self._ended_on = time.time()
            self._changed()

    def _chains(self, ctx: Context, settlement: Settlement) -> bool:
        """Whether a batch ending so settles and claims the next in one round trip.

        It does when it completed with no output, the worker is not stopping, and the backend
        and adapter make the two one unit
        (:func:`~qcore.verbs.jobs.claim.settles_and_claims`); where that unit is two
        statements (MutationStrategy.SPLIT), only for small batches.
        """
        return (
            settlement.verb == "complete"
            and settlement.data is None
            and not self._stopping
            and job_ops.settles_and_claims(ctx)
            and (
                ctx.backend.mutation is MutationStrategy.CTE
                or self.options.batch_size <= SPLIT_CHAIN_MAX_BATCH
            )
        )

    def _orphan_ended(self) -> None:
        """An orphaned handler thread ended: a loop resting at the cap may claim again."""
        self.wake()
        self._changed()

    @property
    def running_jobs(self) -> int:
        """How many jobs the worker's handlers hold now."""
        return len(self._held_jobs)

    @property
    def unsettled(self) -> list[Job]:
        """The jobs a stop left held.

        Neither their handler's outcome nor the stop's failure could be stored (the
        database did not answer). They stay active until their expiry, then retry as the
        queue says.
        """
        return list(self._settler.unsettled.values())

    # -- reporting ---------------------------------------------------------------------

    def _failed(self, jobs: list[Job], settlement: Settlement) -> None:
        for failure in failures_of(settlement, jobs):
            self._failures.failed(self.name, failure)
            for event in events_of(self.name, failure):
                self._events.emit("error", event)

    def _poll_failed(self, exc: BaseException) -> None:
        """Report a failed poll and count it as the poll.

        A poll is a claim, or the question before it; counting it puts the next one a
        polling interval away, not at once (a Boss not started, or a statement failing
        fast, would otherwise spin the loop).
        """
        self._pacing.polled()
        if isinstance(exc, QueueNotFoundError):
            self._error = f"{type(exc).__name__}: {exc}"
            self._error_on = time.time()
            self._pacing.queue_missing(self.id)
            self._changed()
        else:
            self._report(exc)

    def _report(self, exc: BaseException) -> None:
        self._error = f"{type(exc).__name__}: {exc}"
        self._error_on = time.time()
        self._events.emit("error", exc)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception as exc:  # a status report never stops a loop
                self._events.emit("error", exc)

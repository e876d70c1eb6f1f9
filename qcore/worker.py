"""Workers: the loops that fetch jobs of one queue and run a handler on them.

A worker runs ``local_concurrency`` loops, each an asyncio task. A loop fetches a
batch for itself (one statement), runs the handler on it and settles the batch
(one statement): ``complete`` when the handler returns, ``fail`` when it raises,
runs past the batch's expiry, or the worker stops before it ends. Settling
passes the ``Job`` objects, so it is fenced on the attempt they were fetched in:
a worker whose claim lapsed can never settle the job's next attempt.

**Shared statements.** Loops that fetch at the same moment share one fetch
(``batch_size`` jobs each, split in order), and loops that complete without
output at the same moment share one ``complete``: a worker has at most two such
statements in flight (more past eight loops; ``_lanes``), and a call that finds one free
runs at once, so merging adds no latency; it only packs what would have queued
for a connection anyway. Fewer, fuller statements are what let a worker keep up
with a hand-written claim/complete loop on the same pool.

**Drain, poll, wake.** A loop that received a full batch fetches again as soon
as it has settled it, and first wakes one idle loop, so a backlog is drained at
full concurrency. Idle loops share one poll: of the loops that found nothing,
one is the *poller* and sleeps out the polling interval (counted from the last
fetch) before fetching; the others are parked. An empty queue therefore costs
one fetch per polling interval per worker, however many loops it has, and never
a busy loop. ``wake()`` (a NOTIFY for the queue) wakes one idle loop; if that
one finds a full batch it wakes the next, and so on, so a wake never starts a
herd. While the Boss says a NOTIFY would reach the worker (``listening``), the
poller sleeps ``notify_polling_interval_seconds`` instead.

**Connections.** A loop holds a pool connection only for the one statement it
runs (fetch, touch, complete, fail), never while a handler runs and never two
at once, so no ``local_concurrency`` can deadlock on a pool of any size: loops
beyond the pool's ``max`` wait their turn for a connection (up to its
connection timeout; past it the statement fails, is emitted as ``error``, and
the loop goes on).

**Errors.** Nothing a loop meets kills it: a failed fetch (database gone, Boss
not started yet) is emitted as ``error`` (and logged on the ``qcore`` logger)
and the loop goes back to polling, so a worker resumes by itself when the
database returns. A failed ``complete``/``fail`` is emitted and tried again
with backoff, the batch kept in hand, until it lands or the batch expires (then
the monitor fails it); settling is idempotent, being fenced.

**Handlers.** ``async def`` handlers run as a task per batch; plain functions
run on a thread owned by their loop (so a slow one never waits for a shared
pool). A handler is bounded by the largest ``expire_in_seconds`` of its batch;
past it the batch is failed, every job's ``cancelled`` event is set and an
async handler is cancelled. A thread cannot be interrupted: a timed-out plain
function keeps its thread until it returns, and its loop carries on with a new
one. Jobs with ``heartbeat_seconds`` are touched every
``heartbeat_refresh_seconds`` (default: half the smallest ``heartbeat_seconds``
of the batch) while the handler runs; a job the touch no longer finds active in
its attempt has ``cancelled`` set (and, when the whole batch is lost, an async
handler is cancelled and the batch is left to whoever holds it now).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import inspect
import math
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from qcore import jobs as job_ops
from qcore import queues as queue_ops
from qcore.context import Context
from qcore.errors import (
    ConnectionLostError,
    DatabaseError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.events import Events
from qcore.job import Job
from qcore.options import priority_bounds, queue_name

__all__ = [
    "MIN_POLLING_INTERVAL_SECONDS",
    "SHUTDOWN_MESSAGE",
    "WIP_INTERVAL_SECONDS",
    "Coalescer",
    "WipReporter",
    "WorkOptions",
    "Worker",
    "WorkerStatus",
]

#: pg-boss's floor for ``pollingIntervalSeconds``
MIN_POLLING_INTERVAL_SECONDS = 0.5
#: the relaxed poll while a NOTIFY would wake the worker: at least this long
DEFAULT_NOTIFY_POLLING_INTERVAL_SECONDS = 30.0
#: the output of a job failed because the worker stopped while it was held
SHUTDOWN_MESSAGE = "qcore shut down while active"
#: ``wip`` is emitted at most once per this many seconds (the last change is never lost)
WIP_INTERVAL_SECONDS = 2.0
MAX_LOCAL_CONCURRENCY = 1000
MAX_BATCH_SIZE = 100_000
#: settling after a database error: first delay, doubled up to the polling interval
SETTLE_RETRY_SECONDS = 0.05
#: settling while stopping: tries before the batch is left to the monitor
SETTLE_TRIES_WHEN_STOPPING = 3


def _seconds(option: str, value: object, minimum: float, *, inclusive: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value >= minimum if inclusive else value > minimum):  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    bound = f">= {minimum}" if inclusive else f"> {minimum}"
    raise ValidationError(f"{option} must be a number of seconds {bound}, got {value!r}")


def _count(option: str, value: object, maximum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise ValidationError(f"{option} must be an integer from 1 to {maximum}, got {value!r}")


@dataclass(frozen=True)
class WorkOptions:
    """The options of ``Boss.work``, validated on construction (seconds throughout)."""

    batch_size: int = 1
    local_concurrency: int = 1
    polling_interval_seconds: float = 2.0
    include_metadata: bool = False
    priority: bool = True
    order_by_created_on: bool = True
    min_priority: int | None = None
    max_priority: int | None = None
    ignore_start_after: bool = False
    heartbeat_refresh_seconds: float | None = None
    notify_polling_interval_seconds: float | None = None

    def __post_init__(self) -> None:
        _count("batch_size", self.batch_size, MAX_BATCH_SIZE)
        _count("local_concurrency", self.local_concurrency, MAX_LOCAL_CONCURRENCY)
        _seconds(
            "polling_interval_seconds", self.polling_interval_seconds, MIN_POLLING_INTERVAL_SECONDS
        )
        for option in ("include_metadata", "priority", "order_by_created_on", "ignore_start_after"):
            if not isinstance(getattr(self, option), bool):
                raise ValidationError(
                    f"{option} must be True or False, got {getattr(self, option)!r}"
                )
        priority_bounds(self.min_priority, self.max_priority)
        if self.heartbeat_refresh_seconds is not None:
            _seconds(
                "heartbeat_refresh_seconds", self.heartbeat_refresh_seconds, 0, inclusive=False
            )
        if self.notify_polling_interval_seconds is not None:
            _seconds(
                "notify_polling_interval_seconds",
                self.notify_polling_interval_seconds,
                MIN_POLLING_INTERVAL_SECONDS,
            )

    @property
    def relaxed_polling_interval_seconds(self) -> float:
        """The poll interval while a NOTIFY would wake the worker (pg-boss's default:
        at least 30 s, and never shorter than the polling interval)."""
        if self.notify_polling_interval_seconds is not None:
            return float(self.notify_polling_interval_seconds)
        return max(DEFAULT_NOTIFY_POLLING_INTERVAL_SECONDS, float(self.polling_interval_seconds))

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults (for status reports)."""
        defaults = WorkOptions()
        return {
            name: getattr(self, name)
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(defaults, name)
        }


@dataclass(frozen=True)
class WorkerStatus:
    """What a worker is doing, as the ``wip`` event reports it (times are UTC)."""

    id: str
    name: str  # the queue
    state: str  # created, active, stopping, stopped
    local_concurrency: int
    batch_size: int
    polling_interval_seconds: float
    active: int  # jobs in hand
    completed: int  # batches settled as completed, since the worker started
    failed: int  # batches settled as failed (errors, timeouts, shutdown)
    created_on: dt.datetime
    last_fetched_on: dt.datetime | None
    last_job_started_on: dt.datetime | None
    last_job_ended_on: dt.datetime | None
    last_error: str | None
    last_error_on: dt.datetime | None
    options: dict[str, Any] = field(default_factory=dict)

    def registry_entry(self) -> dict[str, Any]:
        """The worker as pg-boss's instance registry lists it (``instance.workers``):
        camelCase keys, ISO times, options left at their default left out, no error text."""

        def iso(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        names = {
            "include_metadata": "includeMetadata",
            "ignore_start_after": "ignoreStartAfter",
            "min_priority": "minPriority",
            "max_priority": "maxPriority",
            "heartbeat_refresh_seconds": "heartbeatRefreshSeconds",
            "notify_polling_interval_seconds": "notifyPollingIntervalSeconds",
        }
        return {
            "id": self.id,
            "queue": self.name,
            "localConcurrency": self.local_concurrency,
            "batchSize": self.batch_size,
            "pollingIntervalSeconds": self.polling_interval_seconds,
            "active": self.active,
            "lastFetchedOn": iso(self.last_fetched_on),
            "lastJobEndedOn": iso(self.last_job_ended_on),
            "lastErrorOn": iso(self.last_error_on),
            "options": {names[k]: v for k, v in self.options.items() if k in names},
        }


class WipReporter:
    """Emits ``wip`` (the status of every worker of a Boss) when a worker changes, at
    most once per ``interval`` seconds: the first change at once, later ones together
    at the end of the interval, so the last state is always reported."""

    def __init__(
        self,
        events: Events,
        statuses: Callable[[], list[WorkerStatus]],
        *,
        interval: float | None = None,
    ) -> None:
        self._events = events
        self._statuses = statuses
        self._interval = WIP_INTERVAL_SECONDS if interval is None else interval
        self._last = -math.inf
        self._timer: asyncio.TimerHandle | None = None

    def changed(self) -> None:
        """A worker changed: report now, or at the end of the current interval."""
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self._last + self._interval - loop.time()
        if wait <= 0:
            self._emit()
        else:
            self._timer = loop.call_later(wait, self._emit)

    def flush(self, statuses: list[WorkerStatus] | None = None) -> None:
        """Report now (at stop): ``statuses`` if given (workers no longer listed, in their
        final state), else the current ones; a report waiting for its interval is dropped."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = asyncio.get_running_loop().time()
        self._events.emit("wip", self._statuses() if statuses is None else statuses)

    def _emit(self) -> None:
        self._timer = None
        self._last = asyncio.get_running_loop().time()
        self._events.emit("wip", self._statuses())


# --------------------------------------------------------------------------- idle loops

_FETCH, _POLL = "fetch", "poll"


class _Gate:
    """Where a worker's idle loops wait: one poller (sleeps out the poll interval, then
    fetches), the rest parked until a wake or until the poller leaves and hands them
    its role. No I/O here: only who fetches when."""

    def __init__(self) -> None:
        self._parked: deque[asyncio.Future[str]] = deque()
        self._poller: asyncio.Future[str] | None = None
        self._pending = False  # a wake found every loop busy: the next idle loop fetches
        self._closed = False

    async def idle(self, delay: Callable[[], Awaitable[float]]) -> None:
        """Return when this loop should fetch (at once after ``close()``)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                return
            if self._pending:
                self._pending = False
                return
            turn: asyncio.Future[str] = loop.create_future()
            if self._poller is None:
                self._poller = turn
                timer: asyncio.TimerHandle | None = None
                try:
                    seconds = await delay()
                    if not turn.done():
                        timer = loop.call_later(max(0.0, seconds), _resolve, turn, _FETCH)
                    await turn
                finally:
                    if timer is not None:
                        timer.cancel()
                    if self._poller is turn:
                        self._poller = None
                    self._promote()
                return
            self._parked.append(turn)
            try:
                why = await turn
            except BaseException:  # cancelled while parked: leave no hole behind
                if not turn.done():
                    self._parked.remove(turn)
                elif not turn.cancelled() and turn.result() == _POLL:
                    self._promote()  # the poller's role was just handed to us: pass it on
                raise
            if why == _FETCH:
                return
            # _POLL: the poller left; take its role (or park again if another took it)

    def _promote(self) -> None:
        while self._poller is None and self._parked:
            turn = self._parked.popleft()
            if not turn.done():
                turn.set_result(_POLL)
                return

    def wake_one(self, *, remember: bool) -> None:
        """Have one idle loop fetch now: a parked one, else the poller. With
        ``remember``, a wake that finds every loop busy makes the next idle loop fetch."""
        while self._parked:
            turn = self._parked.popleft()
            if not turn.done():
                turn.set_result(_FETCH)
                return
        if self._poller is not None and not self._poller.done():
            self._poller.set_result(_FETCH)
            return
        if remember:
            self._pending = True

    def close(self) -> None:
        """Release every idle loop (the worker is stopping)."""
        self._closed = True
        while self._parked:
            _resolve(self._parked.popleft(), _FETCH)
        if self._poller is not None:
            _resolve(self._poller, _FETCH)


def _resolve(future: asyncio.Future[str], value: str) -> None:
    if not future.done():
        future.set_result(value)


# --------------------------------------------------------------------------- coalescing

T = TypeVar("T")
R = TypeVar("R")


class _Request(Generic[T, R]):
    __slots__ = ("error", "item", "served", "turn", "value")

    def __init__(self, item: T, turn: asyncio.Future[None]) -> None:
        self.item = item
        self.turn = turn  # resolved when served, or when it is this request's turn to lead
        self.served = False
        self.value: R | None = None
        self.error: BaseException | None = None

    def serve(self, value: R | None, error: BaseException | None = None) -> None:
        self.value, self.error, self.served = value, error, True
        if not self.turn.done():
            self.turn.set_result(None)

    def result(self) -> R:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class Coalescer(Generic[T, R]):
    """At most ``lanes`` statements at a time for many callers: a call made while every
    lane is busy waits, and the calls that waited run together as one statement when a
    lane frees (the first of them runs it: no task of its own). A call that finds a lane
    free runs at once, so coalescing never adds latency; it merges only what would have
    queued anyway."""

    def __init__(self, run: Callable[[list[T]], Awaitable[list[R]]], lanes: int = 1) -> None:
        self._run = run
        self._lanes = lanes
        self._waiting: list[_Request[T, R]] = []
        self._busy = 0

    async def __call__(self, item: T) -> R:
        request: _Request[T, R] = _Request(item, asyncio.get_running_loop().create_future())
        if self._busy >= self._lanes:
            self._waiting.append(request)
            try:
                await request.turn
            except BaseException:  # cancelled while waiting: give back a lane handed over
                if request in self._waiting:
                    self._waiting.remove(request)
                elif not request.served:
                    self._pass_lane()
                raise
            if request.served:
                return request.result()
            # a lane was handed over: run the next statement
        else:
            self._busy += 1
        batch = [request, *self._waiting]
        self._waiting = []
        try:
            values = await self._run([r.item for r in batch])
        except Exception as exc:
            for r in batch:
                r.serve(None, exc)
        except BaseException:  # this caller was cancelled: the others learn it as an error
            for r in batch:
                if r is not request:
                    r.serve(
                        None, ConnectionLostError("the statement was cancelled", retryable=True)
                    )
            raise
        else:
            for r, value in zip(batch, values, strict=True):
                r.serve(value)
        finally:
            self._pass_lane()
        return request.result()

    def _pass_lane(self) -> None:
        """A statement ended: the first waiting caller runs the next, else the lane frees."""
        if self._waiting:
            self._waiting.pop(0).turn.set_result(None)
        else:
            self._busy -= 1


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class _Settlement:
    """How a batch ends: ``complete`` or ``fail`` with ``data``; ``None`` verb: left alone."""

    verb: str | None
    data: Any = None


def _outcome_of(handler: asyncio.Future[Any], jobs: Sequence[Job]) -> _Settlement:
    """A finished handler's settlement: its return value completes the batch (stored as
    output when the batch is one job, as pg-boss does); an exception fails it."""
    if handler.cancelled():
        return _Settlement("fail", asyncio.CancelledError("the handler was cancelled"))
    error = handler.exception()
    if error is not None:
        return _Settlement("fail", error)
    return _Settlement("complete", handler.result() if len(jobs) == 1 else None)


#: the output of a failure whose own output the database refused
_UNSTORABLE = {"name": "Error", "message": "the handler failed; its error could not be stored"}


def _transient(exc: BaseException) -> bool:
    """Whether trying the same statement again later may succeed."""
    return isinstance(exc, ConnectionLostError) or (
        isinstance(exc, DatabaseError) and exc.retryable
    )


def _timed_out(seconds: float) -> _Settlement:
    shown = int(seconds) if float(seconds).is_integer() else seconds
    return _Settlement(
        "fail", {"name": "TimeoutError", "message": f"handler timed out after {shown} s"}
    )


def _refresh_seconds(jobs: Sequence[Job], option: float | None) -> float | None:
    """How often to touch the batch's heartbeat jobs: the option, else half the smallest
    ``heartbeat_seconds``; None when no job has a heartbeat."""
    beats = [j.heartbeat_seconds for j in jobs if j.heartbeat_seconds is not None]
    if not beats:
        return None
    return option if option is not None else min(beats) / 2


def _lanes(local_concurrency: int) -> int:
    """How many complete statements a worker's loops may have in flight at once: two,
    one more per four loops past eight (fetches: one). Measured on the drain
    benchmarks (batch 1 with 8 loops, batch 100 with 4): one fetch in flight and the
    others merged into the next claims the most per second; completes, which never
    collide, keep the database busy in two lanes while their statements stay full."""
    if local_concurrency == 1:
        return 1
    return max(2, local_concurrency // 4)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _utc(stamp: float | None) -> dt.datetime | None:
    return None if stamp is None else dt.datetime.fromtimestamp(stamp, dt.timezone.utc)


def _call_sync(handler: Callable[..., Any], jobs: list[Job]) -> Any:
    result = handler(jobs)
    if inspect.iscoroutine(result):
        result.close()
        raise TypeError(
            "the handler returned a coroutine from a plain function; declare it `async def`"
            " so qcore awaits it"
        )
    return result


def _is_async(handler: Callable[..., Any]) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


#: in an async handler's task (and the tasks it starts): the loop task running it
_HANDLER_LOOP: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "qcore_handler_loop", default=None
)


async def _inside(coro: Awaitable[Any], loop_task: asyncio.Task[Any] | None) -> Any:
    """Await a handler's coroutine with ``_HANDLER_LOOP`` set in its task's context."""
    _HANDLER_LOOP.set(loop_task)
    return await coro


def _consume(future: asyncio.Future[Any]) -> None:
    """Done callback of an abandoned handler: retrieve its outcome so asyncio does not
    report an exception nobody will read."""
    if not future.cancelled():
        future.exception()


class _Slot:
    """One loop's own thread for plain-function handlers, started on first use.

    A daemon thread, so a handler that never returns cannot hold up the process's
    exit; one that outlives its batch is abandoned (it ends after the call) and the
    loop's next call starts a new thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._inbox: queue.SimpleQueue[_Call | None] | None = None

    def submit(self, handler: Callable[..., Any], jobs: list[Job]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._inbox is None:
            self._inbox = queue.SimpleQueue()
            threading.Thread(
                target=_serve, args=(self._inbox,), name=f"qcore-{self._name}", daemon=True
            ).start()
        self._inbox.put(_Call(loop, future, contextvars.copy_context(), handler, jobs))
        return future

    def abandon(self) -> None:
        """The running call outlived its batch: its thread ends after it, alone."""
        self.close()

    def close(self) -> None:
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None


@dataclass(frozen=True)
class _Call:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    context: contextvars.Context
    handler: Callable[..., Any]
    jobs: list[Job]


def _serve(inbox: queue.SimpleQueue[_Call | None]) -> None:
    """A slot's thread: run calls until told to stop."""
    while (call := inbox.get()) is not None:
        try:
            result = call.context.run(_call_sync, call.handler, call.jobs)
        except BaseException as exc:  # handed to the loop, which fails the batch with it
            _hand_over(call, _set_exception, exc)
        else:
            _hand_over(call, _set_result, result)


def _hand_over(call: _Call, setter: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
    try:
        call.loop.call_soon_threadsafe(setter, call.future, value)
    except RuntimeError:  # the event loop is closed: nobody is waiting any more
        pass


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


# --------------------------------------------------------------------------- the worker


class Worker:
    """``local_concurrency`` loops fetching from queue ``name`` and running ``handler``.

    ``listening(queue)`` says whether a NOTIFY for the queue would reach this worker
    (the Boss's notifier is up); ``on_change()`` is called when its status changes.
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
        self._listening = listening
        self._on_change = on_change
        self._async = _is_async(handler)
        self._fetch_options: dict[str, Any] = {
            "priority": options.priority,
            "order_by_created_on": options.order_by_created_on,
            "include_metadata": options.include_metadata,
            "ignore_start_after": options.ignore_start_after,
            "min_priority": options.min_priority,
            "max_priority": options.max_priority,
        }
        self._gate = _Gate()
        # loops fetching or completing at the same moment share one statement
        # one fetch in flight: loops asking meanwhile share the next (unlocked claims in
        # flight together would also race for one set of rows); completes in lanes
        self._fetch: Coalescer[Context, list[Job]] = Coalescer(self._fetch_for)
        self._complete: Coalescer[tuple[Context, list[Job]], None] = Coalescer(
            self._complete_for, _lanes(options.local_concurrency)
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._slots: list[_Slot] = []
        self._state = "created"
        self._stopping = False
        self._deadline = math.inf  # loop time after which held jobs are failed
        self._stop_signal: asyncio.Future[None] | None = None
        self._last_fetch = -math.inf  # loop time of the last fetch by any loop
        self._queue_notifies: tuple[float, bool] | None = None  # (checked at, notify flag)
        # status
        self._held = 0
        self._completed = 0
        self._failed = 0
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
            slot = _Slot(self.name)
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
        """Stop fetching; let handlers finish within ``timeout`` (None: no limit; at once
        when not graceful); fail the jobs still held.

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
        own = _HANDLER_LOOP.get()
        loops = [t for t in self._tasks if t is not own]
        if loops:
            await asyncio.gather(*loops, return_exceptions=True)
        for slot in self._slots:
            slot.close()
        if self._state != "stopped":
            self._state = "stopped"
            self._changed()

    def status(self) -> WorkerStatus:
        """A snapshot of what the worker is doing."""
        return WorkerStatus(
            id=self.id,
            name=self.name,
            state=self._state,
            local_concurrency=self.options.local_concurrency,
            batch_size=self.options.batch_size,
            polling_interval_seconds=self.options.polling_interval_seconds,
            active=self._held,
            completed=self._completed,
            failed=self._failed,
            created_on=_utc(self._created_on) or _now(),
            last_fetched_on=_utc(self._fetched_on),
            last_job_started_on=_utc(self._started_on),
            last_job_ended_on=_utc(self._ended_on),
            last_error=self._error,
            last_error_on=_utc(self._error_on),
            options=self.options.changed(),
        )

    # -- the loop ----------------------------------------------------------------------

    async def _run(self, slot: _Slot) -> None:
        full = False
        while not self._stopping:
            try:
                if not full:
                    await self._gate.idle(self._poll_delay)
                    if self._stopping:
                        break
                full = await self._fetch_and_process(slot)
            except Exception as exc:  # never let a loop die: report and go on polling
                self._report(exc)
                full = False

    async def _fetch_and_process(self, slot: _Slot) -> bool:
        """One fetch and its batch; whether the batch was full (fetch again at once)."""
        try:
            ctx = self._context()
            jobs = await self._fetch(ctx)
        except Exception as exc:
            self._report(exc)
            return False
        if not jobs:
            return False
        await self._process(ctx, jobs, slot)
        return len(jobs) >= self.options.batch_size

    async def _fetch_for(self, callers: list[Context]) -> list[list[Job]]:
        """One fetch for every loop asking now: ``batch_size`` jobs each, in order. When
        it comes back full, more may be waiting: one more idle loop is brought in."""
        self._last_fetch = asyncio.get_running_loop().time()
        size = self.options.batch_size
        wanted = size * len(callers)
        jobs = await job_ops.fetch(callers[0], self.name, batch_size=wanted, **self._fetch_options)
        self._fetched_on = time.time()
        if len(jobs) >= wanted and not self._stopping:
            self._gate.wake_one(remember=False)
        if len(callers) == 1:
            return [jobs]
        return [jobs[i * size : (i + 1) * size] for i in range(len(callers))]

    async def _complete_for(self, batches: list[tuple[Context, list[Job]]]) -> list[None]:
        """One ``complete`` (no output) for the batches of every loop completing now."""
        jobs = batches[0][1] if len(batches) == 1 else [j for _, b in batches for j in b]
        await job_ops.complete(batches[0][0], self.name, jobs)
        return [None] * len(batches)

    async def _poll_delay(self) -> float:
        """How long the poller sleeps: the (relaxed, while NOTIFY would wake us) polling
        interval, counted from the last fetch."""
        interval = self.options.polling_interval_seconds
        if await self._relaxed():
            interval = self.options.relaxed_polling_interval_seconds
        return self._last_fetch + interval - asyncio.get_running_loop().time()

    async def _relaxed(self) -> bool:
        """Whether a NOTIFY would wake this worker: the Boss listens and the queue has
        ``notify`` set (looked up once per relaxed interval)."""
        if self._listening is None or not self._listening(self.name):
            return False
        now = asyncio.get_running_loop().time()
        checked = self._queue_notifies
        if checked is None or now - checked[0] >= self.options.relaxed_polling_interval_seconds:
            try:
                queue = await queue_ops.get_queue(self._context(), self.name)
            except Exception:
                return False  # the fetch that follows reports what is wrong
            checked = (now, queue is not None and queue.notify)
            self._queue_notifies = checked
        return checked[1]

    async def _process(self, ctx: Context, jobs: list[Job], slot: _Slot) -> None:
        loop = asyncio.get_running_loop()
        self._held += len(jobs)
        self._started_on = time.time()
        self._changed()
        try:
            if loop.time() >= self._deadline:
                # claimed as the worker stopped, too late to start: fail without running
                settlement = _Settlement("fail", SHUTDOWN_MESSAGE)
            else:
                settlement = await self._run_handler(ctx, jobs, slot)
            if settlement.verb is not None:
                await self._settle(ctx, jobs, settlement)
        finally:
            self._held -= len(jobs)
            self._ended_on = time.time()
            self._changed()

    def _start_handler(self, jobs: list[Job], slot: _Slot) -> asyncio.Future[Any]:
        if not self._async:
            return slot.submit(self.handler, jobs)
        loop = asyncio.get_running_loop()
        try:
            coro = self.handler(jobs)
            if not inspect.iscoroutine(coro):
                awaited: asyncio.Future[Any] = asyncio.ensure_future(coro)
                return awaited
            inside = _inside(coro, asyncio.current_task())
            return loop.create_task(inside, name=f"qcore-handler-{self.name}")
        except Exception as exc:
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(exc)
            return failed

    async def _run_handler(self, ctx: Context, jobs: list[Job], slot: _Slot) -> _Settlement:
        """Run the handler, bounded by the batch's expiry and the stop deadline, touching
        heartbeats on the way; how the batch ends."""
        running = self._start_handler(jobs, slot)
        return await self._watch(ctx, jobs, slot, running)

    async def _watch(
        self, ctx: Context, jobs: list[Job], slot: _Slot, running: asyncio.Future[Any]
    ) -> _Settlement:
        loop = asyncio.get_running_loop()
        limit = max(j.expire_in_seconds for j in jobs)
        expires = loop.time() + limit
        refresh = _refresh_seconds(jobs, self.options.heartbeat_refresh_seconds)
        beat = loop.time() + refresh if refresh is not None else math.inf
        beating = [j for j in jobs if j.heartbeat_seconds is not None]
        while not running.done():
            now = loop.time()
            if now >= self._deadline:
                self._abandon(running, jobs, slot)
                return _Settlement("fail", SHUTDOWN_MESSAGE)
            if now >= expires:
                self._abandon(running, jobs, slot)
                return _timed_out(limit)
            if refresh is not None and now >= beat:
                beating = await self._touch(ctx, beating)
                if all(j.cancelled.is_set() for j in jobs):
                    self._abandon(running, jobs, slot)
                    return _Settlement(None)  # every job lost: not ours to settle
                beat = loop.time() + refresh
                continue
            waits: set[asyncio.Future[Any]] = {running}
            if self._stop_signal is not None and not self._stop_signal.done():
                waits.add(self._stop_signal)
            await asyncio.wait(
                waits,
                timeout=min(expires, beat, self._deadline) - now,
                return_when=asyncio.FIRST_COMPLETED,
            )
        return _outcome_of(running, jobs)

    def _abandon(self, running: asyncio.Future[Any], jobs: list[Job], slot: _Slot) -> None:
        for job in jobs:
            job.cancelled.set()
        running.cancel()
        running.add_done_callback(_consume)
        if not self._async:
            slot.abandon()

    async def _touch(self, ctx: Context, beating: list[Job]) -> list[Job]:
        """Refresh the heartbeats; the jobs still ours (a lost one has ``cancelled`` set).
        A failed touch keeps them all: the next one tries again."""
        if not beating:
            return beating
        try:
            result = await job_ops.touch(ctx, self.name, beating)
        except Exception as exc:
            self._report(exc)
            return beating
        alive = set(result.ids)
        for job in beating:
            if job.id not in alive:
                job.cancelled.set()
        return [j for j in beating if j.id in alive]

    async def _settle(self, ctx: Context, jobs: list[Job], settlement: _Settlement) -> None:
        """Complete or fail the batch. A transient database error (connection lost,
        serialization) is reported and the call tried again with backoff — it is
        fenced, so idempotent — until it lands, the batch's expiry has passed again
        (the monitor fails it by then), or, when stopping, after a few tries. An output
        the database refuses fails the batch with why; a failure output it refuses is
        replaced by a plain message."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(j.expire_in_seconds for j in jobs)
        delay = SETTLE_RETRY_SECONDS
        tries = 0
        verb, data = settlement.verb, settlement.data
        while True:
            tries += 1
            try:
                if verb == "complete" and data is None:
                    await self._complete((ctx, jobs))
                    self._completed += 1
                elif verb == "complete":
                    await job_ops.complete(ctx, self.name, jobs, data)
                    self._completed += 1
                else:
                    await job_ops.fail(ctx, self.name, jobs, data)
                    self._failed += 1
                return
            except Exception as exc:
                if not _transient(exc) and not isinstance(exc, QueueNotFoundError):
                    if verb == "complete" and data is not None:
                        verb, data = "fail", exc  # the output cannot be stored: fail with why
                        continue
                    if verb == "fail" and data is not _UNSTORABLE:
                        self._report(exc)
                        data = _UNSTORABLE
                        continue
                self._report(exc)
                if not _transient(exc) or loop.time() >= give_up:
                    return
                if self._stopping and tries >= SETTLE_TRIES_WHEN_STOPPING:
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.options.polling_interval_seconds)
            try:
                ctx = self._context()
            except Exception as exc:
                self._report(exc)
                return

    # -- reporting ---------------------------------------------------------------------

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

"""How a handler runs: as a task, or on a thread of its loop's own.

``async def`` ones run as tasks, plain functions on a thread their loop owns (so a slow
one never waits for a shared pool); and here is the count of those threads a worker gave
up on but cannot stop.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qcore.job import Job


def _call_sync(handler: Callable[..., Any], jobs: list[Job]) -> Any:
    result = handler(jobs)
    if inspect.iscoroutine(result):
        result.close()
        raise TypeError(
            "the handler returned a coroutine from a plain function; declare it `async def`"
            " so qcore awaits it"
        )
    return result


def is_async(handler: Callable[..., Any]) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


#: in an async handler's task (and the tasks it starts): the loop task running it
HANDLER_LOOP: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "qcore_handler_loop", default=None
)


async def inside(coro: Awaitable[Any], loop_task: asyncio.Task[Any] | None) -> Any:
    """Await a handler's coroutine with ``HANDLER_LOOP`` set in its task's context."""
    HANDLER_LOOP.set(loop_task)
    return await coro


def consume(future: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned handler's outcome, as its done callback.

    So asyncio does not report an exception nobody will read.
    """
    if not future.cancelled():
        future.exception()


class Orphans:
    """The handler threads of one worker that still run a call it gave up on.

    It gave up past the batch's expiry, past the stop deadline, or once every job of the
    batch was lost.

    Python cannot stop a thread. A handler that ignores ``job.cancelled`` runs on while
    its job is failed and retried, maybe on a new thread beside it, and again at the
    next expiry: without a bound such threads pile up until the process runs out of
    them. Counting them lets the worker stop claiming once ``limit`` run (:attr:`full`)
    and start again when one ends: ``on_end`` is called on the event loop each time.
    Threads adopted by the loops still running when the limit is reached can take the
    count past it, by fewer than the worker's loops.
    """

    def __init__(self, limit: int, on_end: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self._on_end = on_end
        self._lock = threading.Lock()  # ended on the handler's thread, adopted on the loop's
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def count(self) -> int:
        """How many are running now."""
        with self._lock:
            return self._count

    @property
    def full(self) -> bool:
        """Whether the worker must claim nothing until one ends."""
        return self.count >= self.limit

    def adopt(self) -> None:
        """One more runs on after its batch (called on the event loop)."""
        self._loop = asyncio.get_running_loop()
        with self._lock:
            self._count += 1

    def ended(self) -> None:
        """One of them returned (called on its own thread, which ends next)."""
        with self._lock:
            self._count -= 1
        if self._on_end is not None and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._on_end)
            except RuntimeError:  # the event loop is closed: nobody is waiting any more
                pass


class _Thread:
    """What a slot's thread is told besides its calls.

    Once its call outlived the batch, the ``orphans`` it is counted among, to tell when
    it ends.
    """

    def __init__(self) -> None:
        self.orphans: Orphans | None = None


class Slot:
    """One loop's own thread for plain-function handlers, started on first use.

    A daemon thread, so a handler that never returns cannot hold up the process's
    exit; one that outlives its batch is abandoned (it ends after the call, counted
    among the worker's :class:`Orphans` until then) and the loop's next call starts a
    new thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._inbox: queue.SimpleQueue[_Call | None] | None = None
        self._thread: _Thread | None = None

    def submit(self, handler: Callable[..., Any], jobs: list[Job]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._inbox is None:
            self._inbox = queue.SimpleQueue()
            self._thread = _Thread()
            threading.Thread(
                target=_serve,
                args=(self._inbox, self._thread),
                name=f"qcore-{self._name}",
                daemon=True,
            ).start()
        self._inbox.put(_Call(loop, future, contextvars.copy_context(), handler, jobs))
        return future

    def abandon(self, orphans: Orphans | None = None) -> None:
        """Give up on the running call, which outlived its batch.

        Its thread ends after it, alone, counted among ``orphans`` until then.
        """
        if self._thread is not None and orphans is not None:
            # marked before the thread is told to stop, so it reads the mark when it does
            self._thread.orphans = orphans
            orphans.adopt()
        self.close()

    def close(self) -> None:
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None
            self._thread = None


@dataclass(frozen=True)
class _Call:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    context: contextvars.Context
    handler: Callable[..., Any]
    jobs: list[Job]


def _serve(inbox: queue.SimpleQueue[_Call | None], thread: _Thread) -> None:
    """A slot's thread: run calls until told to stop; an orphan says it has ended."""
    while (call := inbox.get()) is not None:
        try:
            result = call.context.run(_call_sync, call.handler, call.jobs)
        except BaseException as exc:  # handed to the loop, which fails the batch with it
            _hand_over(call, _set_exception, exc)
        else:
            _hand_over(call, _set_result, result)
    if thread.orphans is not None:
        thread.orphans.ended()


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


def refresh_seconds(jobs: Sequence[Job], option: float | None) -> float | None:
    """How often to touch the batch's heartbeat jobs.

    The option, else half the smallest ``heartbeat_seconds``; None when no job has a
    heartbeat.
    """
    beats = [j.heartbeat_seconds for j in jobs if j.heartbeat_seconds is not None]
    if not beats:
        return None
    return option if option is not None else min(beats) / 2

"""How a handler runs: ``async def`` ones as tasks, plain functions on a thread their
loop owns (so a slow one never waits for a shared pool)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
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

"""``SyncBoss``: the verbs of ``Boss`` for code that is not async, as one thin blocking facade.

Django views, Flask handlers and scripts call ``SyncBoss`` methods; each
one runs the same ``Boss`` coroutine on an event loop that the ``SyncBoss``
keeps in a daemon thread of its own, and blocks until it is done. Nothing
is implemented twice: every verb is ``Boss``'s, with its signature, options,
checks and exceptions.

A per-call ``db=`` takes the caller's *sync* connection: a psycopg 3
``Connection`` (Django 4.2+'s ``connection.connection``), a psycopg2
connection, an SQLAlchemy ``Session``, ``Connection`` or ``Engine``, or an
object with ``execute_sql``. Its statements run in a worker thread of the
loop while the calling thread waits, so the connection is never used by two
threads at once. They run inside the caller's open transaction, within a
SAVEPOINT: the caller's ``commit()`` makes the job visible with the caller's
own writes, a ``rollback()`` removes it, and a qcore error undoes only
qcore's part (the caller's transaction stays usable).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import functools
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from qcore.arguments import verb
from qcore.boss import Boss
from qcore.cron import PREVIEW_DEFAULT_COUNT
from qcore.db import Database, adapt
from qcore.errors import NotStartedError, QcoreError
from qcore.job import CommandResult, Job
from qcore.tasks import cancel_and_wait
from qcore.verbs.jobs import LockedBatch
from qcore.worker import WorkerStatus

__all__ = ["SyncBoss", "SyncLockedBatch"]

P = ParamSpec("P")
R = TypeVar("R")
_numbers = itertools.count(1)


def _blocking(
    method: Callable[Concatenate[Boss, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncBoss, P], R]:
    """The blocking twin of a ``Boss`` coroutine method: same parameters, same result."""

    def verb(self: SyncBoss, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._call(_in_callers_transaction(method, self._boss, args, kwargs))

    functools.update_wrapper(verb, method, assigned=("__name__", "__doc__"), updated=())
    verb.__qualname__ = f"SyncBoss.{method.__name__}"
    return verb


async def _in_callers_transaction(
    method: Callable[..., Coroutine[Any, Any, R]],
    boss: Boss,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """Run one verb, inside the caller's transaction when ``db=`` gives a connection.

    A caller's connection given as ``db=`` is wrapped in a SAVEPOINT of the caller's
    transaction (a BEGIN/COMMIT of its own on an autocommit connection), so qcore treats
    it as the caller's transaction: nothing is retried or committed there, and a failure
    undoes only qcore's statements.
    """
    db = kwargs.get("db")
    if db is None or isinstance(db, Database):
        return await method(boss, *args, **kwargs)
    async with adapt(db).transaction() as tx:
        return await method(boss, *args, **{**kwargs, "db": tx})


def _same_parameters_as(
    _: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[Concatenate[SyncBoss, P], None]], Callable[Concatenate[SyncBoss, P], None]]:
    """Type a forwarding ``__init__`` with the parameters of another one."""
    return lambda init: init


class SyncBoss:
    """A ``Boss`` for code that is not async; takes exactly ``Boss``'s arguments.

    ::

        with SyncBoss("postgresql://app@localhost/app") as boss:   # start() ... close()
            boss.create_queue("email", retry_limit=3)
            boss.send("email", {"to": "a@example.com"}, db=psycopg2_conn)  # in your transaction
            boss.work("email", handler)             # def handler(jobs): ... (on a worker thread)

    Each method blocks until the ``Boss`` coroutine it runs is done, and raises what
    that raised (the same ``qcore.errors`` types). The coroutines run on an event
    loop in a daemon thread this ``SyncBoss`` owns; ``close()`` (or leaving the
    ``with`` block) stops the ``Boss``, closes what it opened and ends the thread.
    Close every ``SyncBoss`` you create: one left open keeps its thread (and its
    connections) until the process exits.

    Any thread may call it, several at once. Calling it from its own loop thread
    (from an ``on()`` callback, an ``async def`` handler) raises ``QcoreError``:
    it would wait for itself forever; use the async ``boss`` there.

    A work handler that is a plain function runs on a thread of its worker (one per
    ``local_concurrency`` loop), never on the loop thread: it may block, and it may
    call this ``SyncBoss`` (to send follow-up jobs, say). Event callbacks given to
    ``on()`` run on the loop thread: keep them quick, and do not call the
    ``SyncBoss`` from them.
    """

    @_same_parameters_as(Boss.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._boss = Boss(*args, **kwargs)  # bad options raise here, before a thread exists
        self._closed = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop,), name=f"qcore-sync-{next(_numbers)}", daemon=True
        )
        self._thread.start()

    # -- the bridge ------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop thread; block until it is done; its result or exception."""
        try:
            self._refuse_loop_thread()
        except QcoreError:
            coro.close()
            raise
        with self._lock:  # close() cannot stop the loop between this check and the schedule
            if self._closed:
                coro.close()
                raise NotStartedError("this SyncBoss is closed; create a new one")
            call = _Call(coro)
            self._loop.call_soon_threadsafe(call.begin)
        return call.wait(self._loop)

    def _refuse_loop_thread(self) -> None:
        if threading.get_ident() == self._thread.ident:
            raise QcoreError(
                "a SyncBoss method was called on the SyncBoss's own event loop thread (from"
                " an on() callback or an async handler): it would wait for itself forever."
                " Use the async Boss there: await sync_boss.boss.<verb>(...)"
            )

    @property
    def boss(self) -> Boss:
        """The async ``Boss`` inside; use it only on the loop thread (async callbacks)."""
        return self._boss

    @property
    def started(self) -> bool:
        """Whether background processing (workers, supervisor) runs."""
        return self._boss.started

    @property
    def unsettled_jobs(self) -> list[Job]:
        """The jobs the last ``stop()`` left held (see :attr:`Boss.unsettled_jobs`)."""
        return self._boss.unsettled_jobs

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ended this ``SyncBoss``."""
        return self._closed

    # -- lifecycle -------------------------------------------------------------------------

    @verb()
    def start(self, *, attempts: int = 1) -> SyncBoss:
        """Open the connection, ready the schema, start the loops and the workers.

        See ``Boss.start``: the schema is installed or migrated; ``stop()`` from another thread
        ends the waits between ``attempts``.
        """
        self._call(self._boss.start(attempts=attempts))
        return self

    stop = _blocking(Boss.stop)
    add_service = _blocking(Boss.add_service)

    def close(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        """``stop()`` (closing what qcore opened), then end the loop thread.

        Afterwards every method raises ``NotStartedError``. Calling it again does
        nothing.
        """
        if self._closed:
            return
        self._refuse_loop_thread()  # before the finally: the thread cannot join itself
        try:
            self._call(self._boss.stop(graceful=graceful, timeout=timeout))
        finally:
            with self._lock:
                closing, self._closed = not self._closed, True
            if closing:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()

    def __enter__(self) -> SyncBoss:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self.started else "stopped"
        return f"<SyncBoss {self._boss.backend.name} schema={self._boss.schema!r} {state}>"

    # -- the verbs of Boss, blocking -------------------------------------------------------

    def on(self, event: str, callback: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe to ``error``, ``warning``, ``wip`` or ``stopped``; returns an unsubscribe.

        Callbacks run on the loop thread (see the class).
        """
        return self._boss.on(event, callback)

    @functools.wraps(Boss.handler)
    def handler(self, name: str, **options: Any) -> Any:
        return self._boss.handler(name, **options)

    is_installed = _blocking(Boss.is_installed)
    schema_version = _blocking(Boss.schema_version)

    create_queue = _blocking(Boss.create_queue)
    update_queue = _blocking(Boss.update_queue)
    delete_queue = _blocking(Boss.delete_queue)
    get_queue = _blocking(Boss.get_queue)
    get_queues = _blocking(Boss.get_queues)
    delete_queued_jobs = _blocking(Boss.delete_queued_jobs)
    delete_stored_jobs = _blocking(Boss.delete_stored_jobs)
    delete_all_jobs = _blocking(Boss.delete_all_jobs)
    get_blocked_keys = _blocking(Boss.get_blocked_keys)

    send = _blocking(Boss.send)
    send_after = _blocking(Boss.send_after)
    send_throttled = _blocking(Boss.send_throttled)
    send_debounced = _blocking(Boss.send_debounced)
    insert = _blocking(Boss.insert)
    update = _blocking(Boss.update)
    upsert = _blocking(Boss.upsert)
    redrive = _blocking(Boss.redrive)
    preview_redrive = _blocking(Boss.preview_redrive)
    subscribe = _blocking(Boss.subscribe)
    unsubscribe = _blocking(Boss.unsubscribe)
    publish = _blocking(Boss.publish)
    fetch = _blocking(Boss.fetch)
    complete = _blocking(Boss.complete)
    complete_and_fetch = _blocking(Boss.complete_and_fetch)

    @contextmanager
    def locked_fetch(self, name: str, **options: Any) -> Iterator[SyncLockedBatch]:
        """The blocking twin of :meth:`Boss.locked_fetch`.

        ``with boss.locked_fetch(name, batch_size=...) as batch:``: the jobs are
        ``batch.jobs``, ``batch.complete()`` and ``batch.fail()`` block; leaving the
        block completes what is left (fails it with the exception that ends the block)
        and commits.
        """
        held = self._boss.locked_fetch(name, **options)
        batch = self._call(held.__aenter__())
        try:
            yield SyncLockedBatch(self, batch)
        except BaseException as exc:
            if not self._call(held.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self._call(held.__aexit__(None, None, None))

    fail = _blocking(Boss.fail)
    cancel = _blocking(Boss.cancel)
    restore = _blocking(Boss.restore)
    resume = _blocking(Boss.resume)
    retry = _blocking(Boss.retry)
    delete_job = _blocking(Boss.delete_job)
    touch = _blocking(Boss.touch)
    get_job_by_id = _blocking(Boss.get_job_by_id)
    find_jobs = _blocking(Boss.find_jobs)
    browse_jobs = _blocking(Boss.browse_jobs)
    get_warnings = _blocking(Boss.get_warnings)

    work = _blocking(Boss.work)
    work_handlers = _blocking(Boss.work_handlers)
    off_work = _blocking(Boss.off_work)
    supervise = _blocking(Boss.supervise)
    get_queue_stats = _blocking(Boss.get_queue_stats)
    get_instances = _blocking(Boss.get_instances)
    list_instances = _blocking(Boss.list_instances)
    instance_counts = _blocking(Boss.instance_counts)
    get_affinity_backlog = _blocking(Boss.get_affinity_backlog)
    pause_instance = _blocking(Boss.pause_instance)
    resume_instance = _blocking(Boss.resume_instance)
    remove_instance = _blocking(Boss.remove_instance)
    get_reindex_commands = _blocking(Boss.get_reindex_commands)
    schedule = _blocking(Boss.schedule)
    unschedule = _blocking(Boss.unschedule)
    get_schedules = _blocking(Boss.get_schedules)
    flow = _blocking(Boss.flow)
    get_dependencies = _blocking(Boss.get_dependencies)
    get_dependents = _blocking(Boss.get_dependents)
    resolve_flow = _blocking(Boss.resolve_flow)
    detect_schema_drift = _blocking(Boss.detect_schema_drift)
    get_bam_status = _blocking(Boss.get_bam_status)
    get_bam_entries = _blocking(Boss.get_bam_entries)

    def is_maintaining(self) -> bool:
        """Whether a supervise pass is in flight (read on the loop thread)."""
        return self._call(_returning(self._boss.is_maintaining))

    def preview_schedule(
        self,
        cron: str,
        *,
        tz: str | None = None,
        from_: dt.datetime | None = None,
        count: int = PREVIEW_DEFAULT_COUNT,
    ) -> list[dt.datetime]:
        """The next times ``cron`` fires (see ``Boss.preview_schedule``; read on the loop
        thread, for the clock skew)."""
        return self._call(
            _returning(lambda: self._boss.preview_schedule(cron, tz=tz, from_=from_, count=count))
        )

    def is_timekeeping(self) -> bool:
        """Whether a cron pass is in flight (read on the loop thread)."""
        return self._call(_returning(self._boss.is_timekeeping))

    def is_bam_working(self) -> bool:
        """Whether an async migration command is being processed (read on the loop thread)."""
        return self._call(_returning(self._boss.is_bam_working))

    def is_resolving_flow(self) -> bool:
        """Whether a flow-resolver pass is in flight (read on the loop thread)."""
        return self._call(_returning(self._boss.is_resolving_flow))

    def is_checking_skew(self) -> bool:
        """Whether the clock-skew check is running (read on the loop thread)."""
        return self._call(_returning(self._boss.is_checking_skew))

    def notify_worker(self, id: str) -> bool:
        """Wake worker ``id`` now (on the loop thread); whether it is running here."""
        return self._call(_returning(lambda: self._boss.notify_worker(id)))

    def worker_statuses(self) -> list[WorkerStatus]:
        """What each running worker is doing (read on the loop thread, which changes it)."""
        return self._call(_returning(self._boss.worker_statuses))


# -- the loop thread -----------------------------------------------------------------------


async def _returning(function: Callable[[], R]) -> R:
    return function()


class _Call(Generic[R]):
    """One coroutine run as a task on the loop thread for a caller thread that waits.

    ``asyncio.run_coroutine_threadsafe`` would do, but for one case: when the wait
    is interrupted (``KeyboardInterrupt``) its future reports "cancelled" at once,
    while the task may still be using the caller's connection in a worker thread.
    Here the caller cancels the task and waits until it has unwound.
    """

    def __init__(self, coro: Coroutine[Any, Any, R]) -> None:
        self._coro = coro
        self._task: asyncio.Task[R] | None = None
        self._outcome: concurrent.futures.Future[R] = concurrent.futures.Future()

    def begin(self) -> None:
        """On the loop thread: start the task."""
        self._task = asyncio.get_running_loop().create_task(self._coro)
        self._task.add_done_callback(self._settle)

    def _settle(self, task: asyncio.Task[R]) -> None:
        if task.cancelled():  # by close() from another thread, or by an interrupted wait
            self._outcome.set_exception(
                NotStartedError("the SyncBoss was closed while this call was running")
            )
        elif (exc := task.exception()) is not None:
            self._outcome.set_exception(exc)
        else:
            self._outcome.set_result(task.result())

    def _cancel(self) -> None:
        if self._task is not None:  # begin() was scheduled first, so it has run
            self._task.cancel()

    def wait(self, loop: asyncio.AbstractEventLoop) -> R:
        """On the caller's thread: the task's result, or its exception raised."""
        try:
            return self._outcome.result()
        except BaseException:
            if not self._outcome.done():  # the wait itself was interrupted
                try:
                    loop.call_soon_threadsafe(self._cancel)
                except RuntimeError:  # the loop is closed: so is every task on it
                    pass
                concurrent.futures.wait([self._outcome])
            raise


class SyncLockedBatch:
    """The blocking face of a :class:`~qcore.LockedBatch` (see ``SyncBoss.locked_fetch``)."""

    def __init__(self, boss: SyncBoss, batch: LockedBatch) -> None:
        self._boss = boss
        self._batch = batch
        self.name = batch.name
        self.jobs = batch.jobs

    @property
    def unsettled(self) -> list[Job]:
        return self._batch.unsettled

    def complete(self, jobs: Iterable[Job] | None = None, data: Any = None) -> CommandResult:
        """Complete ``jobs`` (all unsettled ones by default) with the output ``data``."""
        return self._boss._call(self._batch.complete(jobs, data))

    def fail(
        self, jobs: Iterable[Job] | None = None, data: Any = None, *, terminal: bool = False
    ) -> CommandResult:
        """Fail ``jobs`` (all unsettled ones by default), as ``LockedBatch.fail`` does."""
        return self._boss._call(self._batch.fail(jobs, data, terminal=terminal))


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The body of the loop thread.

    Run until ``close()``, then cancel what is left, wait for the worker threads, and
    close the loop.
    """
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(cancel_and_wait(asyncio.all_tasks(loop)))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

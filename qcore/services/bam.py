"""The BAM worker: it runs the async migration commands, one at a time across the fleet.

The commands are those migrations queue in the ``bam`` table (index builds,
``CONCURRENTLY`` where the backend can); one runs at a time across every qcore and
pg-boss instance of the schema.

Every ``bam_interval_seconds`` the instance that takes pg-boss's ``bam_on`` gate claims
commands under pg-boss's ``bamClaim`` lock (:mod:`qcore.sql.bam`) and runs them back to
back: the first claim may retry a failed or stale row, the rest take pending rows only,
until none is left or the instance stops. A command marked failed keeps its error and
holds the commands after it (same migration, same table) until a retry succeeds.

A re-attempted ``CREATE INDEX CONCURRENTLY`` is healed first: an INVALID index left by
an interrupted build is dropped (``DROP INDEX CONCURRENTLY``), a VALID one means the
build had succeeded and the row is only marked completed. After a concurrent build the
index must exist and be valid, or the row fails and the next attempt heals it.

``stop()`` waits for a running command up to the timeout it is given, then ends it as
pg-boss does. A concurrent index build or drop on PostgreSQL, where the instance owns
its pool, is left to finish on the server: its row stays in_progress until the build
ends, and the next instance marks it completed, or heals and rebuilds a failed build.
Any other command, and every command on a connection the application lent
(``Boss(db=...)``), is cancelled (``pg_cancel_backend`` on its tagged statement) and
marked failed, to run again; an interrupted concurrent build leaves an INVALID index
that the next attempt heals. Events: ``bam`` ``{"id", "name", "status", "queue",
"table"}`` (and ``error`` for a failure; ``detached`` for a build left running) as a
command starts and ends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from qcore import locks, retry
from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.db import Database
from qcore.errors import QcoreError
from qcore.events import Events
from qcore.identifiers import quote
from qcore.periodic import Periodic
from qcore.sql import bam as sql
from qcore.tasks import UNWIND_SECONDS

__all__ = ["BamWorker", "run_commands"]

_CONCURRENT_INDEX = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)\"?",
    re.IGNORECASE,
)
#: any other statement that PostgreSQL refuses inside a transaction block
_CONCURRENT = re.compile(r"^\s*\w+(?:\s+UNIQUE)?\s+INDEX\s+CONCURRENTLY\b", re.IGNORECASE)


class _Running:
    """The command in flight, for ``stop()`` to end."""

    def __init__(self, entry_id: Any) -> None:
        self.tag = sql.command_tag(entry_id)
        self.cancelled = False
        #: an index build or drop (``CONCURRENTLY``) now running on the server
        self.concurrent = False
        #: left running on the server by ``stop()``; its row stays in_progress
        self.detached = False


async def _run_concurrently(ctx: Context, sql_text: str, running: _Running) -> None:
    """Run one ``CONCURRENTLY`` statement, shielded from the pass's cancellation.

    When ``stop()`` stops waiting for it, the statement is not cancelled with the pass
    (the server finishes it after the connection closes, as pg-boss leaves it).
    """
    running.concurrent = True
    statement = asyncio.ensure_future(ctx.db.execute(sql_text))
    # a detached statement's outcome is the next instance's to find (its index, valid or not)
    statement.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        await asyncio.shield(statement)
    finally:
        running.concurrent = False


async def _claim(ctx: Context, pending_only: bool) -> dict[str, Any] | None:
    statement = sql.claim_bam_command(
        ctx.q,
        pending_only=pending_only,
        liveness=ctx.backend.capabilities.index_build_progress,
        skip_locked=ctx.backend.fetch is FetchStrategy.SKIP_LOCKED,
    )

    async def work(db: Database) -> list[dict[str, Any]]:
        return await db.execute(statement.sql, statement.bind())

    rows = await locks.run_locked(ctx, sql.CLAIM_LOCK, work)
    return rows[0] if rows else None


async def _index_state(ctx: Context, name: str) -> bool | None:
    """True valid, False invalid, None absent."""
    rows = await retry.run(ctx, sql.index_validity(), schema=ctx.schema, name=name)
    return None if not rows else bool(rows[0]["valid"])


async def _run_one(ctx: Context, entry: dict[str, Any], running: _Running) -> None:
    """Run one claimed command (healing a re-attempted concurrent build); raises on failure."""
    command = str(entry["command"])
    build = _CONCURRENT_INDEX.match(command)
    if build is None:
        if _CONCURRENT.match(command):  # one statement, never in a transaction
            await _run_concurrently(ctx, f"{running.tag}\n{command}", running)
        else:
            await ctx.db.execute_script(f"{running.tag}\n{command}")
        return
    index = build.group(1)
    if entry["reattempt"]:
        state = await _index_state(ctx, index)
        if state is True:
            return  # the build had succeeded; only the row was never marked
        if state is False:
            drop = f"DROP INDEX CONCURRENTLY IF EXISTS {ctx.q}.{quote(index)}"
            await ctx.db.execute(f"{running.tag}\n{drop}")
    # one statement, never in a transaction (a script would make one)
    await _run_concurrently(ctx, f"{running.tag}\n{command}", running)
    state = await _index_state(ctx, index)
    if state is not True:
        what = "does not exist" if state is None else "is invalid"
        raise QcoreError(f"index {index} {what} after the build")


def _event(entry: dict[str, Any], status: str, **more: Any) -> dict[str, Any]:
    return {
        "id": str(entry["id"]),
        "name": entry["name"],
        "status": status,
        "queue": entry["queue"],
        "table": entry["table_name"],
        **more,
    }


async def run_commands(
    ctx: Context,
    events: Events | None = None,
    stopping: Callable[[], bool] = lambda: False,
    on_running: Callable[[_Running | None], None] = lambda _: None,
) -> int:
    """Claim and run commands back to back; how many were claimed.

    It goes on until none is left or ``stopping()``.
    """
    claimed = 0
    pending_only = False
    while not stopping():
        entry = await _claim(ctx, pending_only)
        if entry is None:
            return claimed
        claimed += 1
        pending_only = True
        running = _Running(entry["id"])
        on_running(running)
        if events is not None:
            events.emit("bam", _event(entry, "in_progress"))
        try:
            await _run_one(ctx, entry, running)
        except asyncio.CancelledError:
            if not running.detached:
                raise
            if events is not None:
                events.emit("bam", _event(entry, "in_progress", detached=True))
            return claimed
        except Exception as exc:
            error = str(exc)
            await retry.run(ctx, sql.mark_bam_failed(ctx.q), id=entry["id"], error=error)
            if events is not None:
                if not running.cancelled:
                    events.emit("error", exc)
                events.emit("bam", _event(entry, "failed", error=error))
        else:
            await retry.run(ctx, sql.mark_bam_completed(ctx.q), id=entry["id"])
            if events is not None:
                events.emit("bam", _event(entry, "completed"))
        finally:
            on_running(None)
    return claimed


class BamWorker(Periodic):
    """BAM passes every ``interval_seconds``, for the instance that takes the ``bam_on`` gate.

    The gate is the interval's, and only where the instance may migrate.
    """

    name = "bam"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        interval_seconds: float,
        *,
        enabled: bool = True,
        leave_builds: bool = False,
    ) -> None:
        """Set up the worker; ``leave_builds`` decides what a stop does with a running build.

        ``leave_builds``: at a stop's timeout, leave a concurrent index build running on
        the server instead of cancelling it (where the instance's own pool closes; a
        connection the application lent stays in use until the build ends).
        """
        super().__init__(events, interval_seconds, detached=True, enabled=enabled, at_start=True)
        self._context = context
        self._running: _Running | None = None
        self._leave_builds = leave_builds
        self._pass_task: asyncio.Task[Any] | None = None

    @property
    def working(self) -> bool:
        """Whether a command is being processed right now."""
        return self._running is not None

    def _track(self, running: _Running | None) -> None:
        self._running = running

    async def run_pass(self) -> bool:
        ctx = self._context()
        claimed = await retry.run(ctx, sql.claim_bam_pass(ctx.q), seconds=self.interval_seconds)
        if claimed:
            self._pass_task = asyncio.current_task()
            try:
                await run_commands(ctx, self.events, lambda: self.stopping, self._track)
            finally:
                self._pass_task = None
        return True

    def _abandon_pass(self) -> None:
        # the pass stops waiting for its shielded statement, which runs on
        if self._pass_task is not None:
            self._pass_task.cancel()

    async def stop_within(self, timeout: float) -> None:
        """Stop, ending a command still running after ``timeout`` seconds.

        A concurrent index build or drop on PostgreSQL is left to finish on the server
        (with ``leave_builds``; its row stays in_progress, and the next instance marks
        it completed or heals a failed build); any other command is cancelled (its row
        marked failed, to run again).
        """
        stopping = asyncio.ensure_future(self.stop())
        try:
            await self._stop_or_end_command(stopping, timeout)
        except asyncio.CancelledError:
            # given up on: end the pass too (its claim's transaction rolls back) and let
            # it unwind before the caller closes the pool or blocks the event loop
            stopping.cancel()
            await asyncio.wait({stopping}, timeout=UNWIND_SECONDS)
            raise

    async def _stop_or_end_command(self, stopping: asyncio.Future[None], timeout: float) -> None:
        done, _ = await asyncio.wait({stopping}, timeout=timeout)
        while not done:  # again each second: a cancel can land between two statements
            running, ctx = self._running, self._context()
            if (
                running is not None
                and running.concurrent
                and self._leave_builds
                and (ctx.backend.capabilities.index_build_progress)
            ):
                running.detached = True
                self._abandon_pass()
            elif running is not None:
                running.cancelled = True
                await self._cancel(running)
            done, _ = await asyncio.wait({stopping}, timeout=1.0)
        await stopping

    async def _cancel(self, running: _Running) -> None:
        ctx = self._context()
        try:
            await ctx.db.execute(sql.cancel_bam_command().sql, [running.tag])
        except QcoreError as exc:  # a role that may not signal the backend: wait for it
            if self.events is not None:
                self.events.emit("error", exc)

"""The instance registry: this ``Boss``'s row in pg-boss's ``instance`` table.

The row is written at start(), refreshed every ``instance_heartbeat_seconds``
(supervising or not) and marked stopped by stop(). Nothing on the job path waits for it:
a failed write is an ``error`` event and the next heartbeat, an upsert, writes the row
again. While no NOTIFY reaches this instance, each heartbeat also reads the notices of
pauses, resumes and removals written since the last (:class:`NoticeReader`).

Crash restarts are counted at registration from the rows of earlier lives with this
name on this host; a life that still read live then is judged again on each heartbeat
until it has gone quiet (a crash just before this start is counted within three of its
heartbeats).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from qcore import retry
from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.db import Json
from qcore.events import Events
from qcore.options import GroupLimits
from qcore.periodic import Periodic
from qcore.services.pause_watch import follow_pause
from qcore.services.process_usage import LoopLag, ProcessUsage
from qcore.sql import instances as sql
from qcore.verbs.instances import InstanceNotice, NoticeReader, PauseState

__all__ = ["InstanceRegistry", "RegistrySettings", "recorded_config", "worker_entries"]


def recorded_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config`` of an instance's row, as JSON values.

    The options given (an allowlist the caller passes: never a connection setting or a
    credential), under pg-boss's camelCase names so a fleet of both compares; None ones
    left out.
    """
    return {_camel(k): _jsonable(v) for k, v in options.items() if v is not None}


@dataclass(frozen=True)
class RegistrySettings:
    """What an instance says of itself in its row.

    Its id and name, its heartbeat, its version, the constructor options its row has
    columns for, and ``config`` (the recorded options, never a connection setting or a
    credential).
    """

    id: uuid.UUID
    name: str | None
    instance_key: str | None
    heartbeat_seconds: int
    version: str
    supervise: bool
    schedule: bool
    migrate: bool
    persist_queue_stats: bool
    persist_warnings: bool
    config: Mapping[str, Any]


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.timezone.utc).isoformat()


def worker_entries(statuses: Sequence[Any]) -> list[dict[str, Any]]:
    """One entry per ``work()`` call, as pg-boss writes them.

    CamelCase, times as ISO strings, ``options`` the recorded options that differ from
    their defaults; never an error message, which can carry job data.
    """
    entries = []
    for status in statuses:
        changed = dict(status.options)
        for shown in ("batch_size", "local_concurrency", "polling_interval_seconds"):
            changed.pop(shown, None)
        entries.append(
            {
                "id": status.id,
                "queue": status.name,
                "localConcurrency": status.local_concurrency,
                "batchSize": status.batch_size,
                "pollingIntervalSeconds": status.polling_interval_seconds,
                "active": status.active,
                "lastFetchedOn": _iso(status.last_fetched_on),
                "lastJobEndedOn": _iso(status.last_job_ended_on),
                "lastErrorOn": _iso(status.last_error_on),
                "options": {_camel(k): _jsonable(v) for k, v in changed.items()},
            }
        )
    return entries


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _jsonable(value: Any) -> Any:
    """A recorded option as JSON.

    Plain values as they are, group limits as the option is written, anything else as
    its text.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, GroupLimits):
        return value.as_option()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class InstanceRegistry(Periodic):
    """Keeps this instance's row from start to stop.

    :meth:`start` registers it, each pass is a heartbeat, :meth:`stop` marks it stopped
    (best effort: a row left unstopped goes quiet).
    """

    name = "instances"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        settings: RegistrySettings,
        *,
        workers: Callable[[], Sequence[Any]],
        pool: Callable[[], dict[str, int] | None],
        on_paused: Callable[[bool], None] | None = None,
        limited: Callable[[], str | None] = lambda: None,
        on_notice: Callable[[InstanceNotice], None] | None = None,
        hears_notify: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(events, float(settings.heartbeat_seconds), detached=True)
        self._context = context
        self.settings = settings
        self._workers = workers
        self._pool = pool
        self._on_paused = on_paused
        self._limited = limited
        self._on_notice = on_notice
        self._hears_notify = hears_notify
        self._notices = NoticeReader()
        self._lag = LoopLag()
        self._usage: ProcessUsage | None = None
        self._started_on: dt.datetime | None = None
        self._recount = False
        self._host = socket.gethostname()
        self._process_start = dt.datetime.fromtimestamp(
            psutil.Process().create_time(), dt.timezone.utc
        )

    async def start(self) -> None:
        self._lag.start()
        self._usage = ProcessUsage(lag=self._lag)
        try:
            ctx = self._context()
            [row] = await retry.run(ctx, sql.register_instance(ctx.q), **self._values())
            self._started_on = row["started_on"]
            await self._count_crash_restarts(ctx)
            skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
            prune = sql.prune_instance_lives(ctx.q, skip_locked=skip_locked)
            await retry.run(ctx, prune, **self._slot())
            await self._beat_key(ctx)
            await self._hear(ctx)
        except Exception as exc:
            assert self.events is not None
            self.events.emit("error", exc)
        await super().start()

    async def run_pass(self) -> None:
        """A heartbeat (and, while an earlier life is still undecided, a recount)."""
        ctx = self._context()
        started = self._started_on or dt.datetime.now(dt.timezone.utc)
        await retry.run(ctx, sql.heartbeat_instance(ctx.q), **self._values(), started_on=started)
        await self._beat_key(ctx)
        await self._hear(ctx)
        if self._recount:
            await self._count_crash_restarts(ctx)

    async def _hear(self, ctx: Context) -> None:
        """Pass on the notices written since the last beat, while no NOTIFY brings them."""
        if self._on_notice is None:
            return
        if self._hears_notify():
            self._notices.restart()
            return
        for notice in await self._notices.read(ctx):
            self._on_notice(notice)

    async def _beat_key(self, ctx: Context) -> None:
        """Beat a keyed server's key.

        The key is seen now, the jobs it claimed since the last beat are added to the
        key's count, and its pause state is read, followed and acknowledged.
        """
        key = self.settings.instance_key
        if key is None:
            return
        claimed, ctx.affinity.claimed = ctx.affinity.claimed, 0
        try:
            [row] = await retry.run(
                ctx, sql.beat_instance_key(ctx.q), key=key, id=self.settings.id, claimed=claimed
            )
        except BaseException:
            ctx.affinity.claimed += claimed  # counted at the next beat
            raise
        if self._on_paused is not None:
            await follow_pause(ctx, key, PauseState.from_row(row), self._on_paused)

    async def stop(self) -> None:
        await super().stop()
        await self._lag.stop()
        try:
            ctx = self._context()
            await retry.run(ctx, sql.stop_instance(ctx.q), id=self.settings.id)
        except Exception:  # best effort: a row that is not marked stopped goes quiet
            pass

    async def _count_crash_restarts(self, ctx: Context) -> None:
        slot = {**self._slot(), "pid": os.getpid(), "process_start": self._process_start}
        await retry.run(ctx, sql.count_crash_restarts(ctx.q), **slot)
        [pending] = await retry.run(ctx, sql.crash_recount_at(ctx.q), **slot)
        self._recount = pending["recount_at"] is not None

    def _slot(self) -> dict[str, Any]:
        return {"id": self.settings.id, "name": self.settings.name, "host": self._host}

    def _values(self) -> dict[str, Any]:
        s = self.settings
        pool = self._pool() or {}
        metrics = self._usage.sample() if self._usage is not None else None
        if metrics is not None:
            metrics["limitedBy"] = self._limited()  # qcore's: the system limiter's reason
        return {
            "id": s.id,
            "name": s.name,
            "host": self._host,
            "pid": os.getpid(),
            "version": s.version,
            "node_version": f"Python {platform.python_version()}",
            "heartbeat_seconds": s.heartbeat_seconds,
            "supervise": s.supervise,
            "schedule": s.schedule,
            "migrate": s.migrate,
            "persist_queue_stats": s.persist_queue_stats,
            "persist_warnings": s.persist_warnings,
            "pool_max": pool.get("max"),
            "pool_total": pool.get("total"),
            "pool_idle": pool.get("idle"),
            "pool_waiting": pool.get("waiting"),
            "workers": Json(worker_entries(self._workers())),
            "metrics": Json(metrics) if metrics is not None else None,
            "config": Json(dict(s.config)),
        }

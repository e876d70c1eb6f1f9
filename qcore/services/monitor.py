"""The monitor pass and its background loop.

A pass fails the active jobs that ran past ``expire_seconds`` and those whose
heartbeat is older than ``heartbeat_seconds``, each retried, failed or
dead-lettered exactly as :func:`qcore.verbs.jobs.fail` would. It works queue by queue
as pg-boss's does (reference 6.10, 6.13, 6.14), so qcore and pg-boss instances on
one schema share the work:

1. the queues are grouped by physical job table, in chunks of 100 names;
2. the **monitor claim** stamps ``monitor_claim_on`` on the chunk's queues that
   are due (the background pass: last claimed at least ``monitor_interval_seconds``
   ago) and returns them, so one instance per interval works on a queue;
3. for the claimed queues, expiry and then heartbeat loss, in batches of at most
   1000 jobs, repeated while a batch is full, each batch one transaction under
   pg-boss's ``<table>failJobsByTimeout`` / ``<table>failJobsByHeartbeat`` advisory
   lock (on a backend without advisory locks the claim is the only gate: a batch
   deletes only jobs still matching the predicate, so two passes never fail a job
   twice);
4. ``monitor_on`` = now on the claimed queues.

Before the queues, the job tables that outgrew their planner statistics are analyzed
(:mod:`qcore.services.statistics`). Between the claim and expiry, the claimed queues'
counts are cached on their rows (:mod:`qcore.services.queue_stats`); after expiry,
retention walks the chunk's queues under its own claim, and after every chunk the
pass prunes warnings and snapshots (:mod:`qcore.services.maintenance`). Flows are
not part of the pass yet.

:func:`supervise` called without intervals runs every step now (the steps' own
tests, the CLI); ``Boss.supervise()`` passes the intervals, as pg-boss's
``supervise()`` honours them, so a fleet calling it in a loop does each step once
per interval between the instances.

:class:`Supervisor` runs the background pass every ``interval_seconds`` (the first
one interval after start, as pg-boss's timer) and serialises passes: one at a time
per ``Boss``, an explicit one waiting for the one in flight; a background tick that
finds a pass running skips. An error is emitted as an ``error`` event (and logged)
and the loop goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from typing import TypeVar

from qcore import locks, retry
from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.db import Database
from qcore.events import Events
from qcore.options import queue_name
from qcore.periodic import Periodic
from qcore.services import maintenance, queue_stats
from qcore.services.maintenance import Maintenance
from qcore.services.statistics import refresh_statistics
from qcore.services.vacuum import VacuumWatch
from qcore.sql import monitor as sql
from qcore.verbs import affinity, jobs
from qcore.verbs.queues import missing_queue
from qcore.verbs.reindex import Reindex, rebuild

__all__ = [
    "EXPIRY_LOCK_TIMEOUT_SECONDS",
    "MONITOR_BACKOFF",
    "MonitorResult",
    "Supervisor",
    "supervise",
]

T = TypeVar("T")
#: the pass as the Boss defaults run it
DEFAULT_SETTINGS = Maintenance()

#: how long an expiry batch waits for its advisory lock (pg-boss's lock_timeout)
EXPIRY_LOCK_TIMEOUT_SECONDS = 30.0

#: the warning a pass raises when it defers the next counting (pg-boss's type)
MONITOR_BACKOFF = "monitor_backoff"

TIMEOUT_LOCK = "failJobsByTimeout"
HEARTBEAT_LOCK = "failJobsByHeartbeat"


@dataclass(frozen=True)
class MonitorResult:
    """What one supervise pass did.

    The queues it claimed for monitoring (and so worked on), and how many jobs it failed
    for running past their expiry and for losing their heartbeat; besides (not compared:
    an equality says what the monitor did), the queues whose counts it cached and those
    retention walked, the jobs retention deleted, and the job tables whose stale
    statistics it refreshed.
    """

    claimed: tuple[str, ...] = ()
    expired: int = 0
    heartbeat_lost: int = 0
    cached: tuple[str, ...] = field(default=(), compare=False)
    maintained: tuple[str, ...] = field(default=(), compare=False)
    deleted: int = field(default=0, compare=False)
    analyzed: tuple[str, ...] = field(default=(), compare=False)


def _never() -> bool:
    return False


async def supervise(
    ctx: Context,
    name: str | None = None,
    *,
    monitor_interval_seconds: float | None = None,
    maintenance_interval_seconds: float | None = None,
    settings: Maintenance = DEFAULT_SETTINGS,
    reindex: Reindex | bool = True,
    force_reindex: bool = False,
    vacuum: VacuumWatch | None = None,
    batch_size: int = jobs.EXPIRY_BATCH_SIZE,
    events: Events | None = None,
    stopping: Callable[[], bool] = _never,
    clock: Callable[[], float] = time.monotonic,
) -> MonitorResult:
    """Run one supervise pass now, over every queue or the queue ``name``.

    ``name`` must exist. First come the statistics of job tables that outgrew them
    (:mod:`qcore.services.statistics`), then per chunk of queues the monitor (cached
    counts, backlog warnings, expiry, heartbeat loss) and then retention; after the
    queues, the pruning of warnings and snapshots.

    With ``monitor_interval_seconds`` / ``maintenance_interval_seconds`` (the
    background loop) only the queues whose claim of that step is at least that old
    are worked on; without them (an explicit call) every queue is. Expiry fails at
    most ``batch_size`` jobs per transaction. ``events`` receives the warnings.
    Last, the index bloat check (:func:`qcore.verbs.reindex.rebuild`): rebuilds with
    ``reindex`` thresholds (True: the settings', False: detection only), once per
    ``settings.reindex_interval_seconds`` between instances unless ``force_reindex``.
    ``vacuum`` (the instance's evidence, with ``settings.monitor_vacuum``) runs the
    vacuum checks (:mod:`qcore.services.vacuum`).
    ``stopping`` is asked between steps; once it says yes the pass ends (every
    finished batch stays committed).

    Counting scans the job table inside one snapshot, which holds back what vacuum may
    remove; with ``settings.monitor_vacuum`` on an engine with vacuum statistics, a pass
    whose counting took (by ``clock``) more than a tenth of ``autovacuum_naptime``
    defers the next counting, every instance's (pg-boss's ``monitor_backoff_on``), and
    warns ``monitor_backoff``; while deferred, a pass still expires jobs.
    """
    if name is not None:
        queue_name(name)
    listed = sql.monitor_queues(ctx.q, by_name=name is not None)
    rows = await retry.run(ctx, listed, name=name)
    if name is not None and not rows:
        raise missing_queue(name)
    await maintenance.ensure_partitions(ctx, settings)
    analyzed = await refresh_statistics(ctx)
    pass_seconds = max(monitor_interval_seconds or 0, maintenance_interval_seconds or 0)
    horizon = settings.monitor_vacuum and ctx.backend.capabilities.vacuum_stats
    counting = True
    if horizon:
        [gate] = await retry.run(ctx, sql.counts_deferred(ctx.q))
        counting = not gate["deferred"]
    counted_seconds = 0.0
    claimed: list[str] = []
    cached: list[str] = []
    maintained: list[str] = []
    expired = heartbeat_lost = deleted = 0
    for table, group in groupby(rows, key=lambda r: str(r["table_name"])):
        names = [str(r["name"]) for r in group]
        for start in range(0, len(names), sql.CLAIM_CHUNK_SIZE):
            if stopping():
                break
            chunk = names[start : start + sql.CLAIM_CHUNK_SIZE]
            mine = await _claim(ctx, chunk, monitor_interval_seconds)
            if mine:
                claimed += mine
                if counting:
                    started = clock()
                    cached += await queue_stats.cache_stats(
                        ctx,
                        table,
                        mine,
                        persist=settings.persist_queue_stats,
                        warning_queue_size=settings.warning_queue_size,
                        pass_seconds=pass_seconds,
                        events=events,
                    )
                    counted_seconds += clock() - started
                for heartbeat in (False, True):
                    failed = await _expire(ctx, table, mine, heartbeat, batch_size, stopping)
                    if heartbeat:
                        heartbeat_lost += failed
                    else:
                        expired += failed
                if stopping():
                    break
                stamp = sql.stamp_monitored(ctx.q)
                await retry.run(ctx, stamp, names=mine)
            retention = await maintenance.retain(
                ctx,
                table,
                chunk,
                interval_seconds=maintenance_interval_seconds,
                stopping=stopping,
            )
            maintained += retention.maintained
            deleted += retention.deleted
    if horizon and counted_seconds and not stopping():
        await _defer_counting(ctx, counted_seconds, events)
    if claimed and events is not None and not stopping():
        after = settings.warning_affinity_unmatched_seconds
        await affinity.warn_unmatched(ctx, claimed, events, after)
    if not stopping():
        await maintenance.prune(ctx, settings, stopping=stopping)
    if vacuum is not None and settings.monitor_vacuum and not stopping():
        await vacuum.check(ctx, events)
    if not stopping():
        limits = reindex if isinstance(reindex, Reindex) else settings.reindex
        await rebuild(
            ctx,
            limits or Reindex(),
            rebuilding=reindex is not False and limits is not None,
            interval_seconds=settings.reindex_interval_seconds,
            force=force_reindex,
            events=events,
        )
    return MonitorResult(
        tuple(sorted(claimed)),
        expired,
        heartbeat_lost,
        cached=tuple(sorted(cached)),
        maintained=tuple(sorted(maintained)),
        deleted=deleted,
        analyzed=tuple(analyzed),
    )


async def _defer_counting(ctx: Context, seconds: float, events: Events | None) -> None:
    """Defer the next counting when this pass's took ``seconds``, past its budget."""
    rows = await retry.run(ctx, sql.defer_counts(ctx.q), seconds=seconds)
    if rows and events is not None:
        [deferred] = rows
        events.warn(
            MONITOR_BACKOFF,
            f"counting the queues took {seconds:.1f} s, long enough to hold back autovacuum"
            f" (naptime {deferred['naptime_seconds']:g} s): the next counting waits"
            f" {deferred['backoff_seconds']:.0f} s. Shrink the job table (retention,"
            " delete_after_seconds) or give its busiest queues tables of their own",
            elapsed_seconds=seconds,
            naptime_seconds=float(deferred["naptime_seconds"]),
            backoff_seconds=float(deferred["backoff_seconds"]),
            backoff_until=deferred["backoff_until"].isoformat(),
        )


async def _claim(ctx: Context, names: list[str], interval: float | None) -> list[str]:
    statement = sql.claim_monitor(
        ctx.q,
        gated=interval is not None,
        skip_locked=ctx.backend.fetch is FetchStrategy.SKIP_LOCKED,
    )
    params = statement.bind(names=names, seconds=interval)
    rows = await retry.execute(ctx, statement.sql, params)
    return sorted(str(r["name"]) for r in rows)


async def _expire(
    ctx: Context,
    table: str,
    names: list[str],
    heartbeat: bool,
    batch_size: int,
    stopping: Callable[[], bool],
) -> int:
    """Expiry (or heartbeat loss) for queues of one table; the number of jobs failed.

    It runs a batch per transaction until a batch is not full.
    """
    suffix = table + (HEARTBEAT_LOCK if heartbeat else TIMEOUT_LOCK)

    async def batch(tx: Database) -> jobs.ExpiryBatch:
        await locks.advisory_lock(ctx, tx, suffix, timeout=EXPIRY_LOCK_TIMEOUT_SECONDS)
        return await jobs.expire(
            ctx.with_db(tx), table, names, heartbeat=heartbeat, limit=batch_size
        )

    failed = 0
    while not stopping():
        done = await retry.transaction(ctx, batch)
        failed += done.failed
        if done.picked < batch_size:
            break
    return failed


class Supervisor(Periodic):
    """The background monitor pass of one ``Boss``, and the lock that serialises its passes.

    The pass runs every ``interval_seconds``; the lock keeps its passes, background or
    explicit (:meth:`run`), one at a time.
    """

    name = "supervisor"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        *,
        interval_seconds: float,
        monitor_interval_seconds: float,
        settings: Maintenance = DEFAULT_SETTINGS,
        enabled: bool = True,
    ) -> None:
        super().__init__(events, interval_seconds, enabled=enabled)
        self._context = context
        self.monitor_interval_seconds = monitor_interval_seconds
        self.settings = settings
        #: what this instance's vacuum checks saw on earlier passes
        self.vacuum = VacuumWatch()

    @property
    def maintaining(self) -> bool:
        """Whether a pass, background or explicit, is in flight."""
        return self.busy

    async def run(
        self, name: str | None = None, *, reindex: Reindex | bool = True, force: bool = False
    ) -> MonitorResult | None:
        """One pass now, after the one in flight, each step gated by its shared interval.

        As pg-boss's ``supervise()``: the monitor step runs once per
        ``monitor_interval_seconds`` and retention once per
        ``maintenance_interval_seconds`` between all instances, so a fleet that calls it
        in a loop does not rerun them on every call; ``force`` (a forced rebuild) is the
        one exception, for the rebuild alone. See :func:`supervise`. Returns None,
        without running, once :meth:`stop` was called.
        """
        return await self.exclusive(
            lambda: supervise(
                self._context(),
                name,
                monitor_interval_seconds=self.monitor_interval_seconds,
                maintenance_interval_seconds=self.settings.maintenance_interval_seconds,
                settings=self.settings,
                reindex=reindex,
                force_reindex=force,
                vacuum=self.vacuum,
                events=self.events,
                stopping=self._stop_seen,
            )
        )

    async def run_pass(self) -> None:
        await supervise(
            self._context(),
            monitor_interval_seconds=self.monitor_interval_seconds,
            maintenance_interval_seconds=self.settings.maintenance_interval_seconds,
            settings=self.settings,
            vacuum=self.vacuum,
            events=self.events,
            stopping=self._stop_seen,
        )

    def _stop_seen(self) -> bool:
        return self.stopping

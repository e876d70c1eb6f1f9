"""The supervise pass's verbs of ``Boss``.

Run one now, the counts it caches and their history, the warnings, the index rebuild
statements, whether a pass runs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from qcore.arguments import verb
from qcore.boss.services import busy
from qcore.boss.verbs.parts import BossParts
from qcore.errors import ValidationError
from qcore.options import (
    queue_name,
)
from qcore.services.monitor import Supervisor
from qcore.verbs import queues as queue_ops
from qcore.verbs import stats
from qcore.verbs.queues import missing_queue
from qcore.verbs.reindex import Reindex, reindex_commands
from qcore.verbs.reindex import thresholds as reindex_thresholds
from qcore.verbs.stats import QueueStats
from qcore.verbs.warnings import StoredWarning, read_warnings

__all__ = ["MaintenanceVerbs"]


class MaintenanceVerbs:
    """The verbs of the supervise pass (a part of ``Boss``).

    Run one now, the counts it caches and their history, the index rebuild statements,
    and whether a pass runs.
    """

    def is_maintaining(self: BossParts) -> bool:
        """Whether a supervise pass (background or :meth:`supervise`) is in flight."""
        return busy(self._running, "supervisor")

    @verb()
    async def get_queue_stats(
        self: BossParts,
        name: str,
        *,
        from_: dt.datetime | None = None,
        to: dt.datetime | None = None,
        limit: int = 1000,
        bucket_seconds: int | None = None,
        max_data_points: int | None = None,
        aggregate: str = "max",
        percentiles: list[float] | None = None,
        force: bool = False,
        db: Any = None,
    ) -> list[QueueStats]:
        """Queue ``name``'s counts over time, newest first.

        With ``persist_queue_stats``: the snapshots captured between ``from_`` and ``to``
        (at most ``limit``, 1..100,000), raw or grouped in buckets of ``bucket_seconds``
        or as many as ``max_data_points`` (gauges collapsed by ``aggregate``: max, min or
        avg; counters summed). Without it: one snapshot, the counts cached on the queue
        row, counted again first when older than ``queue_cache_interval_seconds`` (and
        the supervise intervals) or, with ``force``, older than a minute. ``percentiles``
        (percents from 1 to 100, such as ``[50, 95, 99.9]``) adds to each snapshot a
        ``percentiles`` list of ``p``, ``wait_seconds`` and ``run_seconds``, read off its
        own wait and run histograms as pg-boss reads them.
        """
        ctx = self.context(db)
        queue_name(name)
        wanted = stats.check_percentiles(percentiles) if percentiles is not None else []
        cached = None
        if not self.maintenance.persist_queue_stats:
            budget = max(
                self.maintenance.queue_cache_interval_seconds,
                self.monitor_interval_seconds,
                self.supervise_interval_seconds,
            )
            cached = await stats.cached_stats(ctx, name, max_age_seconds=budget, force=force)
        elif await queue_ops.get_queue(ctx, name) is not None:
            snapshots = await stats.read_stats(
                ctx,
                name,
                from_=from_,
                to=to,
                limit=limit,
                bucket_seconds=bucket_seconds,
                max_data_points=max_data_points,
                aggregate=aggregate,
            )
            return [stats.with_percentiles(s, wanted) for s in snapshots] if wanted else snapshots
        if cached is None:
            raise missing_queue(name)
        return [stats.with_percentiles(cached, wanted) if wanted else cached]

    @verb()
    async def get_warnings(
        self: BossParts,
        *,
        limit: int = 100,
        before: tuple[dt.datetime, uuid.UUID | str] | None = None,
        db: Any = None,
    ) -> list[StoredWarning]:
        """Warnings written with ``persist_warnings``, newest first.

        At most ``limit`` (1 to 1,000); the next page is ``before=(w.created_on, w.id)`` of
        this page's last.
        """
        return await read_warnings(self.context(db), limit=limit, before=before)

    @verb()
    async def supervise(
        self: BossParts, name: str | None = None, *, reindex: bool | Mapping[str, Any] | None = None
    ) -> None:
        """Run one supervise pass now, over every queue or the queue ``name``.

        The pass covers cached counts and backlog warnings, expiry and heartbeat loss,
        retention, the pruning of warnings and snapshots, and the index bloat check.

        Each step keeps its interval, shared between all instances as pg-boss's do: the
        monitor runs once per ``monitor_interval_seconds``, retention once per
        ``maintenance_interval_seconds`` and the index rebuild once per
        ``reindex_interval_seconds``, so a fleet that drives maintenance itself
        (``supervise=False`` and a loop or a cron) does not rerun them on every call of
        every instance. ``reindex`` overrides the rebuild for this pass: False
        (detection only), True, or thresholds (``min_pages``, ``max_entries_per_page``,
        ``min_size_ratio``, ``max_index_bytes``) with ``force=True`` to rebuild every job
        index now, bloated or not, whatever the interval (the one exception). One pass
        runs at a time; a call waits for the one in flight, and ``stop()`` waits for the
        call. After ``stop()`` it returns without running.
        """
        limits: Reindex | bool = True
        force = False
        if isinstance(reindex, bool):
            limits = (self.maintenance.reindex or Reindex()) if reindex else False
        elif reindex is not None:
            if not isinstance(reindex, Mapping):
                raise ValidationError(
                    f"reindex must be True, False or a mapping of thresholds, got {reindex!r}"
                )
            limits, force = reindex_thresholds(reindex, self.maintenance.reindex)
        if self._stopped:
            return
        self.context()  # NotStartedError before start()
        supervisor = self._running.get("supervisor", Supervisor)
        if supervisor is not None:  # None after stop(close=False): nothing runs
            await supervisor.run(name, reindex=limits, force=force)

    @verb()
    async def get_reindex_commands(
        self: BossParts,
        *,
        force: bool = False,
        min_pages: int | None = None,
        max_entries_per_page: float | None = None,
        min_size_ratio: float | None = None,
        max_index_bytes: int | None = None,
    ) -> list[str]:
        """The statements that would rebuild the bloated job indexes now, in the order to run them.

        An invalid stub of an interrupted rebuild is dropped first; each statement runs
        outside a transaction. Empty when nothing is bloated, and on a backend without
        REINDEX. ``force=True`` lists every job index; ``min_pages``,
        ``max_entries_per_page``, ``min_size_ratio`` change the bloat rule, and
        ``max_index_bytes``, only when given, leaves out larger indexes.
        """
        given = {
            "min_pages": min_pages,
            "max_entries_per_page": max_entries_per_page,
            "min_size_ratio": min_size_ratio,
            "max_index_bytes": max_index_bytes,
        }
        limits, force = reindex_thresholds(
            {"force": force, **{k: v for k, v in given.items() if v is not None}}
        )
        capped = max_index_bytes is not None
        return await reindex_commands(self.context(), limits, force=force, capped=capped)

"""Cron's verbs of ``Boss``: schedules, their preview and the timekeeper's busy flags."""

from __future__ import annotations

import datetime as dt
from typing import Any

from typing_extensions import Unpack

from qcore.arguments import verb
from qcore.boss.services import busy
from qcore.boss.verbs.parts import BossParts
from qcore.cron import PREVIEW_DEFAULT_COUNT, preview
from qcore.options import (
    SendOptions,
)
from qcore.services.timekeeper import ClockSkew
from qcore.verbs import schedules as schedule_ops

__all__ = ["ScheduleVerbs"]


class ScheduleVerbs:
    """Cron schedules and the timekeeper's busy flags (a part of ``Boss``)."""

    @verb(SendOptions)
    async def schedule(
        self: BossParts,
        name: str,
        cron: str,
        data: Any = None,
        *,
        tz: str = "UTC",
        key: str = "",
        missed: str | None = None,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> None:
        """Send a job of ``data`` to queue ``name`` at every occurrence of ``cron``.

        ``cron`` has 5 fields, or 6 with seconds first, read in time zone ``tz``;
        ``key`` tells several schedules of one queue apart. Replaces the schedule
        (``name``, ``key``) if it exists. ``missed="once"``: after a time no instance
        ran the timekeeper, send one job for the latest occurrence missed (default
        ``skip``: none).
        """
        await schedule_ops.schedule(
            self.context(db), name, cron, data, tz=tz, key=key, missed=missed, **options
        )

    @verb()
    async def unschedule(self: BossParts, name: str, key: str = "", *, db: Any = None) -> bool:
        """Remove the schedule (``name``, ``key``); whether there was one."""
        return await schedule_ops.unschedule(self.context(db), name, key)

    @verb()
    async def get_schedules(
        self: BossParts,
        name: str | None = None,
        key: str | None = None,
        *,
        limit: int = 1000,
        after: tuple[str, str] | schedule_ops.Schedule | None = None,
        db: Any = None,
    ) -> list[schedule_ops.Schedule]:
        """Schedules in (name, key) order: all, a queue's, or one.

        One is addressed by ``name`` and ``key``; at most ``limit`` (1..100,000) after
        ``after`` (the previous page's last).
        """
        return await schedule_ops.get_schedules(
            self.context(db), name, key, limit=limit, after=after
        )

    @verb()
    def preview_schedule(
        self: BossParts,
        cron: str,
        *,
        tz: str | None = None,
        from_: dt.datetime | None = None,
        count: int = PREVIEW_DEFAULT_COUNT,
    ) -> list[dt.datetime]:
        """The next ``count`` (1 to 1,000) times ``cron`` fires in ``tz`` (None: UTC),
        strictly after ``from_`` (by default the database's time: this clock and the skew
        the clock check last read), as ``schedule()`` fires them.

        Nothing is read or written; page by passing the last one back as ``from_``. A bad
        expression, zone or count is a ``ValidationError``, as in ``schedule()``.
        """
        if from_ is None:
            skew = self._running.get("clock_skew", ClockSkew)
            seconds = skew.skew_seconds if skew is not None else None
            from_ = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds or 0.0)
        return preview(cron, tz=tz, after=from_, count=count)

    def is_timekeeping(self: BossParts) -> bool:
        """Whether a cron pass is in flight."""
        return busy(self._running, "timekeeper")

    def is_checking_skew(self: BossParts) -> bool:
        """Whether the clock-skew check is running."""
        return busy(self._running, "clock_skew")

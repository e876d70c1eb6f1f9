"""Affinity as an operator sees it: which patterns wait, and whether any live server can run them.

A job sent with ``preferred_instance_key_pattern`` waits until a server whose key
matches claims it (:mod:`qcore.affinity`). When no live server's key matches, it waits
for ever, and only looks like a stalled queue. :func:`pattern_backlog` counts the
waiting jobs by pattern with the live servers each matches (the queue page shows it);
:func:`warn_unmatched` (a step of the supervise pass) warns, as ``affinity_unmatched``,
of a pattern whose jobs have been ready longer than a threshold with no live match.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from qcore import retry
from qcore.affinity import key_matches
from qcore.context import Context
from qcore.events import Events
from qcore.sql import affinity as sql
from qcore.sql import instances as instance_sql

__all__ = ["UNMATCHED", "PatternBacklog", "live_keys", "pattern_backlog", "warn_unmatched"]

#: the type of the warning of jobs no live server can run
UNMATCHED = "affinity_unmatched"
#: the most (queue, pattern) rows one read returns
MAX_PATTERNS = 1000


@dataclass(frozen=True, slots=True)
class PatternBacklog:
    """The waiting jobs of one queue with one pattern.

    ``waiting``: created or retrying; ``oldest_ready``: the earliest moment one of them
    became claimable and ``ready_seconds`` how long ago (None while none is);
    ``live_matches``: the live keyed servers whose key the pattern matches (0: no server
    can run them now).
    """

    queue: str
    pattern: str
    waiting: int
    oldest_ready: dt.datetime | None
    ready_seconds: float | None
    live_matches: int


async def live_keys(ctx: Context) -> list[str]:
    """The keys of the live keyed servers."""
    rows = await retry.run(ctx, instance_sql.live_instance_keys(ctx.q))
    return [str(r["key"]) for r in rows]


async def pattern_backlog(
    ctx: Context, queues: Sequence[str], *, limit: int = MAX_PATTERNS
) -> list[PatternBacklog]:
    """The waiting jobs of ``queues`` by pattern, most first, each with its live matches.

    Empty where qcore's affinity tables are not installed (a schema pg-boss made).
    """
    if not ctx.affinity.installed or not queues:
        return []
    rows = await retry.run(ctx, sql.pattern_backlog(ctx.q), queues=list(queues), limit=limit)
    if not rows:
        return []
    keys = await live_keys(ctx)
    return [
        PatternBacklog(
            queue=str(r["queue"]),
            pattern=str(r["pattern"]),
            waiting=int(r["waiting"]),
            oldest_ready=r["oldest_ready"],
            ready_seconds=None if r["ready_seconds"] is None else float(r["ready_seconds"]),
            live_matches=sum(key_matches(str(r["pattern"]), k) for k in keys),
        )
        for r in rows
    ]


async def warn_unmatched(
    ctx: Context, queues: Sequence[str], events: Events, after_seconds: float
) -> list[PatternBacklog]:
    """Warn of the patterns of ``queues`` no live server matches, ready ``after_seconds``.

    One ``affinity_unmatched`` warning each (queue, pattern, how many wait, since when);
    the stranded backlogs are returned.
    """
    stranded = [
        b
        for b in await pattern_backlog(ctx, queues)
        if b.live_matches == 0 and b.ready_seconds is not None and b.ready_seconds >= after_seconds
    ]
    for b in stranded:
        assert b.oldest_ready is not None and b.ready_seconds is not None
        waited = b.ready_seconds
        events.warn(
            UNMATCHED,
            f"{b.waiting} job(s) of queue {b.queue!r} wait for a server whose key matches"
            f" {b.pattern!r}, and no live server's does (the oldest ready for"
            f" {waited:.0f} s): start one, or move the jobs",
            queue=b.queue,
            pattern=b.pattern,
            waiting=b.waiting,
            oldest_ready=b.oldest_ready.isoformat(),
        )
    return stranded

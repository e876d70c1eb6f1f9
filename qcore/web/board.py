"""What the dashboard shows, one method per page, as plain values for the templates.

It is read through the public verbs of a ``Boss`` and the metrics history's provider and
admin. Nothing here renders HTML or knows about HTTP; no SQL text is written here.

A board needs a ``Boss`` on the job schema (started or not: only its verbs are used)
and, for the history views, a :class:`~qcore.metrics.MetricsHistoryProvider` and
:class:`~qcore.metrics.MetricsHistoryAdmin` over a store.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from qcore.boss import Boss
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.job import DeadLetterOrigin, Instance, InstanceCounts, Job, JobState, Queue
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    Usage,
    WindowHistory,
)
from qcore.verbs.affinity import PatternBacklog
from qcore.verbs.queues import missing_queue
from qcore.verbs.schedules import Schedule
from qcore.verbs.warnings import StoredWarning

__all__ = [
    "RANGES",
    "STATES",
    "Board",
    "JobFilter",
    "JobPage",
    "JobView",
    "Overview",
    "Problem",
    "QueuePage",
]

#: the history ranges a chart offers
RANGES = ("60m", "7d", "30d", "90d")

#: job states in the order the board lists them
STATES = tuple(s.value for s in JobState)

#: a queue whose oldest ready job waited longer than this is "stalled" (seconds)
STALLED_AFTER_SECONDS = 300

#: an instance heard from longer ago than this may be removed (seed 003)
REMOVABLE_AFTER = dt.timedelta(minutes=30)


def _removable(instance: Instance, now: dt.datetime) -> bool:
    """Whether the board offers to remove a row: a keyed server gone 30 minutes.

    Gone: neither this row nor any other life of its key (the key's last beat) was heard
    from within :data:`REMOVABLE_AFTER`, as ``remove_instance`` requires.
    """
    if instance.instance_key is None or instance.live:
        return False
    heard = max(instance.heartbeat_on, instance.key_seen_on or instance.heartbeat_on)
    return now - heard > REMOVABLE_AFTER


#: jobs per page of a queue's job list
PAGE_SIZE = 50


@dataclass(frozen=True)
class Problem:
    """A queue that needs a look, and why (``backlog``, ``failing`` or ``stalled``)."""

    queue: str
    kind: str
    detail: str


@dataclass(frozen=True)
class Overview:
    queues: list[Queue]
    totals: dict[str, int]
    problems: list[Problem]
    warnings: list[StoredWarning]
    #: the registry's counts (one aggregate, whatever its size)
    instances: InstanceCounts
    #: how old the oldest of the cached counts is (seconds; None: none counted yet)
    counts_age_seconds: float | None = None
    #: the queues the monitor has not counted yet (their counts read 0)
    uncounted: tuple[str, ...] = ()


#: which servers the instances page shows: keyed ones (the default), every one, or the
#: anonymous ones (qcore scripts and pg-boss instances, which no one can address)
INSTANCE_SHOWN = ("keyed", "all", "anonymous")
#: the states the instances page can narrow to
INSTANCE_STATES = ("any", "live", "paused")


@dataclass(frozen=True)
class InstanceFilter:
    """Which rows of the registry the instances page lists."""

    show: str = "keyed"
    state: str = "any"
    search: str | None = None


@dataclass(frozen=True)
class InstancesPage:
    """A page of the instances list, the cursor of the next one, and the whole registry's counts."""

    rows: list[tuple[Instance, bool]]
    next: str | None
    counts: InstanceCounts


@dataclass(frozen=True)
class JobFilter:
    """Which of a queue's jobs a page lists.

    A state, a singleton key, and a JSON value the data contains (as typed, checked when
    read).
    """

    state: str | None = None
    key: str | None = None
    data: str | None = None

    def params(self) -> dict[str, str]:
        """The filter as query parameters of the page's links."""
        return {k: v for k, v in vars(self).items() if v}


@dataclass(frozen=True)
class JobPage:
    """A page of jobs, newest first, and the keyset of the next page (None: last)."""

    jobs: list[Job]
    filter: JobFilter
    next_before: str | None


@dataclass(frozen=True)
class JobView:
    """A job, the jobs it waits for and blocks, and where a dead letter copy came from."""

    job: Job
    parents: list[tuple[str, uuid.UUID]]
    children: list[tuple[str, uuid.UUID]]
    origin: DeadLetterOrigin | None


@dataclass(frozen=True)
class QueuePage:
    queue: Queue
    page: JobPage
    depth: list[dict[str, Any]]
    dead_letter_for: list[str]
    #: its waiting jobs by affinity pattern (empty: none has one)
    patterns: list[PatternBacklog]


def cursor(created_on: dt.datetime | None, id: uuid.UUID) -> str:
    """The keyset of the page after a row (a job, a warning), as one URL value.

    It holds the row's created_on and id.
    """
    assert created_on is not None
    return f"{created_on.isoformat()}_{id}"


def parse_cursor(value: str) -> tuple[dt.datetime, uuid.UUID]:
    """A :func:`cursor` back as ``(created_on, id)``; ``ValidationError`` when malformed."""
    created, _, ident = value.rpartition("_")
    try:
        when = dt.datetime.fromisoformat(created)
        return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc), uuid.UUID(ident)
    except ValueError:
        raise ValidationError(f"not a page cursor: {value!r}") from None


def problems_of(queues: list[Queue]) -> list[Problem]:
    """Queues with a backlog past their warning size, failed jobs, or a stalled head."""
    found = []
    for q in queues:
        if q.warning_queue_size and q.queued_count >= q.warning_queue_size:
            found.append(
                Problem(
                    q.name,
                    "backlog",
                    f"{q.queued_count:,} queued (warns at {q.warning_queue_size:,})",
                )
            )
        if q.failed_count:
            found.append(Problem(q.name, "failing", f"{q.failed_count:,} failed jobs kept"))
        if (q.ready_oldest_seconds or 0) >= STALLED_AFTER_SECONDS:
            found.append(
                Problem(q.name, "stalled", f"oldest ready job waited {q.ready_oldest_seconds:,} s")
            )
    return found


class Board:
    """The dashboard's reads and actions on one job schema.

    And, optionally, on its metrics history.
    """

    def __init__(
        self,
        boss: Boss,
        *,
        history: MetricsHistoryProvider | None = None,
        admin: MetricsHistoryAdmin | None = None,
    ) -> None:
        self.boss = boss
        self.history = history
        self.admin = admin

    # -- pages -------------------------------------------------------------------------

    async def overview(self) -> Overview:
        queues = await self.boss.get_queues()
        totals = {
            "queues": len(queues),
            "queued": sum(q.queued_count for q in queues),
            "active": sum(q.active_count for q in queues),
            "failed": sum(q.failed_count for q in queues),
            "total": sum(q.total_count for q in queues),
        }
        ages = [q.counts_age_seconds for q in queues if q.counts_age_seconds is not None]
        return Overview(
            queues=queues,
            totals=totals,
            problems=problems_of(queues),
            warnings=await self.boss.get_warnings(limit=10),
            instances=await self.boss.instance_counts(),
            counts_age_seconds=max(ages, default=None),
            uncounted=tuple(q.name for q in queues if q.counted_on is None),
        )

    async def queues(self) -> list[Queue]:
        return await self.boss.get_queues()

    async def queue(self, name: str, *, filter: JobFilter, before: str | None) -> QueuePage:
        # one queue's counts are cheap to count now: a page opened right after a send
        # shows it (the overview keeps the monitor's counts and says how old they are)
        queue = await self.boss.get_queue(name, live=True)
        if queue is None:
            raise missing_queue(name)
        queues = await self.boss.get_queues()
        page = await self.jobs(name, filter=filter, before=before)
        depth = await self.boss.get_queue_stats(name, limit=120)
        return QueuePage(
            queue=queue,
            page=page,
            depth=depth[::-1],
            dead_letter_for=sorted(q.name for q in queues if q.dead_letter == name),
            patterns=await self.boss.get_affinity_backlog(name),
        )

    async def jobs(self, name: str, *, filter: JobFilter, before: str | None) -> JobPage:
        if filter.state is not None and filter.state not in STATES:
            raise ValidationError(
                f"unknown job state {filter.state!r}; states: {', '.join(STATES)}"
            )
        try:
            data = json.loads(filter.data) if filter.data else None
        except ValueError as exc:
            raise ValidationError(f"the data filter must be JSON: {exc}") from None
        except RecursionError:  # the decoder's own limit, far past what a job may hold
            raise ValidationError("the data filter nests lists and objects too deep") from None
        jobs = await self.boss.browse_jobs(
            name,
            states=[filter.state] if filter.state else None,
            key=filter.key or None,
            data=data,
            before=parse_cursor(before) if before else None,
            limit=PAGE_SIZE + 1,
        )
        more = len(jobs) > PAGE_SIZE
        jobs = jobs[:PAGE_SIZE]
        last = cursor(jobs[-1].created_on, jobs[-1].id) if more else None
        return JobPage(jobs=jobs, filter=filter, next_before=last)

    async def job(self, name: str, id: str) -> JobView:
        job = await self.boss.get_job_by_id(name, id)
        if job is None:
            raise ValidationError(f"queue {name!r} has no job {id}")
        parents = await self.boss.get_dependencies(name, job.id, limit=100)
        children = await self.boss.get_dependents(name, job.id, limit=100)
        return JobView(job, parents, children, await self.dead_letter_origin(job))

    async def dead_letter_origin(self, job: Job) -> DeadLetterOrigin | None:
        """Where a dead letter copy came from and why its source died (None: not one).

        The failed job is read when it is still kept, else its queue's retry limit.
        """
        if job.source_name is None or job.source_id is None:
            return None
        try:
            source = await self.boss.get_job_by_id(job.source_name, job.source_id)
        except QueueNotFoundError:  # the source queue is gone, and its jobs with it
            return DeadLetterOrigin.of(job)
        queue = None if source is not None else await self.boss.get_queue(job.source_name)
        return DeadLetterOrigin.of(job, source, queue)

    async def instances(self, shown: InstanceFilter, *, after: str | None) -> InstancesPage:
        """A page of the registry: live servers first, then the latest heard; the counts."""
        now = dt.datetime.now(dt.timezone.utc)
        rows = await self.boss.list_instances(
            keyed={"keyed": True, "anonymous": False, "all": None}[shown.show],
            live=True if shown.state == "live" else None,
            paused=True if shown.state == "paused" else None,
            search=shown.search,
            limit=PAGE_SIZE,
            after=after,
        )
        listed = [(i, _removable(i, now)) for i in rows]
        return InstancesPage(listed, rows.next, await self.boss.instance_counts())

    async def warnings(self, *, before: str | None) -> tuple[list[StoredWarning], str | None]:
        rows = await self.boss.get_warnings(
            limit=PAGE_SIZE + 1, before=parse_cursor(before) if before else None
        )
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        return rows, cursor(rows[-1].created_on, rows[-1].id) if more else None

    async def schedules(self) -> list[Schedule]:
        return await self.boss.get_schedules(limit=1000)

    async def queue_history(self, name: str | None, range: str) -> WindowHistory | None:
        if self.history is None:
            return None
        if range not in RANGES:
            raise ValidationError(f"range must be one of {', '.join(RANGES)}, got {range!r}")
        return await self.history.window_history(name, window=range, breakdown=name is None)

    async def storage(self) -> Usage | None:
        return await self.admin.stats() if self.admin is not None else None

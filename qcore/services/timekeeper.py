"""The timekeeper: cron schedules and the clock-skew check.

Cron schedules fire, once per occurrence across every instance, and the clock-skew check
runs.

**The cron pass** (:func:`cron_pass`, every ``cron_monitor_interval_seconds``) is
pg-boss 12.38's, so a fleet of qcore and pg-boss instances shares it:

1. the claim moves ``version.cron_on`` to the database's now when it is at least an
   interval old: one instance per interval runs the pass (the others learn when the
   row comes due and try again just after);
2. each schedule whose cron expression has an occurrence in the last 60 seconds of
   database time (in the schedule's time zone; :mod:`qcore.cron`) is due, and with
   ``missed="once"`` the latest occurrence no pass saw since the previous pass too;
3. each due occurrence becomes a job on the ``__pgboss__send-it`` queue, filed in the
   throttle slot of its minute under the schedule's occurrence key: a second pass (of
   either runtime) finding the same occurrence inserts nothing, so each (schedule,
   occurrence) gives exactly one job.

**The forwarder** (:func:`forward`, a worker on ``__pgboss__send-it`` polling every
``cron_worker_interval_seconds``) sends each such job's payload to the schedule's
queue with the schedule's send options and records the job on the schedule row
(``last_job_id``). A send that fails is reported as an ``error`` event; the occurrence
is not sent twice. While the last pass (any instance's claim answers it) found no
schedule and no occurrence waiting, the forwarder makes no claim: an idle instance
pays nothing for cron it does not use. A pass of this instance that files
occurrences wakes it at once, so the instance that files forwards; another
instance's filings are forwarded by that instance, and by this one from its next
pass.

**The clock-skew check** (:class:`ClockSkew`, at start and every
``clock_monitor_interval_seconds``) compares the database's clock with this process's
and emits a ``clock_skew`` warning past 60 seconds (``direction``: ``slower`` when this
process's clock is behind the database's). Cron never depends on it: a pass judges
every schedule against the database's clock.

A schedule row this pass cannot evaluate (an expression or time zone written straight
into the table, a recurrence rule, which pg-boss can write and qcore does not read) is
skipped with one ``invalid_schedule`` warning per row, not one per pass.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcore import cron, retry
from qcore.context import Context
from qcore.db import Json
from qcore.errors import ConfigError, QcoreError, ValidationError
from qcore.events import Events
from qcore.job import Job
from qcore.options import check_number
from qcore.periodic import Periodic
from qcore.sql import schedules as sql
from qcore.verbs.jobs import enqueue
from qcore.verbs.queues import create_queue
from qcore.verbs.schedules import Schedule, get_schedules, send_options_of
from qcore.worker import Worker

__all__ = [
    "CLOCK_SKEW",
    "INVALID_SCHEDULE",
    "SEND_IT",
    "ClockSkew",
    "CronPass",
    "Timekeeper",
    "TimekeeperSettings",
    "cron_pass",
    "forward",
]

#: the queue occurrences wait in until forwarded (pg-boss's name: both runtimes share it)
SEND_IT = "__pgboss__send-it"
CLOCK_SKEW = "clock_skew"
INVALID_SCHEDULE = "invalid_schedule"
SKEW_WARNING_SECONDS = 60.0
#: jobs the forwarder takes per fetch
FORWARD_BATCH = 50
#: how long a stop waits for the forwarder's batch in flight
FORWARDER_STOP_SECONDS = 10.0


@dataclass(frozen=True)
class TimekeeperSettings:
    """The ``schedule`` options of a ``Boss`` (pg-boss's ranges, checked here)."""

    schedule: bool = True
    cron_monitor_interval_seconds: float = 30.0
    cron_worker_interval_seconds: float = 5.0
    clock_monitor_interval_seconds: float = 600.0

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, bool):
            raise ConfigError(f"schedule must be True or False, got {self.schedule!r}")
        for option, high in (
            ("cron_monitor_interval_seconds", 45),
            ("cron_worker_interval_seconds", 45),
            ("clock_monitor_interval_seconds", 600),
        ):
            check_number(option, getattr(self, option), 1, high, integer=False)


@dataclass
class CronPass:
    """What one attempt at a cron pass did."""

    #: whether this instance had the interval's pass (False: another instance has it)
    claimed: bool
    #: the database's clock the schedules were judged against
    now: dt.datetime
    #: age of the claim it found, in seconds (None: no pass had ever run)
    elapsed: float | None = None
    #: occurrences filed on the send-it queue, as (schedule name, key, slot)
    filed: list[tuple[str, str, str]] = field(default_factory=list)
    #: whether a schedule exists or an occurrence waits (whoever had the pass)
    in_use: bool = True


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _occurrences(
    s: Schedule,
    now: dt.datetime,
    prior: dt.datetime | None,
    due_by: dict[tuple[str, str], dt.datetime | None],
) -> list[dt.datetime]:
    """The occurrences of ``s`` a pass at ``now`` owes a job for.

    See the module. ``due_by``: the pass's due occurrence per (expression, zone), shared
    by its rows.
    """
    if (s.cron, s.timezone) not in due_by:
        cron.check_expression(s.cron)
        due_by[(s.cron, s.timezone)] = cron.due_occurrence(s.cron, s.timezone, now)
    due = due_by[(s.cron, s.timezone)]
    out = [due] if due else []
    window_start = now - dt.timedelta(seconds=cron.WINDOW_SECONDS)
    if s.missed == "once" and prior is not None:
        since = max(prior, _utc(s.created_on))
        if since < window_start:
            missed = cron.latest_occurrence(s.cron, s.timezone, window_start, since)
            if missed:
                out.append(missed)
    return out


async def cron_pass(
    ctx: Context,
    events: Events | None,
    *,
    interval_seconds: float,
    warned: set[tuple[str, str, str, str]] | None = None,
) -> CronPass:
    """Claim this interval's pass and, if it is ours, file every due occurrence.

    ``warned``: the rows already reported as unusable (kept between passes).
    """
    [claim] = await retry.run(
        ctx, sql.claim_cron_pass(ctx.q), seconds=float(interval_seconds), send_it=SEND_IT
    )
    result = CronPass(
        claimed=bool(claim["claimed"]),
        now=_utc(claim["now"]),
        elapsed=claim["elapsed"],
        in_use=bool(claim["in_use"]),
    )
    if not result.claimed or not result.in_use:
        return result
    prior = claim["prior_cron_on"]
    prior = _utc(prior) if prior is not None else None
    broken: set[tuple[str, str, str, str]] = set()
    filed: list[tuple[Any, str, str]] = []
    due_by: dict[tuple[str, str], dt.datetime | None] = {}
    for s in await get_schedules(ctx, limit=None):
        row = (s.name, s.key, s.cron, s.timezone)
        try:
            if s.kind != "cron":
                raise ValidationError(f"a {s.kind} schedule: qcore evaluates cron expressions only")
            occurrences = _occurrences(s, result.now, prior, due_by)
        except (ValidationError, ValueError, KeyError) as exc:
            broken.add(row)
            if events is not None and (warned is None or row not in warned):
                events.warn(
                    INVALID_SCHEDULE,
                    f"the schedule of queue {s.name!r} (key {s.key!r}) could not be evaluated"
                    f" and was skipped: {exc}",
                    queue=s.name,
                    key=s.key,
                    cron=s.cron,
                    timezone=s.timezone,
                )
            continue
        for slot in sorted({cron.throttle_slot(o) for o in occurrences}):
            payload = {"name": s.name, "key": s.key, "data": s.data, "options": s.options}
            filed.append(({**payload, "slot": slot}, cron.occurrence_key(s.name, s.key), slot))
            result.filed.append((s.name, s.key, slot))
    if warned is not None:
        warned.intersection_update(broken)  # a fixed row would be reported again if it broke
        warned.update(broken)
    if filed:
        await enqueue.insert_in_slots(ctx, SEND_IT, filed)
    return result


async def forward(ctx: Context, events: Events | None, jobs: list[Job]) -> int:
    """Send each send-it job's payload to its schedule's queue; how many were sent.

    The sends run concurrently, each its own statement; the newest job of each schedule is
    recorded on its row. A failed send is reported, not raised: the send-it job is done
    either way, so the occurrence is never sent twice.
    """
    bodies = [job.data if isinstance(job.data, dict) else {} for job in jobs]
    results = await asyncio.gather(*(_send(ctx, body) for body in bodies), return_exceptions=True)
    fired: dict[tuple[str, str], tuple[str, str]] = {}
    sent = 0
    for job, body, result in zip(jobs, bodies, results, strict=True):
        name, key = body.get("name"), body.get("key")
        if isinstance(result, BaseException):
            if not isinstance(result, QcoreError):
                raise result
            if events is not None:
                events.emit(
                    "error",
                    QcoreError(
                        f"a scheduled job for queue {name!r} (key {key!r}) was not sent"
                        f" (send-it job {job.id}): {result}"
                    ),
                )
            continue
        sent += 1
        if result is None or not isinstance(name, str) or not isinstance(key, str):
            continue  # a policy dropped it; or a row of an older pg-boss, without its key
        slot = str(body.get("slot") or "")
        if (name, key) not in fired or fired[(name, key)][0] <= slot:
            fired[(name, key)] = (slot, str(result))
    if fired:
        records = [{"name": n, "key": k, "jobId": j} for (n, k), (_, j) in fired.items()]
        try:
            await retry.run(ctx, sql.set_last_job_ids(ctx.q), fired=Json(records))
        except QcoreError as exc:  # the jobs exist: only the bookkeeping is behind
            if events is not None:
                events.emit(
                    "error",
                    QcoreError(f"scheduled jobs were sent but last_job_id was not recorded: {exc}"),
                )
    return sent


async def _send(ctx: Context, body: dict[str, Any]) -> uuid.UUID | None:
    """One occurrence's job, sent as its schedule says."""
    name = body.get("name")
    if not isinstance(name, str):
        raise ValidationError("the send-it job names no queue")
    options = send_options_of(body.get("options") or {})
    return await enqueue.send(ctx, name, body.get("data"), **options)


class Timekeeper(Periodic):
    """The cron pass and the forwarder of its send-it jobs.

    The cron pass runs every ``cron_monitor_interval_seconds`` (the first at start); the
    forwarder is a worker of its own (made by ``worker``, ``Boss._worker``), started and
    stopped with the service, not listed among the instance's workers.
    """

    name = "timekeeper"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        settings: TimekeeperSettings,
        *,
        worker: Callable[..., Worker],
    ) -> None:
        super().__init__(
            events, settings.cron_monitor_interval_seconds, detached=True, at_start=True
        )
        self._context = context
        self._settings = settings
        self._make_worker = worker
        self._forwarder: Worker | None = None
        #: whether the last pass found cron in use (the forwarder idles while not)
        self.cron_in_use = True
        #: when another instance had the last interval: the moment its claim comes due
        self._retry_in: float | None = None
        self._warned: set[tuple[str, str, str, str]] = set()

    def next_delay(self) -> float:
        return super().next_delay() if self._retry_in is None else self._retry_in

    async def start(self) -> None:
        await create_queue(self._context(), SEND_IT)
        if self._forwarder is None:
            self._forwarder = self._make_worker(
                SEND_IT,
                self._forward,
                batch_size=FORWARD_BATCH,
                polling_interval_seconds=self._settings.cron_worker_interval_seconds,
            )
            self._forwarder.dormant = lambda: not self.cron_in_use
            self._forwarder.start()
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None:  # its sends are short: a bounded wait for the batch
            await forwarder.stop(graceful=True, timeout=FORWARDER_STOP_SECONDS)

    async def _forward(self, jobs: list[Job]) -> None:
        await forward(self._context(), self.events, jobs)

    async def run_pass(self) -> bool:
        interval = self.interval_seconds
        self._retry_in = None  # an error: try again an interval later
        result = await cron_pass(
            self._context(), self.events, interval_seconds=interval, warned=self._warned
        )
        self.cron_in_use = result.in_use
        if result.filed and self._forwarder is not None:
            self._forwarder.wake()  # forward what this pass filed now, not at the next poll
        if not result.claimed:
            # another instance has this interval: try again just after its claim comes due
            age = result.elapsed if result.elapsed is not None else 0.0
            self._retry_in = max(0.0, interval - age) + min(1.0, interval / 4)
        return True


class ClockSkew(Periodic):
    """The clock-skew check: at start, then every ``clock_monitor_interval_seconds``.

    ``clock`` is this process's clock (seconds since the epoch).
    """

    name = "clock_skew"

    def __init__(
        self,
        context: Callable[[], Context],
        events: Events,
        interval_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(events, interval_seconds, detached=True, at_start=True)
        self._context = context
        self._clock = clock
        #: the database's clock minus this process's, in seconds, at the last check
        self.skew_seconds: float | None = None

    async def run_pass(self) -> bool:
        await self.check()
        return True

    async def check(self) -> float:
        """Read both clocks once; warn past the threshold; the skew in seconds."""
        ctx = self._context()
        [row] = await retry.run(ctx, sql.database_time(ctx.q))
        skew = float(row["time"]) / 1000 - self._clock()
        self.skew_seconds = skew
        if abs(skew) >= SKEW_WARNING_SECONDS and self.events is not None:
            direction = "slower" if skew > 0 else "faster"
            self.events.warn(
                CLOCK_SKEW,
                f"this instance's clock is {abs(skew):.0f} s {direction} than the database's;"
                " scheduling is not affected (it reads the database's clock)",
                seconds=abs(skew),
                direction=direction,
            )
        return skew

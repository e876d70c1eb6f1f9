"""Cron expressions as pg-boss 12.38 reads them, evaluated with croniter in a time zone.

An expression has five fields (minute hour day month weekday) or six, seconds first
(as pg-boss's cron-parser takes them). A schedule is **due** when an occurrence falls
in the last :data:`WINDOW_SECONDS` before the pass's database time; the job it sends
is filed under the occurrence's throttle slot (the minute it falls in) and the
schedule's occurrence key, which is what keeps every instance, qcore or pg-boss, that
finds the same occurrence due from sending it twice.

Daylight saving time, in the schedule's own zone, as pg-boss's cron-parser reads it
(checked against the real pg-boss by the interop tests): a wall time that does not exist
(the hour skipped in spring) is read with the offset before the gap, so 02:30 runs at
03:30 once the clocks went from 02:00 to 03:00; a wall time that happens twice (the
hour repeated in autumn) runs once, at its first happening. An expression whose hour
field is ``*`` (every hour) is walked in real time instead: the repeated hour is an
hour like any other and runs again, and the skipped one is simply not there.
"""

from __future__ import annotations

import datetime as dt
import time
import zoneinfo
from functools import lru_cache

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

from qcore.errors import ValidationError
from qcore.options import check_count

__all__ = [
    "WINDOW_SECONDS",
    "check_expression",
    "check_timezone",
    "due_occurrence",
    "latest_occurrence",
    "next_occurrences",
    "occurrence_key",
    "preview",
    "throttle_slot",
]

#: how long an occurrence stays due, and the width of the throttle slot it is filed in
#: (one value: a wider window would let two slots take one occurrence)
WINDOW_SECONDS = 60
#: what ``preview`` returns unless told, and the most it returns (pg-boss's)
PREVIEW_DEFAULT_COUNT = 5
PREVIEW_MAX_COUNT = 1000
#: the wall-clock budget of one preview: a sparse expression (``0 0 29 2 *``) searches
#: years for each occurrence, and the walk holds the event loop
PREVIEW_BUDGET_SECONDS = 1.0
_BAD_CRON = (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, ValueError)


def _fields(expression: str) -> list[str]:
    return expression.split()


def check_expression(expression: object) -> str:
    """A cron expression of 5 fields, or 6 with seconds first; ``ValidationError`` else."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError(f"cron must be a non-empty cron expression, got {expression!r}")
    return _checked(expression)


@lru_cache(maxsize=1024)
def _checked(expression: str) -> str:
    fields = _fields(expression)
    if expression.lstrip().upper().startswith(("FREQ=", "RRULE:", "DTSTART")):
        raise ValidationError(
            f"cron {expression!r} is a recurrence rule (RRULE); qcore takes cron expressions"
            " only (5 fields, or 6 with seconds first)"
        )
    if len(fields) not in (5, 6):
        raise ValidationError(
            f"cron {expression!r} has {len(fields)} fields; a cron expression has 5"
            " (minute hour day month weekday) or 6 (seconds first)"
        )
    try:
        _walk(expression, dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    except _BAD_CRON as exc:
        raise ValidationError(
            f"cron {expression!r} is not a valid cron expression: {exc}"
        ) from None
    return expression


def check_timezone(tz: object) -> zoneinfo.ZoneInfo:
    """The IANA time zone named ``tz`` (``"UTC"``, ``"Europe/Paris"``).

    ``ValidationError`` for a name the system's time zone database does not know.
    """
    if not isinstance(tz, str) or not tz:
        raise ValidationError(f"tz must be an IANA time zone name such as 'UTC', got {tz!r}")
    return _zone(tz)


@lru_cache(maxsize=256)
def _zone(tz: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"tz {tz!r} is not a known time zone; give an IANA name such as 'UTC' or"
            " 'America/New_York'"
        ) from None


def _walk(expression: str, start: dt.datetime) -> croniter:
    """A croniter from ``start`` (six fields: seconds first)."""
    return croniter(expression, start, second_at_beginning=len(_fields(expression)) == 6)


def _repeats_every_hour(expression: str) -> bool:
    fields = _fields(expression)
    hour = fields[2] if len(fields) == 6 else fields[1]
    return hour == "*"


def _start(expression: str, zone: zoneinfo.ZoneInfo, at: dt.datetime) -> dt.datetime:
    """Where a walk from instant ``at`` starts: ``at`` itself for an hourly expression
    (walked in real time), its wall time in ``zone`` for any other (walked on the wall
    clock, see the module)."""
    local = at.astimezone(zone)
    return local if _repeats_every_hour(expression) else local.replace(tzinfo=None)


def _instant(occurrence: dt.datetime, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """The UTC instant of a walk's occurrence: a wall time is read with ``fold=0``, its
    first happening, or in a gap the offset before it (pg-boss's reading)."""
    if occurrence.tzinfo is None:
        occurrence = occurrence.replace(tzinfo=zone, fold=0)
    return occurrence.astimezone(dt.timezone.utc)


def latest_occurrence(
    expression: str, tz: str, until: dt.datetime, after: dt.datetime
) -> dt.datetime | None:
    """The latest occurrence in (``after``, ``until``], as an aware UTC datetime."""
    zone = check_timezone(tz)
    # from a second after ``until``: croniter drops the fraction of a second, and
    # ``until`` itself must be reachable (later ones are passed over)
    walk = _walk(expression, _start(expression, zone, until + dt.timedelta(seconds=1)))
    while True:
        occurrence = _instant(walk.get_prev(dt.datetime), zone)
        if occurrence > until:
            continue
        return occurrence if occurrence > after else None


def due_occurrence(expression: str, tz: str, now: dt.datetime) -> dt.datetime | None:
    """The occurrence due at ``now`` (the latest in the window before it), or None."""
    return latest_occurrence(expression, tz, now, now - dt.timedelta(seconds=WINDOW_SECONDS))


def next_occurrences(
    expression: str, tz: str, after: dt.datetime, count: int, *, budget: float | None = None
) -> list[dt.datetime]:
    """The next ``count`` occurrences strictly after ``after`` (aware, UTC).

    ``budget``: seconds of wall clock the walk may take; past it, ``ValidationError``
    (ask for fewer and page from the last one).
    """
    check_expression(expression)
    zone = check_timezone(tz)
    walk = _walk(expression, _start(expression, zone, after))
    deadline = None if budget is None else time.monotonic() + budget
    out: list[dt.datetime] = []
    while len(out) < count:
        occurrence = _instant(walk.get_next(dt.datetime), zone)
        # a wall time before ``after`` (its second happening) or one read onto an instant
        # already listed (the gap) is not a new occurrence
        if occurrence > after and (not out or occurrence > out[-1]):
            out.append(occurrence)
        if deadline is not None and len(out) < count and time.monotonic() > deadline:
            raise ValidationError(
                f"gave up after {budget:g} s with {len(out)} of {count} occurrences of"
                f" {expression!r}: ask for fewer and page with from_ (the last one)"
            )
    return out


def preview(
    expression: str, *, tz: str | None, after: dt.datetime, count: int = PREVIEW_DEFAULT_COUNT
) -> list[dt.datetime]:
    """The next ``count`` occurrences of ``expression`` in ``tz`` (None: UTC) strictly
    after ``after``, as ``schedule()`` would fire them; what ``preview_schedule`` gives.

    The expression is judged before the count, as pg-boss does; ``ValidationError`` for
    either, for a naive ``after``, and for a walk past :data:`PREVIEW_BUDGET_SECONDS`.
    """
    if not isinstance(after, dt.datetime) or after.tzinfo is None:
        raise ValidationError(f"from_ must be an aware datetime, got {after!r}")
    check_expression(expression)
    zone = tz or "UTC"
    check_timezone(zone)
    check_count("count", count, PREVIEW_MAX_COUNT)
    return next_occurrences(expression, zone, after, count, budget=PREVIEW_BUDGET_SECONDS)


def occurrence_key(name: str, key: str) -> str:
    """The singleton key an occurrence of schedule (name, key) is filed under.

    The name's underscores escaped, then ``__`` and the key (pg-boss's form, so a pg-boss
    instance filing the same occurrence collides with it).
    """
    return f"{name.replace('_', chr(92) + '_')}__{key}"


def throttle_slot(instant: dt.datetime) -> str:
    """The slot an instant falls in: the start of its minute, as UTC wall time text.

    ``YYYY-MM-DD HH:MM:SS``, the ``singleton_on`` a job of the occurrence gets.
    """
    utc = instant.astimezone(dt.timezone.utc)
    start = int(utc.timestamp()) // WINDOW_SECONDS * WINDOW_SECONDS
    return dt.datetime.fromtimestamp(start, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

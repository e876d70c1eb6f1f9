"""Cron expressions as pg-boss 12.38 reads them, evaluated with croniter in a time zone.

An expression has five fields (minute hour day month weekday) or six, seconds first
(as pg-boss's cron-parser takes them). A schedule is **due** when an occurrence falls
in the last :data:`WINDOW_SECONDS` before the pass's database time; the job it sends
is filed under the occurrence's throttle slot (the minute it falls in) and the
schedule's occurrence key, which is what keeps every instance, qcore or pg-boss, that
finds the same occurrence due from sending it twice.

Daylight saving time, in the schedule's own zone: a wall time that does not exist (the
hour skipped in spring) runs at the first instant after the gap; a wall time that
happens twice (the hour repeated in autumn) runs once, at its first happening, unless
the expression's hour field is ``*`` (every hour: the repeated hour is an hour like
any other, and runs again).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from functools import lru_cache

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

from qcore.errors import ValidationError

__all__ = [
    "WINDOW_SECONDS",
    "check_expression",
    "check_timezone",
    "due_occurrence",
    "latest_occurrence",
    "next_occurrences",
    "occurrence_key",
    "throttle_slot",
]

#: how long an occurrence stays due, and the width of the throttle slot it is filed in
#: (one value: a wider window would let two slots take one occurrence)
WINDOW_SECONDS = 60
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


def _backwards(expression: str, zone: zoneinfo.ZoneInfo, before: dt.datetime) -> croniter:
    """A croniter walking back from a second after ``before``.

    croniter drops the fraction of a second: ``before`` itself must be reachable; later
    ones are skipped.
    """
    start = (before + dt.timedelta(seconds=1)).astimezone(zone)
    return _walk(expression, start)


def _first_happening(expression: str, occurrence: dt.datetime, zone: zoneinfo.ZoneInfo) -> bool:
    """False for the second happening of a repeated wall time (see the module).

    Judged from the zone itself: croniter's ``fold`` is not reliable.
    """
    if _repeats_every_hour(expression):
        return True
    wall = occurrence.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return True  # happens once
    return occurrence.timestamp() == first.timestamp()


def latest_occurrence(
    expression: str, tz: str, until: dt.datetime, after: dt.datetime
) -> dt.datetime | None:
    """The latest occurrence in (``after``, ``until``], as an aware UTC datetime."""
    zone = check_timezone(tz)
    walk = _backwards(expression, zone, until)
    while True:
        occurrence: dt.datetime = walk.get_prev(dt.datetime)
        if occurrence > until:
            continue
        if occurrence <= after:
            return None
        if _first_happening(expression, occurrence, zone):
            return occurrence.astimezone(dt.timezone.utc)


def due_occurrence(expression: str, tz: str, now: dt.datetime) -> dt.datetime | None:
    """The occurrence due at ``now`` (the latest in the window before it), or None."""
    return latest_occurrence(expression, tz, now, now - dt.timedelta(seconds=WINDOW_SECONDS))


def next_occurrences(expression: str, tz: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    """The next ``count`` occurrences strictly after ``after`` (aware, UTC)."""
    check_expression(expression)
    zone = check_timezone(tz)
    start = after.astimezone(zone)
    walk = _walk(expression, start)
    out: list[dt.datetime] = []
    while len(out) < count:
        occurrence: dt.datetime = walk.get_next(dt.datetime)
        if _first_happening(expression, occurrence, zone):
            out.append(occurrence.astimezone(dt.timezone.utc))
    return out


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

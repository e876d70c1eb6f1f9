"""Cron evaluation (qcore.cron), no database: which occurrence is due, in a time zone,
across daylight saving time, and the key and slot an occurrence is filed under."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from qcore import Boss, cron
from qcore.errors import ValidationError

UTC = dt.timezone.utc


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_due_is_the_latest_occurrence_of_the_last_minute() -> None:
    assert cron.due_occurrence("0 10 * * *", "UTC", at(2026, 12, 3, 10, 0, 0)) == at(
        2026, 12, 3, 10
    )
    assert cron.due_occurrence("0 10 * * *", "UTC", at(2026, 12, 3, 10, 0, 59)) == at(
        2026, 12, 3, 10
    )
    assert cron.due_occurrence("0 10 * * *", "UTC", at(2026, 12, 3, 10, 1, 0)) is None
    assert cron.due_occurrence("0 10 * * *", "UTC", at(2026, 12, 3, 9, 59, 59)) is None
    every_10s = cron.due_occurrence("*/10 * * * * *", "UTC", at(2026, 12, 3, 10, 0, 15))
    assert every_10s == at(2026, 12, 3, 10, 0, 10)  # six fields: seconds first


def test_time_zone() -> None:
    # 09:00 in Paris is 08:00 UTC in winter
    assert cron.due_occurrence("0 9 * * *", "Europe/Paris", at(2026, 12, 3, 8, 0, 30)) == at(
        2026, 12, 3, 8
    )
    assert cron.due_occurrence("0 9 * * *", "Europe/Paris", at(2026, 12, 3, 9, 0, 30)) is None


def test_a_wall_time_in_the_spring_gap_runs_as_far_past_the_gap() -> None:
    # 2026-03-08 02:30 does not exist in New York: read with the offset before the gap
    # (EST), it runs at 03:30 EDT (07:30 UTC), once, as pg-boss's cron-parser runs it
    nights = cron.next_occurrences("30 2 * * *", "America/New_York", at(2026, 3, 7, 12), 3)
    assert nights == [at(2026, 3, 8, 7, 30), at(2026, 3, 9, 6, 30), at(2026, 3, 10, 6, 30)]
    due = cron.due_occurrence("30 2 * * *", "America/New_York", at(2026, 3, 8, 7, 30, 10))
    assert due == at(2026, 3, 8, 7, 30)
    assert cron.due_occurrence("30 2 * * *", "America/New_York", at(2026, 3, 8, 7, 0, 10)) is None
    # every minute of the skipped hour runs, an hour on: 02:00, 02:20, 02:40 EST
    skipped = cron.next_occurrences("*/20 2 * * *", "America/New_York", at(2026, 3, 8, 5), 4)
    assert skipped == [at(2026, 3, 8, 7), at(2026, 3, 8, 7, 20), at(2026, 3, 8, 7, 40),
                       at(2026, 3, 9, 6)]  # fmt: skip


def test_a_repeated_wall_time_runs_once_unless_every_hour() -> None:
    # 2026-11-01 01:30 happens twice in New York (05:30 and 06:30 UTC): a daily job once
    daily = cron.next_occurrences("30 1 * * *", "America/New_York", at(2026, 10, 31, 12), 2)
    assert daily == [at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)]
    assert cron.due_occurrence("30 1 * * *", "America/New_York", at(2026, 11, 1, 6, 30, 5)) is None
    # an hourly job runs in both hours: they are two hours of real time
    hourly = cron.next_occurrences("30 * * * *", "America/New_York", at(2026, 11, 1, 4), 4)
    assert hourly == [at(2026, 11, 1, h, 30) for h in (4, 5, 6, 7)]


def test_latest_occurrence_in_a_gap() -> None:
    found = cron.latest_occurrence("0 * * * *", "UTC", at(2026, 12, 3, 15, 1), at(2026, 12, 3, 10))
    assert found == at(2026, 12, 3, 15)
    assert cron.latest_occurrence("0 0 1 1 *", "UTC", at(2026, 12, 3), at(2026, 6, 1)) is None


def test_key_and_slot_are_pg_boss_s() -> None:
    assert cron.occurrence_key("report", "daily") == "report__daily"
    # underscores in the name are escaped, so ('report_', 'daily') != ('report', '_daily')
    assert cron.occurrence_key("report_", "daily") != cron.occurrence_key("report", "_daily")
    assert cron.occurrence_key("a_b", "") == "a\\_b__"
    assert cron.throttle_slot(at(2026, 12, 3, 10, 0, 59)) == "2026-12-03 10:00:00"
    paris = dt.datetime(2026, 12, 3, 11, 5, 1, tzinfo=cron.check_timezone("Europe/Paris"))
    assert cron.throttle_slot(paris) == "2026-12-03 10:05:00"


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        ("", "non-empty"),
        ("   ", "non-empty"),
        (None, "non-empty"),
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("60 * * * *", "not a valid cron expression"),
        ("* 24 * * *", "not a valid cron expression"),
        ("x * * * *", "not a valid cron expression"),
        ("RRULE:FREQ=DAILY", "recurrence rule"),
    ],
)
def test_bad_expressions(expression: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        cron.check_expression(expression)


@pytest.mark.parametrize("tz", ["", "Nowhere/Land", "../etc/passwd", 5, ["UTC"]])
def test_bad_time_zones(tz: object) -> None:
    with pytest.raises(ValidationError, match="time zone"):
        cron.check_timezone(tz)


def test_a_preview_is_checked_as_schedule_checks_it() -> None:
    """``preview_schedule``'s walk: strictly after ``from_``, UTC unless a zone is
    given; a bad expression, zone, count or naive moment is a ``ValidationError``, the
    expression judged first (as pg-boss does), and a walk past its budget too."""
    start = dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.timezone.utc)
    assert cron.preview("0 * * * *", tz=None, after=start, count=2) == [
        start + dt.timedelta(hours=1),
        start + dt.timedelta(hours=2),
    ]
    assert len(cron.preview("* * * * *", tz="UTC", after=start)) == cron.PREVIEW_DEFAULT_COUNT
    bad_counts: list[Any] = [0, cron.PREVIEW_MAX_COUNT + 1, True, 2.0]
    for bad_count in bad_counts:
        with pytest.raises(ValidationError, match="count must be"):
            cron.preview("* * * * *", tz=None, after=start, count=bad_count)
    with pytest.raises(ValidationError, match="RRULE"):
        cron.preview("FREQ=DAILY", tz=None, after=start, count=0)  # expression first
    with pytest.raises(ValidationError, match="tz"):
        cron.preview("* * * * *", tz="Mars/Olympus", after=start)
    with pytest.raises(ValidationError, match="aware"):
        cron.preview("* * * * *", tz=None, after=dt.datetime(2026, 1, 1))
    with pytest.raises(ValidationError, match="gave up"):
        cron.next_occurrences("0 0 29 2 *", "UTC", start, 1000, budget=0.0)


def test_preview_schedule_refuses_an_unknown_option_as_every_verb_does() -> None:
    boss = Boss("postgresql://postgres@127.0.0.1:5432/postgres")  # nothing is read
    with pytest.raises(ValidationError, match=r"preview_schedule.*zone"):
        boss.preview_schedule("* * * * *", zone="UTC")  # type: ignore[call-arg]
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert boss.preview_schedule("0 * * * *", from_=start, count=1) == [
        start + dt.timedelta(hours=1)
    ]

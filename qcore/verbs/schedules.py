"""Cron schedules on pg-boss's ``schedule`` table.

``schedule``, ``unschedule`` and ``get_schedules``, and the translation of a row's send
options between the two runtimes.

A row holds the send options the way pg-boss stores them (camelCase JSON, with the
schedule's ``tz``, ``key`` and ``missed`` beside them), so a schedule written by qcore
is fired by a pg-boss timekeeper and the reverse. Everything is checked before the row
is written: the cron expression, the time zone, the key, every send option and the
payload; a schedule for a queue that does not exist is a ``QueueNotFoundError``.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from typing_extensions import Unpack

from qcore import cron
from qcore import retry as retrying
from qcore.context import Context
from qcore.db import Json
from qcore.errors import FOREIGN_KEY_VIOLATION, DatabaseError, ValidationError
from qcore.options import (
    LIST_LIMIT_MAX,
    QUEUE_OPTIONS,
    SendOptions,
    check_count,
    job_record,
    known_only,
    queue_name,
    records_json,
)
from qcore.sql import schedules as sql
from qcore.verbs.queues import missing_queue

__all__ = [
    "MISSED_POLICIES",
    "SEND_OPTION_KEYS",
    "Schedule",
    "get_schedules",
    "schedule",
    "send_options_of",
    "unschedule",
]

#: what a schedule does about occurrences no pass saw (its service was down): ``skip``
#: them, or send ``once`` for the latest of them
MISSED_POLICIES: Final = ("skip", "once")
#: a send option's name -> its key in pg-boss's stored options (groups are ``group``)
SEND_OPTION_KEYS: Final[Mapping[str, str]] = {
    "priority": "priority",
    "start_after": "startAfter",
    "singleton_key": "singletonKey",
    "singleton_seconds": "singletonSeconds",
    "singleton_next_slot": "singletonNextSlot",
    # the options a job shares with its queue keep the queue's JSON keys
    **{k: v for k, v in QUEUE_OPTIONS.items() if k in SendOptions.__annotations__},
}
_KEY = re.compile(r"[\w.\-/]+", re.ASCII)
MAX_LIST_LIMIT = LIST_LIMIT_MAX


@dataclass(frozen=True, slots=True)
class Schedule:
    """A row of the ``schedule`` table."""

    name: str
    key: str
    cron: str
    timezone: str
    data: Any
    #: the stored options, as pg-boss stores them (camelCase send options, ``tz``, ``key``)
    options: dict[str, Any]
    kind: str
    created_on: dt.datetime
    updated_on: dt.datetime
    #: the job the schedule last produced (None before it first fired)
    last_job_id: uuid.UUID | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Schedule:
        return cls(
            name=row["name"],
            key=row["key"] or "",
            cron=row["cron"],
            timezone=row["timezone"],
            data=row["data"],
            options=dict(row["options"] or {}),
            kind=row["kind"],
            created_on=row["created_on"],
            updated_on=row["updated_on"],
            last_job_id=row["last_job_id"],
        )

    @property
    def missed(self) -> str:
        """The row's catch-up policy (``skip`` for anything else, as pg-boss reads it)."""
        value = self.options.get("missed")
        return value if value in MISSED_POLICIES else "skip"


def schedule_key(key: object) -> str:
    """A schedule's key: empty, or letters, digits and ``_ . - /`` (pg-boss's rule)."""
    if not isinstance(key, str):
        raise ValidationError(f"key must be a string, got {type(key).__name__}")
    if key and not _KEY.fullmatch(key):
        raise ValidationError(
            f"key {key!r} may contain only ASCII letters, digits, underscores, hyphens,"
            " periods and forward slashes"
        )
    return key


def _stored_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Send options (validated) as pg-boss stores them."""
    out: dict[str, Any] = {}
    for option, value in options.items():
        if value is None:
            continue
        if option == "start_after":
            value = value.total_seconds() if isinstance(value, dt.timedelta) else value
            value = value.isoformat() if isinstance(value, dt.datetime) else value
        if option in ("group_id", "group_tier"):
            out.setdefault("group", {})[option.removeprefix("group_")] = value
            continue
        out[SEND_OPTION_KEYS[option]] = value
    return out


def send_options_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row's options (either runtime's) as ``send`` options.

    The known ones are kept; the schedule's own ``tz``, ``key``, ``missed`` (and any
    other key) are left out.
    """
    names = {json_key: option for option, json_key in SEND_OPTION_KEYS.items()}
    out = {names[k]: v for k, v in stored.items() if k in names and v is not None}
    group = stored.get("group")
    if isinstance(group, Mapping) and group.get("id") is not None:
        out["group_id"] = group["id"]
        if group.get("tier") is not None:
            out["group_tier"] = group["tier"]
    return out


async def schedule(
    ctx: Context,
    name: str,
    cron_expression: str,
    data: Any = None,
    *,
    tz: str = "UTC",
    key: str = "",
    missed: str | None = None,
    **options: Unpack[SendOptions],
) -> None:
    """Create or replace the schedule (``name``, ``key``).

    It sends a job of ``data`` with ``options`` to queue ``name`` at each occurrence of
    ``cron_expression`` in time zone ``tz``.
    """
    queue_name(name)
    schedule_key(key)
    cron.check_expression(cron_expression)
    cron.check_timezone(tz)
    if missed is not None and missed not in MISSED_POLICIES:
        raise ValidationError(f"missed must be one of {', '.join(MISSED_POLICIES)}, got {missed!r}")
    known_only("schedule", options, SEND_OPTION_KEYS.keys() | {"group_id", "group_tier"})
    records_json([job_record(data, **options)], numbered=False)  # options and payload checked
    stored = {**_stored_options(options), "tz": tz, "key": key}
    if missed is not None:
        stored["missed"] = missed
    statement = sql.upsert_schedule(ctx.q)
    values = {
        "name": name,
        "key": key,
        "cron": cron_expression,
        "tz": tz,
        "data": None if data is None else Json(data),
        "options": Json(stored),
    }
    try:
        await retrying.run(ctx, statement, **values)
    except DatabaseError as exc:
        if exc.sqlstate == FOREIGN_KEY_VIOLATION:
            raise missing_queue(name) from None
        raise


async def unschedule(ctx: Context, name: str, key: str = "") -> bool:
    """Remove the schedule (``name``, ``key``); whether there was one."""
    queue_name(name)
    schedule_key(key)
    return bool(await retrying.run(ctx, sql.delete_schedule(ctx.q), name=name, key=key))


async def get_schedules(
    ctx: Context,
    name: str | None = None,
    key: str | None = None,
    *,
    limit: int | None = 1000,
    after: tuple[str, str] | Schedule | None = None,
) -> list[Schedule]:
    """Schedules in (name, key) order, a page at a time.

    Every one, a queue's (``name``), or one (``name`` and ``key``); at most ``limit``
    (1..100,000; None: all), after the (name, key) of ``after`` (the last of the
    previous page).
    """
    if name is not None:
        queue_name(name)
    if key is not None:
        if name is None:
            raise ValidationError("key names a schedule of a queue: give name too")
        schedule_key(key)
    if limit is not None:
        check_count("limit", limit, MAX_LIST_LIMIT)
    page: tuple[str, str] | None = None
    if isinstance(after, Schedule):
        page = (after.name, after.key)
    elif after is not None:
        if not (isinstance(after, tuple) and len(after) == 2):
            raise ValidationError("after must be a Schedule or a (name, key) tuple")
        page = (queue_name(after[0], "after's name"), schedule_key(after[1]))
    statement = sql.get_schedules(
        ctx.q,
        by_name=name is not None,
        by_key=key is not None,
        after=page is not None,
        limited=limit is not None,
    )
    values: dict[str, Any] = {"name": name, "key": key, "limit": limit}
    if page is not None:
        values.update(after_name=page[0], after_key=page[1])
    rows = await retrying.run(ctx, statement, **values)
    return [Schedule.from_row(r) for r in rows]

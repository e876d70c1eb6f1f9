"""A job's options (``send``, ``insert``, ``update``).

Each job is validated as one record of the JSON array a send or insert expands
server-side.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final, TypedDict

from qcore.errors import ValidationError
from qcore.options.ids import job_id
from qcore.options.queues import lifetime_fields, retry_fields
from qcore.options.scalars import INT4_MIN, check_flag, check_int, known_only
from qcore.options.text import check_key, queue_name

__all__ = [
    "EDIT_OPTIONS",
    "MAX_DELAY_SECONDS",
    "SEND_OPTIONS",
    "EditOptions",
    "JobRecord",
    "ScheduledSendOptions",
    "SendOptions",
    "job_record",
]

#: the longest delay ``start_after`` may give in seconds: 100 years (far past any real
#: schedule, far below what a timestamp holds)
MAX_DELAY_SECONDS: Final = 100 * 365 * 86_400
JobRecord = dict[str, Any]


#: the options of send(), by their Python names (each job of insert() takes these too)
class ScheduledSendOptions(TypedDict, total=False):
    """Options of ``send_after``: those of ``send`` but ``start_after``."""

    priority: int
    singleton_key: str
    singleton_seconds: int
    singleton_next_slot: bool
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    heartbeat_seconds: int
    dead_letter: str
    id: uuid.UUID | str
    group_id: str
    group_tier: str


class SendOptions(ScheduledSendOptions, total=False):
    """Options of ``send``; each one left out is inherited from the queue."""

    start_after: dt.datetime | dt.timedelta | float | str
    #: a regular expression: only servers whose instance key it matches claim the job
    preferred_instance_key_pattern: str


class EditOptions(TypedDict, total=False):
    """Options of ``update`` and ``upsert``: what an edit may change.

    Not what says which job it is, nor how it was throttled.
    """

    priority: int
    start_after: dt.datetime | dt.timedelta | float | str
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    heartbeat_seconds: int
    dead_letter: str
    group_id: str
    group_tier: str


#: every option of a job (``send``'s), in their declaration order
SEND_OPTIONS: Final = tuple(SendOptions.__annotations__)

#: every option of an edit
EDIT_OPTIONS: Final = tuple(EditOptions.__annotations__)


def _start_after(value: object) -> dict[str, Any]:
    """The start_after fields of a job record: an absolute instant or a delay in seconds."""
    if value is None:
        return {}
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(
                f"start_after {value!r} is a naive datetime; give an aware one"
                " (e.g. datetime.now(timezone.utc) + timedelta(minutes=5)) or seconds"
            )
        return {"start_after": value.isoformat()}
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (0 <= value <= MAX_DELAY_SECONDS):  # NaN fails the comparison too
            raise ValidationError(
                f"start_after must be from 0 to {MAX_DELAY_SECONDS} seconds (100 years),"
                f" got {value!r}"
            )
        return {"start_after_seconds": float(value)} if value > 0 else {}
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValidationError(
                f"start_after {value!r} is not an ISO 8601 date time; give an aware datetime,"
                " seconds (int, float or timedelta) or an ISO string like"
                " '2030-01-01T08:00:00Z'"
            ) from None
        if parsed.tzinfo is None:  # pg-boss pins a zone-less date time to UTC
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return {"start_after": parsed.isoformat()}
    raise ValidationError(
        f"start_after must be an aware datetime, seconds (int, float or timedelta) or an ISO"
        f" 8601 string; got {type(value).__name__}"
    )


def job_record(data: Any = None, **options: Any) -> JobRecord:
    """One job of a send or insert, as a record of the insert's JSON array.

    It is validated but for ``data`` (see :func:`records_json`).

    Keys are the insert statement's recordset columns; options left None are
    omitted so the statement inherits them from the queue (and an id left out is
    made by the server).
    """
    known_only("job", options, SEND_OPTIONS)
    if options.get("preferred_instance_key_pattern") is not None:
        # send and insert take it off before: elsewhere it would be lost
        raise ValidationError("preferred_instance_key_pattern is taken by send and insert only")
    given = {k: v for k, v in options.items() if v is not None}
    record: JobRecord = {"data": data}
    if not given:  # a payload alone (the bulk case): nothing more to check
        return record
    if "id" in given:
        record["id"] = str(job_id(given["id"]))
    if "priority" in given:
        record["priority"] = check_int("priority", given["priority"], minimum=INT4_MIN)
    record.update(_start_after(given.get("start_after")))
    if "singleton_key" in given:
        record["singleton_key"] = check_key("singleton_key", given["singleton_key"])
    if "singleton_seconds" in given:
        record["singleton_seconds"] = check_int(
            "singleton_seconds", given["singleton_seconds"], minimum=1
        )
    if given.get("singleton_next_slot") and "singleton_seconds" not in record:
        raise ValidationError("singleton_next_slot needs singleton_seconds (the slot length)")
    if "singleton_next_slot" in given:
        check_flag("singleton_next_slot", given["singleton_next_slot"])
    record.update(retry_fields(given))
    record.update(lifetime_fields(given))
    if "dead_letter" in given:
        record["dead_letter"] = queue_name(given["dead_letter"], "dead_letter")
    if "group_id" in given:
        record["group_id"] = check_key("group_id", given["group_id"])
    if "group_tier" in given:
        if "group_id" not in record:
            raise ValidationError("group_tier needs group_id (the tier of which group)")
        record["group_tier"] = check_key("group_tier", given["group_tier"])
    return record

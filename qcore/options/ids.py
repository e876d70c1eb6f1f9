"""Job ids as the verbs take them, and the keyset of a paged read.

An id is a UUID, its string, a :class:`qcore.job.Job`, or a list of them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping

from qcore.errors import ValidationError
from qcore.job import Job

__all__ = ["ids_and_fences", "job_id", "page_keyset"]


def job_id(value: object) -> uuid.UUID:
    """A job id from a UUID or its string form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ValidationError(f"a job id must be a UUID or a UUID string, got {value!r}")


def page_keyset(before: object, what: str) -> tuple[dt.datetime, uuid.UUID] | tuple[None, None]:
    """A page's ``before``, checked.

    The ``(created_on, id)`` of the previous page's last ``what`` (an aware datetime and
    a UUID), or (None, None) for the first page.
    """
    if before is None:
        return None, None
    if (
        not isinstance(before, tuple)
        or len(before) != 2
        or not isinstance(before[0], dt.datetime)
        or before[0].tzinfo is None
    ):
        raise ValidationError(
            f"before must be (created_on, id) of a {what}: an aware datetime and a UUID,"
            f" got {before!r}"
        )
    return before[0], job_id(before[1])


def ids_and_fences(
    ids: object,
) -> tuple[list[uuid.UUID], list[uuid.UUID], list[tuple[uuid.UUID, int]]]:
    """Job ids given as a UUID, a string, a :class:`Job`, or an iterable of them.

    Returns every distinct id, the ids to act on whatever their attempt, and
    ``(id, retry_count)`` for each :class:`Job` given (its attempt fence).
    """
    items: Iterable[object]
    if isinstance(ids, (uuid.UUID, str, Job)):
        items = [ids]
    elif isinstance(ids, Iterable) and not isinstance(ids, (bytes, Mapping)):
        items = list(ids)
    else:
        raise ValidationError(
            f"ids must be a UUID, a UUID string, a Job or a list of them, got {type(ids).__name__}"
        )
    every: dict[uuid.UUID, None] = {}
    plain: list[uuid.UUID] = []
    fences: list[tuple[uuid.UUID, int]] = []
    for item in items:
        if isinstance(item, Job):
            fences.append((item.id, item.retry_count))
            every[item.id] = None
        else:
            value = job_id(item)
            plain.append(value)
            every[value] = None
    if not every:
        raise ValidationError("no job ids given")
    return list(every), plain, fences

"""Reading jobs: one by id, or found by key, data and state."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from qcore import retry as retrying
from qcore.context import Context
from qcore.db import Json
from qcore.errors import ValidationError
from qcore.job import Job, JobState
from qcore.options import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    check_count,
    check_json,
    check_text,
    job_id,
    page_keyset,
    queue_name,
)
from qcore.sql import jobs as sql
from qcore.verbs.queues import get_queue, missing_queue

#: the most jobs one ``find_jobs`` call returns when given a ``limit``
MAX_FOUND = LIST_LIMIT_MAX


def _states(states: Sequence[JobState | str] | None) -> list[str] | None:
    """``states`` as their names, each checked (``ValidationError`` naming the allowed)."""
    if states is None:
        return None
    if isinstance(states, (str, JobState)) or not isinstance(states, Sequence) or not states:
        raise ValidationError(f"states must be a non-empty list of job states, got {states!r}")
    allowed = [s.value for s in JobState]
    names = []
    for state in states:
        value = state.value if isinstance(state, JobState) else state
        if value not in allowed:
            raise ValidationError(f"unknown job state {state!r}; states: {', '.join(allowed)}")
        names.append(value)
    return names


def _check_key(key: object) -> None:
    """A singleton key to look for: a string the database can take (None: any)."""
    if key is not None:
        check_text("key", key)


async def get_job_by_id(ctx: Context, name: str, id: uuid.UUID | str) -> Job | None:
    """A job with every field; None if the queue holds no job with that id."""
    queue_name(name)
    statement = sql.get_job(ctx.q, attributed=ctx.affinity.installed)
    rows = await retrying.run(ctx, statement, queue=name, id=job_id(id))
    if not rows:
        raise missing_queue(name)
    return Job.from_row(rows[0]) if rows[0]["id"] is not None else None


async def find_jobs(
    ctx: Context,
    name: str,
    *,
    id: uuid.UUID | str | None = None,
    key: str | None = None,
    data: Any = None,
    queued: bool = False,
    states: Sequence[JobState | str] | None = None,
    limit: int | None = None,
    after: uuid.UUID | str | None = None,
) -> list[Job]:
    """A queue's jobs, oldest first, filtered.

    The filters, any of: ``id``, singleton ``key``, ``data`` (jobs whose data contains
    this JSON value), ``queued`` (only jobs waiting to run) and ``states`` (jobs in one
    of them); at most ``limit`` (1 to 100,000; 1,000 by default, as pg-boss returns).
    ``after`` (the id of the previous page's
    last job) reads the next page; ``ValidationError`` when that job has been deleted
    since (the page would otherwise end early without saying so).
    """
    queue_name(name)
    wanted = _states(states)
    limit = LIST_LIMIT_DEFAULT if limit is None else check_count("limit", limit, MAX_FOUND)
    try:
        anchor = job_id(after) if after is not None else None
    except ValidationError:
        raise ValidationError(f"after must be a job id (a UUID), got {after!r:.80}") from None
    _check_key(key)
    if not isinstance(queued, bool):
        raise ValidationError(f"queued must be True or False, got {queued!r}")
    statement = sql.find_jobs(
        ctx.q,
        by_id=id is not None,
        by_key=key is not None,
        by_data=data is not None,
        queued=queued,
        by_states=wanted is not None,
        limited=True,
        attributed=ctx.affinity.installed,
        after=anchor is not None,
    )
    params = statement.bind(
        queue=name,
        id=job_id(id) if id is not None else None,
        key=key,
        data=Json(check_json("data", data)),
        states=wanted,
        limit=limit,
        after=anchor,
    )
    rows = await retrying.execute(ctx, statement.sql, params)
    if not rows:
        raise missing_queue(name)
    if anchor is not None and not rows[0]["anchored"]:
        raise ValidationError(
            f"after names job {anchor} of queue {name!r}, which no longer exists (deleted"
            " since the previous page): start again from the first page"
        )
    return Job.from_rows(rows)


#: the most jobs one ``browse_jobs`` page holds
MAX_PAGE = 1_000


async def browse_jobs(
    ctx: Context,
    name: str,
    *,
    states: Sequence[JobState | str] | None = None,
    key: str | None = None,
    data: Any = None,
    before: tuple[dt.datetime, uuid.UUID | str] | None = None,
    limit: int = 50,
) -> list[Job]:
    """A page of a queue's jobs, newest first.

    ``states``: only those; ``key``: with that singleton key; ``data``: whose data
    contains this JSON value. The page comes after ``before``, the ``(created_on, id)``
    of the previous page's last job; at most ``limit`` (1 to 1,000). Each page costs the
    same however deep it is (a rare ``data`` match reads on until the page is full).
    """
    queue_name(name)
    wanted = _states(states)
    check_count("limit", limit, MAX_PAGE)
    _check_key(key)
    created, anchor = page_keyset(before, "job")
    statement = sql.browse_jobs(
        ctx.q,
        by_states=wanted is not None,
        paged=before is not None,
        by_key=key is not None,
        by_data=data is not None,
        attributed=ctx.affinity.installed,
    )
    params = statement.bind(
        queue=name,
        states=wanted,
        key=key,
        data=Json(check_json("data", data)),
        before_created=created,
        before_id=anchor,
        limit=limit,
    )
    rows = await retrying.execute(ctx, statement.sql, params)
    if not rows and await get_queue(ctx, name) is None:
        raise missing_queue(name)
    return [Job.from_row(r) for r in rows]


async def ready_queues(
    ctx: Context, names: Sequence[str], anytime: Sequence[str] = ()
) -> dict[str, bool]:
    """Whether each queue of ``names`` may have a job to claim (the shared idle poll).

    A queue may when it has jobs queued, unblocked and due (due or not for those in
    ``anytime``); a missing queue counts as ready, so its worker's claim reports it. Notes
    each existing queue's ``notify`` for the workers (``Context.notify_seen``), as claims
    do. The poll is this one statement.
    """
    rows = await retrying.run(
        ctx, sql.ready_queues(ctx.q), queues=list(names), anytime=list(anytime)
    )
    for row in rows:
        if row["notify"] is not None:
            ctx.notify_seen[row["name"]] = bool(row["notify"])
    return {row["name"]: bool(row["ready"]) for row in rows}

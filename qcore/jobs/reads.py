"""Reading jobs: one by id, or found by key, data and state."""

from __future__ import annotations

import uuid
from typing import Any

from qcore import retry as retrying
from qcore.context import Context
from qcore.db import Json
from qcore.errors import ValidationError
from qcore.job import Job
from qcore.options import (
    check_json,
    job_id,
    queue_name,
)
from qcore.queues import missing_queue
from qcore.sql import jobs as sql


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
) -> list[Job]:
    """A queue's jobs, oldest first, filtered by any of: ``id``, singleton ``key``,
    ``data`` (jobs whose data contains this JSON value) and ``queued`` (only jobs
    waiting to run)."""
    queue_name(name)
    if key is not None and not isinstance(key, str):
        raise ValidationError(f"key must be a string, got {key!r}")
    if not isinstance(queued, bool):
        raise ValidationError(f"queued must be True or False, got {queued!r}")
    statement = sql.find_jobs(
        ctx.q,
        by_id=id is not None,
        by_key=key is not None,
        by_data=data is not None,
        queued=queued,
        attributed=ctx.affinity.installed,
    )
    params = statement.bind(
        queue=name,
        id=job_id(id) if id is not None else None,
        key=key,
        data=Json(check_json("data", data)),
    )
    rows = await retrying.execute(ctx, statement.sql, params)
    if not rows:
        raise missing_queue(name)
    return [Job.from_row(r) for r in rows if r["id"] is not None]

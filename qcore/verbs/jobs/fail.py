"""Failing jobs (retry, failed, dead letter) and expiry.

Expiry is the monitor's failing of jobs past their time.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qcore import retry as retrying
from qcore.backend import MutationStrategy
from qcore.context import Context
from qcore.db import Database, Json
from qcore.job import CommandResult
from qcore.options import (
    normalize_output,
    queue_name,
)
from qcore.sql import jobs as sql
from qcore.verbs.jobs.routes import (
    Ids,
    as_jsonb,
    command_result,
    fence_values,
    run_command,
    target_ids,
)
from qcore.verbs.queues import missing_queue


async def fail(
    ctx: Context, name: str, ids: Ids, data: Any = None, *, terminal: bool = False
) -> CommandResult:
    """Fail jobs that are not finished, storing ``data`` as their output.

    A job with retries left goes to retry, to run again after ``retry_delay``
    seconds, or with ``retry_backoff`` after a random delay that doubles with
    every attempt (capped by ``retry_delay_max``). A job out of retries is
    failed, and a copy goes to its dead letter queue if it has one, with
    ``source_*`` columns saying where it came from. ``terminal`` fails them that way
    at once, retries left or not (a per-job results handler's ``dead_letter``).
    """
    queue_name(name)
    every, plain, fences = target_ids(ids)
    output = normalize_output(data)
    if ctx.backend.mutation is MutationStrategy.CTE:
        rows = await run_command(
            ctx,
            name,
            # re-inserts via job (the parent table), whatever the queue's own table
            lambda _table: sql.fail_jobs(ctx.q, fenced=bool(fences), terminal=terminal),
            every,
            output=as_jsonb(output),
            **fence_values(plain, fences),
        )
        return command_result(every, [r["id"] for r in rows])

    async def split(tx: Database) -> list[uuid.UUID]:
        return await _fail_split(ctx.with_db(tx), name, every, plain, fences, output, terminal)

    return command_result(every, await retrying.transaction(ctx, split))


def _backoff_seconds(row: Mapping[str, Any]) -> float:
    """The retry delay of a failed attempt, computed as the CTE statement computes it."""
    if not row["retry_backoff"]:
        return float(row["retry_delay"])
    base = max(int(row["retry_delay"]), 1)
    half = 2 ** min(16, int(row["retry_count"]) + 1) / 2
    delay: float = base * (half + half * random.random())
    cap = row["retry_delay_max"]
    return delay if cap is None else min(float(cap), delay)


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A job row as a record of a JSON array parameter (UUIDs and times as text)."""
    out: dict[str, Any] = {}
    for column in sql.REINSERT_COLUMNS:
        value = row[column]
        if isinstance(value, (uuid.UUID, dt.datetime)):
            value = str(value) if isinstance(value, uuid.UUID) else value.isoformat()
        out[column] = value
    return out


async def _fail_split(
    ctx: Context,
    name: str,
    every: list[uuid.UUID],
    plain: list[uuid.UUID],
    fences: list[tuple[uuid.UUID, int]],
    output: Any,
    terminal: bool = False,
) -> list[uuid.UUID]:
    """Fail as separate statements in the caller's (``ctx.db``'s) transaction.

    Delete the jobs, then :func:`_reinsert_split` them. Returns the ids inserted again,
    in the order they were asked for.
    """
    remove = sql.fail_remove(ctx.q, fenced=bool(fences))
    rows = await ctx.db.execute(
        remove.sql, remove.bind(queue=name, ids=every, **fence_values(plain, fences))
    )
    if not rows:
        raise missing_queue(name)
    removed = [r for r in rows if r["id"] is not None]
    settled = await _reinsert_split(ctx, removed, output, terminal)
    order = {job: i for i, job in enumerate(every)}
    return sorted(settled, key=order.__getitem__)


async def _reinsert_split(
    ctx: Context, removed: list[dict[str, Any]], output: Any, terminal: bool = False
) -> list[uuid.UUID]:
    """The split fail after the delete: insert the deleted jobs again as what they become.

    This is MutationStrategy.SPLIT, in ``ctx.db``'s transaction: the jobs with retries
    left go in again as retry (the backoff computed here, as the CTE statement computes
    it), then the rest, and any a policy index refused as retry, as failed together with
    their dead letter copies. Returns the ids inserted again. Shared by :func:`fail` and
    :func:`expire`.
    """
    to_retry: list[dict[str, Any]] = []
    to_fail: list[dict[str, Any]] = []
    for row in removed:
        record = _json_row(row)
        limit, count = row["retry_limit"], row["retry_count"]
        # as the CTE statement: start_after is kept only when the count reached the limit
        record["delay"] = None if count == limit or terminal else _backoff_seconds(row)
        (to_retry if count < limit and not terminal else to_fail).append(record)
    settled: list[uuid.UUID] = []
    if to_retry:
        again = sql.fail_reinsert_retry(ctx.q)
        got = await ctx.db.execute(
            again.sql, again.bind(rows=Json(to_retry), output=as_jsonb(output))
        )
        retried = {r["id"] for r in got}
        settled += [uuid.UUID(r["id"]) for r in to_retry if uuid.UUID(r["id"]) in retried]
        for record in to_retry:  # a policy index refused it as retry: it fails instead
            if uuid.UUID(record["id"]) not in retried:
                to_fail.append({**record, "delay": None})
    if to_fail:
        failed = sql.fail_reinsert_failed(ctx.q)
        got = await ctx.db.execute(
            failed.sql, failed.bind(rows=Json(to_fail), output=as_jsonb(output))
        )
        wanted = {uuid.UUID(r["id"]) for r in to_fail}
        settled += [r["id"] for r in got if r["id"] in wanted]
    return settled


#: the output of a job failed because it ran past ``expire_seconds`` (pg-boss's)
TIMED_OUT: dict[str, Any] = {"value": {"message": "job timed out"}}


#: the output of a job failed because its heartbeat is older than ``heartbeat_seconds``
HEARTBEAT_LOST: dict[str, Any] = {"value": {"message": "job heartbeat timeout"}}


#: the most jobs one expiry batch fails (pg-boss's batch size)
EXPIRY_BATCH_SIZE = 1000


@dataclass(frozen=True)
class ExpiryBatch:
    """What one expiry batch did.

    ``picked`` jobs matched (a full batch means more may be waiting), ``failed`` of them
    were failed (the rest were settled meanwhile).
    """

    picked: int
    failed: int


async def expire(
    ctx: Context,
    table: str,
    names: Sequence[str],
    *,
    heartbeat: bool = False,
    limit: int = EXPIRY_BATCH_SIZE,
) -> ExpiryBatch:
    """Fail at most ``limit`` active jobs that ran past their expiry or lost their heartbeat.

    The jobs are those of the queues ``names`` (all kept in the physical job table
    ``table``); heartbeat loss counts with ``heartbeat``. They are retried, failed or
    dead-lettered exactly as :func:`fail` does, with the output :data:`TIMED_OUT` or
    :data:`HEARTBEAT_LOST`.

    Runs on ``ctx.db`` as it is: inside a transaction (the caller's, holding the
    expiry lock) or, on a CTE backend, as one statement. The split strategy needs a
    transaction: it deletes, then inserts again.
    """
    output = HEARTBEAT_LOST if heartbeat else TIMED_OUT
    if ctx.backend.mutation is MutationStrategy.CTE:
        statement = sql.expire_jobs(ctx.q, table, heartbeat=heartbeat)
        params = statement.bind(names=list(names), limit=limit, output=Json(output))
        row = (await ctx.db.execute(statement.sql, params))[0]
        return ExpiryBatch(picked=int(row["picked"]), failed=int(row["failed"]))
    remove = sql.expire_remove(ctx.q, table, heartbeat=heartbeat)
    rows = await ctx.db.execute(remove.sql, remove.bind(names=list(names), limit=limit))
    settled = await _reinsert_split(ctx, rows, output) if rows else []
    return ExpiryBatch(picked=len(rows), failed=len(settled))

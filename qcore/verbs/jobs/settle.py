"""Commands on jobs by id: complete, cancel, resume, retry, delete, restore, touch."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from qcore.context import Context
from qcore.db import Json
from qcore.job import CommandResult, Job
from qcore.options import (
    normalize_output,
    queue_name,
)
from qcore.sql import jobs as sql
from qcore.sql._statement import Statement
from qcore.sql.locks import notify_channel
from qcore.verbs.jobs.routes import (
    Ids,
    Targets,
    as_jsonb,
    command_result,
    fence_values,
    run_command,
    run_settling,
    target_ids,
)
from qcore.verbs.queues import reduce_cached_counts


async def complete(
    ctx: Context, name: str, ids: Ids, data: Any = None, *, include_queued: bool = False
) -> CommandResult:
    """Mark active jobs completed, storing ``data`` as their output.

    A dict is stored as it is, anything else as ``{"value": data}``. ``include_queued``
    completes queued jobs too.
    """
    queue_name(name)
    targets = target_ids(ids)
    output = normalize_output(data)
    done = await _complete(ctx, name, targets, output, include_queued)
    return command_result(targets[0], done)


async def complete_each(
    ctx: Context, name: str, outputs: Sequence[tuple[Job, Any]]
) -> CommandResult:
    """Complete active jobs each with its own output, in one statement.

    They come as ``(job, output)`` pairs, outputs as ``complete`` takes them, fenced on
    their attempts.
    """
    queue_name(name)
    targets = target_ids([job for job, _ in outputs])
    values = [{"id": str(job.id), "output": normalize_output(out)} for job, out in outputs]
    rows = await run_command(
        ctx,
        name,
        lambda table: sql.complete_each(ctx.q, table=table),
        targets[0],
        outputs=Json(values),
        **fence_values(targets[1], targets[2]),
    )
    return command_result(targets[0], [r["id"] for r in rows])


async def complete_together(
    ctx: Context, name: str, calls: list[Targets], *, include_queued: bool = False
) -> list[CommandResult]:
    """The completes (no output) of several calls on queue ``name``, in as few statements as can be.

    Each call is given as its checked ids (:func:`qcore.options.ids_and_fences`); one
    statement takes every call whose ids overlap no other's in it (a call sharing a job
    with one before it waits for the next statement, so each job is completed, and
    counted, by one call only).
    """
    results: list[CommandResult | None] = [None] * len(calls)
    for members in _disjoint_rounds(calls):
        merged: Targets = (
            [x for i in members for x in calls[i][0]],
            [x for i in members for x in calls[i][1]],
            [x for i in members for x in calls[i][2]],
        )
        completed = await _complete(ctx, name, merged, None, include_queued)
        # as many as given (ids distinct in a round): every call completed all its ids
        done = None if len(completed) == len(merged[0]) else set(completed)
        for i in members:
            every = calls[i][0]
            results[i] = command_result(
                every, every if done is None else [x for x in every if x in done]
            )
    return [r for r in results if r is not None]


def _disjoint_rounds(calls: list[Targets]) -> list[list[int]]:
    """The calls (by index) grouped into rounds that share no job id.

    Each call goes in the first round it fits.
    """
    if len(calls) == 1:
        return [[0]]
    rounds: list[tuple[set[uuid.UUID], list[int]]] = []
    for i, (every, _, _) in enumerate(calls):
        ids = set(every)
        for taken, members in rounds:
            if taken.isdisjoint(ids):
                taken.update(ids)
                members.append(i)
                break
        else:
            rounds.append((ids, [i]))
    return [members for _, members in rounds]


async def _complete(
    ctx: Context, name: str, targets: Targets, output: Any, include_queued: bool
) -> list[uuid.UUID]:
    every, plain, fences = targets
    return await run_settling(
        ctx,
        name,
        lambda table: sql.complete_jobs(
            ctx.q, fenced=bool(fences), include_queued=include_queued, table=table
        ),
        every,
        output=as_jsonb(output),
        **fence_values(plain, fences),
    )


async def _fenced_command(
    ctx: Context, name: str, ids: Ids, build: Callable[..., Statement]
) -> tuple[list[uuid.UUID], list[dict[str, Any]]]:
    """Run the command ``build`` makes on jobs ``ids``; the ids asked for, and the rows.

    The command is ``build(q, fenced=..., table=...)``, fenced on the attempts of the
    ``Job`` objects among the ids.
    """
    queue_name(name)
    every, plain, fences = target_ids(ids)
    rows = await run_command(
        ctx,
        name,
        lambda table: build(ctx.q, fenced=bool(fences), table=table),
        every,
        **fence_values(plain, fences),
    )
    return every, rows


async def cancel(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Cancel jobs that are not finished yet (queued or active)."""
    every, rows = await _fenced_command(ctx, name, ids, sql.cancel_jobs)
    return command_result(every, [r["id"] for r in rows])


async def restore(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Hand active jobs back to the queue unstarted.

    They go back to created, so the next claim spends no attempt: what a worker does
    with jobs it claimed but will not run.
    """
    every, rows = await _fenced_command(ctx, name, ids, sql.restore_jobs)
    return command_result(every, [r["id"] for r in rows])


async def resume(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Bring cancelled jobs back to created (they run no earlier than now)."""
    queue_name(name)
    every, _, _ = target_ids(ids)
    rows = await run_command(ctx, name, lambda table: sql.resume_jobs(ctx.q, table=table), every)
    retained = sum(1 for r in rows if r["retained"])
    await reduce_cached_counts(ctx, name, retained=retained, total=0)
    return command_result(every, [r["id"] for r in rows])


async def retry(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Give failed jobs another attempt.

    They go back to retry, with one more allowed. On a ``notify`` queue a job that is
    ready now wakes listening workers.
    """
    queue_name(name)
    every, _, _ = target_ids(ids)
    notify = ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None
    rows = await run_command(
        ctx,
        name,
        lambda table: sql.retry_jobs(ctx.q, notify=notify, table=table),
        every,
        channel=channel,
    )
    return command_result(every, [r["id"] for r in rows])


async def delete_job(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Delete jobs, whatever their state."""
    every, rows = await _fenced_command(ctx, name, ids, sql.delete_jobs)
    retained = sum(1 for r in rows if r["retained"])
    await reduce_cached_counts(ctx, name, retained=retained, total=retained)
    return command_result(every, [r["id"] for r in rows])


async def touch(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Refresh the heartbeat of active jobs.

    ``ids`` of the result are those refreshed (a job missing from it is no longer
    active, or no longer in that attempt).
    """
    every, rows = await _fenced_command(ctx, name, ids, sql.touch_jobs)
    return command_result(every, [r["id"] for r in rows])

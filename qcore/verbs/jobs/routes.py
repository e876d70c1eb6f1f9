"""What the job verbs share: ids, routes, and running a command on a route.

The ids a command takes (with the attempts they fence), the route of a queue to its
physical table, and running a command there.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from qcore import retry as retrying
from qcore.context import Context, QueueRoute
from qcore.db import Json
from qcore.errors import DatabaseError
from qcore.job import CommandResult, Job
from qcore.options import (
    ids_and_fences,
)
from qcore.sql._statement import Statement
from qcore.verbs.queues import missing_queue, queue_route

T = TypeVar("T")


#: what the commands accept as job ids
Ids = uuid.UUID | str | Job | Iterable[uuid.UUID | str | Job]


UNDEFINED_TABLE = "42P01"


MAX_BATCH = 1_000_000


async def routed(
    ctx: Context,
    name: str,
    attempt: Callable[[QueueRoute], Awaitable[T | None]],
    *,
    unchanged: T | None = None,
) -> T:
    """Run ``attempt`` with the queue's route, reading the route again if it went stale.

    The route (policy and job table) is read once per context. None back means no queue
    row matched that route, and a missing table that the table is gone: the queue was
    deleted, or recreated elsewhere. The route is read again (QueueNotFoundError if the
    queue is gone) and the attempt made once more; where that finds the same route,
    ``unchanged`` is the answer if given.
    """
    route = await queue_route(ctx, name)
    for _ in range(2):
        try:
            result = await attempt(route)
        except DatabaseError as exc:
            if exc.sqlstate != UNDEFINED_TABLE or ctx.db.in_transaction:
                raise
            result = None
        if result is not None:
            return result
        ctx.routes.pop(name, None)
        fresh = await queue_route(ctx, name)
        if fresh == route and unchanged is not None:
            return unchanged
        route = fresh
    raise missing_queue(name)


#: a command's checked ids: every distinct id, the unfenced ones, the (id, retry_count) fences
Targets = tuple[list[uuid.UUID], list[uuid.UUID], list[tuple[uuid.UUID, int]]]


def target_ids(ids: object) -> Targets:
    """Every distinct id, the unfenced ids, and the (id, retry_count) fences of Jobs."""
    return ids_and_fences(ids)


async def run_command(
    ctx: Context,
    name: str,
    build: Callable[[str], Statement],
    every: list[uuid.UUID],
    **values: Any,
) -> list[dict[str, Any]]:
    """Run a command built for the queue's job table (``build(table)``); its rows."""
    return await _run_routed(
        ctx, name, build, every, lambda rows: [r for r in rows if r["id"] is not None], values
    )


async def run_settling(
    ctx: Context,
    name: str,
    build: Callable[[str], Statement],
    every: list[uuid.UUID],
    **values: Any,
) -> list[uuid.UUID]:
    """Run a settling command built for the queue's job table; the ids it changed.

    The command's row is as ``settling_command``'s.
    """
    return await _run_routed(
        ctx, name, build, every, lambda rows: settled_ids(every, rows[0]), values
    )


async def _run_routed(
    ctx: Context,
    name: str,
    build: Callable[[str], Statement],
    every: list[uuid.UUID],
    read: Callable[[list[dict[str, Any]]], T],
    values: dict[str, Any],
) -> T:
    """A command on the queue's job table, read from its rows by ``read``.

    No row: the route is read again, see :func:`routed`.
    """

    async def attempt(route: QueueRoute) -> T | None:
        statement = build(route.table)
        params = statement.bind(queue=name, ids=every, table=route.table, **values)
        rows = await retrying.execute(ctx, statement.sql, params)
        return read(rows) if rows else None

    return await routed(ctx, name, attempt)


def settled_ids(every: list[uuid.UUID], row: dict[str, Any]) -> list[uuid.UUID]:
    """The ids a settling command changed, from its row and the ids it was given."""
    settled: list[uuid.UUID] | None = row["settled"]
    return list(every) if settled is None else settled


def command_result(every: list[uuid.UUID], ids: list[uuid.UUID]) -> CommandResult:
    return CommandResult(requested=len(every), affected=len(ids), ids=ids)


def fence_values(plain: list[uuid.UUID], fences: list[tuple[uuid.UUID, int]]) -> dict[str, Any]:
    return {
        "plain_ids": plain,
        "fence_ids": [id_ for id_, _ in fences],
        "fence_counts": [count for _, count in fences],
    }


def as_jsonb(value: Any) -> Any:
    """A parameter for a ``$n::jsonb``: SQL NULL for None, else the JSON value."""
    return None if value is None else Json(value)

"""The queue verbs: create, update, delete and read queues; bulk-delete their jobs.

Each verb validates its arguments before anything reaches the database, then
runs the statements of :mod:`qcore.sql.queues` through the context's adapter.
Creating and deleting a queue run under pg-boss's ``create-queue`` and
``delete-queue`` locks (advisory, or a lease where the engine has none), so
qcore and pg-boss instances on one schema exclude each other.
"""

from __future__ import annotations

import asyncio
import logging
import random

from typing_extensions import Unpack

from qcore import locks, retry
from qcore.context import Context, QueueRoute
from qcore.db import Database, Json
from qcore.errors import DatabaseError, QueueNotFoundError, ValidationError
from qcore.identifiers import quote
from qcore.job import Policy, Queue
from qcore.options import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    QueueOptions,
    check_count,
    check_flag,
    queue_name,
    queue_options,
    queue_options_json,
)
from qcore.sql import queues as sql

__all__ = [
    "DELETE_BATCH_SIZE",
    "check_page",
    "create_queue",
    "delete_all_jobs",
    "delete_queue",
    "delete_queued_jobs",
    "delete_stored_jobs",
    "get_blocked_keys",
    "get_queue",
    "get_queues",
    "missing_queue",
    "reduce_cached_counts",
    "update_queue",
]

log = logging.getLogger("qcore.queues")

CREATE_QUEUE_LOCK = "create-queue"
DELETE_QUEUE_LOCK = "delete-queue"
#: jobs deleted per statement by the bulk deletes (each batch is its own transaction)
DELETE_BATCH_SIZE = 10_000
LOCK_NOT_AVAILABLE = "55P03"
_DROP_ATTEMPTS = 12


def missing_queue(name: str) -> QueueNotFoundError:
    """The error for an operation on a queue that does not exist."""
    return QueueNotFoundError(
        f"queue {name!r} does not exist; create it first with create_queue({name!r})"
    )


def keyless_strict_fifo(name: str) -> ValidationError:
    """The error for a job without a singleton key sent to a key_strict_fifo queue."""
    return ValidationError(
        f"queue {name!r} has the key_strict_fifo policy: every job needs a singleton_key"
    )


async def _require_queues(db: Database, ctx: Context, names: list[str], what: str) -> None:
    statement = sql.queue_names(ctx.q)
    rows = await db.execute(statement.sql, statement.bind(names=names))
    missing = sorted(set(names) - {r["name"] for r in rows})
    if missing:
        raise QueueNotFoundError(
            f"{what} queue {missing[0]!r} does not exist; create it before naming it"
        )


async def create_queue(ctx: Context, name: str, **options: Unpack[QueueOptions]) -> None:
    """Create a queue; nothing happens if it exists (its settings are not changed).

    Options left None take pg-boss's defaults (policy ``standard``, 2 retries
    without delay, jobs expire after 15 minutes, kept 14 days queued and 7
    days after finishing). ``partition=True`` gives the queue its own table,
    which only a backend with a partitioned schema shape has. ``dead_letter``
    must name an existing queue.
    """
    queue_name(name)
    given = queue_options(name, options)
    if given.get("partition") and not ctx.backend.schema.partitioned:
        raise ValidationError(
            f"partition=True gives a queue its own table partition, but the"
            f" {ctx.backend.name} backend keeps every queue in one shared job table (its"
            " schema shape is not partitioned); leave partition unset"
        )
    payload = queue_options_json({"policy": Policy.STANDARD.value, **given})
    statement = sql.call_create_queue(ctx.q)

    async def work(db: Database) -> None:
        if "dead_letter" in given:
            await _require_queues(db, ctx, [given["dead_letter"]], "dead letter")
        await db.execute(statement.sql, statement.bind(name=name, options=Json(payload)))

    await locks.run_locked(ctx, CREATE_QUEUE_LOCK, work)


async def update_queue(ctx: Context, name: str, **options: Unpack[QueueOptions]) -> None:
    """Change the given settings of a queue; jobs already in it keep theirs.

    ``policy`` and ``partition`` cannot change (giving the current value is
    allowed). None clears ``retry_delay_max``, ``dead_letter`` and
    ``heartbeat_seconds``.
    """
    queue_name(name)
    given = queue_options(name, options, update=True)
    fixed = {k: given.pop(k) for k in ("policy", "partition") if k in given}
    updates = {sql.UPDATABLE_COLUMNS[k]: v for k, v in given.items()}
    statement = sql.update_queue(ctx.q, tuple(updates))

    async def work(db: Database) -> None:
        if fixed:
            current = await _read_queue(ctx.with_db(db), name)
            if current is None:
                raise missing_queue(name)
            for option, wanted in fixed.items():
                have = getattr(current, option)
                if wanted != have:
                    raise ValidationError(
                        f"the {option} of queue {name!r} cannot change (it is {have!r}, asked"
                        f" for {wanted!r}); create a new queue instead"
                    )
        if updates.get("dead_letter") is not None:
            await _require_queues(db, ctx, [updates["dead_letter"]], "dead letter")
        rows = await db.execute(statement.sql, statement.bind(name=name, **updates))
        if not rows:
            raise missing_queue(name)

    await retry.transaction(ctx, work)


async def _read_queue(ctx: Context, name: str, *, live: bool = False) -> Queue | None:
    statement = (sql.get_queues_live if live else sql.get_queues)(ctx.q, by_name=True)
    rows = await retry.run(ctx, statement, names=[name])
    return Queue.from_row(rows[0]) if rows else None


async def queue_route(ctx: Context, name: str) -> QueueRoute:
    """The queue's policy and job table, read once and remembered on the context.

    A missing queue raises QueueNotFoundError.
    """
    route = ctx.routes.get(name)
    if route is None:
        queue = await _read_queue(ctx, name)
        if queue is None:
            raise missing_queue(name)
        route = ctx.routes[name] = QueueRoute(queue.policy, queue.table_name)
    return route


async def get_queue(ctx: Context, name: str, *, live: bool = False) -> Queue | None:
    """A queue's settings and counts; None if there is no such queue.

    The counts are those the monitor cached (``counted_on``, ``counts_age_seconds`` say
    how old), or with ``live`` counted now from its jobs (a scan of them).
    """
    queue_name(name)
    return await _read_queue(ctx, name, live=check_flag("live", live))


def check_page(limit: int | None, after: str | None) -> bool:
    """Whether a read is paged, its ``limit`` (1 to 100,000) and ``after`` (a name or key
    of the previous page's last row) checked."""
    if limit is not None:
        check_count("limit", limit, LIST_LIMIT_MAX)
    if after is not None and (not isinstance(after, str) or not after):
        raise ValidationError(f"after must be a non-empty string, got {after!r:.80}")
    return limit is not None or after is not None


async def get_queues(
    ctx: Context,
    names: list[str] | None = None,
    *,
    live: bool = False,
    limit: int | None = None,
    after: str | None = None,
) -> list[Queue]:
    """Every queue, or those in ``names`` (a list of queue names), ordered by name.

    Their counts as :func:`get_queue` gives them (``live``: counted now, a scan of every
    job of those queues). A page: at most ``limit`` (1 to 100,000), the queues named
    after ``after`` (the last name of the previous page); every queue by default (pg-boss
    returns 1,000: a board and a metrics scrape read them all).
    """
    if names is not None:
        if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
            raise ValidationError(f"names must be a list of queue names, got {names!r:.80}")
        names = [queue_name(n) for n in names]
    paged = check_page(limit, after)
    read = sql.get_queues_live if check_flag("live", live) else sql.get_queues
    statement = read(ctx.q, by_name=names is not None, paged=paged)
    rows = await retry.run(
        ctx, statement, names=names, after=after, limit=LIST_LIMIT_MAX if limit is None else limit
    )
    return [Queue.from_row(r) for r in rows]


async def delete_queue(ctx: Context, name: str) -> None:
    """Delete a queue and all its jobs; nothing happens for an unknown queue.

    Refused (``ValidationError``) while another queue, or a job of another
    queue, names it as dead letter queue. A queue in the shared job table has
    its jobs deleted in batches first; a queue with its own partition has the
    partition dropped.
    """
    queue_name(name)
    ctx.routes.pop(name, None)
    queue = await _read_queue(ctx, name)
    if queue is None:
        return
    refs = sql.dead_letter_references(ctx.q)
    rows = await retry.run(ctx, refs, name=name)
    if rows[0]["queues"] or rows[0]["jobs"]:
        users = ", ".join(repr(n) for n in rows[0]["queues"]) or "jobs of other queues"
        raise ValidationError(
            f"queue {name!r} cannot be deleted: it is the dead letter queue of {users};"
            " clear their dead_letter (update_queue(..., dead_letter=None)) first"
        )
    own_table = queue.partition and ctx.backend.schema.partitioned
    if not own_table:
        await _delete_in_batches(ctx, name, "all")
    delay = 0.025
    for attempt in range(1, _DROP_ATTEMPTS + 1):
        try:
            await locks.run_locked(ctx, DELETE_QUEUE_LOCK, lambda db: _drop(ctx.with_db(db), name))
            return
        except DatabaseError as exc:
            if exc.sqlstate != LOCK_NOT_AVAILABLE or attempt == _DROP_ATTEMPTS:
                raise
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, 0.4)


async def _drop(ctx: Context, name: str) -> None:
    """Inside the delete-queue lock: drop the queue (its table first, if it has one)."""
    queue = await _read_queue(ctx, name)
    if queue is None:
        return
    table: str | None = None
    if queue.partition and ctx.backend.schema.partitioned:
        table = quote(queue.table_name)
        exists = sql.table_exists(ctx.q)
        rows = await ctx.db.execute(exists.sql, exists.bind(name=f"{ctx.q}.{table}"))
        if rows[0]["present"]:
            await ctx.db.execute(sql.lock_job_tables(ctx.q, table).sql)
    call = sql.call_delete_queue(ctx.q)
    await ctx.db.execute(call.sql, call.bind(name=name))
    if table is not None:
        bam = sql.delete_unfinished_bam(ctx.q)
        await ctx.db.execute(bam.sql, bam.bind(table=queue.table_name))


async def _delete_in_batches(ctx: Context, name: str, which: str) -> int:
    """Delete a queue's queued, stored or all jobs, one batch per transaction; how many.

    Inside a caller's transaction it all runs in that transaction.
    """
    statement = sql.delete_jobs_batch(ctx.q, which)
    deleted = retained = 0
    while True:
        rows = await retry.run(ctx, statement, name=name, limit=DELETE_BATCH_SIZE)
        deleted += rows[0]["deleted"]
        retained += rows[0]["retained"]
        if rows[0]["deleted"] < DELETE_BATCH_SIZE:
            break
    await reduce_cached_counts(ctx, name, retained=retained, total=deleted)
    return int(deleted)


async def reduce_cached_counts(ctx: Context, name: str, *, retained: int, total: int) -> None:
    """Take jobs just deleted (or resumed) off a queue's cached counts.

    This is done now rather than waiting for the monitor. Skipped inside a caller's
    transaction (it would hold the queue row until the caller commits) and when nothing
    counted was removed; a failure is logged, not raised: the jobs are gone, and the next
    monitor pass corrects the counts.
    """
    if ctx.db.in_transaction or (retained <= 0 and total <= 0):
        return
    statement = sql.reduce_cached_counts(ctx.q)
    try:
        await retry.run(ctx, statement, name=name, retained=retained, total=total)
    except DatabaseError as exc:
        log.warning("could not lower the cached counts of queue %r: %s", name, exc)


async def _bulk_delete(ctx: Context, name: str, which: str) -> int:
    queue_name(name)
    if await _read_queue(ctx, name) is None:
        raise missing_queue(name)
    return await _delete_in_batches(ctx, name, which)


async def delete_queued_jobs(ctx: Context, name: str) -> int:
    """Delete a queue's queued jobs (created or retry); how many were deleted."""
    return await _bulk_delete(ctx, name, "queued")


async def delete_stored_jobs(ctx: Context, name: str) -> int:
    """Delete a queue's finished jobs (completed, cancelled or failed); how many."""
    return await _bulk_delete(ctx, name, "stored")


async def delete_all_jobs(ctx: Context, name: str | None = None) -> int | None:
    """Delete every job of a queue, or of every queue.

    With a name, returns how many; with no name every job of every queue goes at once
    (TRUNCATE; returns None) and all cached counts are zeroed.
    """
    if name is not None:
        return await _bulk_delete(ctx, name, "all")
    truncate = sql.truncate_table(ctx.q, quote("job"))
    zero = sql.zero_cached_counts(ctx.q, one=False)

    async def work(db: Database) -> None:
        await db.execute(truncate.sql)
        await db.execute(zero.sql)

    if ctx.backend.capabilities.transactional_ddl:
        await retry.transaction(ctx, work)
    else:
        await work(ctx.db)
    return None


async def get_blocked_keys(
    ctx: Context, name: str, *, limit: int | None = None, after: str | None = None
) -> list[str]:
    """The singleton keys of a key_strict_fifo queue held up by a failed job, in order.

    No job of such a key runs until the failed one is retried or deleted. A page: at
    most ``limit`` (1 to 100,000; 1,000 by default, as pg-boss returns), the keys after
    ``after`` (the last key of the previous page).
    """
    queue_name(name)
    check_page(limit, after)
    statement = sql.select_blocked_keys(ctx.q)
    rows = await retry.run(
        ctx, statement, name=name, after=after, limit=LIST_LIMIT_DEFAULT if limit is None else limit
    )
    if not rows:
        raise missing_queue(name)
    return [r["key"] for r in rows if r["key"] is not None]

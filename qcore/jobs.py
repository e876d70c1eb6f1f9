"""The job verbs: send and insert, fetch, and the commands that settle or move jobs.

Each verb validates its input first (nothing is written for bad input), then
runs statements built by :mod:`qcore.sql.jobs` for the context's backend:

* fetch claims with ``FOR UPDATE SKIP LOCKED`` or, on engines without it,
  with an unlocked read and an ``UPDATE`` that rechecks the state
  (``FetchStrategy``);
* fail is one statement of data-modifying CTEs, or the same effect as
  several statements in one transaction with the retry backoff computed
  here (``MutationStrategy``).

Everything else is one statement on every backend. Statements outside a
caller's transaction are run again on a retryable failure (``qcore.retry``);
inside one they are the caller's to run again.

Most verbs address the queue's own physical job table, as pg-boss does (no
partition routing, no other partition planned or locked): its route, the
policy and table read once per context and checked by every statement, so a
queue deleted or recreated by another process is noticed and read again.

Ids may be given as a UUID, its string, a :class:`~qcore.job.Job`, or a list
of these. A ``Job`` fences the command on the attempt it was fetched in
(``retry_count``): a worker whose claim lapsed cannot settle a newer attempt.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.context import Context, QueueRoute
from qcore.db import Database, Json
from qcore.errors import DatabaseError, QueueNotFoundError, UniqueViolation, ValidationError
from qcore.job import CommandResult, Job
from qcore.options import (
    FetchOptions,
    JobRecord,
    SendOptions,
    check_json,
    fetch_options,
    ids_and_fences,
    job_id,
    job_record,
    normalize_output,
    payloads_json,
    queue_name,
    records_json,
)
from qcore.queues import missing_queue, queue_route, reduce_cached_counts
from qcore.sql import jobs as sql
from qcore.sql._statement import Statement
from qcore.sql.locks import notify_channel

__all__ = [
    "EXPIRY_BATCH_SIZE",
    "HEARTBEAT_LOST",
    "TIMED_OUT",
    "ExpiryBatch",
    "Ids",
    "cancel",
    "complete",
    "delete_job",
    "expire",
    "fail",
    "fetch",
    "find_jobs",
    "get_job_by_id",
    "insert",
    "resume",
    "retry",
    "send",
    "send_debounced",
    "send_throttled",
    "touch",
]

T = TypeVar("T")

#: what the commands accept as job ids
Ids = uuid.UUID | str | Job | Iterable[uuid.UUID | str | Job]

_CHECK_VIOLATION = "23514"
_UNDEFINED_TABLE = "42P01"
_FOREIGN_KEY_VIOLATION = "23503"
_MAX_BATCH = 1_000_000


# --------------------------------------------------------------------------- routes


async def _routed(
    ctx: Context,
    name: str,
    attempt: Callable[[QueueRoute], Awaitable[T | None]],
    *,
    unchanged: T | None = None,
) -> T:
    """Run ``attempt`` with the queue's route (policy and job table, read once per
    context). None back means no queue row matched that route, and a missing table
    that the table is gone: the queue was deleted, or recreated elsewhere. The route
    is read again (QueueNotFoundError if the queue is gone) and the attempt made once
    more; where that finds the same route, ``unchanged`` is the answer if given."""
    route = await queue_route(ctx, name)
    for _ in range(2):
        try:
            result = await attempt(route)
        except DatabaseError as exc:
            if exc.sqlstate != _UNDEFINED_TABLE or ctx.db.in_transaction:
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


# --------------------------------------------------------------------------- send / insert


async def send(
    ctx: Context, name: str, data: Any = None, **options: Unpack[SendOptions]
) -> uuid.UUID | None:
    """Queue one job; its id, or None when the queue's policy (or a throttle slot)
    already holds a job for it and it was dropped.

    Options left None are inherited from the queue. ``start_after``: an aware
    datetime, seconds from now (number or timedelta), or an ISO 8601 string
    (zone-less means UTC). ``singleton_seconds`` throttles: one job per key per
    slot of that many seconds; with ``singleton_next_slot`` a job that finds
    its slot taken goes into the next slot instead (debounce).
    """
    queue_name(name)
    record = job_record(data, **options)
    text = records_json([record], numbered=False)
    inserted = await _insert(ctx, name, [record], text)
    if inserted:
        return inserted[0]
    if options.get("singleton_next_slot"):
        inserted = await _insert(ctx, name, [record], text, next_slot=True)
        if inserted:
            return inserted[0]
    return None


def _slot_options(seconds: int, key: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    taken = sorted({"singleton_seconds", "singleton_key", "singleton_next_slot"} & set(options))
    if taken:
        raise ValidationError(
            f"{', '.join(taken)} cannot be given here: the slot length is `seconds` and the"
            " key is `key`"
        )
    return {**options, "singleton_seconds": seconds, "singleton_key": key}


async def send_throttled(
    ctx: Context,
    name: str,
    data: Any = None,
    *,
    seconds: int,
    key: str | None = None,
    next_slot: bool = False,
    **options: Any,
) -> uuid.UUID | None:
    """Queue a job unless one for ``key`` was already sent in the current slot of
    ``seconds`` (slots are aligned to the epoch); None when it was dropped. With
    ``next_slot`` (debouncing) a job whose slot is taken goes into the next slot,
    starting about a second after it begins; None only if that one is taken too."""
    slot = _slot_options(seconds, key, options)
    return await send(ctx, name, data, singleton_next_slot=next_slot, **slot)


async def send_debounced(
    ctx: Context,
    name: str,
    data: Any = None,
    *,
    seconds: int,
    key: str | None = None,
    **options: Any,
) -> uuid.UUID | None:
    """:func:`send_throttled` with ``next_slot``: a job whose slot is taken goes into the
    next one."""
    return await send_throttled(
        ctx, name, data, seconds=seconds, key=key, next_slot=True, **options
    )


async def insert(
    ctx: Context, name: str, jobs: Sequence[Mapping[str, Any]], *, return_id: bool = True
) -> list[uuid.UUID] | None:
    """Queue a batch of jobs in one statement; the ids of those inserted, in input order
    (a job a policy index refused is left out), or None with ``return_id=False``.

    Each job is a mapping with ``data`` and any of :func:`send`'s options except
    ``singleton_next_slot``.
    """
    queue_name(name)
    if isinstance(jobs, Mapping) or not isinstance(jobs, Sequence):
        raise ValidationError(f"jobs must be a list of mappings, got {type(jobs).__name__}")
    if len(jobs) > _MAX_BATCH:
        raise ValidationError(f"at most {_MAX_BATCH} jobs per insert, got {len(jobs)}")
    if len(jobs) > 1 and all(type(job) is dict and len(job) == 1 and "data" in job for job in jobs):
        # data alone (the bulk case): no option to check, the server expands the payloads
        payloads = [job["data"] for job in jobs]
        ids = await _insert(ctx, name, payloads, payloads_json(payloads), payloads=True)
        return ids if return_id else None
    records = []
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise ValidationError(f"jobs[{i}] must be a mapping, got {type(job).__name__}")
        if "singleton_next_slot" in job:
            raise ValidationError(f"jobs[{i}]: singleton_next_slot is for send() only")
        options = {k: v for k, v in job.items() if k != "data"}
        try:
            records.append(job_record(job.get("data"), **options))
        except ValidationError as exc:
            raise ValidationError(f"jobs[{i}]: {exc}") from None
    ids = await _insert(ctx, name, records, records_json(records, numbered=True))
    return ids if return_id else None


async def _insert(
    ctx: Context,
    name: str,
    records: list[JobRecord] | list[Any],
    text: str,
    *,
    next_slot: bool = False,
    payloads: bool = False,
) -> list[uuid.UUID]:
    """Run the insert statement for ``records`` (``text``: their JSON array): one
    job through send's plain INSERT ... SELECT, a batch through the recordset.
    With ``payloads`` the records are a batch's ``data`` alone (no options).

    Into a standard queue, without throttling, only a duplicate id can conflict:
    the statement then skips ON CONFLICT (cheaper) and runs again with it if one
    does (outside a caller's transaction only, which a conflict would abort)."""
    notify = ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None
    check_dead_letters = not payloads and any("dead_letter" in r for r in records)
    # send's plain INSERT ... SELECT
    one = len(records) == 1 and not check_dead_letters and not payloads
    # the array's one object, or the array
    payload = {"job": Json(records[0], text[1:-1])} if one else {"jobs": Json(records, text)}
    throttled = not payloads and any("singleton_seconds" in r for r in records)

    async def attempt(route: QueueRoute) -> list[dict[str, Any]] | None:
        expect_no_conflict = route.policy == "standard" and not throttled
        drop_conflicts = not expect_no_conflict or ctx.db.in_transaction
        while True:
            if one:
                statement = sql.send_job(
                    ctx.q,
                    notify=notify,
                    next_slot=next_slot,
                    drop_conflicts=drop_conflicts,
                    table=route.table,
                )
            else:
                statement = sql.insert_jobs(
                    ctx.q,
                    notify=notify,
                    check_dead_letters=check_dead_letters,
                    next_slot=next_slot,
                    drop_conflicts=drop_conflicts,
                    table=route.table,
                    payloads=payloads,
                )
            params = statement.bind(queue=name, table=route.table, channel=channel, **payload)
            try:
                rows = await retrying.execute(ctx, statement.sql, params)
            except UniqueViolation:
                if drop_conflicts:
                    raise
                drop_conflicts = True  # a duplicate id: dropped, as pg-boss drops it
                continue
            except DatabaseError as exc:
                if exc.sqlstate == _UNDEFINED_TABLE:
                    raise
                raise _insert_error(name, exc) from exc
            found = bool(rows) if one else bool(rows[0]["queues"])
            return rows if found else None

    # a send that finds no row for an unchanged route was dropped by a policy index
    dropped: list[dict[str, Any]] | None = [] if one else None
    rows = await _routed(ctx, name, attempt, unchanged=dropped)
    if one:
        return [rows[0]["id"]] if rows else []
    row = rows[0]
    if row.get("missing_dead_letters"):
        missing = sorted(row["missing_dead_letters"])
        raise QueueNotFoundError(
            f"dead letter queue {missing[0]!r} does not exist; create it before sending jobs"
            " that name it"
        )
    ids: list[uuid.UUID] = row["ids"]
    return ids


def _insert_error(name: str, exc: DatabaseError) -> Exception:
    text = str(exc)
    if exc.sqlstate == _CHECK_VIOLATION and "key_strict_fifo" in text:
        return ValidationError(
            f"queue {name!r} has the key_strict_fifo policy: every job needs a singleton_key"
        )
    if exc.sqlstate == _FOREIGN_KEY_VIOLATION:
        return QueueNotFoundError(
            f"queue {name!r} or a dead letter queue named by the job does not exist"
            f" (it may have just been deleted): {text}"
        )
    return exc


# --------------------------------------------------------------------------- fetch


async def fetch(ctx: Context, name: str, **options: Unpack[FetchOptions]) -> list[Job]:
    """Claim up to ``batch_size`` ready jobs (now active), returned in claim order:
    highest priority first, then oldest (``created_on``), as the fetch index holds
    them, so a claim costs the same on a long queue as on a short one. Jobs of one
    insert are claimed in the order they were given; jobs sharing a ``created_on``
    (a pg-boss batch, sends in one transaction) in the index's order, as pg-boss
    claims them. A batch comes back sorted by those keys, then by id.

    ``priority=False`` ignores priority (and sorts every ready job: slower on a
    long queue); ``order_by_created_on=False`` takes any jobs of the highest
    priority (the cheapest claim). The queue's policy applies: key_strict_fifo
    hands out only the head job of each key, and none of a key with a job
    active, in retry or failed; singleton and stately hand out nothing for a key
    with an active job and at most one job per key per batch.
    ``ignore_start_after`` also takes jobs deferred to later. A fetch that lost
    a race on a policy index returns [].
    """
    queue_name(name)
    given = fetch_options(options)
    batch_size: int = given["batch_size"]
    priority: bool = given["priority"]
    order_by_created_on: bool = given["order_by_created_on"]
    include_metadata: bool = given["include_metadata"]
    ignore_start_after: bool = given["ignore_start_after"]
    low, high = given["min_priority"], given["max_priority"]
    skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED

    async def attempt(route: QueueRoute) -> list[Job] | None:
        statement = sql.fetch_jobs(
            ctx.q,
            skip_locked=skip_locked,
            policy=route.policy,
            priority=priority,
            order_by_created_on=order_by_created_on,
            ignore_start_after=ignore_start_after,
            min_priority=low is not None,
            max_priority=high is not None,
            include_metadata=include_metadata,
            table=route.table,
        )
        params = statement.bind(
            queue=name,
            policy=route.policy,
            table=route.table,
            limit=min(batch_size, 2**31 - 1),
            min_priority=low,
            max_priority=high,
        )
        try:
            rows = await retrying.execute(ctx, statement.sql, params)
        except UniqueViolation:
            if ctx.db.in_transaction:  # the caller's transaction is aborted: theirs to handle
                raise
            return []  # another claimer took the key's slot first (singleton/stately index)
        if not rows:
            return None
        return [Job.from_row(r) for r in rows if r["id"] is not None]

    return await _routed(ctx, name, attempt)


# --------------------------------------------------------------------------- commands


def _ids(ids: object) -> tuple[list[uuid.UUID], list[uuid.UUID], list[str]]:
    """Every distinct id, the unfenced ids, and the ``id:retry_count`` fences of Jobs."""
    return ids_and_fences(ids)


async def _run_command(
    ctx: Context,
    name: str,
    build: Callable[[str], Statement],
    every: list[uuid.UUID],
    **values: Any,
) -> list[dict[str, Any]]:
    """Run a command built for the queue's job table (``build(table)``); its rows."""

    async def attempt(route: QueueRoute) -> list[dict[str, Any]] | None:
        statement = build(route.table)
        params = statement.bind(queue=name, ids=every, table=route.table, **values)
        rows = await retrying.execute(ctx, statement.sql, params)
        return [r for r in rows if r["id"] is not None] if rows else None

    return await _routed(ctx, name, attempt)


def _result(every: list[uuid.UUID], ids: list[uuid.UUID]) -> CommandResult:
    return CommandResult(requested=len(every), affected=len(ids), ids=ids)


def _fence_values(plain: list[uuid.UUID], fences: list[str]) -> dict[str, Any]:
    return {"plain_ids": plain, "fences": fences}


async def complete(
    ctx: Context, name: str, ids: Ids, data: Any = None, *, include_queued: bool = False
) -> CommandResult:
    """Mark active jobs completed, storing ``data`` as their output (a dict as it is,
    anything else as ``{"value": data}``). ``include_queued`` completes queued jobs too."""
    queue_name(name)
    every, plain, fences = _ids(ids)
    output = normalize_output(data)
    rows = await _run_command(
        ctx,
        name,
        lambda table: sql.complete_jobs(
            ctx.q, fenced=bool(fences), include_queued=include_queued, table=table
        ),
        every,
        output=_jsonb(output),
        **_fence_values(plain, fences),
    )
    return _result(every, [r["id"] for r in rows])


async def _fenced_command(
    ctx: Context, name: str, ids: Ids, build: Callable[..., Statement]
) -> tuple[list[uuid.UUID], list[dict[str, Any]]]:
    """Run the command ``build(q, fenced=..., table=...)`` makes on jobs ``ids`` (fenced on
    the attempts of the ``Job`` objects among them): the ids asked for, and the rows."""
    queue_name(name)
    every, plain, fences = _ids(ids)
    rows = await _run_command(
        ctx,
        name,
        lambda table: build(ctx.q, fenced=bool(fences), table=table),
        every,
        **_fence_values(plain, fences),
    )
    return every, rows


async def cancel(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Cancel jobs that are not finished yet (queued or active)."""
    every, rows = await _fenced_command(ctx, name, ids, sql.cancel_jobs)
    return _result(every, [r["id"] for r in rows])


async def resume(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Bring cancelled jobs back to created (they run no earlier than now)."""
    queue_name(name)
    every, _, _ = _ids(ids)
    rows = await _run_command(ctx, name, lambda table: sql.resume_jobs(ctx.q, table=table), every)
    retained = sum(1 for r in rows if r["retained"])
    await reduce_cached_counts(ctx, name, retained=retained, total=0)
    return _result(every, [r["id"] for r in rows])


async def retry(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Give failed jobs another attempt: back to retry, with one more allowed. On a
    ``notify`` queue a job that is ready now wakes listening workers."""
    queue_name(name)
    every, _, _ = _ids(ids)
    notify = ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None
    rows = await _run_command(
        ctx,
        name,
        lambda table: sql.retry_jobs(ctx.q, notify=notify, table=table),
        every,
        channel=channel,
    )
    return _result(every, [r["id"] for r in rows])


async def delete_job(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Delete jobs, whatever their state."""
    every, rows = await _fenced_command(ctx, name, ids, sql.delete_jobs)
    retained = sum(1 for r in rows if r["retained"])
    await reduce_cached_counts(ctx, name, retained=retained, total=retained)
    return _result(every, [r["id"] for r in rows])


async def touch(ctx: Context, name: str, ids: Ids) -> CommandResult:
    """Refresh the heartbeat of active jobs; ``ids`` of the result are those refreshed
    (a job missing from it is no longer active, or no longer in that attempt)."""
    every, rows = await _fenced_command(ctx, name, ids, sql.touch_jobs)
    return _result(every, [r["id"] for r in rows])


def _jsonb(value: Any) -> Any:
    """A parameter for a ``$n::jsonb``: SQL NULL for None, else the JSON value."""
    return None if value is None else Json(value)


# --------------------------------------------------------------------------- fail


async def fail(ctx: Context, name: str, ids: Ids, data: Any = None) -> CommandResult:
    """Fail jobs that are not finished, storing ``data`` as their output.

    A job with retries left goes to retry, to run again after ``retry_delay``
    seconds, or with ``retry_backoff`` after a random delay that doubles with
    every attempt (capped by ``retry_delay_max``). A job out of retries is
    failed, and a copy goes to its dead letter queue if it has one, with
    ``source_*`` columns saying where it came from.
    """
    queue_name(name)
    every, plain, fences = _ids(ids)
    output = normalize_output(data)
    if ctx.backend.mutation is MutationStrategy.CTE:
        rows = await _run_command(
            ctx,
            name,
            lambda _table: sql.fail_jobs(ctx.q, fenced=bool(fences)),  # re-inserts via job
            every,
            output=_jsonb(output),
            **_fence_values(plain, fences),
        )
        return _result(every, [r["id"] for r in rows])

    async def split(tx: Database) -> list[uuid.UUID]:
        return await _fail_split(ctx.with_db(tx), name, every, plain, fences, output)

    return _result(every, await retrying.transaction(ctx, split))


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
    fences: list[str],
    output: Any,
) -> list[uuid.UUID]:
    """Fail as separate statements in the caller's (``ctx.db``'s) transaction: delete the
    jobs, then :func:`_reinsert_split` them. Returns the ids inserted again, in the
    order they were asked for."""
    remove = sql.fail_remove(ctx.q, fenced=bool(fences))
    rows = await ctx.db.execute(
        remove.sql, remove.bind(queue=name, ids=every, **_fence_values(plain, fences))
    )
    if not rows:
        raise missing_queue(name)
    settled = await _reinsert_split(ctx, [r for r in rows if r["id"] is not None], output)
    order = {job: i for i, job in enumerate(every)}
    return sorted(settled, key=order.__getitem__)


async def _reinsert_split(
    ctx: Context, removed: list[dict[str, Any]], output: Any
) -> list[uuid.UUID]:
    """The split fail after the delete (MutationStrategy.SPLIT), in ``ctx.db``'s
    transaction: insert the deleted jobs with retries left again as retry (the backoff
    computed here, as the CTE statement computes it), then the rest, and any a policy
    index refused as retry, as failed together with their dead letter copies. Returns
    the ids inserted again. Shared by :func:`fail` and :func:`expire`."""
    to_retry: list[dict[str, Any]] = []
    to_fail: list[dict[str, Any]] = []
    for row in removed:
        record = _json_row(row)
        limit, count = row["retry_limit"], row["retry_count"]
        # as the CTE statement: start_after is kept only when the count reached the limit
        record["delay"] = None if count == limit else _backoff_seconds(row)
        (to_retry if count < limit else to_fail).append(record)
    settled: list[uuid.UUID] = []
    if to_retry:
        again = sql.fail_reinsert_retry(ctx.q)
        got = await ctx.db.execute(
            again.sql, again.bind(rows=Json(to_retry), output=_jsonb(output))
        )
        retried = {r["id"] for r in got}
        settled += [uuid.UUID(r["id"]) for r in to_retry if uuid.UUID(r["id"]) in retried]
        for record in to_retry:  # a policy index refused it as retry: it fails instead
            if uuid.UUID(record["id"]) not in retried:
                to_fail.append({**record, "delay": None})
    if to_fail:
        failed = sql.fail_reinsert_failed(ctx.q)
        got = await ctx.db.execute(
            failed.sql, failed.bind(rows=Json(to_fail), output=_jsonb(output))
        )
        wanted = {uuid.UUID(r["id"]) for r in to_fail}
        settled += [r["id"] for r in got if r["id"] in wanted]
    return settled


# --------------------------------------------------------------------------- expiry

#: the output of a job failed because it ran past ``expire_seconds`` (pg-boss's)
TIMED_OUT: dict[str, Any] = {"value": {"message": "job timed out"}}
#: the output of a job failed because its heartbeat is older than ``heartbeat_seconds``
HEARTBEAT_LOST: dict[str, Any] = {"value": {"message": "job heartbeat timeout"}}
#: the most jobs one expiry batch fails (pg-boss's batch size)
EXPIRY_BATCH_SIZE = 1000


@dataclass(frozen=True)
class ExpiryBatch:
    """What one expiry batch did: ``picked`` jobs matched (a full batch means more may be
    waiting), ``failed`` of them were failed (the rest were settled meanwhile)."""

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
    """Fail at most ``limit`` active jobs of the queues ``names`` (all kept in the physical
    job table ``table``) that ran past their expiry or, with ``heartbeat``, lost their
    heartbeat; retried, failed or dead-lettered exactly as :func:`fail` does, with the
    output :data:`TIMED_OUT` or :data:`HEARTBEAT_LOST`.

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


# --------------------------------------------------------------------------- reads


async def get_job_by_id(ctx: Context, name: str, id: uuid.UUID | str) -> Job | None:
    """A job with every field; None if the queue holds no job with that id."""
    queue_name(name)
    statement = sql.get_job(ctx.q)
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

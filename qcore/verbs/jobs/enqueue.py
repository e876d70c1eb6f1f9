"""Queueing jobs: ``send``, its throttled and debounced forms, and ``insert``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.context import Context, QueueRoute
from qcore.db import Database, Json
from qcore.errors import (
    CHECK_VIOLATION,
    FOREIGN_KEY_VIOLATION,
    DatabaseError,
    QueueNotFoundError,
    UniqueViolation,
    ValidationError,
)
from qcore.options import (
    JobRecord,
    SendOptions,
    job_record,
    payloads_json,
    queue_name,
    records_json,
)
from qcore.sql import jobs as sql
from qcore.sql.locks import notify_channel
from qcore.verbs.jobs.affinity import take_pattern, write_patterns
from qcore.verbs.jobs.routes import (
    MAX_BATCH,
    UNDEFINED_TABLE,
    routed,
)
from qcore.verbs.queues import keyless_strict_fifo


async def send(
    ctx: Context, name: str, data: Any = None, **options: Unpack[SendOptions]
) -> uuid.UUID | None:
    """Queue one job; its id, or None when it was dropped.

    It is dropped when the queue's policy (or a throttle slot) already holds a job for
    it.

    Options left None are inherited from the queue. ``start_after``: an aware
    datetime, seconds from now (number or timedelta), or an ISO 8601 string
    (zone-less means UTC). ``singleton_seconds`` throttles: one job per key per
    slot of that many seconds; with ``singleton_next_slot`` a job that finds
    its slot taken goes into the next slot instead (debounce).
    ``preferred_instance_key_pattern``: a regular expression (compiled now); only a
    server whose instance key it matches (``re.search``) will claim the job.
    """
    queue_name(name)
    given, pattern = take_pattern(ctx, options)
    record = job_record(data, **given)
    patterns = _with_pattern(record, pattern)
    text = records_json([record], numbered=False)
    inserted = await _add(ctx, name, [record], text, patterns)
    if inserted:
        return inserted[0]
    if options.get("singleton_next_slot"):
        inserted = await _add(ctx, name, [record], text, patterns, next_slot=True)
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
    """Queue a job unless one for ``key`` was already sent in the current slot.

    A slot is ``seconds`` long, aligned to the epoch; None when the job was dropped.
    With ``next_slot`` (debouncing) a job whose slot is taken goes into the next slot,
    starting about a second after it begins; None only if that one is taken too.
    """
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
    """:func:`send_throttled` with ``next_slot``.

    A job whose slot is taken goes into the next one.
    """
    return await send_throttled(
        ctx, name, data, seconds=seconds, key=key, next_slot=True, **options
    )


async def insert(
    ctx: Context, name: str, jobs: Sequence[Mapping[str, Any]], *, return_id: bool = True
) -> list[uuid.UUID] | None:
    """Queue a batch of jobs in one statement.

    Returns the ids of those inserted, in input order (a job a policy index refused is
    left out), or None with ``return_id=False``.

    Each job is a mapping with ``data`` and any of :func:`send`'s options except
    ``singleton_next_slot``. Jobs with a ``preferred_instance_key_pattern`` are written
    with their patterns in one transaction.
    """
    queue_name(name)
    if isinstance(jobs, Mapping) or not isinstance(jobs, Sequence):
        raise ValidationError(f"jobs must be a list of mappings, got {type(jobs).__name__}")
    if len(jobs) > MAX_BATCH:
        raise ValidationError(f"at most {MAX_BATCH} jobs per insert, got {len(jobs)}")
    if len(jobs) > 1 and all(type(job) is dict and len(job) == 1 and "data" in job for job in jobs):
        # data alone (the bulk case): no option to check, the server expands the payloads
        payloads = [job["data"] for job in jobs]
        ids = await _insert(ctx, name, payloads, payloads_json(payloads), payloads=True)
        return ids if return_id else None
    records = []
    patterns: dict[str, str] = {}
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise ValidationError(f"jobs[{i}] must be a mapping, got {type(job).__name__}")
        if "singleton_next_slot" in job:
            raise ValidationError(f"jobs[{i}]: singleton_next_slot is for send() only")
        options = {k: v for k, v in job.items() if k != "data"}
        try:
            given, pattern = take_pattern(ctx, options)
            record = job_record(job.get("data"), **given)
        except ValidationError as exc:
            raise ValidationError(f"jobs[{i}]: {exc}") from None
        patterns.update(_with_pattern(record, pattern))
        records.append(record)
    ids = await _add(ctx, name, records, records_json(records, numbered=True), patterns)
    return ids if return_id else None


def _with_pattern(record: JobRecord, pattern: str | None) -> dict[str, str]:
    """``{id: pattern}`` for a record with a pattern, else empty.

    The pattern is written by id, so a record without an id of its own is given one.
    """
    if pattern is None:
        return {}
    record.setdefault("id", str(uuid.uuid4()))
    return {record["id"]: pattern}


async def _add(
    ctx: Context,
    name: str,
    records: list[JobRecord],
    text: str,
    patterns: dict[str, str],
    *,
    next_slot: bool = False,
) -> list[uuid.UUID]:
    """:func:`_insert`, with the patterns of the jobs it added, in one transaction.

    ``patterns`` are by record id; only patterned jobs get wake-ups of their own, not the
    queue's.
    """
    if not patterns:
        return await _insert(ctx, name, records, text, next_slot=next_slot)

    async def add(tx: Database) -> list[uuid.UUID]:
        wake = len(patterns) < len(records)
        ids = await _insert(ctx.with_db(tx), name, records, text, next_slot=next_slot, wake=wake)
        added = [(i, patterns[str(i)]) for i in ids if str(i) in patterns]
        await write_patterns(tx, ctx, name, added)
        return ids

    if ctx.db.in_transaction:
        return await add(ctx.db)
    return await retrying.transaction(ctx, add)


async def insert_in_slots(
    ctx: Context, name: str, jobs: Sequence[tuple[Any, str, str]]
) -> list[uuid.UUID]:
    """Queue ``(data, singleton_key, slot)`` jobs, each in the throttle slot it names.

    The slot is given (``YYYY-MM-DD HH:MM:SS``, UTC) rather than computed from now: a
    job whose key already has a job in that slot is dropped. The timekeeper's insert
    (not a verb).
    """
    records: list[JobRecord] = [
        {"data": data, "singleton_key": key, "singleton_slot": slot} for data, key, slot in jobs
    ]
    return await _insert(ctx, name, records, records_json(records, numbered=True))


async def insert_record(
    ctx: Context, name: str, record: JobRecord, *, upsert_by_key: bool = False
) -> list[uuid.UUID]:
    """Queue one validated job record, as ``upsert``'s insert does.

    Returns its id, or none when a policy index dropped it. With ``upsert_by_key`` the
    job is marked as upserted by its key, which pg-boss's upsert index (one such queued
    job per key) then holds.
    """
    text = records_json([record], numbered=False)
    return await _insert(ctx, name, [record], text, upsert_by_key=upsert_by_key)


async def _insert(
    ctx: Context,
    name: str,
    records: list[JobRecord] | list[Any],
    text: str,
    *,
    next_slot: bool = False,
    payloads: bool = False,
    upsert_by_key: bool = False,
    wake: bool = True,
) -> list[uuid.UUID]:
    """Run the insert statement for ``records``.

    ``text`` is their JSON array: one job goes through send's plain INSERT ... SELECT, a
    batch through the recordset. With ``payloads`` the records are a batch's ``data``
    alone (no options).

    Into a standard queue, without throttling, only a duplicate id can conflict:
    the statement then skips ON CONFLICT (cheaper) and runs again with it if one
    does (outside a caller's transaction only, which a conflict would abort).
    ``wake=False``: no NOTIFY (the caller sends its own)."""
    notify = wake and ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None
    check_dead_letters = not payloads and any("dead_letter" in r for r in records)
    # send's plain INSERT ... SELECT
    one = len(records) == 1 and not check_dead_letters and not payloads
    # the array's one object, or the array
    payload = {"job": Json(records[0], text[1:-1])} if one else {"jobs": Json(records, text)}
    throttled = not payloads and any(
        "singleton_seconds" in r or "singleton_slot" in r for r in records
    )

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
                    upsert_by_key=upsert_by_key,
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
                    upsert_by_key=upsert_by_key,
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
                if exc.sqlstate == UNDEFINED_TABLE:
                    raise
                raise _insert_error(name, exc) from exc
            found = bool(rows) if one else bool(rows[0]["queues"])
            return rows if found else None

    # a send that finds no row for an unchanged route was dropped by a policy index
    dropped: list[dict[str, Any]] | None = [] if one else None
    rows = await routed(ctx, name, attempt, unchanged=dropped)
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
    if exc.sqlstate == CHECK_VIOLATION and "key_strict_fifo" in text:
        return keyless_strict_fifo(name)
    if exc.sqlstate == FOREIGN_KEY_VIOLATION:
        return QueueNotFoundError(
            f"queue {name!r} or a dead letter queue named by the job does not exist"
            f" (it may have just been deleted): {text}"
        )
    return exc

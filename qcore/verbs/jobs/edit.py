"""Editing queued jobs and moving jobs out of a dead letter queue.

The edits are ``update`` and ``upsert``; the move is ``redrive``.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, TypedDict

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.context import Context, QueueRoute
from qcore.db import Database, Json
from qcore.errors import (
    CHECK_VIOLATION,
    FOREIGN_KEY_VIOLATION,
    DatabaseError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.job import EditResult, RedrivePreview
from qcore.options import (
    EDIT_OPTIONS,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    JobRecord,
    check_count,
    check_json,
    check_key,
    job_id,
    job_record,
    known_only,
    queue_name,
    records_json,
)
from qcore.sql import jobs as sql
from qcore.sql.locks import notify_channel
from qcore.verbs.jobs.enqueue import insert_record
from qcore.verbs.jobs.routes import Ids, routed, target_ids

#: ``update``'s ``data`` left out: the payload is kept
KEEP: Final = object()

#: which of several queued jobs with one singleton key an edit targets
MATCHES: Final = ("newest", "oldest", "all")

#: most dead letter jobs one redrive moves
REDRIVE_LIMIT_MAX: Final = LIST_LIMIT_MAX


class RedriveFilter(TypedDict, total=False):
    """Which dead letters ``redrive`` moves (and ``preview_redrive`` counts), and where:
    pg-boss's ``RedriveOptions``."""

    #: the queue to move them to (by default each one's source queue)
    destination: str
    #: only those that came from this queue
    source_name: str
    #: only those whose data contains this mapping (as ``find_jobs`` matches)
    data: Mapping[str, Any]
    #: only those dead-lettered before this aware moment
    created_before: dt.datetime
    #: only these
    ids: Ids
    #: at most this many (1 to 100,000; 1,000 by default)
    limit: int


def _target(
    verb: str, id: object, singleton_key: object, match: str | None
) -> tuple[dict[str, Any], bool, str]:
    """The job(s) an edit addresses: the statement's values, whether by key, the match."""
    if (id is None) == (singleton_key is None):
        raise ValidationError(f"{verb}() takes exactly one of id or singleton_key")
    if id is not None:
        if match is not None:
            raise ValidationError(f"{verb}(): match is for a singleton_key, not an id")
        return {"id": job_id(id)}, False, "newest"
    check_key("singleton_key", singleton_key)
    chosen = "newest" if match is None else match
    if chosen not in MATCHES:
        raise ValidationError(f"match must be one of {', '.join(MATCHES)}, got {match!r}")
    return {"key": singleton_key}, True, chosen


def _edit_record(verb: str, data: Any, options: Mapping[str, Any]) -> JobRecord:
    """The fields an edit sets (only those given), validated as ``send`` validates them."""
    known_only(verb, options, EDIT_OPTIONS)
    record = job_record(None if data is KEEP else data, **options)
    if data is KEEP:
        del record["data"]
    start = options.get("start_after")
    if start is not None and not ({"start_after", "start_after_seconds"} & set(record)):
        record["start_after_seconds"] = 0.0  # 0 seconds: pulled forward to now
    if not record:
        raise ValidationError(f"{verb}() was given nothing to change: data or an option")
    return record


async def update(
    ctx: Context,
    name: str,
    data: Any = KEEP,
    *,
    id: uuid.UUID | str | None = None,
    singleton_key: str | None = None,
    match: str | None = None,
    **options: Any,
) -> EditResult:
    """Change a queued (created or retry) job in place.

    It is addressed by ``id``, or by ``singleton_key`` (``match``: the newest, the
    oldest or all jobs with it). Only the fields given change; ``data`` left out is
    kept. A job a worker has claimed is left alone. A new ``start_after`` moves the
    job's retention with it.
    """
    queue_name(name)
    target, by_key, chosen = _target("update", id, singleton_key, match)
    record = _edit_record("update", data, options)
    ids = await _edit(ctx, name, record, target, by_key, chosen)
    return EditResult(ids=ids, updated=len(ids), inserted=0)


async def _edit(
    ctx: Context,
    name: str,
    record: JobRecord,
    target: dict[str, Any],
    by_key: bool,
    match: str,
) -> list[uuid.UUID]:
    notify = ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None
    fields = frozenset(record)
    text = records_json([record], numbered=False)[1:-1] if "data" in record else json.dumps(record)

    async def attempt(route: QueueRoute) -> list[dict[str, Any]] | None:
        statement = sql.update_jobs(
            ctx.q, fields, by_key=by_key, match=match, notify=notify, table=route.table
        )
        params = statement.bind(
            queue=name, table=route.table, channel=channel, job=Json(record, text), **target
        )
        try:
            rows = await retrying.execute(ctx, statement.sql, params)
        except DatabaseError as exc:
            raise _dead_letter_error(record, exc) from exc
        return [r for r in rows if r["id"] is not None] if rows else None

    rows = await routed(ctx, name, attempt)
    return [r["id"] for r in rows]


def _dead_letter_error(record: JobRecord, exc: DatabaseError) -> Exception:
    if exc.sqlstate == FOREIGN_KEY_VIOLATION and "dead_letter" in record:
        return QueueNotFoundError(
            f"dead letter queue {record['dead_letter']!r} does not exist; create it first"
        )
    return exc


async def upsert(
    ctx: Context,
    name: str,
    data: Any = None,
    *,
    id: uuid.UUID | str | None = None,
    singleton_key: str | None = None,
    match: str | None = None,
    **options: Any,
) -> EditResult:
    """Update the queued job(s) ``update`` would address, else send a new one, in one transaction.

    The new job gets that ``id`` or ``singleton_key``. Concurrent upserts of one key
    agree on one job: the loser's insert meets the winner's row in pg-boss's upsert
    index (``job_i13``), skips, and edits that job instead.
    """
    queue_name(name)
    target, by_key, chosen = _target("upsert", id, singleton_key, match)
    edit = _edit_record("upsert", data, options)
    new = job_record(data, **options, **({"singleton_key": singleton_key} if by_key else {}))
    if not by_key:
        new["id"] = str(target["id"])

    async def once(tx: Database) -> EditResult:
        in_tx = ctx.with_db(tx)
        updated = await _edit(in_tx, name, edit, target, by_key, chosen)
        if updated:
            return EditResult(ids=updated, updated=len(updated), inserted=0)
        inserted = await insert_record(in_tx, name, new, upsert_by_key=by_key)
        if inserted:
            return EditResult(ids=inserted, updated=0, inserted=len(inserted))
        # the insert met a concurrent upsert's (or send's) job, now visible: edit it
        updated = await _edit(in_tx, name, edit, target, by_key, chosen)
        return EditResult(ids=updated, updated=len(updated), inserted=0)

    try:
        return await retrying.transaction(ctx, once)
    except DatabaseError as exc:  # a deferred foreign key reports at COMMIT
        raise _dead_letter_error(edit, exc) from exc


async def redrive(ctx: Context, name: str, **filters: Unpack[RedriveFilter]) -> int:
    """Move up to ``limit`` queued jobs, oldest first, out of dead letter queue ``name``.

    Each is sent again, fresh (new id, no attempts, the destination queue's settings as
    they are now), to the queue it came from or to ``destination``, keeping its data,
    priority, key, group and the root of its dead letter chain. Narrowed by
    ``source_name``, ``data`` (containment, as ``find_jobs``), ``created_before`` and
    ``ids``. A job the destination's policy refuses is failed in place, the reason its
    output; one with no queue to go to stays. Returns how many were moved.
    """
    queue_name(name)
    values, narrowed = _checked_filter(**filters)
    into = "destination" in values

    async def attempt(route: QueueRoute) -> int | None:
        if ctx.backend.mutation is MutationStrategy.CTE:
            statement = sql.redrive_jobs(
                ctx.q,
                narrowed,
                destination=into,
                skip_locked=ctx.backend.fetch is FetchStrategy.SKIP_LOCKED,
                table=route.table,
            )
            rows = await retrying.run(ctx, statement, queue=name, **values)
            return int(rows[0]["moved"])

        async def split(tx: Database) -> int:
            return await _redrive_split(ctx.with_db(tx), name, route.table, narrowed, into, values)

        return await retrying.transaction(ctx, split)

    try:
        return await routed(ctx, name, attempt)
    except DatabaseError as exc:
        if exc.sqlstate != CHECK_VIOLATION:
            raise
        # the statement is one unit: nothing moved
        raise ValidationError(
            f"cannot redrive from {name!r}: a job would break a rule of its destination"
            f" queue (a key_strict_fifo queue takes only jobs with a singleton key): {exc}"
        ) from None


def _checked_filter(
    *,
    destination: str | None = None,
    source_name: str | None = None,
    data: Mapping[str, Any] | None = None,
    created_before: dt.datetime | None = None,
    ids: Ids | None = None,
    limit: int = LIST_LIMIT_DEFAULT,
) -> tuple[dict[str, Any], frozenset[str]]:
    """A redrive's (or its preview's) filter, checked: the values to bind, and the
    names of the filters that narrow the jobs (all but ``limit`` and ``destination``)."""
    values: dict[str, Any] = {"limit": check_count("limit", limit, REDRIVE_LIMIT_MAX)}
    if destination is not None:
        values["destination"] = queue_name(destination, "destination")
    if source_name is not None:
        values["source_name"] = queue_name(source_name, "source_name")
    if data is not None:
        if not isinstance(data, Mapping):
            raise ValidationError(f"data must be a mapping to match, got {type(data).__name__}")
        values["data"] = Json(check_json("data", dict(data)))
    if created_before is not None:
        if not isinstance(created_before, dt.datetime) or created_before.utcoffset() is None:
            raise ValidationError(
                f"created_before must be an aware datetime, got {created_before!r}"
            )
        values["created_before"] = created_before
    if ids is not None:
        values["ids"] = target_ids(ids)[0]
    return values, frozenset(values) - {"limit", "destination"}


async def preview_redrive(
    ctx: Context, name: str, **filters: Unpack[RedriveFilter]
) -> RedrivePreview:
    """What :func:`redrive` with the same filters would do, moving nothing.

    Up to ``limit`` (1 to 100,000) of the jobs it would move and as many it would leave
    in place are read: ``total`` both, ``destinations`` where the movable ones would go
    (most first), ``unroutable`` those with no queue to go to (no source queue recorded
    and no ``destination``, or a source queue since deleted). A count that reaches
    ``limit`` means at least that many.
    """
    queue_name(name)
    values, narrowed = _checked_filter(**filters)

    async def attempt(route: QueueRoute) -> list[Any]:
        statement = sql.preview_redrive(
            ctx.q, narrowed, destination="destination" in values, table=route.table
        )
        return await retrying.run(ctx, statement, queue=name, **values)

    rows = await routed(ctx, name, attempt)
    counts = Counter(str(r["destination"]) for r in rows if r["destination"] is not None)
    return RedrivePreview(
        total=len(rows),
        destinations=sorted(counts.items(), key=lambda item: (-item[1], item[0])),
        unroutable=sum(1 for r in rows if r["destination"] is None),
    )


async def _redrive_split(
    ctx: Context,
    name: str,
    table: str,
    filters: frozenset[str],
    into: bool,
    values: dict[str, Any],
) -> int:
    """The redrive as statements in one transaction; the same jobs move.

    This is for engines that refuse an INSERT and a DELETE on one table in one
    statement.
    """
    pick = sql.redrive_candidates(ctx.q, filters, destination=into, table=table)
    rows = await retrying.run(ctx, pick, queue=name, **values)
    if not rows:
        return 0
    ids = [r["id"] for r in rows]
    new_ids = [r["new_id"] for r in rows]
    where = {"destination": values.get("destination")}
    add = sql.insert_redriven(ctx.q, destination=into, table=table)
    rows = await retrying.run(ctx, add, queue=name, ids=ids, new_ids=new_ids, **where)
    created = {r["id"] for r in rows}
    moved = [i for i, new in zip(ids, new_ids, strict=True) if new in created]
    refused = [i for i, new in zip(ids, new_ids, strict=True) if new not in created]
    if moved:
        remove = sql.delete_jobs(ctx.q, table=table)
        await retrying.run(ctx, remove, queue=name, ids=moved, table=table)
    if refused:
        fail = sql.fail_not_redriven(ctx.q, destination=into, table=table)
        await retrying.run(ctx, fail, queue=name, ids=refused, **where)
    return len(moved)

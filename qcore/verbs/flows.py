"""Flows: a graph of jobs whose children wait for their parents.

They are written as pg-boss 12.38 writes one (``blocked``, ``blocking``,
``pending_dependencies`` and ``job_dependency`` edges), so either runtime's resolver
releases either's flows.

``flow(jobs)`` takes a list of job specs, each a mapping with ``ref`` (unique in the
flow), ``name`` (its queue), and optionally ``data``, ``options`` (``send`` options)
and ``depends_on`` (refs of its parents). Everything is checked first: at least two
jobs and one edge, unique refs, parents that exist in the flow, no job its own parent,
no cycle (the error names one), each job's options and payload. Then every job and edge
is inserted in one transaction: a job a queue's policy refuses (a singleton already
holding one) undoes the whole flow, since a graph with a hole in it would never finish.
Children start blocked; the resolver (:mod:`qcore.services.flows`) releases a child
once every parent has **completed**. A parent that failed, was cancelled or deleted
never releases its children; ``complete(..., include_queued=True)`` on a child, or a
``retry`` of the parent that then completes, does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from qcore import retry as retrying
from qcore.context import Context
from qcore.db import Database, Json
from qcore.errors import (
    CHECK_VIOLATION,
    FOREIGN_KEY_VIOLATION,
    DatabaseError,
    QueueNotFoundError,
    UniqueViolation,
    ValidationError,
)
from qcore.options import LIST_LIMIT_MAX, check_count, job_id, job_record, queue_name, records_json
from qcore.sql import flows as sql
from qcore.sql import jobs as job_sql
from qcore.sql.locks import notify_channel
from qcore.verbs.queues import keyless_strict_fifo, queue_route

__all__ = ["JobRef", "flow", "get_dependencies", "get_dependents"]

#: (queue name, job id) of a job in a flow
JobRef = tuple[str, uuid.UUID]
_SPEC_KEYS: Final = frozenset({"ref", "name", "data", "options", "depends_on"})
MAX_LIST_LIMIT = LIST_LIMIT_MAX


def _find_cycle(parents: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle of refs (first ref repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(ref: str, path: list[str]) -> list[str] | None:
        state[ref] = 1
        path.append(ref)
        for parent in parents[ref]:
            if state.get(parent) == 1:
                return [*path[path.index(parent) :], parent]
            if parent not in state:
                found = visit(parent, path)
                if found:
                    return found
        path.pop()
        state[ref] = 2
        return None

    for ref in parents:
        if ref not in state:
            found = visit(ref, [])
            if found:
                return list(reversed(found))  # parent -> child order
    return None


def _checked(jobs: object) -> list[dict[str, Any]]:
    """The specs, validated (see the module); each with ``record`` and ``parents``."""
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        raise ValidationError(f"flow takes a list of job specs, got {type(jobs).__name__}")
    if len(jobs) < 2:
        raise ValidationError(f"a flow needs at least 2 jobs, got {len(jobs)}")
    specs: list[dict[str, Any]] = []
    refs: set[str] = set()
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise ValidationError(f"jobs[{i}] must be a mapping, got {type(job).__name__}")
        unknown = sorted(set(job) - _SPEC_KEYS)
        if unknown:
            raise ValidationError(
                f"jobs[{i}]: unknown key {', '.join(unknown)}; a flow job has"
                f" {', '.join(sorted(_SPEC_KEYS))}"
            )
        ref = job.get("ref")
        if not isinstance(ref, str) or not ref:
            raise ValidationError(f"jobs[{i}]: ref must be a non-empty string, got {ref!r}")
        if ref in refs:
            raise ValidationError(f"jobs[{i}]: duplicate ref {ref!r}")
        refs.add(ref)
        name = queue_name(job.get("name"), f"jobs[{i}] ({ref!r}): queue name")
        options = job.get("options") or {}
        if not isinstance(options, Mapping):
            raise ValidationError(f"job {ref!r}: options must be a mapping of send options")
        if "singleton_next_slot" in options:
            raise ValidationError(f"job {ref!r}: singleton_next_slot is for send() only")
        try:
            record = job_record(job.get("data"), **options)
        except ValidationError as exc:
            raise ValidationError(f"job {ref!r}: {exc}") from None
        depends_on = job.get("depends_on") or []
        if (
            isinstance(depends_on, str)
            or not isinstance(depends_on, Sequence)
            or not all(isinstance(parent, str) for parent in depends_on)
        ):
            raise ValidationError(f"job {ref!r}: depends_on must be a list of refs")
        parents = list(dict.fromkeys(depends_on))
        specs.append({"ref": ref, "name": name, "record": record, "parents": parents})
    for spec in specs:
        for parent in spec["parents"]:
            if parent == spec["ref"]:
                raise ValidationError(f"job {parent!r} cannot depend on itself")
            if not isinstance(parent, str) or parent not in refs:
                raise ValidationError(f"job {spec['ref']!r} depends on {parent!r}, not in the flow")
    if not any(spec["parents"] for spec in specs):
        raise ValidationError("a flow needs at least one job with depends_on")
    cycle = _find_cycle({spec["ref"]: spec["parents"] for spec in specs})
    if cycle:
        raise ValidationError(f"the flow has a cycle: {' -> '.join(cycle)}")
    return specs


async def flow(ctx: Context, jobs: Sequence[Mapping[str, Any]]) -> dict[str, uuid.UUID]:
    """Insert a flow (see the module); each ref's job id."""
    specs = _checked(jobs)
    ids = {
        s["ref"]: uuid.UUID(s["record"]["id"]) if "id" in s["record"] else uuid.uuid4()
        for s in specs
    }
    blocking = {parent for s in specs for parent in s["parents"]}
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for s in specs:
        record = {**s["record"], "id": str(ids[s["ref"]])}
        if s["parents"]:
            record.update(blocked=True, pending_dependencies=len(s["parents"]))
        if s["ref"] in blocking:
            record["blocking"] = True
        by_queue.setdefault(s["name"], []).append(record)
    texts = {name: records_json(records, numbered=True) for name, records in by_queue.items()}
    names = {s["ref"]: s["name"] for s in specs}
    edges = [
        {
            "child_name": s["name"],
            "child_id": str(ids[s["ref"]]),
            "parent_name": names[parent],
            "parent_id": str(ids[parent]),
        }
        for s in specs
        for parent in s["parents"]
    ]
    routes = {name: await queue_route(ctx, name) for name in by_queue}
    for name, records in by_queue.items():
        if routes[name].policy == "key_strict_fifo" and any(
            "singleton_key" not in r for r in records
        ):
            raise keyless_strict_fifo(name)
    notify = ctx.backend.capabilities.listen_notify
    channel = notify_channel(ctx.schema_spec) if notify else None

    async def insert(db: Database) -> None:
        for name, records in by_queue.items():
            route = routes[name]
            statement = job_sql.insert_jobs(
                ctx.q, notify=notify, drop_conflicts=False, table=route.table, flow=True
            )
            values = statement.bind(
                queue=name, table=route.table, channel=channel, jobs=Json(records, texts[name])
            )
            [row] = await db.execute(statement.sql, values)
            if not row["queues"]:
                raise QueueNotFoundError(f"queue {name!r} of the flow does not exist")
        statement = sql.insert_dependencies(ctx.q)
        await db.execute(statement.sql, statement.bind(edges=Json(edges)))

    try:
        if ctx.db.in_transaction:
            await insert(ctx.db)
        else:
            await retrying.transaction(ctx, insert)
    except UniqueViolation as exc:
        raise ValidationError(
            f"a queue's policy refused a job of the flow, so none of it was written: {exc}"
        ) from None
    except DatabaseError as exc:
        if exc.sqlstate == CHECK_VIOLATION and "key_strict_fifo" in str(exc):
            ctx.routes.clear()  # a queue made again with that policy since it was read
            raise ValidationError(
                f"a key_strict_fifo queue of the flow refused a job without a singleton_key,"
                f" so none of it was written: {exc}"
            ) from None
        if exc.sqlstate == FOREIGN_KEY_VIOLATION:
            ctx.routes.clear()
            raise QueueNotFoundError(
                f"a queue of the flow does not exist (it may have just been deleted): {exc}"
            ) from None
        raise
    return ids


async def _edges(
    ctx: Context,
    name: str,
    id: object,
    parents: bool,
    limit: int,
    after: JobRef | None,
) -> list[JobRef]:
    queue_name(name)
    value = job_id(id)
    check_count("limit", limit, MAX_LIST_LIMIT)
    if after is not None:
        if not (isinstance(after, tuple) and len(after) == 2):
            raise ValidationError("after must be a (queue name, job id) tuple")
        after = (queue_name(after[0], "after's queue name"), job_id(after[1]))
    statement = sql.get_edges(ctx.q, parents=parents, after=after is not None)
    values: dict[str, Any] = {"name": name, "id": value, "limit": limit}
    if after is not None:
        values.update(after_name=after[0], after_id=after[1])
    rows = await retrying.run(ctx, statement, **values)
    return [(r["name"], r["id"]) for r in rows]


async def get_dependencies(
    ctx: Context, name: str, id: object, *, limit: int = 1000, after: JobRef | None = None
) -> list[JobRef]:
    """The parents of job ``id`` of queue ``name``, as (queue, id) in order.

    At most ``limit`` (1..100,000), after ``after`` (the last of the previous page).
    """
    return await _edges(ctx, name, id, True, limit, after)


async def get_dependents(
    ctx: Context, name: str, id: object, *, limit: int = 1000, after: JobRef | None = None
) -> list[JobRef]:
    """The children of job ``id`` of queue ``name`` (as :func:`get_dependencies`)."""
    return await _edges(ctx, name, id, False, limit, after)

"""Locked claims: jobs claimed and settled inside one transaction, one write each.

A plain claim marks jobs active (one write) and the settle ends them (another). A
locked claim only locks them (``FOR UPDATE SKIP LOCKED``) and settles them, before
commit, straight from queued to how they ended: about half the server's work per
job. What it trades (see the user guide): the jobs read as queued while they run,
a connection is held per batch, and a batch that dies with its connection (crash,
kill, lost network) simply comes back, with no attempt counted.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.context import Context, QueueRoute
from qcore.errors import ConfigError, DatabaseError, ValidationError
from qcore.job import CommandResult, Job
from qcore.options import FetchOptions, normalize_output, queue_name
from qcore.sql import jobs as sql
from qcore.sql._statement import Statement
from qcore.sql.jobs.spec import FetchSpec
from qcore.verbs.jobs.affinity import claim_matching, in_claim_order
from qcore.verbs.jobs.claim import claim_plan_pins, claimed_jobs
from qcore.verbs.jobs.routes import as_jsonb, command_result, routed, settled_ids
from qcore.verbs.queues import missing_queue

#: how long past a batch's longest expiry the server waits on an idle locked claim
#: before it ends the session (and the jobs come back): the client's own watch fails
#: a batch at its expiry, so this only catches a client that froze
HOLD_GRACE_SECONDS = 30

#: the policies whose rules count active jobs, which a locked claim leaves queued
_COUNTING_POLICIES = ("singleton", "stately")


def check_locked_claims(ctx: Context) -> None:
    """ConfigError unless this backend and adapter can hold a claim in a transaction."""
    backend, db = ctx.backend, ctx.db
    if backend.fetch is not FetchStrategy.SKIP_LOCKED or backend.mutation is not (
        MutationStrategy.CTE
    ):
        raise ConfigError(
            f"locked claims need FOR UPDATE SKIP LOCKED and several mutations in one"
            f" statement; the {backend.name} backend has not both: use fetch and complete"
        )
    if db.in_transaction:
        raise ConfigError(
            "a locked claim opens and ends a transaction of its own: call it outside"
            " a transaction (without db=)"
        )
    if not db.atomic_transactions or db.single_connection:
        raise ConfigError(
            f"locked claims hold a transaction open while jobs run, which the"
            f" {db.driver or type(db).__name__} adapter cannot do without stopping every"
            " other statement (one connection, or transactions it does not own)"
        )


def locked_spec(options: Mapping[str, Any]) -> FetchSpec:
    """A locked claim's fetch options, checked.

    They are those of fetch, without group limits (which count active jobs).
    """
    given = FetchSpec.of(options)
    if given.group_concurrency is not None:
        raise ValidationError(
            "group_concurrency counts active jobs, and a locked claim's jobs stay queued:"
            " use fetch, or limit groups locally"
        )
    return given


class LockedBatch:
    """The jobs of a locked claim, settled in the claiming transaction.

    See :func:`locked_fetch`. ``complete`` and ``fail`` settle some or all of them now;
    whatever is left when the block ends is completed (or failed with the error that
    ended it).
    """

    def __init__(self, ctx: Context, route: QueueRoute, name: str, jobs: list[Job]) -> None:
        self._ctx = ctx
        self._route = route
        self.name = name
        self.jobs = jobs
        self._open = {j.id: j for j in jobs}

    @property
    def unsettled(self) -> list[Job]:
        """The jobs not yet completed or failed."""
        return list(self._open.values())

    async def complete(self, jobs: Iterable[Job] | None = None, data: Any = None) -> CommandResult:
        """Complete ``jobs`` (all unsettled ones by default) with the output ``data``."""
        output = normalize_output(data)
        ids = self._take(jobs)
        statement = sql.complete_held(self._ctx.q, table=self._route.table)
        rows = await self._run(statement, ids, output=as_jsonb(output))
        return command_result(ids, settled_ids(ids, rows[0]) if rows else [])

    async def fail(
        self, jobs: Iterable[Job] | None = None, data: Any = None, *, terminal: bool = False
    ) -> CommandResult:
        """Fail ``jobs`` (all unsettled ones by default) as ``fail`` fails running jobs.

        They go to retry after the delay while retries are left, else to failed and
        dead-lettered; with ``terminal``, at once.
        """
        output = normalize_output(data)
        ids = self._take(jobs)
        statement = sql.fail_held(self._ctx.q, terminal=terminal)
        rows = await self._run(statement, ids, output=as_jsonb(output))
        return command_result(ids, [r["id"] for r in rows if r["id"] is not None])

    def _take(self, jobs: Iterable[Job] | None) -> list[uuid.UUID]:
        """The ids of ``jobs``, which count as settled from now on.

        They must be this batch's and not yet settled (checked before anything is
        written).
        """
        if jobs is None:  # all of them: nothing to check
            every = list(self._open)
            self._open.clear()
            return every
        chosen = list(jobs)
        ids: list[uuid.UUID] = []
        for job in chosen:
            if not isinstance(job, Job) or self._open.get(job.id) is not job:
                raise ValidationError(
                    f"{job!r} is not an unsettled job of this locked batch: give jobs it"
                    " holds, each once"
                )
            ids.append(job.id)
        if len(set(ids)) != len(ids):
            raise ValidationError("a job was given twice: give each job once")
        for id_ in ids:
            del self._open[id_]
        return ids

    async def _run(
        self, statement: Statement, ids: list[uuid.UUID], **values: Any
    ) -> list[dict[str, Any]]:
        """The statement's rows for ``ids`` (none when there are none to settle)."""
        if not ids:
            return []
        params = statement.bind(queue=self.name, ids=ids, table=self._route.table, **values)
        rows = await self._ctx.db.execute(statement.sql, params)
        if not rows:
            raise missing_queue(self.name)
        return rows


async def fail_released(
    ctx: Context, name: str, jobs: Iterable[Job], data: Any = None
) -> CommandResult:
    """Fail jobs a locked claim held and gave back, as :meth:`LockedBatch.fail` would have.

    The claim's transaction rolled back because the database refused how they ended (an
    output it cannot store), which leaves them queued with no attempt counted, ready to
    run again for ever. In a transaction of its own: the jobs still queued and free are
    locked and failed (the attempt counted, retried or dead-lettered as the queue says);
    one that another claim took meanwhile is left to it.
    """
    queue_name(name)
    output = as_jsonb(normalize_output(data))
    ids = [job.id for job in jobs]
    async with ctx.db.separate_transaction() as tx:
        lock = sql.lock_released(ctx.q)
        locked = await tx.execute(lock.sql, lock.bind(queue=name, ids=ids))
        free = [r["id"] for r in locked]
        if not free:
            return command_result(ids, [])
        fail = sql.fail_held(ctx.q)
        rows = await tx.execute(fail.sql, fail.bind(queue=name, ids=free, output=output))
    return command_result(ids, [r["id"] for r in rows if r["id"] is not None])


@asynccontextmanager
async def locked_fetch(
    ctx: Context, name: str, **options: Unpack[FetchOptions]
) -> AsyncIterator[LockedBatch]:
    """Claim up to ``batch_size`` ready jobs in a transaction held for the block.

    The claim has fetch's options and order (no ``group_concurrency``; not on singleton
    or stately queues, whose rules count active jobs). On a normal exit the jobs not
    settled are completed; on an exception they are failed with it (then it propagates);
    either way in the same transaction, then committed. Cancelled, or its connection
    lost, the transaction rolls back: the jobs are queued again as they were, no attempt
    counted; so does a database error inside the block (it propagates). An empty batch
    still opens the block (``batch.jobs == []``).
    """
    queue_name(name)
    spec = locked_spec(options)
    async with locked_claim(ctx, name, spec) as batch:
        yield batch


@asynccontextmanager
async def locked_claim(ctx: Context, name: str, spec: FetchSpec) -> AsyncIterator[LockedBatch]:
    """A worker's locked claim: :func:`locked_fetch` as ``spec`` says.

    ``spec`` was checked when it was built, with :func:`locked_spec`, as ``name`` must
    be; this checks only that the context can hold one.
    """
    check_locked_claims(ctx)
    failure: Exception | None = None
    async with ctx.db.separate_transaction() as tx:
        held = ctx.with_db(tx)
        route, jobs = await _claim(held, name, spec)
        batch = LockedBatch(held, route, name, jobs)
        try:
            yield batch
        except DatabaseError:
            raise  # the transaction is lost: it rolls back and the jobs come back
        except Exception as exc:
            failure = exc
            if batch.unsettled:
                await batch.fail(data=exc)
        else:
            if batch.unsettled:
                await batch.complete()
    if failure is not None:
        raise failure


async def _claim(ctx: Context, name: str, spec: FetchSpec) -> tuple[QueueRoute, list[Job]]:
    """The claim, and the route it was made on (the settles address the same table)."""
    low, high = spec.min_priority, spec.max_priority
    ignored = spec.ignore_groups
    affinity = ctx.affinity
    claimed_on: list[QueueRoute] = []

    def order(jobs: list[Job]) -> list[Job]:
        # the lock returns them in index order, ties in any
        return in_claim_order(jobs, spec.priority, spec.order_by_created_on)

    async def attempt(
        route: QueueRoute, limit: int, patterned: bool
    ) -> tuple[list[Job], bool] | None:
        if route.policy in _COUNTING_POLICIES:
            raise ConfigError(
                f"queue {name!r} has the {route.policy} policy, whose rule counts active"
                " jobs, and a locked claim's jobs stay queued: use fetch"
            )
        statement = sql.claim_held(
            ctx.q,
            spec=spec,
            policy=route.policy,
            table=route.table,
            affinity=affinity.installed,
            patterned=patterned,
            keyed=affinity.installed and affinity.key is not None,
            limit=limit,
        )
        params = statement.bind(
            queue=name,
            policy=route.policy,
            table=route.table,
            min_priority=low,
            max_priority=high,
            ignore_groups=list(ignored) if ignored else None,
            hold_grace=HOLD_GRACE_SECONDS,
            matching=affinity.matching(name),
            instance_key=affinity.key,
        )
        # the held transaction is qcore's: the switch may stay off for its settles
        before, _ = claim_plan_pins(ctx, spec.priority, limit, restore=False)
        statements = [*before, (statement.sql, params)]
        rows = (await retrying.execute_together(ctx, statements))[-1]
        if not rows:
            return None
        claimed = claimed_jobs(ctx, name, rows)
        longest = max((j.expire_in_seconds for j in claimed), default=0)
        wanted = (longest + HOLD_GRACE_SECONDS) * 1000
        if wanted > rows[0]["held_for"]:  # a job's own expiry is longer than its queue's
            longer = sql.hold_longer()
            await ctx.db.execute(longer.sql, longer.bind(ms=wanted))
        claimed_on.append(route)
        return order(claimed), bool(rows[0].get("patterned"))

    async def claim(limit: int, first: bool, patterned: bool) -> tuple[list[Job], bool]:
        return await routed(ctx, name, lambda route: attempt(route, limit, patterned))

    jobs = await claim_matching(ctx, name, spec.batch_size, claim, order)
    return claimed_on[-1], jobs

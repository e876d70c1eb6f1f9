"""The claim: ``fetch`` takes the next ready jobs of a queue."""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.backend import FetchStrategy, MutationStrategy
from qcore.context import Context, QueueRoute
from qcore.db import Database, Statements
from qcore.errors import ConfigError, UniqueViolation, ValidationError
from qcore.job import Job
from qcore.options import FetchOptions, ids_and_fences, queue_name
from qcore.sql import affinity as affinity_sql
from qcore.sql import jobs as sql
from qcore.sql.jobs.spec import FetchSpec
from qcore.verbs.jobs.affinity import claim_matching, in_claim_order
from qcore.verbs.jobs.routes import Targets, fence_values, routed


async def fetch(ctx: Context, name: str, **options: Unpack[FetchOptions]) -> list[Job]:
    """Claim up to ``batch_size`` ready jobs (now active), returned in claim order.

    The order is highest priority first, then oldest (``created_on``), as the fetch
    index holds them, so a claim costs the same on a long queue as on a short one, at
    any batch size and however stale the table's statistics (:func:`claim_plan_pins`).
    Jobs of one insert are claimed in the order they were given; jobs sharing a
    ``created_on`` (a pg-boss batch, sends in one transaction) in the index's order, as
    pg-boss claims them. A batch comes back sorted by those keys, then by id.

    ``priority=False`` ignores priority (and sorts every ready job: slower on a
    long queue); ``order_by_created_on=False`` takes any jobs of the highest
    priority (the cheapest claim). The queue's policy applies: key_strict_fifo
    hands out only the head job of each key, and none of a key with a job
    active, in retry or failed; singleton and stately hand out nothing for a key
    with an active job and at most one job per key per batch.
    ``ignore_start_after`` also takes jobs deferred to later. A fetch that lost
    a race on a policy index returns [].

    ``group_concurrency`` (an integer, or ``{"default": n, "tiers": {tier: n}}``)
    claims no job of a ``group_id`` that already has that many active (its
    ``group_tier``'s limit where the tiers name it), counting the jobs active when the
    claim starts: two claims at the same instant can each fill a group's last place,
    as with pg-boss. ``ignore_groups`` leaves the jobs of those group ids alone.

    Affinity: a job added with ``preferred_instance_key_pattern`` is claimed only by a
    server whose instance key the pattern matches (never by an anonymous one); a keyed
    server records its key on every job it claims (``processed_on_instance_key``).
    """
    queue_name(name)
    return await claim(ctx, name, FetchSpec.of(options))


async def complete_and_fetch(
    ctx: Context, name: str, done: list[Job], **options: Unpack[FetchOptions]
) -> list[Job]:
    """Complete the jobs ``done`` and claim the next, in one round trip and one commit.

    The jobs complete with no output, fenced on their attempts, and the claim is
    :func:`fetch`'s: the worker's settle-and-claim, one round trip and one commit per
    batch instead of two. Both happen or neither (an error claims nothing). Where the
    backend takes several mutations of a table in one statement (MutationStrategy.CTE)
    it is one statement; elsewhere the complete and the claim are two statements of one
    transaction, sent together where the adapter pipelines (psycopg). An adapter whose
    transactions are not atomic (an ``execute_sql`` object) cannot promise both or
    neither there: a ConfigError.
    """
    if not isinstance(done, list) or not all(isinstance(j, Job) for j in done):
        raise ValidationError("done must be a list of the Job objects fetched")
    if not settles_and_claims(ctx):
        raise ConfigError(
            f"settle-and-claim on the {ctx.backend.name} backend is two statements in one"
            f" transaction, which the {ctx.db.driver or 'given'} adapter cannot make atomic:"
            " complete, then fetch"
        )
    queue_name(name)
    return await claim(ctx, name, FetchSpec.of(options), done)


def settles_and_claims(ctx: Context) -> bool:
    """Whether :func:`complete_and_fetch` can settle and claim as one unit here.

    It can in one statement (MutationStrategy.CTE), or in one transaction the adapter
    makes atomic.
    """
    return ctx.backend.mutation is MutationStrategy.CTE or ctx.db.atomic_transactions


async def claim(
    ctx: Context, name: str, spec: FetchSpec, done: list[Job] | None = None
) -> list[Job]:
    """A worker's claim: :func:`fetch` as ``spec`` says, which checks nothing again.

    ``spec`` was checked when it was built, as ``name`` must be. With ``done``, those
    jobs complete in the same statement (as :func:`complete_and_fetch`, where
    :func:`settles_and_claims`).
    """
    settles = ids_and_fences(done) if done else None
    priority = spec.priority
    low, high = spec.min_priority, spec.max_priority
    groups = spec.group_concurrency
    ignored = spec.ignore_groups
    skip_locked = ctx.backend.fetch is FetchStrategy.SKIP_LOCKED
    affinity = ctx.affinity
    keyed = affinity.installed and affinity.key is not None
    # the settle and the attribution in the claim statement, or in the claim's transaction
    one_statement = ctx.backend.mutation is MutationStrategy.CTE

    async def attempt(
        route: QueueRoute, limit: int, settling: Targets | None, patterned: bool
    ) -> tuple[list[Job], bool] | None:
        statement = sql.fetch_jobs(
            ctx.q,
            skip_locked=skip_locked,
            spec=spec,
            policy=route.policy,
            table=route.table,
            settle=settling is not None and one_statement,
            affinity=affinity.installed,
            patterned=patterned,
            keyed=keyed,
            record=keyed and one_statement,
            limit=limit,
        )
        params = statement.bind(
            queue=name,
            policy=route.policy,
            table=route.table,
            min_priority=low,
            max_priority=high,
            group_limit=groups.default if groups else None,
            group_tiers=groups.tiers_json() if groups and groups.tiers else None,
            ignore_groups=list(ignored) if ignored else None,
            matching=affinity.matching(name),
            instance_key=affinity.key,
            **(_settled(settling) if settling is not None else {}),
        )

        settle: Statements = []
        if settling is not None and not one_statement:
            # the split settle-and-claim: the complete, then the claim, one transaction
            complete = sql.complete_jobs(ctx.q, fenced=bool(settling[2]), table=route.table)
            settle = [
                (complete.sql, complete.bind(queue=name, table=route.table, **_settled(settling)))
            ]
        before, after = claim_plan_pins(ctx, priority, limit)
        statements = [*before, *settle, (statement.sql, params), *after]
        at = len(before) + len(settle)  # the claim's rows

        async def claim_and_record(tx: Database) -> list[dict[str, Any]]:
            rows = (await tx.execute_together(statements))[at]
            ids = [str(r["id"]) for r in rows if r["id"] is not None]
            if ids:
                record = affinity_sql.record_processed(ctx.q)
                await tx.execute(
                    record.sql, record.bind(queue=name, ids=ids, instance_key=affinity.key)
                )
            return rows

        try:
            if keyed and not one_statement and ctx.db.in_transaction:
                rows = await claim_and_record(ctx.db)
            elif keyed and not one_statement:
                rows = await retrying.transaction(ctx, claim_and_record)
            elif len(statements) > 1:
                rows = (await retrying.execute_together(ctx, statements))[at]
            else:
                rows = await retrying.execute(ctx, statement.sql, params)
        except UniqueViolation:
            if ctx.db.in_transaction or settling is not None:
                raise  # the caller's transaction is aborted, or the settle undone with it
            return [], False  # another claimer took the key's slot first (policy index)
        if not rows:
            return None
        return claimed_jobs(ctx, name, rows), bool(rows[0].get("patterned"))

    async def claim_some(limit: int, first: bool, patterned: bool) -> tuple[list[Job], bool]:
        settling = settles if first else None
        return await routed(ctx, name, lambda route: attempt(route, limit, settling, patterned))

    def order(jobs: list[Job]) -> list[Job]:
        return in_claim_order(jobs, priority, spec.order_by_created_on)

    return await claim_matching(ctx, name, spec.batch_size, claim_some, order)


def claim_plan_pins(
    ctx: Context, priority: bool, limit: int, *, restore: bool | None = None
) -> tuple[Statements, Statements]:
    """What runs around a claim of ``limit`` jobs so that it reads the fetch index in order.

    Both run in the claim's transaction, so the index is read in order however stale the
    table's statistics (:func:`~qcore.sql.jobs.pin_claim_plan`). Nothing runs where the
    engine's planner has no such switch, where the claim's order is not the index's
    (``priority=False``), or for a claim of one (the planner's estimate of a never
    analyzed queue, a few rows, already favours the index read that stops at the first
    row; the pin's statement cost a batch-1 worker drain 12-15 % of its jobs/s,
    measured). After it, with ``restore`` (by default: in the caller's transaction,
    which goes on), the switch is put back.
    """
    if not (priority and limit > 1 and ctx.backend.capabilities.planner_settings):
        return [], []
    if ctx.db.in_transaction if restore is None else restore:
        return [(sql.pin_claim_plan(keep=True).sql, ())], [(sql.unpin_claim_plan().sql, ())]
    return [(sql.pin_claim_plan().sql, ())], []


def claimed_jobs(ctx: Context, name: str, rows: list[dict[str, Any]]) -> list[Job]:
    """The jobs of a claim's rows, for any claim statement: fetch, settle-and-claim, locked.

    It notes the queue's ``notify`` they carry for the workers (``Context.notify_seen``).
    """
    ctx.notify_seen[name] = bool(rows[0]["queue_notify"])
    return Job.from_rows(rows)


def _settled(targets: Targets) -> dict[str, Any]:
    """The values of a settle-and-claim's completing half (no output)."""
    every, plain, fences = targets
    return {"ids": every, "output": None, **fence_values(plain, fences)}

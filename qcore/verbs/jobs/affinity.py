"""Affinity in the verbs: claims and enqueues that respect a job's preferred servers.

A claim takes only the jobs this server may run (see :mod:`qcore.affinity`), and an
enqueue writes the patterns beside its jobs.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from qcore import retry as retrying
from qcore.affinity import affinity_pattern, notify_payload
from qcore.context import Context
from qcore.db import Database
from qcore.errors import ConfigError
from qcore.job import Job
from qcore.sql import affinity as sql
from qcore.sql.locks import notify_channel

__all__ = [
    "PATTERNS_PAGE",
    "PATTERN_OPTION",
    "claim_matching",
    "in_claim_order",
    "take_pattern",
    "write_patterns",
]

#: the send/insert option naming the servers a job may run on
PATTERN_OPTION = "preferred_instance_key_pattern"
#: distinct patterns read per round trip (a server reads and judges them all)
PATTERNS_PAGE = 10_000

#: ``claim(limit, first, patterned)``: one claim of at most ``limit`` jobs (``first``: the
#: call's first, which also settles what the call settles; ``patterned``: the claim's
#: branch, see :func:`~qcore.sql.affinity.affinity_condition`), the jobs in claim order
#: and whether the queue has patterned jobs
Claim = Callable[[int, bool, bool], Awaitable[tuple[list[Job], bool]]]


async def read_patterns(ctx: Context, name: str) -> bool:
    """Read and judge every waiting pattern of ``name``; whether this server's matches changed.

    They are read a page at a time, and every one, since a pattern left unread would
    strand its jobs.
    """
    patterns: list[str] = []
    after: str | None = None
    while True:
        rows = await retrying.run(
            ctx, sql.waiting_patterns(ctx.q), queue=name, after=after, limit=PATTERNS_PAGE
        )
        patterns += (r["pattern"] for r in rows)
        if len(rows) < PATTERNS_PAGE:
            return ctx.affinity.judge(name, patterns)
        after = patterns[-1]


async def claim_matching(
    ctx: Context, name: str, size: int, claim: Claim, order: Callable[[list[Job]], list[Job]]
) -> list[Job]:
    """Claim up to ``size`` jobs this server may run.

    The claim takes the branch the queue's last claim called for: plain, or patterned. A
    plain claim that finds patterned jobs waiting takes nothing, and the server claims
    again on the patterned branch (once, when a queue gains its first patterned jobs). A
    keyed server judges the queue's patterns first when its judgement is stale, and when
    a patterned claim comes back short, reads them again and, if it now matches more,
    claims the rest (``order`` sorts the two claims' jobs together). A queue without
    patterned jobs costs one claim, as before affinity.
    """
    affinity = ctx.affinity
    fresh = affinity.installed and affinity.stale(name)
    if fresh:
        await read_patterns(ctx, name)
    branch = affinity.patterned(name)
    jobs, patterned = await claim(size, True, branch)
    if patterned and not branch:
        affinity.claimed_on(name, patterned=True, jobs=0)
        if affinity.stale(name):
            fresh = True
            await read_patterns(ctx, name)
        jobs, patterned = await claim(size, False, True)
    if (
        patterned
        and not fresh
        and affinity.key is not None
        and len(jobs) < size
        and await read_patterns(ctx, name)
    ):
        more, patterned = await claim(size - len(jobs), False, True)
        if more:
            jobs = order(jobs + more)
    affinity.claimed_on(name, patterned=patterned, jobs=len(jobs))
    return jobs


def in_claim_order(jobs: list[Job], priority: bool, by_age: bool) -> list[Job]:
    """The jobs sorted as a fetch returns them: by the claim's keys, then id."""

    def key(job: Job) -> tuple[Any, ...]:
        rank = -(job.priority or 0) if priority else 0
        return (rank, job.created_on if by_age else 0, job.id)

    return sorted(jobs, key=key)


def take_pattern(ctx: Context, options: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Split a job's options into the options without its pattern, and the pattern checked.

    The pattern is None when not given. Raises ``ConfigError`` from an anonymous server, or
    where the schema lacks qcore's affinity tables, and ``ValidationError`` for a pattern
    that does not compile.
    """
    rest = dict(options)
    value = rest.pop(PATTERN_OPTION, None)
    if value is None:
        return rest, None
    pattern = affinity_pattern(value, ctx.affinity.key)
    if not ctx.affinity.installed:
        raise ConfigError(
            f"{PATTERN_OPTION} needs qcore's affinity tables, which schema {ctx.schema!r}"
            " lacks (made by pg-boss, never migrated by qcore): start once with migrate=True"
        )
    return rest, pattern


async def write_patterns(
    db: Database, ctx: Context, name: str, patterns: list[tuple[uuid.UUID, str]]
) -> None:
    """Write the patterns of the jobs just added, with their wake-ups.

    The patterns come as ``(id, pattern)``, written in the adding transaction ``db``; the
    wake-ups are JSON payloads, which a server whose key cannot match skips.
    """
    if not patterns:
        return
    statement = sql.insert_patterns(ctx.q)
    await db.execute(
        statement.sql,
        statement.bind(
            queue=name, ids=[str(i) for i, _ in patterns], patterns=[p for _, p in patterns]
        ),
    )
    if ctx.backend.capabilities.listen_notify:
        notify = sql.notify_patterned(ctx.q)
        payloads = sorted({notify_payload(name, p) for _, p in patterns})
        await db.execute(
            notify.sql,
            notify.bind(channel=notify_channel(ctx.schema_spec), queue=name, payloads=payloads),
        )

"""Calls of one Boss that arrive together share a statement.

They are concurrent ``complete`` calls (no output) on a queue, and on unlocked claims
concurrent ``fetch`` calls.

Only calls on the Boss's own pool are shared: one made inside a transaction (``db=``,
or a transaction the task has open) runs on its own, in that transaction.
"""

from __future__ import annotations

from typing import Any

from qcore.coalescer import Coalescer
from qcore.context import Context
from qcore.job import CommandResult, Job
from qcore.verbs import jobs as job_ops
from qcore.verbs.jobs.routes import Targets
from qcore.verbs.jobs.settle import complete_together

__all__ = ["COMPLETE_LANES", "SharedStatements"]

#: complete statements one queue may have in flight at once; the calls made meanwhile
#: wait and go together in the next (completes never collide, so two keep the database
#: busy while each stays full)
COMPLETE_LANES = 2


_SharedFetch = Coalescer[tuple[Context, int], list[Job]]
_SharedComplete = Coalescer[tuple[Context, Targets], CommandResult]


class SharedStatements:
    """The coalescers of one Boss, one per queue and set of options."""

    def __init__(self) -> None:
        self._fetches: dict[tuple[Any, ...], Coalescer[tuple[Context, int], list[Job]]] = {}
        self._completes: dict[
            tuple[str, bool], Coalescer[tuple[Context, Targets], CommandResult]
        ] = {}

    async def fetch(self, ctx: Context, name: str, size: int, options: dict[str, Any]) -> list[Job]:
        """``fetch(name, batch_size=size, **options)``, sharing one claim with concurrent calls.

        The claim is shared with the calls made meanwhile with the same options
        (unhashable options are not shared: the fetch says what is wrong with them).
        """
        try:
            key = (name, tuple(sorted(options.items())))
            shared = self._fetches.get(key)
        except TypeError:
            return await job_ops.fetch(ctx, name, batch_size=size, **options)
        if shared is None:
            shared = Coalescer(lambda calls: _fetch_together(name, options, calls))
            self._fetches[key] = shared
        return await shared((ctx, size))

    async def complete(
        self, ctx: Context, name: str, targets: Targets, include_queued: bool
    ) -> CommandResult:
        """``complete(name, ids)`` with no output, the ids checked (``targets``)."""
        key = (name, include_queued)
        shared = self._completes.get(key)
        if shared is None:
            shared = Coalescer(
                lambda calls: _complete_together(name, include_queued, calls), COMPLETE_LANES
            )
            self._completes[key] = shared
        return await shared((ctx, targets))


async def _fetch_together(
    name: str, options: dict[str, Any], calls: list[tuple[Context, int]]
) -> list[list[Job]]:
    """One claim for every call waiting at once; the jobs dealt out in order."""
    sizes = [n for _, n in calls]
    jobs = await job_ops.fetch(calls[0][0], name, batch_size=sum(sizes), **options)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [jobs[start : start + n] for start, n in zip(starts, sizes, strict=True)]


async def _complete_together(
    name: str, include_queued: bool, calls: list[tuple[Context, Targets]]
) -> list[CommandResult]:
    targets = [t for _, t in calls]
    return await complete_together(calls[0][0], name, targets, include_queued=include_queued)

"""Flows' verbs of ``Boss``: job dependencies and their resolver."""

from __future__ import annotations

import uuid
from typing import Any

from qcore.arguments import verb
from qcore.boss.services import busy
from qcore.boss.verbs.parts import BossParts
from qcore.services.flows import FlowResolver
from qcore.verbs import flows as flow_ops

__all__ = ["FlowVerbs"]


class FlowVerbs:
    """Flows (job dependencies) and their resolver (a part of ``Boss``)."""

    @verb()
    async def flow(
        self: BossParts, jobs: list[dict[str, Any]], *, db: Any = None
    ) -> dict[str, uuid.UUID]:
        """Insert a graph of jobs in one transaction; returns each ref's id.

        Each job is a dict of ``ref``, ``name`` (its queue), ``data``, ``options`` (send
        options) and ``depends_on`` (refs of its parents). A child waits until every
        parent has completed.
        """
        return await flow_ops.flow(self.context(db), jobs)

    @verb()
    async def get_dependencies(
        self: BossParts,
        name: str,
        id: uuid.UUID | str,
        *,
        limit: int = 1000,
        after: flow_ops.JobRef | None = None,
        db: Any = None,
    ) -> list[flow_ops.JobRef]:
        """The parents of a job, as (queue, id), at most ``limit`` after ``after``."""
        return await flow_ops.get_dependencies(self.context(db), name, id, limit=limit, after=after)

    @verb()
    async def get_dependents(
        self: BossParts,
        name: str,
        id: uuid.UUID | str,
        *,
        limit: int = 1000,
        after: flow_ops.JobRef | None = None,
        db: Any = None,
    ) -> list[flow_ops.JobRef]:
        """The children of a job, as (queue, id), at most ``limit`` after ``after``."""
        return await flow_ops.get_dependents(self.context(db), name, id, limit=limit, after=after)

    @verb()
    async def resolve_flow(self: BossParts) -> int:
        """Release now the children whose parents have all completed.

        This is the resolver's pass, ungated by its interval; returns how many parents it
        resolved.
        """
        self.context()  # NotStartedError before start()
        flows = self._running.get("flows", FlowResolver)
        if flows is None:
            return 0
        return await flows.resolve_now()

    def is_resolving_flow(self: BossParts) -> bool:
        """Whether a resolver pass (background or :meth:`resolve_flow`) is in flight."""
        return busy(self._running, "flows")

"""``local_group_concurrency``: a per-process limit on the jobs of one group run at once.

It is kept in memory: no database cost, no coordination between processes.
"""

from __future__ import annotations

from collections.abc import Sequence

from qcore.job import Job
from qcore.options import GroupLimits


class LocalGroups:
    """The jobs of each group a worker is running, against the group's limit.

    The limit is that of its jobs' ``group_tier`` where the tiers name it, else the
    default.
    """

    def __init__(self, limits: GroupLimits) -> None:
        self.limits = limits
        self._running: dict[str, int] = {}
        self._tier: dict[str, str | None] = {}  # the tier each running group's jobs last had

    def admit(self, jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
        """Split a claimed batch into the jobs to run and the surplus to hand back.

        The jobs to run are counted as running from now; the surplus is that of groups
        already at their limit. Jobs with no group always run.
        """
        admitted: list[Job] = []
        surplus: list[Job] = []
        for job in jobs:
            group = job.group_id
            if group is None:
                admitted.append(job)
                continue
            running = self._running.get(group, 0)
            if running < self.limits.limit(job.group_tier):
                self._running[group] = running + 1
                self._tier[group] = job.group_tier
                admitted.append(job)
            else:
                surplus.append(job)
        return admitted, surplus

    def release(self, jobs: Sequence[Job]) -> None:
        """The admitted ``jobs`` have ended (settled or abandoned)."""
        for job in jobs:
            group = job.group_id
            if group is None or group not in self._running:
                continue
            if self._running[group] <= 1:
                del self._running[group]
                del self._tier[group]
            else:
                self._running[group] -= 1

    def full(self) -> list[str]:
        """The groups with no room left, for the next fetch to leave alone.

        A group is full at the limit of the tier its jobs last had (a group whose jobs
        change tier may be fetched, and its surplus handed back, once more).
        """
        return [
            group
            for group, running in self._running.items()
            if running >= self.limits.limit(self._tier[group])
        ]

    def running(self, group: str) -> int:
        return self._running.get(group, 0)

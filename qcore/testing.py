"""Helpers for your own test suites: wait for a job to get somewhere, without sleeps.

::

    from qcore.testing import JobSpy

    spy = JobSpy(boss, "emails")
    await boss.send("emails", {"to": "a@example.com"})
    job = await spy.wait_for_job(lambda data: data["to"] == "a@example.com")
    assert job.output == {"sent": True}

A spy reads the queue's rows (through ``find_jobs``), so it sees jobs whatever process
sent or worked them, a pg-boss one included. A state the job has already passed counts
as reached: every job was ``created``; a job that has started (``started_on``) has been
``active``; one with a ``retry_count`` has been in ``retry``; the final states count
while the job is in them. For time-dependent code (cron, retention, backoff) move the
schema's clock instead of sleeping: ``qcore.conformance.helpers.set_clock``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from qcore.boss import Boss
from qcore.errors import ValidationError
from qcore.job import Job, JobState
from qcore.options import check_seconds, job_id, queue_name

__all__ = ["JobSpy"]


def _reached(job: Job, state: JobState) -> bool:
    if state is JobState.CREATED:
        return True
    if state is JobState.ACTIVE:
        return job.started_on is not None
    if state is JobState.RETRY:
        return job.state is JobState.RETRY or job.retry_count > 0
    return job.state is state


class JobSpy:
    """Waits for jobs of one queue to reach a state; ``poll_seconds`` between reads."""

    def __init__(self, boss: Boss, name: str, *, poll_seconds: float = 0.05) -> None:
        self.boss = boss
        self.name = queue_name(name)
        self.poll_seconds = check_seconds("poll_seconds", poll_seconds, 0, inclusive=False)

    async def wait_for_job(
        self,
        predicate: Callable[[Any], bool] | None = None,
        *,
        state: JobState | str = JobState.COMPLETED,
        id: uuid.UUID | str | None = None,
        timeout: float = 30.0,
    ) -> Job:
        """The first job (oldest first) whose ``data`` satisfies ``predicate``, once in ``state``.

        With ``id``, that job; at once if one already has reached ``state``.
        ``TimeoutError`` after ``timeout`` seconds, saying what was seen.
        """
        try:
            wanted = JobState(state)
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise ValidationError(f"state must be one of {known}, got {state!r}") from None
        if predicate is not None and not callable(predicate):
            raise ValidationError(f"predicate must be callable, got {predicate!r}")
        check_seconds("timeout", timeout, 0, inclusive=False)
        wanted_id = job_id(id) if id is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen: list[Job] = []
        while True:
            jobs = await self.boss.find_jobs(self.name, id=wanted_id)
            seen = [j for j in jobs if predicate is None or predicate(j.data)]
            for job in seen:
                if _reached(job, wanted):
                    return job
            if loop.time() >= deadline:
                states = (
                    ", ".join(f"{j.id}: {j.state.value if j.state else None}" for j in seen[:10])
                    or "none"
                )
                raise TimeoutError(
                    f"no job of queue {self.name!r} matching reached {wanted.value} within"
                    f" {timeout:g} s; matching jobs seen: {states}"
                )
            await asyncio.sleep(self.poll_seconds)

"""The test helper for users' suites (qcore.testing.JobSpy) on every backend: waits on
the database's rows, resolves at once for a state already reached, times out clearly."""

from __future__ import annotations

import asyncio

import pytest

from qcore import Boss, Job, JobState
from qcore.errors import ValidationError
from qcore.testing import JobSpy

pytestmark = pytest.mark.feature("testing")


async def test_wait_for_a_job_a_worker_completes(boss: Boss) -> None:
    await boss.create_queue("mail")
    spy = JobSpy(boss, "mail")

    async def handler(jobs: list[Job]) -> dict[str, str]:
        return {"sent": jobs[0].data["to"]}

    await boss.send("mail", {"to": "a@example.com"})
    await boss.send("mail", {"to": "b@example.com"})
    waiting = asyncio.ensure_future(spy.wait_for_job(lambda d: d["to"] == "b@example.com"))
    await boss.work("mail", handler, polling_interval_seconds=0.5)
    job = await asyncio.wait_for(waiting, 60)
    assert job.state is JobState.COMPLETED and job.output == {"sent": "b@example.com"}
    # reached already: at once, and an earlier state counts as passed
    again = await spy.wait_for_job(lambda d: d["to"] == "a@example.com", state="active")
    assert again.state is JobState.COMPLETED and again.started_on is not None
    assert (await spy.wait_for_job(state="created", id=job.id)).id == job.id


async def test_failed_and_timeout(boss: Boss) -> None:
    await boss.create_queue("q", retry_limit=0)
    spy = JobSpy(boss, "q", poll_seconds=0.01)
    job_id = await boss.send("q", {"n": 1})
    with pytest.raises(TimeoutError, match=f"{job_id}: created"):
        await spy.wait_for_job(state="completed", timeout=0.3)
    [job] = await boss.fetch("q")
    await boss.fail("q", job, "boom")
    failed = await spy.wait_for_job(lambda d: d["n"] == 1, state=JobState.FAILED)
    assert failed.output == {"value": "boom"}
    with pytest.raises(ValidationError, match="state must be one of"):
        await spy.wait_for_job(state="done")
    with pytest.raises(ValidationError, match="timeout"):
        await spy.wait_for_job(timeout=0)
    with pytest.raises(ValidationError, match="queue name"):
        JobSpy(boss, "bad name!")

"""A new user's first hour with workers: what the log says when a handler fails, when a
queue is missing or deleted, when a stop waits for running jobs, when ``start()``
fails, and when a connection URL has the wrong scheme. Real PostgreSQL throughout (the
``boss`` fixture: a started Boss on a schema of the test's own)."""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
import warnings
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import locks_claims, until
from qcore.errors import (
    ConfigError,
    JobFailedError,
    NotInstalledError,
    QueueNotFoundError,
)
from qcore.events import WarningEvent
from qcore.job import Job, JobResult, JobState
from qcore.worker.failures import Failure, FailureLog

pytestmark = [pytest.mark.postgres, pytest.mark.feature("workers")]

#: every wait in these tests: generous, the machine may be busy
DEADLINE = 60.0


def records(caplog: pytest.LogCaptureFixture, contains: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if contains in r.getMessage()]


async def state(boss: Boss, queue: str, job_id: Any) -> JobState | None:
    job = await boss.get_job_by_id(queue, job_id)
    return job.state if job is not None else None


async def boom(jobs: list[Job]) -> None:
    raise RuntimeError("boom: the handler broke")


# -- part 2: failed attempts in the log ------------------------------------------------


async def test_a_failed_attempt_is_logged_with_queue_job_attempt_and_error(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qcore")
    await boss.create_queue("dlq")
    await boss.create_queue("poison", retry_limit=1, retry_delay=0, dead_letter="dlq")
    errors: list[Any] = []
    boss.on("error", errors.append)
    job_id = await boss.send("poison", {"n": 1})
    await boss.work("poison", boom, polling_interval_seconds=0.5)
    await until(
        lambda: records(caplog, "retries exhausted"), DEADLINE, what="the second attempt failed"
    )
    lines = records(caplog, f"job {job_id} failed")
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING], lines
    first, last = (r.getMessage() for r in lines)
    assert all(r.name == "qcore.worker" for r in lines)
    assert "queue 'poison'" in first and "(attempt 1 of 2)" in first
    assert "RuntimeError: boom: the handler broke" in first
    assert "(attempt 2 of 2)" in last
    assert "retries exhausted, copied to dead letter queue 'dlq'" in last
    # the traceback once for this error at WARNING, then at DEBUG
    assert lines[0].exc_info is not None and lines[1].exc_info is None
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in records(caplog, "traceback"))
    # the same through the error event, one per failed job; never logged a second time
    failed = [e for e in errors if isinstance(e, JobFailedError)]
    assert [(e.queue, e.job_id, e.attempt, e.attempts) for e in failed] == [
        ("poison", job_id, 1, 2),
        ("poison", job_id, 2, 2),
    ]
    assert isinstance(failed[0].error, RuntimeError) and not failed[0].retries_exhausted
    assert failed[1].retries_exhausted and failed[1].dead_letter == "dlq"
    assert not [r for r in caplog.records if r.name == "qcore" and "boom" in r.getMessage()]

    async def failed_for_good() -> bool:  # (logged as the batch ends, before it is settled)
        return await state(boss, "poison", job_id) is JobState.FAILED

    await until(failed_for_good, DEADLINE, what="the job failed for good")


async def test_a_failed_batch_is_one_line_naming_its_jobs(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="qcore")
    await boss.create_queue("batchy", retry_limit=0)
    ids = [await boss.send("batchy", {"n": n}) for n in range(3)]
    await boss.work("batchy", boom, batch_size=3, polling_interval_seconds=0.5)
    await until(lambda: records(caplog, "queue 'batchy'"), DEADLINE, what="the batch failed")
    (line,) = records(caplog, "queue 'batchy'")
    text = line.getMessage()
    assert "3 jobs (" in text and all(str(i) in text for i in ids), text
    assert "(attempt 1 of 1)" in text and "retries exhausted" in text
    assert "RuntimeError: boom" in text


async def test_per_job_results_log_the_failed_ones(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="qcore")
    await boss.create_queue("each", retry_limit=3)
    good, bad = await boss.send("each", {"ok": True}), await boss.send("each", {"ok": False})

    async def handler(jobs: list[Job]) -> list[JobResult]:
        return [
            JobResult(j.id, "completed" if j.data["ok"] else "failed", {"message": "no"})
            for j in jobs
        ]

    await boss.work(
        "each", handler, batch_size=2, per_job_results=True, polling_interval_seconds=0.5
    )
    await until(lambda: records(caplog, "queue 'each'"), DEADLINE, what="the failed job was logged")
    text = records(caplog, "queue 'each'")[0].getMessage()
    assert f"job {bad} failed (attempt 1 of 4)" in text and str(good) not in text


async def test_locked_fetch_failures_are_logged(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = boss.context()
    if not locks_claims(ctx):
        pytest.skip(
            f"locked claims need FOR UPDATE SKIP LOCKED, one-statement mutations and a pooled"
            f" adapter, which the {ctx.backend.name} backend here has not"
        )
    caplog.set_level(logging.INFO, logger="qcore")
    await boss.create_queue("locked", retry_limit=2)
    job_id = await boss.send("locked", {})
    await boss.work("locked", boom, locked_fetch=True, polling_interval_seconds=0.5)
    await until(
        lambda: records(caplog, f"job {job_id} failed"), DEADLINE, what="the locked attempt failed"
    )
    text = records(caplog, f"job {job_id} failed")[0].getMessage()
    assert "queue 'locked'" in text and "(attempt 1 of 3)" in text and "RuntimeError" in text


async def test_a_poison_queue_cannot_flood_the_log(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    """At most ``lines`` lines per queue per window; then one summary line once the
    window has ended (the window runs on a clock the test moves)."""
    caplog.set_level(logging.INFO, logger="qcore")
    now = [1000.0]
    boss._failures = FailureLog(lines=3, window=60.0, clock=lambda: now[0])
    await boss.create_queue("flood", retry_limit=0)
    await boss.insert("flood", [{"data": {"n": n}} for n in range(12)])
    errors: list[Any] = []
    boss.on("error", errors.append)
    await boss.work("flood", boom, polling_interval_seconds=0.5)
    await until(lambda: len(errors) == 12, DEADLINE, what="every job failed")
    assert len(records(caplog, "queue 'flood'")) == 3
    assert not records(caplog, "more failures")
    now[0] += 61  # the window ends: the next poll says what was left out
    (summary,) = await until(
        lambda: records(caplog, "more failures"), DEADLINE, what="the summary line"
    )
    assert summary.getMessage() == "…and 9 more failures on queue 'flood' in the last 60 s"
    await boss.send("flood", {"n": "again"})
    await until(
        lambda: len(records(caplog, "queue 'flood'")) == 4, DEADLINE, what="a new window logs again"
    )


# -- part 3: missing and deleted queues ------------------------------------------------


async def test_work_on_a_queue_that_does_not_exist_is_refused(boss: Boss) -> None:
    with pytest.raises(QueueNotFoundError, match="'nowhere' does not exist") as caught:
        await boss.work("nowhere", boom)
    assert caught.value.queues == ("nowhere",)
    assert boss.worker_statuses() == []
    await boss.create_queue("here")
    boss.handler("here")(boom)
    boss.handler("gone")(boom)
    boss.handler("lost")(boom)
    with pytest.raises(QueueNotFoundError) as caught:
        await boss.work_handlers()
    assert caught.value.queues == ("gone", "lost")
    assert boss.worker_statuses() == []  # nothing started


async def test_a_queue_deleted_under_its_worker_warns_once_backs_off_and_resumes(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="qcore")
    await boss.create_queue("fleeting")
    done: list[Any] = []

    async def handler(jobs: list[Job]) -> None:
        done.extend(j.id for j in jobs)

    seen: list[WarningEvent] = []
    boss.on("warning", seen.append)
    errors: list[Any] = []
    boss.on("error", errors.append)
    await boss.work("fleeting", handler, polling_interval_seconds=0.5)
    await boss.delete_queue("fleeting")
    await until(
        lambda: records(caplog, "does not exist"), DEADLINE, what="the worker saw the queue gone"
    )
    # several polls' worth of time: 0.5 s polls would be 10 by now; backing off, 4 or so
    await asyncio.sleep(5)
    missing = records(caplog, "does not exist")
    assert len(missing) == 1 and missing[0].levelno == logging.WARNING, missing
    assert [w.type for w in seen] == ["queue_missing"]
    assert not [r for r in caplog.records if r.exc_info and "fleeting" in r.getMessage()]
    assert errors == []
    (status,) = boss.worker_statuses()
    assert status.last_error is not None and "fleeting" in status.last_error
    await boss.create_queue("fleeting")
    job_id = await boss.send("fleeting", {})
    await until(lambda: job_id in done, DEADLINE, what="the worker resumed")
    assert records(caplog, "exists again")


# -- part 8: stop, start, URLs ---------------------------------------------------------


async def test_a_stop_with_running_jobs_says_what_it_waits_for(
    boss: Boss, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="qcore")
    await boss.create_queue("slow")
    started = asyncio.Event()

    async def slow(jobs: list[Job]) -> None:
        started.set()
        await asyncio.sleep(1)

    await boss.send("slow", {})
    await boss.send("slow", {})
    await boss.work("slow", slow, batch_size=2, polling_interval_seconds=0.5)
    await asyncio.wait_for(started.wait(), DEADLINE)
    await boss.stop(timeout=20)
    (line,) = records(caplog, "stopping: waiting")
    assert line.getMessage() == "stopping: waiting up to 20 s for 2 running jobs to finish"
    assert line.levelno == logging.WARNING


async def test_a_failed_start_leaves_nothing_open(pg_dsn: str) -> None:
    schema = f"never_installed_{uuid.uuid4().hex[:8]}"
    boss = Boss(pg_dsn, schema=schema, migrate=False, supervise=False)
    before = set(asyncio.all_tasks())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(NotInstalledError):
            await boss.start()
        assert boss._db is None  # the pool it opened is closed again
        await asyncio.sleep(0.2)  # what a closed pool finishes on the loop
        gc.collect()
    left = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert left == [], left
    assert [str(w.message) for w in caught] == []
    assert not boss.started
    await boss.stop()  # still fine


@pytest.mark.parametrize("scheme", ["postgress", "http", "postgresql+asyncpg"])
async def test_a_url_of_another_scheme_is_named_before_connecting(scheme: str) -> None:
    url = f"{scheme}://app:s3cret-pw@127.0.0.1:1/app"
    with pytest.raises(ConfigError) as caught:
        Boss(url)
    text = str(caught.value)
    assert text.startswith(
        f"not a PostgreSQL URL: scheme {scheme!r} (expected postgresql:// or postgres://)"
    )
    assert "s3cret" not in text
    for fine in ("postgres://app@127.0.0.1:1/app", "host=127.0.0.1 port=1 dbname=app"):
        Boss(fine)


def test_a_failure_line_survives_an_undecodable_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A message with a lone surrogate (bytes decoded with surrogateescape) is escaped in
    the line and logged without its traceback, which no UTF-8 handler could write."""
    caplog.set_level(logging.INFO, logger="qcore")
    failures = FailureLog()
    jobs = [Job(uuid.uuid4(), "q", {}, n, 60, retry_limit=2) for n in (0, 1)]
    try:
        raise RuntimeError("cannot open caf\udce9.txt")
    except RuntimeError as exc:
        failures.failed("q", Failure(jobs, exc, False, None))
    (line,) = caplog.records
    assert "attempts 1-2 of 3" in line.getMessage()
    assert "RuntimeError: cannot open caf\\udce9.txt" in line.getMessage()
    assert line.exc_info is None
    line.getMessage().encode("utf-8")

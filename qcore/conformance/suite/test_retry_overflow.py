"""A retry delay can never leave the range of a timestamp: with ``retry_backoff`` the
delay doubles with every failure, and a large ``retry_delay`` reaches past what an
interval holds by the 16th. The computed delay is capped at
:data:`qcore.sql.jobs.fail.MAX_RETRY_DELAY_SECONDS` in every statement that computes it
(fail on both mutation strategies, a locked claim's fail, the monitor's expiry), so
the job is retried and a monitor pass over a shared job table is not stopped by it.
Below the cap the delay is pg-boss's, unchanged."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from qcore.backend import FetchStrategy, MutationStrategy
from qcore.conformance.helpers import row, server_now
from qcore.context import Context
from qcore.services.monitor import supervise
from qcore.sql.jobs.fail import MAX_RETRY_DELAY_SECONDS
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("retries")

#: the largest retry_delay a queue accepts (an integer column)
HUGE_DELAY = 2**31 - 1
CAP = dt.timedelta(seconds=MAX_RETRY_DELAY_SECONDS)
SLACK = dt.timedelta(milliseconds=50)


async def _huge_queue(ctx: Context, name: str, **options: Any) -> None:
    await queues.create_queue(
        ctx, name, retry_limit=40, retry_delay=HUGE_DELAY, retry_backoff=True, **options
    )


async def _set_row(ctx: Context, job_id: uuid.UUID, assignments: str, *values: Any) -> None:
    """Write a job's columns directly (as another client on the schema could)."""
    await ctx.db.execute(
        f"UPDATE {ctx.q}.job SET {assignments} WHERE id = $1::uuid", [job_id, *values]
    )


def test_the_cap_is_the_longest_delay_a_queue_can_be_given() -> None:
    assert MAX_RETRY_DELAY_SECONDS == HUGE_DELAY


async def test_backoff_past_the_sixteenth_failure_is_capped(sctx: Context) -> None:
    await _huge_queue(sctx, "huge")
    sent = await jobs.send(sctx, "huge")
    seen: list[tuple[dt.datetime, dt.datetime, dt.datetime]] = []
    for attempt in range(18):
        [job] = await jobs.fetch(sctx, "huge", ignore_start_after=True)
        assert job.id == sent and job.retry_count == attempt
        before = await server_now(sctx)
        result = await jobs.fail(sctx, "huge", job, {"attempt": attempt})
        after = await server_now(sctx)
        assert result.affected == 1, attempt
        r = await row(sctx, sent)
        assert r["state"] == "retry" and r["output"] == {"attempt": attempt}
        seen.append((before, r["start_after"], after))
    # every attempt's uncapped delay (at least HUGE_DELAY) is past the cap
    for attempt, (before, start, after) in enumerate(seen):
        assert before - SLACK + CAP <= start <= after + SLACK + CAP, attempt


async def test_backoff_below_the_cap_is_unchanged(sctx: Context) -> None:
    """Where pg-boss's delay is below the cap, it is the delay: attempt 15 of a
    30000 s base waits between 30000 * 2^15 and 30000 * 2^16 seconds (under the cap)."""
    base = 30_000
    assert base * 2**16 < MAX_RETRY_DELAY_SECONDS
    await queues.create_queue(sctx, "q", retry_limit=40, retry_delay=base, retry_backoff=True)
    sent = await jobs.send(sctx, "q")
    assert sent is not None
    assert len(await jobs.fetch(sctx, "q")) == 1
    await _set_row(sctx, sent, "retry_count = 15")
    before = await server_now(sctx)
    assert (await jobs.fail(sctx, "q", sent)).affected == 1  # by id: not fenced on the count
    after = await server_now(sctx)
    start = (await row(sctx, sent))["start_after"]
    shortest = dt.timedelta(seconds=base * 2**15)
    longest = dt.timedelta(seconds=base * 2**16)
    assert before - SLACK + shortest <= start <= after + SLACK + longest


async def test_a_failure_past_the_limit_moves_start_after_within_the_cap(
    sctx: Context,
) -> None:
    """A job counted past its limit (the limit lowered while it ran) is failed, and
    its start_after moved by the backoff as pg-boss moves it, within the cap."""
    await _huge_queue(sctx, "huge")
    sent = await jobs.send(sctx, "huge")
    assert sent is not None
    assert len(await jobs.fetch(sctx, "huge")) == 1
    await _set_row(sctx, sent, "retry_count = 20, retry_limit = 5")
    before = await server_now(sctx)
    assert (await jobs.fail(sctx, "huge", sent, "over")).affected == 1
    after = await server_now(sctx)
    r = await row(sctx, sent)
    assert r["state"] == "failed" and r["output"] == {"value": "over"}
    assert before - SLACK + CAP <= r["start_after"] <= after + SLACK + CAP


async def test_an_uncapped_row_does_not_stop_expiry_of_the_shared_table(sctx: Context) -> None:
    """A job whose retry would overflow and a job of another queue, both expired in
    the same job table: one pass retries both."""
    await _huge_queue(sctx, "huge", expire_in_seconds=60)
    await queues.create_queue(sctx, "plain", retry_limit=1, expire_in_seconds=60)
    huge = await jobs.send(sctx, "huge")
    plain = await jobs.send(sctx, "plain")
    assert huge is not None and plain is not None
    for name in ("huge", "plain"):
        assert len(await jobs.fetch(sctx, name)) == 1
    # the 20th attempt of the huge job, both started long ago
    await _set_row(sctx, huge, "retry_count = 20")
    for job_id in (huge, plain):
        await _set_row(sctx, job_id, "started_on = started_on - interval '1 hour'")
    tables = await sctx.db.execute(
        f"SELECT DISTINCT table_name FROM {sctx.q}.queue WHERE name IN ('huge', 'plain')"
    )
    assert len(tables) == 1  # one physical table, one expiry statement for both

    before = await server_now(sctx)
    result = await supervise(sctx)
    after = await server_now(sctx)
    assert result.expired == 2
    r = await row(sctx, plain)
    assert r["state"] == "retry" and r["output"] == jobs.TIMED_OUT
    r = await row(sctx, huge)
    assert r["state"] == "retry" and r["output"] == jobs.TIMED_OUT
    assert before - SLACK + CAP <= r["start_after"] <= after + SLACK + CAP


async def test_a_locked_claim_fail_is_capped(ctx: Context, pool: Any) -> None:
    pctx = ctx.with_db(pool)
    if not (
        pctx.backend.fetch is FetchStrategy.SKIP_LOCKED
        and pctx.backend.mutation is MutationStrategy.CTE
        and not pctx.db.single_connection
    ):
        pytest.skip("locked claims need SKIP LOCKED, one-statement mutations and a pool")
    await _huge_queue(pctx, "huge")
    sent = await jobs.send(pctx, "huge")
    assert sent is not None
    # an attempt that ran before: the claim counts it, the 21st
    await _set_row(pctx, sent, "started_on = now(), retry_count = 20")
    before = await server_now(pctx)
    async with jobs.locked_fetch(pctx, "huge") as batch:
        [job] = batch.jobs
        assert job.retry_count == 21
        await batch.fail([job], {"locked": True})
    after = await server_now(pctx)
    r = await row(pctx, sent)
    assert r["state"] == "retry" and r["output"] == {"locked": True}
    assert before - SLACK + CAP <= r["start_after"] <= after + SLACK + CAP

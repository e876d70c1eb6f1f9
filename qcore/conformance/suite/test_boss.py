"""The public facade end to end: every verb reaches its operation, on every backend."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend, FetchStrategy
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.job import JobState

pytestmark = pytest.mark.feature("lifecycle")


async def test_round_trip_through_the_facade(boss: Boss) -> None:
    assert await boss.is_installed()
    assert await boss.schema_version() == 46
    await boss.create_queue("mail", retry_limit=1)
    queue = await boss.get_queue("mail")
    assert queue is not None and queue.retry_limit == 1
    job_id = await boss.send("mail", {"to": "a@example.com"}, priority=3)
    assert job_id is not None
    [job] = await boss.fetch("mail")
    assert job.id == job_id and job.data == {"to": "a@example.com"}
    result = await boss.complete("mail", job.id, {"sent": True})
    assert result.affected == 1
    stored = await boss.get_job_by_id("mail", job_id)
    assert stored is not None and stored.state is JobState.COMPLETED
    assert stored.output == {"sent": True}


async def test_send_joins_the_callers_transaction(boss: Boss) -> None:
    await boss.create_queue("tx")
    with pytest.raises(RuntimeError):
        async with boss.db.transaction() as tx:
            assert await boss.send("tx", {"n": 1}, db=tx) is not None
            raise RuntimeError("the caller rolls back")
    assert await boss.fetch("tx") == []
    async with boss.db.transaction() as tx:
        kept = await boss.send("tx", {"n": 2}, db=tx)
    [job] = await boss.fetch("tx")
    assert job.id == kept


async def test_bad_input_is_refused_before_writing(boss: Boss) -> None:
    with pytest.raises(QueueNotFoundError):
        await boss.send("nowhere", {})
    with pytest.raises(ValidationError):
        await boss.create_queue("bad name!")
    await boss.create_queue("q")
    with pytest.raises(ValidationError):
        await boss.send("q", {"x": float("nan")})
    assert await boss.fetch("q", batch_size=10) == []


async def test_start_is_idempotent_and_stop_keeps_a_given_connection(boss: Boss) -> None:
    assert await boss.start() is boss
    db = boss.db
    await boss.stop()
    assert await db.execute("SELECT 1 AS one") == [{"one": 1}]  # the caller's: still open
    await boss.start()


@pytest.mark.usefixtures("installed")
async def test_unlocked_claims_of_one_instance_share_a_statement(
    db: Any, backend: Backend, schema: str
) -> None:
    """With the atomic-update fetch, four concurrent fetch() calls of one Boss would race
    for the same candidate rows; sharing one statement, each gets its full batch."""
    unlocked = dataclasses.replace(backend, fetch=FetchStrategy.ATOMIC_UPDATE)
    async with Boss(db=db, backend=unlocked, schema=schema) as boss:
        await boss.create_queue("q")
        await boss.insert("q", [{"data": i} for i in range(40)])
        batches = await asyncio.gather(*(boss.fetch("q", batch_size=10) for _ in range(4)))
        assert [len(b) for b in batches] == [10, 10, 10, 10]
        assert len({j.id for b in batches for j in b}) == 40
        with pytest.raises(ValidationError, match="batch_size must be an integer >= 1"):
            await boss.fetch("q", batch_size=0)

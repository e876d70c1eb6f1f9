"""Reading jobs and warnings a page at a time (what the dashboard lists) on every
backend: newest first, keyset pages that neither skip nor repeat a job (ties on
``created_on`` included), a state filter, and the same typed errors for bad input."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from qcore.errors import QueueNotFoundError, ValidationError

pytestmark = pytest.mark.feature("dashboard")


async def test_pages_walk_every_job_once_newest_first(boss: Any) -> None:
    await boss.create_queue("pages")
    sent = await boss.insert("pages", [{"data": {"n": n}} for n in range(23)])
    # five jobs sharing one created_on, as pg-boss's batch insert writes them
    tied = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    await boss.insert("pages", [{"data": {"tie": n}} for n in range(5)])
    q = boss.context().q
    await boss.db.execute(
        f"UPDATE {q}.job SET created_on = $1 WHERE name = 'pages' AND data ? 'tie'", [tied]
    )
    seen: list[uuid.UUID] = []
    before = None
    while True:
        page = await boss.browse_jobs("pages", limit=4, before=before)
        seen += [j.id for j in page]
        if len(page) < 4:
            break
        before = (page[-1].created_on, page[-1].id)
    assert len(seen) == len(set(seen)) == 28
    assert set(sent or []) <= set(seen)
    newest = await boss.browse_jobs("pages", limit=5)
    assert {j.data.get("tie") for j in newest} == set(range(5))  # the tied five lead
    assert [j.id for j in newest] == sorted((j.id for j in newest), reverse=True)


async def test_a_state_filter_and_bad_input(boss: Any) -> None:
    await boss.create_queue("filtered", retry_limit=0)
    await boss.insert("filtered", [{"data": n} for n in range(6)])
    [job] = await boss.fetch("filtered")
    await boss.fail("filtered", job.id)
    failed = await boss.browse_jobs("filtered", states=["failed"])
    assert [j.id for j in failed] == [job.id]
    assert len(await boss.browse_jobs("filtered", states=["created"])) == 5
    with pytest.raises(QueueNotFoundError):
        await boss.browse_jobs("no-such-queue")
    with pytest.raises(ValidationError, match="unknown job state"):
        await boss.browse_jobs("filtered", states=["done"])
    with pytest.raises(ValidationError, match="limit"):
        await boss.browse_jobs("filtered", limit=0)
    with pytest.raises(ValidationError, match="before must be"):
        await boss.browse_jobs("filtered", before=("yesterday", job.id))
    assert await boss.browse_jobs("filtered", states=["cancelled"]) == []  # empty, no error


async def test_stored_warnings_page_newest_first(boss: Any) -> None:
    q = boss.context().q
    for n in range(7):
        await boss.db.execute(
            f"INSERT INTO {q}.warning (type, message, created_on)"
            " VALUES ('test', $1, now() - $2 * interval '1 minute')",
            [f"warning {n}", n],
        )
    first = await boss.get_warnings(limit=4)
    assert [w.message for w in first] == [f"warning {n}" for n in range(4)]
    rest = await boss.get_warnings(limit=4, before=(first[-1].created_on, first[-1].id))
    assert [w.message for w in rest] == [f"warning {n}" for n in range(4, 7)]
    with pytest.raises(ValidationError, match="limit"):
        await boss.get_warnings(limit=5000)


async def test_filters_by_singleton_key_and_data(boss: Any) -> None:
    await boss.create_queue("keyed")
    await boss.insert(
        "keyed",
        [{"data": {"to": f"user{n % 3}", "n": n}, "singleton_key": f"k{n % 2}"} for n in range(12)],
    )
    by_key = await boss.browse_jobs("keyed", key="k1")
    assert sorted(j.data["n"] for j in by_key) == [1, 3, 5, 7, 9, 11]
    by_data = await boss.browse_jobs("keyed", data={"to": "user0"})
    assert sorted(j.data["n"] for j in by_data) == [0, 3, 6, 9]
    both = await boss.browse_jobs("keyed", key="k0", data={"to": "user0"}, limit=1)
    assert [j.data["n"] for j in both] == [6]  # newest first, one a page
    after = await boss.browse_jobs(
        "keyed", key="k0", data={"to": "user0"}, before=(both[0].created_on, both[0].id)
    )
    assert [j.data["n"] for j in after] == [0]
    with pytest.raises(ValidationError, match="key must be a string"):
        await boss.browse_jobs("keyed", key=7)

"""A custom ``db=`` object whose driver returns json and jsonb as text (asyncpg without
codecs, as most users would write one): jobs still come back with decoded data and
output, and a JSON string payload stays a string."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from qcore import Boss
from qcore.db.custom import CustomDatabase
from tests.adapters import AsyncExecuteSql

pytestmark = [pytest.mark.feature("adapters"), pytest.mark.postgres]


@pytest.fixture
async def text_json_boss(pg_dsn: str) -> AsyncIterator[Boss]:
    import asyncpg

    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2)  # no json codecs
    boss = Boss(db=AsyncExecuteSql(pool), schema="qcore_custom_json", supervise=False)
    await boss.start()
    try:
        yield boss
    finally:
        await boss.db.execute_script("DROP SCHEMA qcore_custom_json CASCADE")
        await boss.stop()
        await pool.close()


async def test_json_columns_that_arrive_as_text_are_decoded(text_json_boss: Boss) -> None:
    boss = text_json_boss
    raw = await boss.db.execute("SELECT '{\"a\": 1}'::jsonb AS data")
    assert raw == [{"data": {"a": 1}}]  # decoded by name, once the probe saw text
    assert isinstance(boss.db, CustomDatabase)
    await boss.create_queue("q")
    first = await boss.send("q", {"to": "a@example.com", "n": [1, 2]})
    second = await boss.send("q", "just a string")
    assert first is not None and second is not None
    jobs = {j.id: j for j in await boss.fetch("q", batch_size=2)}
    assert jobs[first].data == {"to": "a@example.com", "n": [1, 2]}
    assert jobs[second].data == "just a string"
    await boss.complete("q", first, {"sent": True})
    done = await boss.get_job_by_id("q", first)
    assert done is not None and done.output == {"sent": True} and done.data["n"] == [1, 2]

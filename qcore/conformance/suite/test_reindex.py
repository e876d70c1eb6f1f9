"""The index bloat check: a job index left at the size of a drained backlog is found,
warned about, listed by ``get_reindex_commands`` and rebuilt by the supervise pass
(once per interval between instances, or now with ``force``); a backend without
REINDEX lists nothing."""

from __future__ import annotations

from typing import Any

import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import running
from qcore.errors import ValidationError
from qcore.events import WarningEvent
from qcore.verbs import jobs
from qcore.verbs.reindex import INDEX_BLOAT

pytestmark = pytest.mark.feature("reindex")

#: thresholds a small test table can cross (the defaults want 128 pages)
SMALL: dict[str, Any] = {"min_pages": 10}


async def _drained_backlog(boss: Boss) -> None:
    """10,000 jobs inserted and all but ten deleted, then vacuumed: the job indexes keep
    their pages while their entries are gone."""
    ctx = boss.context()
    for _ in range(10):
        await jobs.insert(ctx, "q", [{"data": i} for i in range(1000)])
    await ctx.db.execute(
        f"DELETE FROM {ctx.q}.job WHERE name = 'q' AND id NOT IN"
        f" (SELECT id FROM {ctx.q}.job WHERE name = 'q' ORDER BY id LIMIT 10)"
    )
    await ctx.db.execute(f"VACUUM ANALYZE {ctx.q}.job")


@pytest.mark.requires("reindex")
async def test_a_bloated_index_is_found_warned_and_rebuilt(
    db: Any, backend: Backend, schema: str
) -> None:
    boss = Boss(db=db, backend=backend, schema=schema, supervise=False, reindex=SMALL)
    warnings: list[WarningEvent] = []
    boss.on("warning", warnings.append)
    async with running(boss):
        assert await boss.get_reindex_commands(min_pages=10) == []  # healthy: nothing to do
        await boss.create_queue("q")
        await _drained_backlog(boss)
        commands = await boss.get_reindex_commands(min_pages=10)
        assert commands and all(c.startswith("REINDEX INDEX CONCURRENTLY ") for c in commands)
        assert any("i11" in c for c in commands), commands  # the fetch index
        every = await boss.get_reindex_commands(force=True)
        assert len(every) >= len(commands)

        await boss.supervise(reindex=False)  # detection only: warned, not rebuilt
        assert {w.data["index"] for w in warnings if w.type == INDEX_BLOAT}
        assert await boss.get_reindex_commands(min_pages=10) == commands

        await boss.supervise()  # the interval is due (never claimed): rebuilt
        assert await boss.get_reindex_commands(min_pages=10) == []
        ctx = boss.context()
        [claim] = await ctx.db.execute(f"SELECT reindex_on FROM {ctx.q}.version")
        assert claim["reindex_on"] is not None

        await _drained_backlog(boss)
        await boss.supervise()  # claimed a moment ago: the shared interval holds
        assert await boss.get_reindex_commands(min_pages=10) != []
        await boss.supervise(reindex={"force": True})  # force: now, bloated or not
        assert await boss.get_reindex_commands(min_pages=10) == []


async def test_reindex_arguments_are_checked_and_unsupported_backends_list_nothing(
    boss: Boss, backend: Backend
) -> None:
    for bad in ({"min_pages": -1}, {"max_entries_per_page": 0}, {"force": "yes"}, {"minpages": 1}):
        with pytest.raises(ValidationError):
            await boss.get_reindex_commands(**bad)
    with pytest.raises(ValidationError):
        await boss.supervise(reindex="sometimes")  # type: ignore[arg-type]
    if not backend.capabilities.reindex:
        assert await boss.get_reindex_commands(force=True) == []

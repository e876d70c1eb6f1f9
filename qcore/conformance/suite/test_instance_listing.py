"""The registry at fleet shape, as the operator reads it: live servers ahead of a thousand
dead rows, filters and pages that cover every row once, counts from one statement, and a
removal that takes the server's rows out of the list without touching a job. Time is the
schema's clock (``set_clock``) wherever a row must look old."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import insert_dead_instances, running, set_clock
from qcore.errors import ValidationError
from qcore.verbs import jobs, queues

pytestmark = pytest.mark.feature("instances")

#: the dead rows maintenance is allowed to keep
DEAD_ROWS = 1000


def _boss(db: Any, backend: Any, schema: str, **options: Any) -> Boss:
    return Boss(db=db, backend=backend, schema=schema, supervise=False, **options)


@pytest.mark.usefixtures("installed")
async def test_live_servers_come_first_ahead_of_a_thousand_dead_rows(
    db: Any, backend: Any, schema: str
) -> None:
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(admin) as a:
        ctx = a.context()
        await insert_dead_instances(ctx, DEAD_ROWS)
        keyed = [_boss(db, backend, schema, instance_key=f"gpu-{n}") for n in range(3)]
        anonymous = _boss(db, backend, schema)
        async with contextlib.AsyncExitStack() as fleet:
            for server in (*keyed, anonymous):
                await fleet.enter_async_context(running(server))
            first = await a.list_instances(keyed=True, limit=50)
            assert {i.instance_key for i in first} == {"gpu-0", "gpu-1", "gpu-2"}
            assert all(i.live for i in first) and first.next is None

            counts = await a.instance_counts()
            assert (counts.total, counts.live) == (DEAD_ROWS + 4, 4)
            assert (counts.keyed, counts.keyed_live, counts.anonymous_live) == (3, 3, 1)
            assert counts.paused == 0

            # every row exactly once, live first, pages of 150 through 1,004 rows
            seen: list[Any] = []
            after = None
            while True:
                page = await a.list_instances(limit=150, after=after)
                seen.extend(page)
                if page.next is None:
                    break
                after = page.next
            assert len(seen) == DEAD_ROWS + 4 and len({i.id for i in seen}) == len(seen)
            assert [i.live for i in seen] == [True] * 4 + [False] * DEAD_ROWS
            dead = [i.heartbeat_on for i in seen[4:]]
            assert dead == sorted(dead, reverse=True)  # the latest heard first

            only_anonymous = await a.list_instances(keyed=False, live=True)
            assert [i.id for i in only_anonymous] == [anonymous.instance_id]
            assert [i.instance_key for i in await a.list_instances(search="GPU-1")] == ["gpu-1"]
            assert len(await a.list_instances(search="retired-HOST", limit=1000)) == DEAD_ROWS

            await a.pause_instance("gpu-2")
            paused = await a.list_instances(paused=True)
            assert [i.instance_key for i in paused] == ["gpu-2"]
            assert (await a.instance_counts()).paused == 1
            await a.resume_instance("gpu-2")


@pytest.mark.usefixtures("installed")
async def test_remove_takes_every_row_of_the_server_and_leaves_its_jobs(
    db: Any, backend: Any, schema: str
) -> None:
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(admin) as a:
        ctx = a.context()
        await queues.create_queue(ctx, "render")
        sent = await jobs.send(ctx, "render", {"n": 1})
        lives = []
        for _ in range(2):  # two lives of the server, each its own row
            server = _boss(db, backend, schema, instance_key="retired:gpu")
            async with running(server) as s:
                lives.append(s.instance_id)
                if len(lives) == 1:
                    [job] = await s.fetch("render")
                    await s.complete("render", job.id)
        listed = {i.id: i for i in await a.get_instances(limit=100_000)}
        assert all(listed[life].instance_key == "retired:gpu" for life in lives)
        try:
            await set_clock(ctx, 31 * 60)
            assert await a.remove_instance("retired:gpu") == 2
        finally:
            await set_clock(ctx, 0)
        remaining = {i.id for i in await a.get_instances(limit=100_000)}
        assert remaining.isdisjoint(lives)  # gone from the list, not left as anonymous
        assert sent is not None
        kept = await jobs.get_job_by_id(ctx, "render", sent)
        assert kept is not None and kept.state == "completed"
        assert kept.processed_on_instance_key == "retired:gpu"


@pytest.mark.usefixtures("installed")
async def test_a_recently_seen_server_is_not_removed(db: Any, backend: Any, schema: str) -> None:
    admin = _boss(db, backend, schema, register_instance=False)
    busy = _boss(db, backend, schema, instance_key="busy")
    async with running(admin) as a, running(busy):
        with pytest.raises(ValidationError, match="seen 0 minutes ago"):
            await a.remove_instance("busy")
        assert busy.instance_id in {i.id for i in await a.get_instances()}


@pytest.mark.usefixtures("installed")
async def test_bad_listing_arguments_are_refused(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, register_instance=False)) as a:
        for bad in (
            {"limit": 0},
            {"limit": 1001},
            {"live": "yes"},
            {"search": 7},
            {"search": "x" * 201},
            {"search": "\ud800"},
            {"after": "not a cursor"},
            {"after": "2|2026-01-01T00:00:00+00:00|00000000-0000-0000-0000-000000000000"},
        ):
            with pytest.raises(ValidationError):
                await a.list_instances(**bad)

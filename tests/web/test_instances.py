"""The instances page at fleet shape: a thousand dead rows maintenance may keep, a few
live keyed servers and an anonymous one. The live servers come first, the counts cover
the whole registry, anonymous rows sit behind a filter, and the list pages."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from qcore import Boss
from qcore.conformance.helpers import insert_dead_instances
from qcore.services.pause_watch import follow_pause
from qcore.verbs.instances import read_pause
from qcore.web import create_app
from tests.conftest import admin_execute
from tests.web.test_web import client

pytestmark = [pytest.mark.feature("web"), pytest.mark.postgres]

#: the dead rows maintenance is allowed to keep
DEAD_ROWS = 1000


@pytest_asyncio.fixture
async def registry(pg_dsn: str) -> AsyncIterator[Boss]:
    """A board's ``Boss`` (not registered) over a registry of 1,000 dead rows, three live
    keyed servers and one live anonymous one."""
    schema = f"web_fleet_{uuid.uuid4().hex[:8]}"
    board = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=False)
    await board.start()
    await insert_dead_instances(board.context(), DEAD_ROWS)
    servers = [
        # no listener: a pause stays "requested" until the server reads it
        Boss(
            pg_dsn,
            schema=schema,
            supervise=False,
            schedule=False,
            instance_key=f"gpu-{n}",
            use_listen_notify=False,
        )
        for n in range(3)
    ]
    anonymous = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=True)
    servers.append(anonymous)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                await server.start()
                stack.push_async_callback(server.stop)
            yield board
    finally:
        await board.stop()
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


def _keys(html: str) -> list[str]:
    return re.findall(r'<tr data-key="([^"]*)"', html)


async def test_live_keyed_servers_lead_and_the_counts_cover_every_row(registry: Boss) -> None:
    async with client(create_app(registry)) as http:
        page = await http.get("/instances")
        assert page.status_code == 200
        assert sorted(_keys(page.text)) == ["gpu-0", "gpu-1", "gpu-2"]
        assert f"4 live of {DEAD_ROWS + 4:,} registered" in page.text
        assert "3 keyed" in page.text and "1 anonymous" in page.text
        assert "next »" not in page.text

        overview = await http.get("/")
        assert "3 / 3" in overview.text and "keyed servers live" in overview.text

        every = await http.get("/instances", params={"show": "all"})
        rows = _keys(every.text)
        assert len(rows) == 50 and "next »" in every.text  # a page, not the registry
        assert sorted(rows[:4]) == ["", "gpu-0", "gpu-1", "gpu-2"]  # live ones first
        seen = len(rows)
        next_page = re.search(r'href="(/instances\?[^"]*after=[^"]*)"', every.text)
        while next_page is not None:
            more = await http.get(next_page.group(1).replace("&amp;", "&"))
            assert more.status_code == 200
            seen += len(_keys(more.text))
            next_page = re.search(r'href="(/instances\?[^"]*after=[^"]*)"', more.text)
        assert seen == DEAD_ROWS + 4

        found = await http.get("/instances", params={"show": "all", "q": "GPU-2"})
        assert _keys(found.text) == ["gpu-2"]
        await registry.pause_instance("gpu-1")
        paused = await http.get("/instances", params={"state": "paused"})
        assert _keys(paused.text) == ["gpu-1"]
        assert ">pause requested</span>" in paused.text and "not yet acknowledged" in paused.text
        ctx = registry.context()  # what the server does when it reads its pause
        await follow_pause(ctx, "gpu-1", await read_pause(ctx, "gpu-1"), lambda _: None)
        acknowledged = await http.get("/instances", params={"state": "paused"})
        assert ">pause requested</span>" not in acknowledged.text
        assert re.search(r">paused</span> <span[^>]*>acknowledged ", acknowledged.text)
        anonymous = await http.get("/instances", params={"show": "anonymous", "state": "live"})
        assert _keys(anonymous.text) == [""]


async def test_bad_filters_are_refused(registry: Boss) -> None:
    async with client(create_app(registry)) as http:
        for params in ({"show": "everyone"}, {"state": "asleep"}, {"after": "x"}):
            page = await http.get("/instances", params=params)
            assert page.status_code == 400, params


async def test_the_queue_page_counts_waiting_jobs_by_pattern_and_the_job_page_shows_it(
    pg_dsn: str,
) -> None:
    schema = f"web_affinity_{uuid.uuid4().hex[:8]}"
    boss = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, instance_key="a:ram-8gb")
    await boss.start()
    try:
        await boss.create_queue("render")
        gpu = await boss.send("render", {"n": 1}, preferred_instance_key_pattern="<b>gpu</b>")
        await boss.send("render", {"n": 2}, preferred_instance_key_pattern="ram-8gb")
        async with client(create_app(boss)) as http:
            page = await http.get("/queue", params={"name": "render"})
            assert page.status_code == 200
            section = page.text[page.text.index('id="affinity"') :]
            assert "&lt;b&gt;gpu&lt;/b&gt;" in section and "<b>gpu</b>" not in section
            matched = r'ram-8gb</td><td class="num">1</td><td>[^<]*</td><td class="num">1<'
            assert re.search(matched, section)  # one waits; one live server (this one) matches
            assert '<span class="badge failed">none</span>' in section  # no server has a gpu
            job = await http.get("/job", params={"queue": "render", "id": str(gpu)})
            assert "<dt>affinity</dt><dd class=\"mono\">&lt;b&gt;gpu&lt;/b&gt;</dd>" in job.text
            plain = await http.get("/queue", params={"name": "render", "state": "completed"})
            assert plain.status_code == 200
    finally:
        await boss.stop()
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


async def test_remove_is_offered_only_for_a_key_gone_30_minutes(registry: Boss) -> None:
    """An earlier life of a key whose server is live now, and a key heard from ten
    minutes ago, offer no Remove (``remove_instance`` would refuse them); a key gone two
    hours offers it, and the Remove goes through."""
    ctx = registry.context()
    for key, minutes in (("gpu-0", 120), ("recent", 10), ("retired", 120)):
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
            " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
            " persist_warnings, config, started_on, heartbeat_on, stopped_on)"
            " SELECT gen_random_uuid(), $1, 'old-host', 1, 'x', 'x', 30, false, false,"
            " false, false, false, jsonb_build_object('instanceKey', $1::text), t, t, t"
            f" FROM (SELECT {ctx.q}.job_now() - $2::int * interval '1 minute' AS t) s",
            [key, minutes],
        )
        await ctx.db.execute(  # as its server's key beat (gpu-0's beats on, live)
            f"INSERT INTO {ctx.q}.qcore_instance_key (instance_key, seen_on)"
            f" VALUES ($1, {ctx.q}.job_now() - $2::int * interval '1 minute')"
            " ON CONFLICT (instance_key) DO NOTHING",
            [key, minutes],
        )
    async with client(create_app(registry)) as http:
        page = await http.get("/instances", params={"show": "all", "q": "old-host"})
        rows = re.findall(r'<tr data-key="([^"]*)".*?</tr>', page.text, re.S)
        assert sorted(rows) == ["gpu-0", "recent", "retired"]
        offered = {
            key
            for key, row in re.findall(r'<tr data-key="([^"]*)"(.*?)</tr>', page.text, re.S)
            if 'value="remove"' in row
        }
        assert offered == {"retired"}
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert token
        for key, status in (("retired", 303), ("gpu-0", 400)):
            done = await http.post(
                "/instances", data={"csrf": token.group(1), "action": "remove", "key": key}
            )
            assert done.status_code == status, done.text
        left = await registry.list_instances(keyed=True, search="old-host")
        assert sorted(str(i.instance_key) for i in left) == ["gpu-0", "recent"]

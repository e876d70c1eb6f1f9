"""What a new user sees on the board in the first hour: counts that say how old they are
(or are counted live), a dead-letter job that says why its source died and where it came
from, and an empty metrics history that says how to fill it."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from markupsafe import escape

from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.job import Job
from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider, PostgresMetricsStore
from qcore.web import create_app
from tests.conftest import admin_execute
from tests.dead_letters import MARKUP, fail_into_dead_letter

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]


class Setup:
    def __init__(self, boss: Boss, dead: Job, source_id: uuid.UUID) -> None:
        self.boss = boss
        self.dead = dead
        self.source_id = source_id


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080"
    )


@pytest_asyncio.fixture
async def setup(pg_dsn: str) -> AsyncIterator[Setup]:
    schema = f"web_first_{uuid.uuid4().hex[:10]}"
    boss = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=False)
    await boss.start()
    try:
        await boss.create_queue("orders/dlq")
        await boss.create_queue("orders", retry_limit=1, retry_delay=0, dead_letter="orders/dlq")
        dead, source = await fail_into_dead_letter(boss, "orders", "orders/dlq")
        yield Setup(boss, dead, source)
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


async def test_counts_are_live_on_a_queue_page_and_dated_on_the_overview(setup: Setup) -> None:
    boss = setup.boss
    await boss.create_queue("fresh")
    await boss.supervise()  # the monitor counts every queue: fresh has none yet
    for n in range(3):
        await boss.send("fresh", {"n": n})
    await set_clock(boss.context(), 41)  # the monitor's counts are now 41 s old
    try:
        async with client(create_app(boss)) as http:
            queue = (await http.get("/queue?name=fresh")).text
            overview = (await http.get("/")).text
            listing = (await http.get("/queues")).text
            scrape = (await http.get("/metrics")).text
    finally:
        await set_clock(boss.context(), 0)
    counts = re.search(r'data-live="queue-counts">(.*?)</div>', queue, re.S)
    assert counts is not None
    assert "<dt>queued</dt><dd>3</dd>" in counts.group(1), counts.group(1)
    [age] = [line for line in scrape.splitlines() if line.startswith("qcore_queue_counts_age")
             and 'queue="fresh"' in line]  # fmt: skip
    assert 41 <= float(age.split()[-1]) < 100, age
    for page in (overview, listing):
        found = re.search(r"as of (\d+) s ago", page)
        assert found is not None, page
        assert 41 <= int(found.group(1)) < 100


async def test_a_queue_never_counted_says_so_on_the_overview(setup: Setup) -> None:
    await setup.boss.create_queue("uncounted")
    async with client(create_app(setup.boss)) as http:
        overview = (await http.get("/")).text
    assert "not counted yet" in overview


async def test_a_dead_letter_job_shows_why_its_source_died(setup: Setup) -> None:
    dead = setup.dead
    async with client(create_app(setup.boss)) as http:
        page = await http.get(f"/job?queue=orders%2Fdlq&id={dead.id}")
    assert page.status_code == 200
    text = page.text
    section = re.search(r'<section class="card" id="dead-letter">(.*?)</section>', text, re.S)
    assert section is not None, text
    shown = section.group(1)
    escaped = str(escape(MARKUP))
    assert escaped in shown and MARKUP not in text  # the message, as text
    assert f"RuntimeError: {escaped}" in shown  # the traceback's last line
    assert "in explode" in shown  # the traceback itself
    assert ">orders</a>" in shown  # the source queue
    link = f'href="/job?queue=orders&amp;id={setup.source_id}"'
    assert link in shown  # the source job, linked
    assert "2 of 2" in shown  # attempts: the first run and its one retry


async def test_an_empty_history_says_how_to_record_it(setup: Setup) -> None:
    boss = setup.boss
    store = PostgresMetricsStore(boss.db, schema=boss.context().schema, backend=boss.backend)
    app = create_app(boss, history=MetricsHistoryProvider(store), admin=MetricsHistoryAdmin(store))
    async with client(app) as http:
        page = await http.get("/history")
    assert page.status_code == 200
    hint = re.search(r'<p[^>]*id="record-hint"[^>]*>(.*?)</p>', page.text, re.S)
    assert hint is not None
    assert "qcore metrics record" in hint.group(1) and "record_metrics" in hint.group(1)

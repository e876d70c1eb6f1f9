"""The dashboard over HTTP, in process, against a real database filled by real workers:
every page renders its data, actions change the database, and what guards them holds
(CSRF, read-only, credentials, escaping, the bind check). The same app in a real
browser: ``tests/web/test_browser.py``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.errors import ConfigError
from qcore.job import Job
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
)
from qcore.web import create_app
from qcore.web.security import Access, check_bind
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]

XSS_DATA = {"note": "<script>window.pwned = 1</script>", "attr": '"><img src=x onerror=alert(1)>'}
XSS_ERROR = '<script>alert("err")</script>"><img src=x onerror=alert(2)>'
TOKEN = "a-dashboard-token-long-enough"


class Fleet:
    """A schema with queues, finished and failed jobs, a waiting backlog, a keyed
    instance, a stored warning, a schedule and a recorded minute of history."""

    def __init__(self, boss: Boss, store: PostgresMetricsStore, xss_job: uuid.UUID) -> None:
        self.boss = boss
        self.store = store
        self.xss_job = xss_job

    def app(self, **options: Any) -> Any:
        return create_app(
            self.boss,
            history=MetricsHistoryProvider(self.store),
            admin=MetricsHistoryAdmin(self.store),
            **options,
        )


async def fill(boss: Boss) -> uuid.UUID:
    """Queues ``mail`` (completed and failed jobs, a backlog) and ``mail/dlq`` (its dead
    letter queue); the id of a failed job whose data and error carry markup."""
    await boss.create_queue("mail/dlq")
    await boss.create_queue("mail", retry_limit=0, dead_letter="mail/dlq")
    await boss.create_queue("idle")
    for n in range(30):
        await boss.send("mail", {"n": n})
    xss = await boss.send("mail", XSS_DATA)
    assert xss is not None

    async def handler(jobs: list[Job]) -> None:
        for job in jobs:
            if job.data == XSS_DATA or job.data.get("n", 0) % 10 == 9:
                raise RuntimeError(XSS_ERROR)

    await boss.work("mail", handler, batch_size=1, local_concurrency=4)
    deadline = asyncio.get_running_loop().time() + 120
    while asyncio.get_running_loop().time() < deadline:
        jobs = await boss.find_jobs("mail", states=["created", "retry", "active"], limit=1)
        if not jobs:
            break
        await asyncio.sleep(0.2)
    await boss.off_work("mail")
    for n in range(120):  # a backlog long enough for three pages
        await boss.send("mail", {"waiting": n})
    await boss.schedule("idle", "*/5 * * * *", {"from": "cron"})
    boss.events.warn("test_warning", "a warning stored for the board <b>bold?</b>")
    await boss.events.drain()
    await boss.supervise()
    return xss


def fleet_boss(dsn: str, schema: str, key: str) -> Boss:
    """The fleet's own server: keyed, its warnings and queue stats stored, no background
    passes (the tests run what they need)."""
    return Boss(
        dsn,
        schema=schema,
        supervise=False,
        schedule=False,
        persist_warnings=True,
        persist_queue_stats=True,
        instance_key=key,
        max=6,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(pg_dsn: str) -> AsyncIterator[Fleet]:
    schema = f"web_{uuid.uuid4().hex[:10]}"
    boss = fleet_boss(pg_dsn, schema, "web-test:host-1")
    await boss.start()
    try:
        xss = await fill(boss)
        store = PostgresMetricsStore(boss.db, schema=schema, backend=boss.backend)
        # the schema's clock two minutes on, so the minute the jobs finished in is closed
        await set_clock(boss.context(), 120)
        await MetricsRecorder(store, PgBossQueues(boss.context()), margin_seconds=0).tick()
        await set_clock(boss.context(), 0)
        yield Fleet(boss, store, xss)
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


def client(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080", headers=headers
    )


def token_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_every_page_renders_its_data(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        pages = {
            "/": ["Problem queues", "mail", "failing", "test_warning"],
            "/queues": ["mail/dlq", "idle", "standard", "chart sparkline"],
            "/queue?name=mail": ["Jobs", "older", "Create a job", "<svg"],
            "/queue?name=mail%2Fdlq": ["Redrive to source queues"],
            f"/job?queue=mail&id={fleet.xss_job}": ["Retry", "Delete", "failed"],
            "/instances": ["web-test:host-1", "Pause"],
            "/warnings": ["test_warning"],
            "/schedules": ["*/5 * * * *", "idle"],
            "/history": ["Metrics history", "By queue", "mail", "log scale"],
            "/history/storage": ["By tier", "Keep only the last 7d", "Clear all history"],
        }
        for path, texts in pages.items():
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text[:500])
            for text in texts:
                assert text in page.text, (path, text)
            assert page.headers["x-frame-options"] == "DENY"
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert "unsafe-inline" not in page.headers["content-security-policy"]


async def test_the_chart_tab_is_a_query_parameter_and_an_unknown_one_is_the_default(
    fleet: Fleet,
) -> None:
    def shown(html: str) -> list[str]:
        panels = re.findall(r'data-panel="(\w+)"\s*(hidden)?', html)
        return [name for name, hidden in panels if not hidden]

    async with client(fleet.app()) as http:
        for base in ("/queue?name=mail&range=60m", "/history?range=7d"):
            for chart, tab in (
                ("", "throughput"),
                ("latency", "latency"),
                ("throughput", "throughput"),
                ("bogus", "throughput"),
                ('"><script>alert(1)</script>', "throughput"),
            ):
                page = await http.get(
                    base + ("&chart=" + urllib.parse.quote(chart) if chart else "")
                )
                assert page.status_code == 200, (base, chart, page.text[:300])
                assert shown(page.text) == [tab, tab], (base, chart)
                assert "<script>alert(1)" not in page.text
                assert re.search(rf'data-tab="{tab}" aria-selected="true"', page.text)
            latency = (await http.get(base + "&chart=latency")).text
            assert "p95 run" in latency and "log scale" in latency
            # the range links keep the tab shown
            assert re.search(r"range=30d&amp;chart=latency", latency), base
        older = await http.get("/history?tab=latency")  # the former parameter still works
        assert shown(older.text) == ["latency", "latency"]


async def test_markup_in_data_errors_and_warnings_is_shown_as_text(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        job = (await http.get(f"/job?queue=mail&id={fleet.xss_job}")).text
        listing = (await http.get("/queue?name=mail&state=failed")).text
        overview = (await http.get("/")).text
    for html in (job, listing):
        assert "<script>window.pwned" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in job
    assert "&lt;img src=x onerror=alert(2)&gt;" in job  # the error, escaped
    assert "<b>bold?</b>" not in overview and "&lt;b&gt;bold?&lt;/b&gt;" in overview
    assert "<script" not in job.replace('<script src="/static/board.js" defer></script>', "")


async def test_job_pages_are_keyset_pages(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        seen: list[str] = []
        url = "/queue?name=mail&state=created"
        for _ in range(5):
            html = (await http.get(url)).text
            seen += re.findall(r'href="/job\?queue=mail&amp;id=([0-9a-f-]{36})"', html)
            older = re.search(r'href="([^"]+)" id="older"', html)
            if older is None:
                break
            url = older.group(1).replace("&amp;", "&")
        assert len(seen) == len(set(seen)) == 120  # 50 + 50 + 20, none twice
        filtered = (await http.get('/queue?name=mail&data={"waiting": 7}')).text
        assert len(re.findall(r'href="/job\?queue=mail&amp;id=([0-9a-f-]{36})"', filtered)) == 1
        none = (await http.get("/queue?name=mail&key=nobody")).text
        assert "matching the filter" in none
        assert (await http.get("/queue?name=mail&data={oops")).status_code == 400
        bad = await http.get("/queue?name=mail&before=not-a-cursor")
        assert bad.status_code == 400 and "not a page cursor" in bad.text
        missing = await http.get("/queue?name=nope")
        assert missing.status_code == 404


async def test_a_post_without_this_browsers_token_is_refused(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        html = (await http.get(f"/job?queue=mail&id={fleet.xss_job}")).text
        good = token_of(html)
        form = {"queue": "mail", "id": str(fleet.xss_job), "action": "retry"}
        missing = await http.post("/job/action", data=form)
        forged = await http.post("/job/action", data={**form, "csrf": "0" * 64})
        assert missing.status_code == forged.status_code == 403
        assert "CSRF" in forged.text
        cross = await http.post(
            "/job/action", data={**form, "csrf": good}, headers={"origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        job = await fleet.boss.get_job_by_id("mail", fleet.xss_job)
        assert job is not None and job.state is not None and job.state.value == "failed"
    # another browser's token does not pass in this one
    async with client(fleet.app()) as other:
        await other.get("/")
        stolen = await other.post("/job/action", data={**form, "csrf": good})
        assert stolen.status_code == 403


async def test_actions_change_the_database(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        html = (await http.get("/queue?name=idle")).text
        token = token_of(html)
        made = await http.post(
            "/queue/create",
            data={"csrf": token, "queue": "idle", "data": '{"made": "here"}', "priority": "3"},
        )
        assert made.status_code == 303
        created = made.headers["location"]
        job_id = re.search(r"id=([0-9a-f-]{36})", created)
        assert job_id
        job = await fleet.boss.get_job_by_id("idle", job_id.group(1))
        assert job is not None and job.data == {"made": "here"} and job.priority == 3
        for action, state in (("cancel", "cancelled"), ("resume", "created")):
            done = await http.post(
                "/job/action",
                data={"csrf": token, "queue": "idle", "id": job_id.group(1), "action": action},
            )
            assert done.status_code == 303
            job = await fleet.boss.get_job_by_id("idle", job_id.group(1))
            assert job is not None and job.state is not None and job.state.value == state
            shown = (await http.get(done.headers["location"])).text
            assert f'class="notice" role="status">{action}: 1 job(s)<' in shown
        # a notice only this board's redirect sealed is shown: a link made elsewhere,
        # or a sealed notice with its words changed, puts nothing on the page
        sealed = urllib.parse.urlsplit(done.headers["location"]).query
        job_page = f"queue=idle&id={job_id.group(1)}"
        forged = sealed.replace("resume", "Session+expired%3A+sign+in+at+evil.example")
        for query in (f"{job_page}&done=Session+expired", forged):
            page = await http.get(f"/job?{query}")
            assert page.status_code == 200 and 'class="notice"' not in page.text, query
        bad = await http.post(
            "/queue/create", data={"csrf": token, "queue": "idle", "data": "{not json"}
        )
        assert bad.status_code == 400 and "data must be JSON" in bad.text
        unknown = await http.post(
            "/job/action",
            data={"csrf": token, "queue": "idle", "id": job_id.group(1), "action": "drop"},
        )
        assert unknown.status_code == 400 and "unknown job action" in unknown.text
        gone = await http.post(
            "/job/action",
            data={"csrf": token, "queue": "idle", "id": job_id.group(1), "action": "delete"},
        )
        assert gone.status_code == 303
        assert await fleet.boss.get_job_by_id("idle", job_id.group(1)) is None


async def test_read_only_shows_no_action_and_refuses_every_post(fleet: Fleet) -> None:
    async with client(fleet.app(read_only=True)) as http:
        for path in ("/", f"/job?queue=mail&id={fleet.xss_job}", "/instances", "/queue?name=mail"):
            html = (await http.get(path)).text
            assert 'method="post"' not in html, path
        storage = (await http.get("/history/storage")).text
        assert "Clear all history" not in storage
        for path, form in (
            ("/job/action", {"queue": "mail", "id": str(fleet.xss_job), "action": "retry"}),
            ("/instances", {"key": "web-test:host-1", "action": "pause"}),
            ("/history/purge", {"keep": "all"}),
            ("/queue/create", {"queue": "idle", "data": "{}"}),
        ):
            refused = await http.post(path, data=form)
            assert refused.status_code == 403 and "read-only" in refused.text, path


async def test_credentials_guard_every_page(fleet: Fleet) -> None:
    async with client(fleet.app(token=TOKEN)) as http:
        assert (await http.get("/")).status_code == 401
        assert (await http.get("/metrics")).status_code == 401
        browser = await http.get("/queues", headers={"accept": "text/html"})
        assert browser.status_code == 303 and browser.headers["location"] == "/login"
        assert (
            await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        ).status_code == 200
        wrong = await http.post("/login", data={"token": "not-the-token-at-all"})
        assert wrong.status_code == 401
        signed = await http.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303
        assert "Max-Age=43200" in signed.headers["set-cookie"]  # a sign-in lasts 12 h
        assert TOKEN not in signed.headers["set-cookie"]
        page = await http.get("/")  # the session cookie
        assert page.status_code == 200 and "Sign out" in page.text
        refused = await http.post("/logout", data={"csrf": "0" * 64})
        assert refused.status_code == 403
        assert (await http.get("/")).status_code == 200  # a forged sign-out changes nothing
        out = await http.post("/logout", data={"csrf": token_of(page.text)})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert "Max-Age=0" in out.headers["set-cookie"]
        assert (await http.get("/")).status_code == 401  # signed out
    async with client(fleet.app(token=TOKEN, read_only=True)) as http:
        await http.post("/login", data={"token": TOKEN})
        page = await http.get("/")
        out = await http.post("/logout", data={"csrf": token_of(page.text)})
        assert out.status_code == 303  # signing out changes no data: read-only allows it
        assert (await http.get("/")).status_code == 401
    async with client(fleet.app(basic_auth="ops:correct horse")) as http:
        assert (await http.get("/")).status_code == 401
        ok = await http.get("/", auth=("ops", "correct horse"))
        assert ok.status_code == 200
        assert (await http.get("/", auth=("ops", "wrong password"))).status_code == 401


def test_a_sign_in_expires_and_cannot_be_forged() -> None:
    """The form's cookie carries when it was issued and a MAC of that under the token:
    good for twelve hours, then refused; a changed time, another board's token, the
    token itself or the old never-expiring value are refused."""
    now = [1_700_000_000.0]
    access = Access(token=TOKEN, clock=lambda: now[0])
    cookie = access.session_value()
    assert access.allows(None, cookie)
    now[0] += 12 * 3600 - 1
    assert access.allows(None, cookie)
    now[0] += 1
    assert not access.allows(None, cookie)  # expired
    issued, _, mac = cookie.partition(".")
    assert not access.allows(None, f"{int(issued) + 3600}.{mac}")  # a later time, same MAC
    fresh = access.session_value()
    assert access.allows(None, fresh)
    other = Access(token="another-token-of-sixteen", clock=lambda: now[0])
    assert not other.allows(None, fresh)
    never_expiring = hmac.new(TOKEN.encode(), b"qcore-dashboard-session", hashlib.sha256)
    for bad in (TOKEN, mac, never_expiring.hexdigest(), "", ".", f"{issued}.", "x.y", "１２.ab"):
        assert not access.allows(None, bad), bad
    ahead = Access(token=TOKEN, clock=lambda: now[0] + 3600)  # issued by a clock ahead
    assert not access.allows(None, ahead.session_value())
    assert Access(token=TOKEN, session_seconds=60, clock=lambda: now[0]).allows(None, fresh)


def test_the_board_listens_beyond_this_machine_only_with_credentials() -> None:
    check_bind("127.0.0.1", Access())
    check_bind("::1", Access())
    with pytest.raises(ConfigError, match="needs --token"):
        check_bind("0.0.0.0", Access())
    check_bind("0.0.0.0", Access(token=TOKEN))
    with pytest.raises(ConfigError, match="at least 16"):
        Access(token="short")


async def test_instances_pause_and_resume_from_the_board(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        token = token_of((await http.get("/instances")).text)
        for action, paused in (("pause", True), ("resume", False)):
            done = await http.post(
                "/instances", data={"csrf": token, "key": "web-test:host-1", "action": action}
            )
            assert done.status_code == 303
            [row] = [
                i for i in await fleet.boss.get_instances() if i.instance_key == "web-test:host-1"
            ]
            assert row.paused is paused
        early = await http.post(
            "/instances", data={"csrf": token, "key": "web-test:host-1", "action": "remove"}
        )
        assert early.status_code == 400  # seen less than 30 minutes ago


async def test_prometheus_endpoint(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        text = (await http.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    queued = {
        s.labels["queue"]: s.value
        for s in families["qcore_queue_jobs"].samples
        if s.labels["state"] == "queued"
    }
    assert queued["mail"] >= 120
    finished = {
        (s.labels["queue"], s.labels["outcome"]): s.value
        for s in families["qcore_jobs_finished"].samples
        if s.name == "qcore_jobs_finished_total"
    }
    assert finished[("mail", "completed")] + finished[("mail", "failed")] == 31
    assert finished[("mail", "failed")] == 4
    runs = [s for s in families["qcore_job_run_seconds"].samples if s.labels.get("le") == "+Inf"]
    assert {s.labels["queue"]: s.value for s in runs}["mail"] == 31


async def test_the_storage_panel_trims_follow_the_charted_range(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        history = (await http.get("/history?range=30d")).text
        assert 'href="/history/storage?range=30d" class="menu" id="storage-link"' in history
        storage = (await http.get("/history/storage?range=30d")).text
        keeps = re.findall(r'class="button( here)?" href="[^"]*" id="keep-(\w+)"', storage)
        assert keeps == [("", "7d"), (" here", "30d"), ("", "90d")]  # the charts' day ranges
        assert "(the charted range)" in storage and 'id="charted"' in storage
        hour = (await http.get("/history/storage?range=60m")).text
        assert "charts the last 60m" in hour
        marked = re.findall(r'class="button( here)?" href="[^"]*" id="keep-(\w+)"', hour)
        assert marked == [("", "7d"), ("", "30d"), ("", "90d")]  # no trim keeps just an hour
        assert "(the charted range)" not in hour
        for odd in ("bogus", "%3Cb%3E"):
            page = await http.get(f"/history/storage?range={odd}")
            assert page.status_code == 200 and 'id="charted"' not in page.text
            assert "<b>" not in page.text


async def test_the_storage_panel_confirms_then_purges(fleet: Fleet) -> None:
    async with client(fleet.app()) as http:
        confirm = await http.get("/history/purge?keep=all")
        assert confirm.status_code == 200 and "cannot be undone" in confirm.text
        assert "All history" in confirm.text
        keep = await http.get("/history/purge?keep=7d")
        assert "before" in keep.text
        assert (await http.get("/history/purge?keep=1y")).status_code == 400
        before = await MetricsHistoryAdmin(fleet.store).stats()
        assert before.rows > 0
        done = await http.post(
            "/history/purge", data={"csrf": token_of(confirm.text), "keep": "all"}
        )
        assert done.status_code == 303
        after = await MetricsHistoryAdmin(fleet.store).stats()
        assert after.rows == 0


async def test_mounted_under_a_prefix_every_link_and_redirect_keeps_it(fleet: Fleet) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    host = Starlette(routes=[Mount("/ops/board", app=fleet.app())])
    async with client(host) as http:
        page = await http.get("/ops/board/queue?name=idle")
        assert page.status_code == 200
        links = re.findall(r'(?:href|action|src)="(/[^"]*)"', page.text)
        assert links and all(link.startswith("/ops/board/") for link in links), links
        assert (await http.get("/ops/board/static/board.css")).status_code == 200
        made = await http.post(
            "/ops/board/queue/create", data={"csrf": token_of(page.text), "queue": "idle"}
        )
        assert made.status_code == 303 and made.headers["location"].startswith("/ops/board/job?")
    guarded = Starlette(routes=[Mount("/ops/board", app=fleet.app(token=TOKEN))])
    async with client(guarded) as http:
        asked = await http.get("/ops/board/", headers={"accept": "text/html"})
        assert asked.status_code == 303 and asked.headers["location"] == "/ops/board/login"
        assert (await http.get("/ops/board/login")).status_code == 200


def test_the_command_refuses_an_open_address_without_credentials() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "qcore", "dashboard", "--dsn", "postgresql://nowhere",
         "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0" in done.stderr and "--token" in done.stderr


async def test_a_read_only_board_creates_no_store_and_shows_queues_without_one(
    fleet: Fleet,
) -> None:
    schema = fleet.boss.context().schema
    absent = PostgresMetricsStore(
        fleet.boss.db, schema=schema, backend=fleet.boss.backend,
        table_prefix="absent_", migrate=False,
    )  # fmt: skip
    app = create_app(
        fleet.boss,
        history=MetricsHistoryProvider(absent),
        admin=MetricsHistoryAdmin(absent),
        read_only=True,
    )
    async with client(app) as http:
        page = await http.get("/queue?name=mail")
        assert page.status_code == 200 and "Jobs" in page.text and 'id="history"' not in page.text
        scrape = await http.get("/metrics")
        assert scrape.status_code == 200 and "qcore_queue_jobs" in scrape.text
        assert "qcore_jobs_finished" not in scrape.text
        history = await http.get("/history")  # a page saying how the store is made
        assert history.status_code == 200 and "migrate" in history.text.lower()
    rows = admin_execute(
        f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}'"
        " AND tablename LIKE 'absent_%'"
    )
    assert rows == [(0,)]


async def test_one_board_for_several_databases(fleet: Fleet, pg_dsn: str) -> None:
    from qcore.web import combine

    schema = f"web_other_{uuid.uuid4().hex[:8]}"
    other = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=False)
    await other.start()
    try:
        await other.create_queue("only-there")
        host = combine({"main": fleet.app(), "other": create_app(other)})
        async with client(host) as http:
            first = await http.get("/")
            assert first.status_code == 303 and first.headers["location"] == "/db/main/"
            there = await http.get("/db/other/queues")
            assert there.status_code == 200 and "only-there" in there.text
            assert "mail/dlq" not in there.text
            here = await http.get("/db/main/queues")
            assert "mail/dlq" in here.text and "only-there" not in here.text
            for page in (here.text, there.text):  # the sidebar switches between them
                assert 'href="/db/main/"' in page and 'href="/db/other/"' in page
        with pytest.raises(ConfigError, match="letters, digits"):
            combine({"a/b": create_app(other)})
        with pytest.raises(ConfigError, match="create_app"):
            combine({"x": cast(Any, object())})
        alone = create_app(other)
        with pytest.raises(ConfigError, match="create_app"):  # refused whole: alone untouched
            combine({"alone": alone, "x": cast(Any, object())})
        assert alone.state.dashboard.databases == []
    finally:
        await other.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)

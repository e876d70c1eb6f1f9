"""The board's audit log: each action taken on the dashboard is recorded with who took
it (the host application's signed-in user, the basic-auth user, the token's holder or
anonymous, and their address), shown newest first a page at a time, escaped."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Mount

from qcore import Boss
from qcore.verbs.audit import list_audit, record
from qcore.web import create_app
from tests.conftest import admin_execute
from tests.web.test_web import client, token_of

pytestmark = [pytest.mark.feature("web"), pytest.mark.postgres]


@pytest_asyncio.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    schema = f"web_audit_{uuid.uuid4().hex[:8]}"
    instance = Boss(pg_dsn, schema=schema, supervise=False, schedule=False)
    await instance.start()
    await instance.create_queue("idle")
    try:
        yield instance
    finally:
        await instance.stop()
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


async def _post(http: Any, page: str, path: str, **form: str) -> Any:
    token = token_of((await http.get(page)).text)
    done = await http.post(path, data={"csrf": token, **form})
    assert done.status_code == 303, done.text
    return done


async def test_each_action_is_recorded_with_who_took_it(boss: Boss) -> None:
    basic = "Basic " + base64.b64encode(b"ops:s3cret-pass").decode()
    app = create_app(boss, basic_auth="ops:s3cret-pass")
    async with client(app, authorization=basic) as http:
        made = await _post(http, "/queue?name=idle", "/queue/create", queue="idle", data="{}")
        job = re.search(r"id=([0-9a-f-]{36})", made.headers["location"])
        assert job
        ident = job.group(1)
        queue = "/queue?name=idle"
        await _post(http, queue, "/job/action", queue="idle", id=ident, action="cancel")
        # any page's token will do: no server is listed yet to carry a form
        await _post(http, queue, "/instances", action="pause", key="<b>gpu</b>")
        page = await http.get("/audit")
        assert page.status_code == 200
        cells = r'<tr><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td><td class="mono">([^<]*)<'
        rows = re.findall(cells, page.text)
        assert [(who, what) for who, what, _ in rows] == [
            ("ops (127.0.0.1)", "instance pause"),
            ("ops (127.0.0.1)", "job cancel"),
            ("ops (127.0.0.1)", "job create"),
        ]
        assert rows[0][2] == "&lt;b&gt;gpu&lt;/b&gt;" and "<b>gpu</b>" not in page.text
        assert rows[1][2] == f"idle/{ident}"


class _Header(AuthenticationBackend):
    """The host application's sign-in, as a test stands it in: a user header."""

    async def authenticate(self, conn: Any) -> Any:
        user = conn.headers.get("x-user")
        return (AuthCredentials(["authenticated"]), SimpleUser(user)) if user else None


async def test_a_board_mounted_in_an_application_records_its_signed_in_user(boss: Boss) -> None:
    host = Starlette(
        routes=[Mount("/qcore", app=create_app(boss))],
        middleware=[Middleware(AuthenticationMiddleware, backend=_Header())],
    )
    async with client(host, **{"x-user": "alice"}) as http:
        await _post(http, "/qcore/queue?name=idle", "/qcore/queue/redrive", queue="idle")
    [entry] = await list_audit(boss.context())
    assert (entry.actor, entry.action, entry.target) == ("alice (127.0.0.1)", "redrive", "idle")
    assert entry.detail == {"moved": 0}


async def test_the_log_pages_newest_first(boss: Boss) -> None:
    ctx = boss.context()
    for n in range(60):
        await record(ctx, "script", "note", f"t{n}")
    first = await list_audit(ctx)
    assert [e.target for e in first[:2]] == ["t59", "t58"] and len(first) == 50
    assert first.next is not None
    rest = await list_audit(ctx, after=first.next)
    assert [e.target for e in rest] == [f"t{n}" for n in range(9, -1, -1)] and rest.next is None
    async with client(create_app(boss)) as http:
        page = await http.get("/audit")
        assert "older »" in page.text
        bad = await http.get("/audit", params={"after": "yesterday"})
        assert bad.status_code == 400


async def test_a_job_page_offers_only_what_its_state_allows(boss: Boss) -> None:
    """No Resume or Cancel on a completed job: cancel a job not yet ended, resume a
    cancelled one, retry a failed one; delete any."""
    await boss.create_queue("once", retry_limit=0)  # a failure fails the job for good
    sent = [await boss.send("once") for _ in range(4)]
    assert all(isinstance(j, uuid.UUID) for j in sent)
    active, done, failed, cancelled = (cast(uuid.UUID, j) for j in sent)
    assert len(await boss.fetch("once", batch_size=10)) == 4
    await boss.complete("once", [done])
    await boss.fail("once", [failed], {"why": "test"})
    await boss.cancel("once", [cancelled])
    async with client(create_app(boss)) as http:
        for job, offered in (
            (active, ["cancel", "delete"]),
            (done, ["delete"]),
            (failed, ["retry", "delete"]),
            (cancelled, ["resume", "delete"]),
        ):
            page = await http.get("/job", params={"queue": "once", "id": str(job)})
            assert re.findall(r'id="action-([a-z]+)"', page.text) == offered, job

"""What the dashboard answers to and how it fails, over HTTP in process against a real
database: a request addressed to a name the board was not given is refused before any
route runs (DNS rebinding); every answer, a crash's included, carries the security
headers; a read survives a connection the server dropped; failed sign-ins are limited
per address; bad query parameters are 400s that say what is allowed; a board without
a history store says how to get one; ``qcore dashboard`` warns about credentials on
its command line."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio

from qcore import Boss
from qcore.errors import ConfigError
from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider, PostgresMetricsStore
from qcore.web import combine, create_app
from qcore.web.security import HEADERS, AllowedHosts, SignInLimit
from tests.conftest import admin_execute, terminate_others, with_database
from tests.web.test_web import TOKEN, token_of

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]

FOREIGN = "evil.example:8080"

#: every page, asset and endpoint a browser can GET (``{job}``: a job's id)
GETS = (
    "/",
    "/queues",
    "/queue?name=q",
    "/job?queue=q&id={job}",
    "/instances",
    "/warnings",
    "/schedules",
    "/history",
    "/history/storage",
    "/history/purge?keep=7d",
    "/metrics",
    "/login",
    "/static/board.css",
    "/static/board.js",
    "/no-such-page",
)
#: every route that takes a POST
POSTS = (
    "/queue/create",
    "/queue/redrive",
    "/job/action",
    "/instances",
    "/history/purge",
    "/login",
    "/logout",
)


class Small:
    """A schema with a queue ``q`` holding waiting jobs, and a metrics store."""

    def __init__(self, boss: Boss, store: PostgresMetricsStore) -> None:
        self.boss = boss
        self.store = store

    def app(self, **options: Any) -> Any:
        options.setdefault("history", MetricsHistoryProvider(self.store))
        options.setdefault("admin", MetricsHistoryAdmin(self.store))
        return create_app(self.boss, **options)

    async def job(self) -> str:
        made = await self.boss.send("q", {"made": "for a test"})
        assert made is not None
        return str(made)

    async def state(self, job: str) -> str:
        found = await self.boss.get_job_by_id("q", job)
        assert found is not None and found.state is not None
        return found.state.value


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def small(pg_dsn: str) -> AsyncIterator[Small]:
    schema = f"web_hard_{uuid.uuid4().hex[:8]}"
    boss = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=False)
    await boss.start()
    try:
        await boss.create_queue("q")
        store = PostgresMetricsStore(boss.db, schema=schema, backend=boss.backend)
        await MetricsHistoryAdmin(store).stats()  # the store's tables made now
        yield Small(boss, store)
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


def client(
    app: Any, *, crashes: bool = False, address: str = "127.0.0.1", **headers: str
) -> httpx.AsyncClient:
    """A client of ``app`` from ``address``; ``crashes``: an exception the app raises
    after answering is left to the app (the client sees the answer, as a browser would)."""
    transport = httpx.ASGITransport(
        app=app, raise_app_exceptions=not crashes, client=(address, 50000)
    )
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080", headers=headers)


def assert_headers(answer: httpx.Response) -> None:
    for name, value in HEADERS.items():
        assert answer.headers.get_list(name) == [value], (answer.request.url, name)


# -- which hosts -----------------------------------------------------------------------


async def test_a_rebound_name_is_refused_on_every_route_before_it_runs(small: Small) -> None:
    """The audit's attack: a page of evil.example, its name pointed at 127.0.0.1, reads a
    job and posts a cancel with the Origin of its name and a token of the board. Every
    GET and POST addressed to that name is a 400 that shows nothing and changes
    nothing; the same POST addressed to 127.0.0.1 is carried out."""
    job = await small.job()
    async with client(small.app()) as http:
        token = token_of((await http.get(f"/job?queue=q&id={job}")).text)
        for path in GETS:
            answer = await http.get(path.format(job=job), headers={"host": FOREIGN})
            assert answer.status_code == 400, (path, answer.status_code)
            assert "evil.example" in answer.text and "--allowed-host" in answer.text
            assert job not in answer.text and "for a test" not in answer.text
            assert "set-cookie" not in answer.headers  # no route ran, not even the guard
            assert_headers(answer)
        cancel = {"csrf": token, "queue": "q", "id": job, "action": "cancel"}
        for path in POSTS:
            answer = await http.post(
                path,
                data={**cancel, "token": TOKEN},
                headers={"host": FOREIGN, "origin": f"http://{FOREIGN}"},
            )
            assert answer.status_code == 400, (path, answer.status_code)
            assert_headers(answer)
        assert await small.state(job) == "created"
        done = await http.post("/job/action", data=cancel)
        assert done.status_code == 303
        assert await small.state(job) == "cancelled"


async def test_localhost_and_addresses_pass_on_any_port_names_only_when_given(
    small: Small,
) -> None:
    passing = (
        "localhost",
        "localhost:3000",
        "LocalHost.:8080",
        "127.0.0.1:1",
        "127.8.9.10",
        "[::1]:8080",
        "[::1]",
        "10.0.0.5:8080",  # a container's port, a tunnel, a scraper by pod address
        "[2001:db8::5]:80",
    )
    refused = (
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "evil.example:8080@127.0.0.1",
        "",
        "[::1",
        "[127.0.0.1]",
        "::1",
        "localhost:80x",
        "localhost:",
        "localhost:123456",
        "local host",
    )
    async with client(small.app()) as http:
        for host in passing:
            assert (await http.get("/queues", headers={"host": host})).status_code == 200, host
        for host in refused:
            answer = await http.get("/queues", headers={"host": host})
            assert answer.status_code == 400, host
    named = small.app(allowed_hosts=["Board.Example.com", ".corp.example", "10.1.2.3"])
    async with client(named) as http:
        for host in (
            "board.example.com:443",
            "BOARD.EXAMPLE.COM",
            "corp.example",
            "a.b.corp.example",
        ):
            assert (await http.get("/queues", headers={"host": host})).status_code == 200, host
        for host in ("evilcorp.example", "board.example.com.evil.example", "example.com"):
            assert (await http.get("/queues", headers={"host": host})).status_code == 400, host
    for bad in (
        "http://board.example.com",
        "board.example.com:443",
        "",
        "*",
        "a/b",
        "a b",
        "ünï.example",
    ):
        with pytest.raises(ConfigError, match="not a host name"):
            small.app(allowed_hosts=[bad])
    assert AllowedHosts("one.example").allows("one.example")  # a lone name, not its letters
    assert not AllowedHosts("one.example").allows("o")


async def test_a_combined_board_answers_no_foreign_host_either(small: Small) -> None:
    host = combine({"main": small.app(allowed_hosts=["ops.example"]), "eu": small.app()})
    async with client(host) as http:
        for path in ("/", "/db/main/", "/db/eu/queues", "/db/nowhere/"):
            answer = await http.get(path, headers={"host": FOREIGN})
            assert answer.status_code == 400, path
            assert_headers(answer)
        assert (
            await http.get("/db/main/queues", headers={"host": "ops.example"})
        ).status_code == 200
        # a name one board was given is still refused by the other
        assert (await http.get("/db/eu/queues", headers={"host": "ops.example"})).status_code == 400
        first = await http.get("/")
        assert first.status_code == 303
        assert_headers(first)
        missing = await http.get("/db/nowhere/")
        assert missing.status_code == 404
        assert_headers(missing)


# -- every answer's headers ------------------------------------------------------------


async def test_every_answer_carries_the_security_headers(
    small: Small, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = small.app()

    async def crash() -> Any:
        raise RuntimeError("a bug in a page")

    monkeypatch.setattr(app.state.dashboard.board, "queues", crash)
    async with client(app, crashes=True) as http:
        answers = {
            200: await http.get("/"),
            404: await http.get("/no-such-page"),
            405: await http.put("/queues"),
            400: await http.get("/queue?name=q&state=lost"),
            500: await http.get("/queues"),
        }
        static_miss = await http.get("/static/nothing.css")
    for status, answer in answers.items():
        assert answer.status_code == status, (status, answer.text[:300])
        assert_headers(answer)
    assert static_miss.status_code == 404
    assert_headers(static_miss)
    assert "a bug in a page" not in answers[500].text  # the log has it, not the browser
    async with client(app) as http:  # and the crash is raised on, for the server's log
        with pytest.raises(RuntimeError, match="a bug in a page"):
            await http.get("/queues")
    guarded = small.app(token=TOKEN)
    async with client(guarded) as http:
        asked = await http.get("/", headers={"accept": "text/html"})
        refused = await http.get("/metrics")
        for answer, status in ((asked, 303), (refused, 401)):
            assert answer.status_code == status
            assert_headers(answer)


# -- bad query parameters --------------------------------------------------------------


async def test_a_bad_range_is_a_400_naming_what_is_allowed_a_bad_tab_the_default(
    small: Small,
) -> None:
    for app in (small.app(), create_app(small.boss)):  # with history and without
        async with client(app) as http:
            for path in ("/queue?name=q&range=1y", "/queue?name=q&range="):
                answer = await http.get(path)
                assert answer.status_code == 400, path
                assert "range must be one of 60m, 7d, 30d, 90d" in answer.text
            assert (await http.get("/queue?name=q&range=7d")).status_code == 200
    async with client(small.app()) as http:
        answer = await http.get("/history?range=1y")
        assert answer.status_code == 400 and "60m, 7d, 30d, 90d" in answer.text
        for path in ("/history?tab=pie", "/history?chart=pie", "/queue?name=q&chart=pie"):
            answer = await http.get(path)  # a tab is only a view: the default one
            assert answer.status_code == 200, path
            assert 'data-tab="throughput" aria-selected="true"' in answer.text, path
        assert (await http.get("/history?range=30d&tab=latency")).status_code == 200


async def test_a_nul_or_a_bottomless_data_filter_is_a_400(small: Small) -> None:
    async with client(small.app(), crashes=True) as http:
        for path in (
            "/queue?name=q&key=%00",
            "/queue?name=q&state=created%00",
            f"/job?queue=q%00&id={uuid.uuid4()}",
            "/queue?name=q&data=" + quote("[" * 5000 + "]" * 5000),
        ):
            answer = await http.get(path)
            assert answer.status_code == 400, (path[:60], answer.text[-300:])
            assert_headers(answer)


# -- a board without a history store ---------------------------------------------------


async def test_history_without_a_store_says_how_to_get_one(small: Small) -> None:
    async with client(create_app(small.boss)) as http:
        for path in ("/history", "/history/storage", "/history/purge?keep=all"):
            answer = await http.get(path)
            assert answer.status_code == 404, path
            assert "--history" in answer.text and "create_app" in answer.text
        token = token_of((await http.get("/queue?name=q")).text)
        purge = await http.post("/history/purge", data={"csrf": token, "keep": "all"})
        assert purge.status_code == 404
    schema = small.boss.context().schema
    absent = PostgresMetricsStore(
        small.boss.db, schema=schema, backend=small.boss.backend,
        table_prefix="absent_", migrate=False,
    )  # fmt: skip
    app = create_app(
        small.boss,
        history=MetricsHistoryProvider(absent),
        admin=MetricsHistoryAdmin(absent),
        read_only=True,
    )
    async with client(app) as http:
        for path in ("/history", "/history/storage"):
            answer = await http.get(path)
            assert answer.status_code == 200, path
            assert "not set up" in answer.text and "qcore metrics record" in answer.text
        assert (await http.get("/queue?name=q")).status_code == 200  # no charts, no error


# -- a lost connection -----------------------------------------------------------------


async def test_a_read_is_run_again_once_after_the_server_dropped_the_connection(
    pg_dsn: str,
) -> None:
    """A server restart leaves the pool's connections dead: the first read on one fails.
    Here the server ends them (pg_terminate_backend, on a database of the test's own so
    no other test loses a connection) between two requests."""
    database = f"qcore_web_retry_{uuid.uuid4().hex[:8]}"
    admin_execute(f'CREATE DATABASE "{database}"', pg_dsn)
    dsn = with_database(pg_dsn, database)
    boss = Boss(dsn, supervise=False, schedule=False, register_instance=False, max=4)
    try:
        await boss.start()
        await boss.create_queue("q")
        await boss.send("q", {"survives": "the restart"})
        async with client(create_app(boss)) as http:
            for path in ("/", "/queue?name=q"):  # every pooled connection used
                assert (await http.get(path)).status_code == 200
            assert terminate_others(dsn) >= 1
            page = await http.get("/queue?name=q")
            assert page.status_code == 200, page.text[-500:]
            assert "the restart" in page.text
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', pg_dsn)


# -- sign-ins --------------------------------------------------------------------------


async def test_failed_sign_ins_are_limited_per_address(small: Small) -> None:
    now = [1000.0]
    app = small.app(token=TOKEN)
    app.state.dashboard.sign_ins.clock = lambda: now[0]
    wrong = {"token": "not-the-token-at-all"}
    async with client(app) as http, client(app, address="10.0.0.7") as other:
        for _ in range(5):
            assert (await http.post("/login", data=wrong)).status_code == 401
            now[0] += 1
        limited = await http.post("/login", data={"token": TOKEN})  # even the right one
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "55"  # the first failure leaves at 1060
        assert "try again in 55 s" in limited.text
        assert_headers(limited)
        bearer = await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 429  # the header is a sign-in as well
        assert (await other.post("/login", data={"token": TOKEN})).status_code == 303
        now[0] = 1060.0  # the first failure has left the window: one more try
        assert (await http.post("/login", data=wrong)).status_code == 401
        assert (await http.post("/login", data={"token": TOKEN})).status_code == 429
        now[0] = 1065.0
        signed = await http.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303
        assert (await http.get("/")).status_code == 200  # the cookie: not a guess
    basic = small.app(basic_auth="ops:correct horse")
    basic.state.dashboard.sign_ins.clock = lambda: now[0]
    async with (
        client(basic, address="2001:db8::1") as http,
        client(basic, address="2001:db8::2") as neighbour,
    ):
        for _ in range(5):
            assert (await http.get("/", auth=("ops", "guess"))).status_code == 401
        assert (await http.get("/", auth=("ops", "correct horse"))).status_code == 429
        # the same /64: one machine's share of addresses
        assert (await neighbour.get("/", auth=("ops", "correct horse"))).status_code == 429
        assert (await http.get("/")).status_code == 401  # no credentials: nothing guessed


def test_the_sign_in_limit_keys_clients_and_stays_bounded() -> None:
    now = [0.0]
    limit = SignInLimit(attempts=2, seconds=60, clock=lambda: now[0])
    for client in ("::ffff:192.0.2.1", "::ffff:192.0.2.1"):
        limit.failed(client)
    assert limit.wait("192.0.2.1") == 60  # the same client, over IPv4 or a mapped IPv6
    assert limit.wait("::ffff:192.0.2.2") == 0  # not every IPv4 client as one /64
    limit.TRACKED = 3
    for n in range(10):
        limit.failed(f"198.51.100.{n}")
    assert len(limit) <= 3
    now[0] = 61
    assert limit.wait("198.51.100.9") == 0 and limit.wait("192.0.2.1") == 0
    assert len(limit) <= 2  # those looked at and found past their window are forgotten


# -- the command -----------------------------------------------------------------------


async def test_the_served_board_answers_its_names_and_refuses_others(
    small: Small, pg_dsn: str
) -> None:
    """``qcore dashboard`` under uvicorn, over a real socket: the names of
    ``--allowed-host`` and ``--host`` pass, localhost and addresses pass, others not."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    schema = small.boss.context().schema
    with tempfile.TemporaryFile() as log:
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "qcore", "dashboard", "--url", pg_dsn, "--schema", schema,
            "--host", "127.0.0.1", "--port", str(port), "--allowed-host", "board.example",
            "--allowed-host", ".corp.example",
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 90
                while True:
                    try:
                        await http.get("/login")
                        break
                    except httpx.TransportError:
                        if server.returncode is not None or loop.time() > deadline:
                            log.seek(0)
                            raise AssertionError(log.read().decode()) from None
                        await asyncio.sleep(0.2)
                for host in ("board.example", "x.corp.example:8443", "localhost:1", "127.0.0.1"):
                    answer = await http.get("/queues", headers={"host": host})
                    assert answer.status_code == 200, host
                    assert_headers(answer)
                for host in (FOREIGN, "board.example.evil.example"):
                    answer = await http.get("/static/board.css", headers={"host": host})
                    assert answer.status_code == 400, host
                    assert_headers(answer)
        finally:
            server.terminate()
            try:
                await asyncio.wait_for(server.wait(), 30)
            except asyncio.TimeoutError:
                server.kill()
                await server.wait()


def test_the_command_warns_about_credentials_in_its_options() -> None:
    def dashboard(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "qcore", "dashboard", "--dsn", "postgresql://nowhere", *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    done = dashboard("--token", TOKEN, "--allowed-host", "board.example.com:443")
    assert done.returncode == 2  # the host refused: nothing started
    assert "--token is visible" in done.stderr and "QCORE_DASHBOARD_TOKEN" in done.stderr
    assert "not a host name" in done.stderr
    done = dashboard("--basic-auth", "ops:correct horse", "--allowed-host", "a/b")
    assert "--basic-auth is visible" in done.stderr and "QCORE_DASHBOARD_BASIC_AUTH" in done.stderr
    assert TOKEN not in done.stderr

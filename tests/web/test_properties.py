"""A standing property of the dashboard: whatever a query string holds, a page answers
with less than a 500 and with the security headers. Hypothesis builds the queries from
the parameters each route reads (queue names, states, singleton keys, data filters as
JSON of every kind, ranges, tabs, keyset cursors, job ids, purge choices, sealed
notices), mixing values a form would send with text and bytes no form would: invalid
UTF-8, NUL, lone surrogates inside JSON, nesting past every limit, numbers past every
range. Each example is a real request against a real database.

Bounded: a few hundred examples, no deadline (a shared machine is slow at times), and
derandomized where ``CI`` is set, so a CI run is the same run every time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from qcore import Boss
from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider, PostgresMetricsStore
from qcore.web import create_app
from qcore.web.board import RANGES, STATES
from qcore.web.security import HEADERS
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]

QUEUES = ("q", "a/b.c-d_e")


class Boards:
    """Two boards on one schema (with the metrics history and without), the ids of its
    jobs and a keyset cursor of its own."""

    def __init__(self, apps: list[Any], jobs: list[str], cursor: str) -> None:
        self.apps = apps
        self.jobs = jobs
        self.cursor = cursor


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def boards(pg_dsn: str) -> AsyncIterator[Boards]:
    schema = f"web_prop_{uuid.uuid4().hex[:8]}"
    boss = Boss(pg_dsn, schema=schema, supervise=False, schedule=False, register_instance=False)
    await boss.start()
    try:
        jobs = []
        for name in QUEUES:
            await boss.create_queue(name)
            for n in range(3):
                made = await boss.send(name, {"n": n, "tags": ["x", "y"]}, singleton_key=f"k{n}")
                assert made is not None
                jobs.append(str(made))
        store = PostgresMetricsStore(boss.db, schema=schema, backend=boss.backend)
        history = create_app(
            boss, history=MetricsHistoryProvider(store), admin=MetricsHistoryAdmin(store)
        )
        [job] = await boss.find_jobs("q", limit=1)
        assert job.created_on is not None
        yield Boards([history, create_app(boss)], jobs, f"{job.created_on.isoformat()}_{job.id}")
    finally:
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


# -- what a query may hold -------------------------------------------------------------

#: any text a URL can carry (lone surrogates are not Unicode: a URL cannot hold them)
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)

#: JSON values of every kind, strings with any code point, NUL and lone surrogates too
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(), max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(), max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


DATA = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.integers(min_value=1, max_value=1500).map(nested),
    st.sampled_from(['{"n": 1}', '{"tags": ["x"]}', "[", '"\\ud800"', '{"a": "\\u0000"}', "1e999"]),
    TEXT,
)

OFFSETS = st.timedeltas(
    min_value=-dt.timedelta(hours=23, minutes=59), max_value=dt.timedelta(hours=23, minutes=59)
)

CURSORS = st.one_of(
    st.builds(
        lambda when, zone, ident: f"{when.replace(tzinfo=zone).isoformat()}_{ident}",
        st.datetimes(),
        st.none() | OFFSETS.map(dt.timezone),
        st.uuids(),
    ),
    TEXT,
)


#: values no form sends that have broken a page before: NUL, a lone surrogate, nesting
#: past every limit, numbers past every range, a huge text
NASTY_VALUES = (
    "\x00",
    "k0\x00",
    '"\\ud800"',
    '{"a": "\\udc00x"}',
    '{"a": "\\u0000"}',
    nested(400),
    nested(1200),
    "1e999",
    "NaN",
    "-" + "9" * 400,
    "x" * 2000,
    "9999-12-31T23:59:59-23:59_" + str(uuid.UUID(int=0)),
    "0001-01-01T00:00:00+23:59_" + str(uuid.UUID(int=0)),
)
NASTY = st.sampled_from(NASTY_VALUES)


def kinds(boards: Boards) -> dict[str, st.SearchStrategy[str]]:
    """For each query parameter, the values a page of the board itself links to."""
    return {
        "name": st.sampled_from(QUEUES),
        "queue": st.sampled_from(QUEUES),
        "state": st.sampled_from(STATES),
        "key": st.sampled_from(("k0", "k1", "nobody")),
        "data": DATA,
        "range": st.sampled_from(RANGES),
        "tab": st.sampled_from(("throughput", "latency")),
        "before": CURSORS | st.just(boards.cursor),
        "id": st.sampled_from(boards.jobs) | st.uuids().map(str),
        "keep": st.sampled_from(("7d", "30d", "90d", "all")),
        "done": TEXT,
        "seal": st.text("0123456789abcdef", min_size=64, max_size=64),
    }


#: each route a browser can GET and the parameters it reads
ROUTES = {
    "/": (),
    "/queues": (),
    "/queue": ("name", "state", "key", "data", "range", "before", "done", "seal"),
    "/job": ("queue", "id", "done", "seal"),
    "/instances": ("done", "seal"),
    "/warnings": ("before",),
    "/schedules": (),
    "/history": ("range", "tab"),
    "/history/storage": ("done", "seal"),
    "/history/purge": ("keep",),
    "/metrics": (),
    "/login": (),
}

#: the longest path and query a server takes (uvicorn's parser refuses a longer head)
MAX_TARGET = 16 * 1024

RAW_BYTES = st.binary(max_size=24).map(lambda b: urllib.parse.quote_from_bytes(b, safe=""))


def target(path: str, pairs: list[tuple[str, str]]) -> str:
    """``path`` with the query ``pairs``, each value already percent-encoded."""
    return f"{path}?{'&'.join(f'{n}={v}' for n, v in pairs)}" if pairs else path


def encoded(text: str) -> str:
    return urllib.parse.quote(text, safe="")


@st.composite
def queries(draw: st.DrawFn, boards: Boards) -> tuple[int, str]:
    """Which board and a path with a query. One parameter of the route (or one no route
    reads) is the one under test: something nasty, any text, or percent-encoded bytes
    that may not be UTF-8. The others are values of their kind, or absent, or twice, so
    a page gets past its first checks to the one under test."""
    of_kind = kinds(boards)
    path = draw(st.sampled_from([p for p, names in ROUTES.items() for _ in range(1 + len(names))]))
    names = [*ROUTES[path], "x"]
    tested = draw(st.sampled_from(names))
    wild = draw(
        st.one_of(
            NASTY.map(encoded), TEXT.map(encoded), RAW_BYTES, of_kind.get(tested, TEXT).map(encoded)
        )
    )
    pairs = []
    for name in names:
        if name == tested:
            pairs.append((name, wild))
        elif name != "x":
            for _ in range(draw(st.sampled_from((0, 1, 1, 1, 2)))):
                pairs.append((name, encoded(draw(of_kind[name]))))
    pairs = draw(st.permutations(pairs))
    board = draw(st.integers(0, len(boards.apps) - 1))
    url = target(path, pairs)
    assume(len(url) <= MAX_TARGET)
    return board, url


async def answers_well(app: Any, url: str) -> None:
    """``url`` answered below 500, with every security header once."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as http:
        answer = await http.get(url)
    assert answer.status_code < 500, (url[:300], answer.status_code, answer.text[-400:])
    for name, value in HEADERS.items():
        assert answer.headers.get_list(name) == [value], (url[:300], name)


async def test_every_nasty_value_in_every_parameter(boards: Boards) -> None:
    """The values that broke pages before, each in each parameter of each route, the
    others given as a page links them: the regressions hypothesis might not draw."""
    usual = {
        "name": "q", "queue": "q", "state": "created", "key": "k0", "data": '{"n": 1}',
        "range": "7d", "tab": "latency", "before": boards.cursor, "id": boards.jobs[0],
        "keep": "7d", "done": "x", "seal": "0" * 64,
    }  # fmt: skip
    for path, names in ROUTES.items():
        for tested in names:
            for wild in NASTY_VALUES:
                pairs = [(n, encoded(wild if n == tested else usual[n])) for n in names]
                for app in boards.apps:
                    await answers_well(app, target(path, pairs))


@settings(
    max_examples=300,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
async def test_no_query_makes_a_page_fail_or_lose_its_headers(
    boards: Boards, data: st.DataObject
) -> None:
    board, url = data.draw(queries(boards), label="board, path")
    await answers_well(boards.apps[board], url)

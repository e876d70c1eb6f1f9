"""The dashboard in a real browser: Debian's chromium driven by selenium through
chromedriver, against ``qcore dashboard`` serving a real database that real workers
filled (the fleet of ``tests/web/test_web.py``). Clicks change the database; the markup
in job data stays text; forged and read-only POSTs are refused.

Screenshots of the main pages go to a temporary folder, or to the folder named by
``QCORE_DASHBOARD_SCREENSHOTS`` (the docs' images are made that way).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.metrics import MetricsHistoryAdmin, MetricsRecorder, PgBossQueues, PostgresMetricsStore
from qcore.services.instances import InstanceRegistry
from tests.conftest import admin_execute
from tests.web.test_web import XSS_DATA, fill, fleet_boss

pytestmark = [pytest.mark.postgres, pytest.mark.feature("dashboard")]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
KEY = "browser-test:host-1"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    pytest.skip(
        "no chromium and chromedriver here (Debian packages chromium, chromium-driver)",
        allow_module_level=True,
    )

from selenium.common.exceptions import NoAlertPresentException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``qcore dashboard`` in a subprocess, until stopped.

    A board with ``--history`` records too: its recorder's one tick at start finds the
    queues' leases held by the fixture's recorder, and the next is an hour away, so the
    history the pages show (and a purge leaves) is the fixture's alone.
    """

    def __init__(self, dsn: str, schema: str, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qcore", "dashboard", "--url", dsn, "--schema", schema,
             "--port", str(self.port), "--history", "--interval", "3600", *extra],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/", timeout=5):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()  # never left serving after a failed start
                    self.proc.wait(30)
                    self.log.seek(0)
                    output = self.log.read().decode()
                    raise AssertionError(f"the dashboard did not start:\n{output}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def a_busy_week(boss: Boss) -> None:
    """A week of finished jobs on three queues, busier by day than by night, so the
    history's charts and the screenshots show a shape (rows as workers leave them)."""
    q = boss.context().q
    for name, per_slot, failing in (("mail", 6, 0.02), ("reports", 2, 0.10), ("sms", 4, 0.0)):
        await boss.create_queue(name) if name != "mail" else None
        await boss.db.execute(
            f"INSERT INTO {q}.job (name, state, data, created_on, started_on, completed_on)"
            " SELECT $1::text, CASE WHEN random() < $3::float8 THEN 'failed' ELSE 'completed'"
            f" END::{q}.job_state, '{{}}'::jsonb, t - interval '1 second' * (1 + 20 * random()),"
            " t - interval '1 millisecond' * (20 + 400 * random()), t"
            " FROM generate_series(now() - interval '7 days', now() - interval '2 minutes',"
            " interval '15 minutes') AS slot,"
            " LATERAL (SELECT slot + interval '1 second' * k AS t FROM generate_series(1,"
            " ($2::int * (1.2 + sin(extract(epoch FROM slot) / 13751.0)))::int) AS k) AS jobs",
            [name, per_slot, failing],
        )


#: the fleet the board shows: dead rows (as maintenance keeps at most) and live servers
DEAD_ROWS, LIVE_SERVERS = 1000, 12


async def a_fleet(boss: Boss) -> None:
    """Copies of the board's own row: ``LIVE_SERVERS`` live keyed servers (``gpu-N:rack``,
    beating hourly so they stay live through the tests) and ``DEAD_ROWS`` rows of
    servers gone a day or more (every third anonymous, the others keyed
    ``retired-N:cpu``), each of another name, so no registration prunes them."""
    q = boss.context().q
    copy = (
        f"INSERT INTO {q}.instance (id, name, host, pid, version, node_version, application_name,"
        " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats, persist_warnings,"
        " pool_max, pool_total, pool_idle, pool_waiting, workers, metrics, config, started_on,"
        " heartbeat_on, stopped_on)"
        " SELECT gen_random_uuid(), $2 || n, 'host-' || n, t.pid + n, t.version, t.node_version,"
        " t.application_name, $3::int, t.supervise, t.schedule, t.migrate,"
        " t.persist_queue_stats, t.persist_warnings, t.pool_max, t.pool_total, t.pool_idle,"
        " t.pool_waiting, t.workers, t.metrics, CASE WHEN $4::boolean AND n % 3 = 0"
        " THEN t.config - 'instanceKey' ELSE jsonb_set(t.config, '{instanceKey}',"
        " to_jsonb($2 || n || $5::text)) END,"
        f" {q}.job_now() - $6::int * interval '1 minute' - n * interval '5 minutes',"
        f" {q}.job_now() - $6::int * interval '1 minute' - n * interval '5 minutes',"
        " CASE WHEN $4::boolean AND n % 2 = 0 THEN"
        f" {q}.job_now() - $6::int * interval '1 minute' - n * interval '5 minutes' END"
        f" FROM {q}.instance t, generate_series(1, $7::int) AS n WHERE t.id = $1::uuid"
    )
    own = str(boss.instance_id)
    await boss.db.execute(copy, [own, "gpu-", 3600, False, ":rack", 0, LIVE_SERVERS])
    await boss.db.execute(copy, [own, "retired-", 30, True, ":cpu", 24 * 60, DEAD_ROWS])
    await boss.db.execute(  # a key is a server's once the key table knows it
        f"INSERT INTO {q}.qcore_instance_key (instance_key, seen_on, instance_id)"
        " SELECT DISTINCT ON (config ->> 'instanceKey') config ->> 'instanceKey', heartbeat_on, id"
        f" FROM {q}.instance WHERE config ->> 'instanceKey' IS NOT NULL"
        " ORDER BY config ->> 'instanceKey', heartbeat_on DESC ON CONFLICT DO NOTHING"
    )


class World:
    def __init__(self, boss: Boss, store: PostgresMetricsStore, xss: uuid.UUID, board: Server,
                 read_only: Server, combined: Server, shots: Path) -> None:  # fmt: skip
        self.boss, self.store, self.xss = boss, store, xss
        self.board, self.read_only, self.combined = board, read_only, combined
        self.shots = shots


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(pg_dsn: str) -> AsyncIterator[World]:
    schema = f"webui_{uuid.uuid4().hex[:10]}"
    boss = fleet_boss(pg_dsn, schema, KEY)
    await boss.start()
    servers: list[Server] = []
    try:
        xss = await fill(boss)
        await a_busy_week(boss)
        for _ in range(3):  # depth snapshots for the queue's chart
            await boss.supervise()
        await a_fleet(boss)
        store = PostgresMetricsStore(boss.db, schema=schema, backend=boss.backend)
        await set_clock(boss.context(), 120)
        await MetricsRecorder(store, PgBossQueues(boss.context()), margin_seconds=0).tick()
        await set_clock(boss.context(), 0)
        servers.append(await asyncio.to_thread(Server, pg_dsn, schema))
        servers.append(await asyncio.to_thread(Server, pg_dsn, schema, "--read-only"))
        # the same database again under another name: the board's switch between two
        servers.append(
            await asyncio.to_thread(Server, pg_dsn, schema, "--database", f"copy={pg_dsn}")
        )
        folder = os.environ.get("QCORE_DASHBOARD_SCREENSHOTS")
        shots = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="qcore-shots-"))
        shots.mkdir(parents=True, exist_ok=True)
        yield World(boss, store, xss, servers[0], servers[1], servers[2], shots)
    finally:
        for server in servers:
            server.stop()
        await boss.stop(graceful=False)
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="qcore-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    assert "Error" not in driver.title, driver.find_element(By.TAG_NAME, "main").text


def _click(driver: Any, element: Any) -> None:
    """Click ``element`` and wait until the page it leads to has replaced this one."""
    _leave(driver, element.click)


def _leave(driver: Any, action: Any, *args: Any) -> None:
    """Run ``action`` and wait until a new document has replaced this one and loaded.

    The old document is marked on its window rather than watched through an element:
    asking ChromeDriver about an element of a page being replaced can fail with an
    inspector error instead of reporting the element stale.
    """
    driver.execute_script("window.qcoreLeftBehind = true")
    action(*args)

    def arrived(driver: Any) -> bool:
        return bool(
            driver.execute_script(
                "return window.qcoreLeftBehind === undefined && document.readyState === 'complete'"
            )
        )

    WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(arrived)


def _text(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "main").text)


async def _run(function: Any, *args: Any) -> Any:
    """A blocking browser step off the event loop the fleet's Boss runs on."""
    return await asyncio.to_thread(function, *args)


async def test_every_page_renders_in_the_browser(world: World, browser: Any) -> None:
    def visit() -> None:
        url = world.board.url
        pages = {
            "overview": ("/", ["Problem queues", "failing", "test_warning"]),
            "queues": ("/queues", ["mail/dlq", "idle"]),
            "queue": ("/queue?name=mail", ["Jobs", "Metrics", "Create a job"]),
            "job": (f"/job?queue=mail&id={world.xss}", ["Data", "Error"]),
            "instances": ("/instances", [KEY, "live"]),
            "warnings": ("/warnings", ["test_warning"]),
            "schedules": ("/schedules", ["*/5 * * * *"]),
            "history": ("/history", ["Metrics history", "By queue"]),
            "storage": ("/history/storage", ["By tier", "Clear all history"]),
        }
        for name, (path, texts) in pages.items():
            _open(browser, url + path)
            shown = _text(browser)
            for text in texts:
                assert text in shown, (path, text)
            if name != "job":  # its error's stack names this machine's paths
                browser.save_screenshot(str(world.shots / f"{name}.png"))
        # the history page's charts are SVG in the page, with the log axis labelled
        _open(browser, url + "/history?tab=latency")
        assert "log scale" in browser.find_element(By.CSS_SELECTOR, "[data-panel=latency] svg").text

    await _run(visit)


async def test_markup_in_job_data_never_runs(world: World, browser: Any) -> None:
    def look() -> None:
        _open(browser, f"{world.board.url}/job?queue=mail&id={world.xss}")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
        assert browser.execute_script("return window.pwned === undefined") is True
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
        assert XSS_DATA["note"] in browser.find_element(By.ID, "job-data").text
        assert "onerror=alert(2)" in browser.find_element(By.ID, "job-output").text

    await _run(look)


async def test_pausing_an_instance_from_the_board(world: World, browser: Any) -> None:
    """The board's pause is "requested" until the server reads it (this one has no
    worker and no listener: at its heartbeat), then "paused", acknowledged; a resume
    the same way."""

    def pause() -> str:
        _open(browser, f"{world.board.url}/instances")
        _click(browser, browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{KEY}"] button.pause'))
        return _text(browser)

    def row_text() -> str:
        _open(browser, f"{world.board.url}/instances")
        return str(browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{KEY}"]').text)

    async def heartbeat() -> None:
        registry = world.boss.services.get("registry", InstanceRegistry)
        assert registry is not None
        await registry.exclusive(registry.run_pass)

    def layout() -> tuple[str, str]:
        _open(browser, f"{world.board.url}/instances")
        return (
            browser.execute_script(
                "return getComputedStyle(document.querySelector('tr[data-key] td.actions')).display"
            ),
            browser.execute_script(
                "return getComputedStyle(document.querySelector('tr[data-key] td.key')).whiteSpace"
            ),
        )

    # the action column is a table cell (aligned with its header), keys never wrap
    assert await _run(layout) == ("table-cell", "nowrap")
    shown = await _run(pause)
    assert f"paused {KEY}" in shown
    [row] = await world.boss.list_instances(search=KEY)
    assert row.paused
    assert "pause requested" in await _run(row_text)
    await heartbeat()
    assert world.boss.paused
    acknowledged = await _run(row_text)
    assert "paused" in acknowledged and "acknowledged" in acknowledged
    assert "requested" not in acknowledged

    def resume() -> str:
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{KEY}"]')
        _click(browser, row.find_element(By.CSS_SELECTOR, "button.resume"))
        return str(browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{KEY}"]').text)

    assert "resume requested" in await _run(resume)
    [row] = await world.boss.list_instances(search=KEY)
    assert not row.paused
    await heartbeat()
    assert not world.boss.paused
    assert "paused" not in await _run(row_text) and "requested" not in await _run(row_text)


async def test_the_instances_page_at_fleet_scale(world: World, browser: Any) -> None:
    """With a thousand dead rows behind a dozen live servers: the live ones lead the
    first page of fifty, the counts come from every row, the next page and the search
    find the rest, and Remove takes a long-gone server's key off the list."""
    counts = await world.boss.instance_counts()
    assert counts.total >= DEAD_ROWS + LIVE_SERVERS + 1

    def first_page() -> tuple[str, list[str], bool]:
        _open(browser, f"{world.board.url}/instances")
        rows = browser.find_elements(By.CSS_SELECTOR, "#instances tbody tr")
        classes = [str(r.get_attribute("class")) for r in rows]
        has_next = bool(browser.find_elements(By.PARTIAL_LINK_TEXT, "next"))
        return str(browser.find_element(By.ID, "instance-counts").text), classes, has_next

    said, classes, has_next = await _run(first_page)
    assert f"{counts.live:,} live of {counts.total:,} registered" in said
    assert len(classes) == 50 and has_next
    live = classes.count("live")
    assert live == counts.keyed_live >= LIVE_SERVERS + 1
    assert classes[:live] == ["live"] * live  # every live server before any quiet one

    def second_page() -> list[str]:
        _click(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "next"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#instances tbody tr")
        return [str(r.get_attribute("class")) for r in rows]

    assert set(await _run(second_page)) == {"quiet-row"}

    gone = "retired-5:cpu"  # keyed, heard from a day ago

    def search(text: str) -> list[str]:
        _open(browser, f"{world.board.url}/instances?q={text}")
        rows = browser.find_elements(By.CSS_SELECTOR, "#instances tbody tr[data-key]")
        return [str(r.get_attribute("data-key")) for r in rows]

    assert await _run(search, gone) == [gone]

    def remove() -> str:
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{gone}"]')
        _leave(browser, _accept_confirm, row.find_element(By.CSS_SELECTOR, "button.remove"))
        return _text(browser)

    assert f"removed {gone}" in await _run(remove)
    assert await _run(search, gone) == []
    assert (await world.boss.instance_counts()).total == counts.total - 1
    # a live server offers no Remove
    assert await _run(search, "gpu-1:rack") == ["gpu-1:rack"]
    assert not browser.find_elements(By.CSS_SELECTOR, "button.remove")


def _accept_confirm(button: Any) -> None:
    """Click ``button`` and accept the confirmation its ``data-confirm`` asks for."""
    driver = button.parent
    button.click()
    WebDriverWait(driver, 10).until(lambda d: _alert(d) is not None)
    alert = _alert(driver)
    assert alert is not None and "Its jobs are not touched" in alert.text
    alert.accept()


def _alert(driver: Any) -> Any:
    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None


async def test_retrying_a_failed_job_requeues_it(world: World, browser: Any) -> None:
    def retry() -> str:
        _open(browser, f"{world.board.url}/job?queue=mail&id={world.xss}")
        assert browser.find_element(By.ID, "job-state").text == "failed"
        _click(browser, browser.find_element(By.ID, "action-retry"))
        return str(browser.find_element(By.ID, "job-state").text)

    assert await _run(retry) in ("retry", "created")
    job = await world.boss.get_job_by_id("mail", world.xss)
    assert job is not None and job.state is not None and job.state.value in ("retry", "created")


async def test_the_range_selector_switches_series(world: World, browser: Any) -> None:
    def switch() -> tuple[str, str, str]:
        _open(browser, f"{world.board.url}/queue?name=mail")
        before = browser.find_element(By.CSS_SELECTOR, "#history svg.throughput-chart")
        ticks_60m = " ".join(t.text for t in before.find_elements(By.CSS_SELECTOR, ".x-tick"))
        _click(browser, browser.find_element(By.CSS_SELECTOR, "nav.ranges a[data-range='7d']"))
        after = browser.find_element(By.CSS_SELECTOR, "#history svg.throughput-chart")
        ticks_7d = " ".join(t.text for t in after.find_elements(By.CSS_SELECTOR, ".x-tick"))
        here = browser.find_element(By.CSS_SELECTOR, "nav.ranges a.here").text
        return ticks_60m, ticks_7d, here

    ticks_60m, ticks_7d, here = await _run(switch)
    assert here == "7d"
    assert ":" in ticks_60m  # hours and minutes over an hour
    assert ":" not in ticks_7d and ticks_7d != ticks_60m  # days over a week


async def test_chart_tabs_legend_choices_and_the_fold_are_remembered(
    world: World, browser: Any
) -> None:
    def shown(selector: str) -> list[str]:
        return [
            str(el.get_attribute("data-panel"))
            for el in browser.find_elements(By.CSS_SELECTOR, selector)
            if el.is_displayed()
        ]

    def series_off(name: str) -> bool:
        item = browser.find_element(
            By.CSS_SELECTOR, f"[data-panel=latency] .legend-item[data-series='{name}']"
        )
        return "off" in str(item.get_attribute("class")).split()

    def use() -> None:
        url = f"{world.board.url}/history?range=7d"
        _open(browser, url)
        browser.execute_script("localStorage.clear()")
        _open(browser, url)
        assert shown("[data-panel]") == ["throughput", "throughput"]  # totals, chart
        assert "completed" in _text(browser) and "p95 run" not in _text(browser)
        tab = browser.find_element(By.CSS_SELECTOR, "nav.tabs [data-tab=latency]")
        tab.click()  # the script switches in place: no new page
        assert shown("[data-panel]") == ["latency", "latency"]
        assert "p95 run" in _text(browser) and "p95 wait" in _text(browser)
        assert browser.current_url.endswith("chart=latency")
        assert "chart=latency" in str(
            browser.find_element(By.CSS_SELECTOR, "nav.ranges a[data-range='30d']").get_attribute(
                "href"
            )
        )
        assert series_off("p99 run") and not series_off("p95 run")
        item = browser.find_element(
            By.CSS_SELECTOR, "[data-panel=latency] .legend-item[data-series='p99 run'] text"
        )
        item.click()
        assert not series_off("p99 run")
        browser.refresh()  # a new page, the Latency tab from its URL, p99 run remembered
        assert shown("[data-panel]") == ["latency", "latency"]
        assert not series_off("p99 run") and series_off("p99 wait")
        # the chart folds away, and stays folded on the next page
        fold = browser.find_element(By.CSS_SELECTOR, "details.chart-fold")
        assert fold.get_attribute("open") is not None
        browser.find_element(By.CSS_SELECTOR, "details.chart-fold > summary").click()
        _open(browser, f"{world.board.url}/queue?name=mail")
        assert (
            browser.find_element(By.CSS_SELECTOR, "details.chart-fold").get_attribute("open")
            is None
        )
        browser.execute_script("localStorage.clear()")

    await _run(use)


async def test_the_storage_panel_confirms_before_it_purges(world: World, browser: Any) -> None:
    assert (await MetricsHistoryAdmin(world.store).stats()).rows > 0

    def open_confirmation() -> str:
        _open(browser, f"{world.board.url}/history/storage")
        _click(browser, browser.find_element(By.ID, "clear-all"))
        return str(browser.find_element(By.ID, "confirm").text)

    confirmation = await _run(open_confirmation)
    assert "All history goes" in confirmation and "cannot be undone" in confirmation
    assert (await MetricsHistoryAdmin(world.store).stats()).rows > 0  # nothing gone yet

    def confirm() -> str:
        _click(browser, browser.find_element(By.ID, "confirm-purge"))
        return _text(browser)

    assert "purged all history" in await _run(confirm)
    assert (await MetricsHistoryAdmin(world.store).stats()).rows == 0


_FORGE = """
const form = document.createElement("form");
form.method = "post"; form.action = "/job/action";
for (const [k, v] of Object.entries(arguments[0])) {
  const input = document.createElement("input");
  input.type = "hidden"; input.name = k; input.value = v; form.appendChild(input);
}
document.body.appendChild(form); form.submit();
"""


async def test_a_forged_post_is_rejected(world: World, browser: Any) -> None:
    def forge() -> str:
        _open(browser, f"{world.board.url}/")
        fields = {"queue": "mail", "id": str(world.xss), "action": "delete", "csrf": "f" * 64}
        _leave(browser, browser.execute_script, _FORGE, fields)
        return str(browser.find_element(By.ID, "error").text)

    assert "CSRF" in await _run(forge)
    assert await world.boss.get_job_by_id("mail", world.xss) is not None


async def test_read_only_shows_no_action_and_refuses_posts(world: World, browser: Any) -> None:
    def look() -> tuple[int, int, str]:
        url = world.read_only.url
        forms = 0
        for path in ("/", "/instances", f"/job?queue=mail&id={world.xss}", "/queue?name=mail"):
            _open(browser, url + path)
            forms += len(browser.find_elements(By.CSS_SELECTOR, "form[method=post]"))
        _open(browser, url + "/history/storage")
        purges = len(browser.find_elements(By.ID, "clear-all"))
        fields = {"queue": "mail", "id": str(world.xss), "action": "delete", "csrf": ""}
        _leave(browser, browser.execute_script, _FORGE, fields)
        return forms, purges, str(browser.find_element(By.ID, "error").text)

    forms, purges, refused = await _run(look)
    assert forms == 0 and purges == 0
    assert "read-only" in refused
    assert await world.boss.get_job_by_id("mail", world.xss) is not None


async def test_the_sidebar_switches_between_databases(world: World, browser: Any) -> None:
    def switch() -> tuple[str, str, str]:
        _open(browser, world.combined.url + "/")
        landed = str(browser.current_url)
        _click(browser, browser.find_element(By.CSS_SELECTOR, "nav.side a.db[href$='/db/copy/']"))
        _click(browser, browser.find_element(By.LINK_TEXT, "Queues"))
        here = browser.find_element(By.CSS_SELECTOR, "nav.side a.db.here").text
        return landed, str(browser.current_url), str(here)

    landed, now, here = await _run(switch)
    assert landed.endswith("/db/main/")
    assert now.endswith("/db/copy/queues") and here == "copy"

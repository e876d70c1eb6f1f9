"""``qcore dashboard --history`` records as well as shows: a recorder per database in the
board's own process, into PostgreSQL or Redis, started with the server and stopped with
it (its leases handed back), none on a read-only board, which creates nothing; a tick
that fails leaves the board serving. ``qcore metrics record`` and the board take the
same retention and latency options, refused with exit status 2 when out of range. The
Dockerfile's own command line serves a board that records; its image is built where a
Docker daemon answers. Real PostgreSQL and Redis, the command in a subprocess."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from qcore import Boss
from qcore.cli import dashboard
from qcore.cli.connection import LIBPQ_VARIABLES, resolve
from qcore.conformance.helpers import set_clock
from qcore.conformance.suite.test_metrics import REDIS_URL, drop_prefix, redis_client
from qcore.metrics import Retention
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("cli")]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "dashboard" / "Dockerfile"
TOKEN = "a-token-for-the-history-tests"
#: how long a condition gets to come true (the machine may be busy)
DEADLINE = 60.0

# -- fixtures and helpers ---------------------------------------------------------------


async def _fill(dsn: str, schema: str) -> None:
    """Queue ``mail`` with three jobs sent, fetched and completed, their times then moved
    ten minutes back (one closed minute, so a recorder's first tick counts them)."""
    async with Boss(dsn, schema=schema, supervise=False, schedule=False) as boss:
        await boss.create_queue("mail")
        for n in range(3):
            await boss.send("mail", {"n": n})
        jobs = await boss.fetch("mail", batch_size=3)
        assert len(jobs) == 3
        await boss.complete("mail", [job.id for job in jobs])
        await boss.db.execute(
            f"UPDATE {schema}.job SET created_on = now() - interval '11 minutes',"
            " started_on = now() - interval '10 minutes' - interval '20 milliseconds',"
            " completed_on = now() - interval '10 minutes' WHERE name = 'mail'"
        )


@pytest.fixture
def filled(pg_dsn: str) -> Iterator[str]:
    """A schema of its own whose queue ``mail`` holds three completed jobs."""
    schema = f"clihist_{uuid.uuid4().hex[:8]}"
    asyncio.run(_fill(pg_dsn, schema))
    try:
        yield schema
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def _table(dsn: str, schema: str, name: str) -> bool:
    [(present,)] = admin_execute(f"SELECT to_regclass('{schema}.{name}') IS NOT NULL", dsn)
    return bool(present)


def _rows(dsn: str, schema: str, where: str = "true") -> int:
    """Rows of the store's series table in ``schema`` (0 while it does not exist)."""
    if not _table(dsn, schema, "qcore_metrics_series"):
        return 0
    [(n,)] = admin_execute(f"SELECT count(*) FROM {schema}.qcore_metrics_series WHERE {where}", dsn)
    return int(n)


def _store_tables(dsn: str, schema: str) -> list[str]:
    rows = admin_execute(
        f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'"
        " AND tablename LIKE 'qcore_metrics%'",
        dsn,
    )
    return [str(r[0]) for r in rows]


def _environment(**extra: str) -> dict[str, str]:
    """This environment without any database setting, plus ``extra``."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("QCORE_DATABASE_URL", "DATABASE_URL", "QCORE_DASHBOARD_TOKEN")
        and k not in LIBPQ_VARIABLES
    }
    return {**clean, "PYTHONUNBUFFERED": "1", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, ready: Callable[[], bool], board: Board) -> None:
    """Until ``ready()``; fails with the board's output if it ends or time runs out."""
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if board.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {DEADLINE:.0f} s (exit status {board.proc.returncode}):\n"
                + board.output()
            )
        time.sleep(0.5)


class Board:
    """``qcore dashboard`` (``argv``: what follows ``python -m qcore``) in a subprocess,
    on a free port, its token from the environment; waited for until it answers."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qcore", *argv, "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=_environment(QCORE_DASHBOARD_TOKEN=TOKEN, **env),
            cwd=ROOT / "tests",
        )
        self.status: int | None = None
        try:
            _wait_for("the board answering", self._answers, self)
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        try:
            self.get("/login")
        except OSError:
            return False
        return True

    def get(self, path: str) -> tuple[int, str]:
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> int:
        """SIGTERM, as ``docker stop`` sends it; the exit status (killed if it hangs)."""
        if self.status is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.status = self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("no exit within the deadline after SIGTERM") from None
        return self.status


@contextlib.contextmanager
def serving(argv: list[str], env: dict[str, str]) -> Iterator[Board]:
    board = Board(argv, env)
    try:
        yield board
    finally:
        board.stop()
        board.log.close()


def _stopped_cleanly(board: Board) -> str:
    """The board's output once it stopped on SIGTERM as uvicorn stops (0, or the signal)."""
    status = board.stop()
    output = board.output()
    assert status in (0, -signal.SIGTERM), output
    assert "shutdown complete" in output.lower(), output
    return output


def _leases(dsn: str, schema: str) -> int:
    [(n,)] = admin_execute(f"SELECT count(*) FROM {schema}.qcore_metrics_lease", dsn)
    return int(n)


# -- the Dockerfile's command line ------------------------------------------------------


def _docker_command() -> list[str]:
    """The Dockerfile's ENTRYPOINT and CMD (JSON arrays), one command line."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    found = {}
    for instruction in ("ENTRYPOINT", "CMD"):
        lines = re.findall(rf"^{instruction}\s+(\[.*\])\s*$", text, re.MULTILINE)
        assert len(lines) == 1, f"one {instruction} as a JSON array, found {lines}"
        found[instruction] = json.loads(lines[0])
    return [*found["ENTRYPOINT"], *found["CMD"]]


def test_the_dockerfiles_command_serves_the_history_it_records(pg_dsn: str, filled: str) -> None:
    command = _docker_command()
    assert command[:2] == ["qcore", "dashboard"] and "--history" in command, command
    assert "0.0.0.0" in command  # reached from outside the container: needs the token
    # the image's command, run by this Python: the database from the environment
    argv = [*command[1:], "--schema", filled]
    with serving(argv, {"QCORE_DATABASE_URL": pg_dsn}) as board:
        _wait_for("history rows", lambda: _rows(pg_dsn, filled) == 6, board)
        mail = _rows(pg_dsn, filled, "completed = 3 AND latency IS NOT NULL")
        assert mail == 6, board.output()  # mail's and the rollup's three tiers, with latency
        code, page = board.get("/history")
        assert code == 200 and "mail" in page, (code, page[:2000])
        assert board.get("/queues")[0] == 200
        assert _leases(pg_dsn, filled) == 1  # mail's sampling lease, held
        assert "recording the metrics history every 60 s" in board.output()
        output = _stopped_cleanly(board)
    assert _leases(pg_dsn, filled) == 0, output  # handed back by recorder.stop()
    stats = run_qcore("metrics", "stats", "--json", "--url", pg_dsn, "--schema", filled)
    assert json.loads(stats.stdout)["rows"] == 6, stats.stderr


def test_the_image_builds() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no Docker daemon here (no docker command)")
    info = subprocess.run([docker, "info"], capture_output=True, timeout=60, check=False)
    if info.returncode != 0:
        pytest.skip("no Docker daemon here (docker info fails)")
    tag = f"qcore-dashboard-test:{uuid.uuid4().hex[:8]}"
    built = subprocess.run(
        [docker, "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    try:
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        help_ = subprocess.run(
            [docker, "run", "--rm", tag, "--help"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert help_.returncode == 0 and "--history" in help_.stdout, help_.stderr
        user = subprocess.run(
            [docker, "run", "--rm", "--entrypoint", "id", tag, "-u"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert user.returncode == 0 and user.stdout.strip() != "0", user.stdout + user.stderr
    finally:
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True, timeout=300, check=False)


# -- where it records -------------------------------------------------------------------


def test_every_database_on_the_board_is_recorded(
    pg_dsn: str, filled: str, empty_database: str
) -> None:
    asyncio.run(_fill(empty_database, filled))  # the same schema in another database
    argv = ["dashboard", "--url", pg_dsn, "--schema", filled, "--history"]
    argv += ["--database", f"eu={empty_database}", "--interval", "30"]
    with serving(argv, {}) as board:
        _wait_for("history rows in the main database", lambda: _rows(pg_dsn, filled) == 6, board)
        _wait_for("history rows in eu", lambda: _rows(empty_database, filled) == 6, board)
        assert "every 30 s" in board.output()
        for name in ("main", "eu"):
            code, page = board.get(f"/db/{name}/history")
            assert code == 200 and "mail" in page, (name, code, page[:2000])
        _stopped_cleanly(board)
    assert _leases(pg_dsn, filled) == 0 and _leases(empty_database, filled) == 0


def test_a_read_only_board_creates_nothing_and_records_nothing(pg_dsn: str, filled: str) -> None:
    argv = ["dashboard", "--url", pg_dsn, "--schema", filled, "--history", "--read-only"]
    with serving(argv, {}) as board:
        code, page = board.get("/history")  # says how the store gets made
        assert code == 200 and "migrate" in page.lower(), (code, page[:2000])
        assert board.get("/queue?name=mail")[0] == 200
        assert "recording" not in board.output()
        _stopped_cleanly(board)
    assert _store_tables(pg_dsn, filled) == []  # no recorder created the store either


def test_a_failing_tick_leaves_the_board_serving(pg_dsn: str, filled: str) -> None:
    argv = ["dashboard", "--url", pg_dsn, "--schema", filled, "--history", "--interval", "1"]
    with serving(argv, {}) as board:
        _wait_for("history rows", lambda: _rows(pg_dsn, filled) == 6, board)
        admin_execute(f"DROP TABLE {filled}.qcore_metrics_lease", pg_dsn)  # every tick fails

        def said() -> bool:
            return "metrics recorder (main):" in board.output()

        _wait_for("the failure said on stderr", said, board)
        assert board.get("/history")[0] == 200  # the board serves on
        assert board.get("/")[0] == 200
        line = next(s for s in board.output().splitlines() if "metrics recorder (main):" in s)
        assert line.startswith("qcore dashboard: metrics recorder (main): ") and "lease" in line
        assert "Traceback" not in board.output()
        _stopped_cleanly(board)


def test_the_board_records_into_redis_under_its_prefix(
    pg_dsn: str, filled: str, empty_database: str
) -> None:
    """Each database under a prefix of its own: the main one under ``--redis-prefix``,
    ``eu`` (the same schema in another database) under ``<prefix>.eu``."""
    prefix = f"qcore-board:{uuid.uuid4().hex[:8]}"
    prefixes = {"main": prefix, "eu": f"{prefix}.eu"}
    for each in prefixes.values():
        asyncio.run(_redis_keys(each, drop=True))  # skips the test when no Redis answers
    asyncio.run(_fill(empty_database, filled))
    argv = ["dashboard", "--url", pg_dsn, "--schema", filled, "--history"]
    argv += ["--redis", REDIS_URL, "--redis-prefix", prefix, "--database", f"eu={empty_database}"]
    try:
        with serving(argv, {}) as board:

            def recorded() -> bool:
                for each in prefixes.values():
                    keys = asyncio.run(_redis_keys(each))
                    if not any(f":pgboss:{filled}:mail:m:" in k for k in keys):
                        return False
                return True

            _wait_for("history in Redis under both prefixes", recorded, board)
            assert any(":__lease__:" in k for k in asyncio.run(_redis_keys(prefix)))
            for name in prefixes:
                code, page = board.get(f"/db/{name}/history")
                assert code == 200 and "mail" in page, (name, code, page[:2000])
            _stopped_cleanly(board)
        for name, each in prefixes.items():
            keys = asyncio.run(_redis_keys(each))
            assert not any(":__lease__:" in k for k in keys), keys  # handed back at the stop
            url = pg_dsn if name == "main" else empty_database
            common = ["--url", url, "--schema", filled, "--redis", REDIS_URL]
            stats = run_qcore("metrics", "stats", "--json", *common, "--redis-prefix", each)
            assert json.loads(stats.stdout)["rows"] == 6, (name, stats.stderr)
            assert _store_tables(url, filled) == []  # nothing in PostgreSQL
    finally:
        for each in prefixes.values():
            asyncio.run(_redis_keys(each, drop=True))


async def _redis_keys(prefix: str, *, drop: bool = False) -> list[str]:
    """The keys under ``prefix`` (deleted with ``drop``)."""
    client = await redis_client()
    try:
        if drop:
            await drop_prefix(client, prefix)
            return []
        return [k.decode() async for k in client.scan_iter(match=prefix + ":*", count=1000)]
    finally:
        await client.aclose()


# -- retention and latency --------------------------------------------------------------


def test_no_latency_records_counts_only(pg_dsn: str, filled: str) -> None:
    where = ["--url", pg_dsn, "--schema", filled]
    done = run_qcore("metrics", "record", "--once", "--no-latency", *where)
    assert done.returncode == 0, done.stderr
    assert "1 queue-minute(s) changed" in done.stdout
    assert _rows(pg_dsn, filled, "completed = 3") == 6  # the counts, every tier
    assert _rows(pg_dsn, filled, "latency IS NOT NULL OR age IS NOT NULL") == 0
    # the same with latency, into a second schema's store: the histograms are there
    store = f"{filled}_latency"
    try:
        both = run_qcore("metrics", "record", "--once", *where, "--store-schema", store)
        assert both.returncode == 0, both.stderr
        assert _rows(pg_dsn, store, "latency IS NOT NULL") == 6
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {store} CASCADE", pg_dsn)


def _clock(dsn: str, schema: str, ahead_seconds: float) -> None:
    async def move() -> None:
        async with Boss(dsn, schema=schema, supervise=False, schedule=False) as boss:
            await set_clock(boss.context(), ahead_seconds)

    asyncio.run(move())


def test_per_tier_retention_reaches_the_recorder(pg_dsn: str, filled: str) -> None:
    where = ["--url", pg_dsn, "--schema", filled]
    assert run_qcore("metrics", "record", "--once", *where).returncode == 0
    minutes = "tier = 'm'"
    assert _rows(pg_dsn, filled, minutes) == 2  # mail's and the rollup's minute
    try:
        _clock(pg_dsn, filled, 86400 + 3600)  # the jobs are now 25 hours old
        # the default keeps minute rows 7 days
        assert run_qcore("metrics", "record", "--once", *where).returncode == 0
        assert _rows(pg_dsn, filled, minutes) == 2
        # a day of minutes: they go, the hour and day rows stay
        done = run_qcore("metrics", "record", "--once", "--retain-minutes", "1", *where)
        assert done.returncode == 0, done.stderr
        assert _rows(pg_dsn, filled, minutes) == 0
        assert _rows(pg_dsn, filled) == 4
        # a day of hours too, by the same option of the board's recorder
        done = run_qcore(
            "metrics", "record", "--once", "--retain-hours", "1", "--retain-days", "30", *where
        )
        assert done.returncode == 0, done.stderr
        assert _rows(pg_dsn, filled, "tier = 'h'") == 0 and _rows(pg_dsn, filled) == 2
    finally:
        _clock(pg_dsn, filled, 0)


def _dashboard_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    dashboard.add_parser(parser.add_subparsers())
    return parser.parse_args(["dashboard", *argv])


async def test_the_board_reads_and_records_with_the_retention_given(
    pg_dsn: str, filled: str
) -> None:
    where = ["--url", pg_dsn, "--schema", filled, "--history"]
    cases = {
        (): Retention(),
        ("--retention-days", "30"): Retention(minutes=7, hours=30, days=30),
        ("--retain-minutes", "1", "--retain-days", "400"): Retention(minutes=1, days=400),
    }
    for given, retention in cases.items():
        args = _dashboard_args(*where, *given, "--interval", "90", "--no-latency")
        recorders: list[Any] = []
        async with contextlib.AsyncExitStack() as stack:
            app = await dashboard.open_board(resolve(args), args, stack, recorders=recorders)
            assert app.state.dashboard.board.history.retention == retention, given
            [recorder] = recorders
            assert recorder.retention == retention and not recorder.latency
            assert recorder.interval_seconds == 90
        read_only = _dashboard_args(*where, *given, "--read-only")
        recorders = []
        async with contextlib.AsyncExitStack() as stack:
            app = await dashboard.open_board(
                resolve(read_only), read_only, stack, recorders=recorders
            )
            assert app.state.dashboard.board.history.retention == retention, given
            assert recorders == []


# -- usage errors -----------------------------------------------------------------------


BAD = [
    (["--retention-days", "0"], "--retention-days must be a whole number of days from 1 to 3650"),
    (["--retention-days", "3651"], "--retention-days must be a whole number of days"),
    (["--retention-days", "soon"], "--retention-days must be a whole number of days"),
    (["--retain-minutes", "-1"], "--retain-minutes must be a whole number of days from 1 to 3650"),
    (["--retain-hours", "1.5"], "--retain-hours must be a whole number of days"),
    (["--retain-days", "9999"], "--retain-days must be a whole number of days"),
    (["--interval", "0"], "--interval must be a number from 1 to 3600"),
    (["--interval", "fast"], "--interval must be a number from 1 to 3600"),
    (["--retention-days", "7", "--retain-minutes", "1"], "--retention-days or --retain-minutes"),
    (["--redis", REDIS_URL, "--store-schema", "x"], "give --store-schema or --redis, not both"),
]


@pytest.mark.parametrize("command", ["metrics", "dashboard"])
@pytest.mark.parametrize(("given", "said"), BAD, ids=[" ".join(g) for g, _ in BAD])
def test_bad_values_are_usage_errors(command: str, given: list[str], said: str) -> None:
    # nothing connects: the database named does not exist
    argv = ["dashboard", "--history"] if command == "dashboard" else ["metrics", "record"]
    done = run_qcore(*argv, "--url", "postgresql://nobody@127.0.0.1:1/none", *given)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"qcore {command}: "), done.stderr
    assert said in lines[0], lines[0]


def test_the_history_options_need_history() -> None:
    done = run_qcore(
        "dashboard", "--url", "postgresql://nobody@127.0.0.1:1/none",
        "--redis", REDIS_URL, "--retain-days", "30", "--no-latency",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "qcore dashboard: --redis, --retain-days, --no-latency: only with --history"
    )


def test_a_failure_said_again_only_when_it_changes_or_ten_minutes_passed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = dashboard._Report("eu")
    for _ in range(5):
        report(ConnectionError("connection refused\nmore detail"), "")
    report(ConnectionError("connection refused"), "mail")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "qcore dashboard: metrics recorder (eu): connection refused",
        "qcore dashboard: metrics recorder (eu, queue 'mail'): connection refused",
    ]
    report._said -= dashboard.REPEAT_SECONDS  # as if ten minutes had passed
    report(ConnectionError("connection refused"), "mail")
    report(ConnectionError("connection refused"), "mail")
    report._said -= dashboard.REPEAT_SECONDS
    report(ConnectionError("connection refused"), "mail")
    assert capsys.readouterr().err.splitlines() == [
        "qcore dashboard: metrics recorder (eu, queue 'mail'): connection refused",
        "qcore dashboard: metrics recorder (eu, queue 'mail'): connection refused"
        " (and 1 time(s) more since it was last said)",
    ]

"""The embedded PGlite engine: the Node.js server wrapper and the single-session adapter,
against a real PGlite run by Node.js."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qcore.conformance.helpers import cut_connection
from qcore.db.pglite import PGliteDatabase
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    NotInstalledError,
    QcoreError,
    UniqueViolation,
)
from qcore_backends.pglite.server import PGliteServer
from tests.adapters import ROUND_TRIP_CASES, check_round_trip

pytestmark = [pytest.mark.pglite, pytest.mark.feature("pglite engine")]


def _start(server: PGliteServer) -> PGliteServer:
    """Start a server, or skip naming the missing capability (Node.js, the npm packages)."""
    if shutil.which("node") is None and shutil.which("nodejs") is None:
        pytest.skip("Node.js is not installed: the embedded PGlite engine runs in Node.js")
    try:
        return server.start()
    except ConfigError as exc:
        pytest.skip(f"Node.js 18+ with npm is needed to run PGlite: {exc}")
    except NotInstalledError as exc:
        pytest.skip(f"PGlite's npm packages cannot be installed (npm registry unreachable?): {exc}")


@pytest.fixture(scope="session")
def pglite_server() -> Iterator[PGliteServer]:
    server = _start(PGliteServer())
    yield server
    server.stop()


@pytest.fixture
async def db(pglite_server: PGliteServer) -> AsyncIterator[PGliteDatabase]:
    database = await PGliteDatabase.connect(pglite_server.url)
    yield database
    await database.close()


def table_name() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


# -- the server ---------------------------------------------------------------------------


def test_start_and_version(pglite_server: PGliteServer) -> None:
    assert pglite_server.url.startswith("postgresql://postgres@127.0.0.1:")
    assert pglite_server.url.endswith("/postgres?sslmode=disable")
    with psycopg.connect(pglite_server.url) as conn:
        row = conn.execute("SELECT version()").fetchone()
    assert row is not None and "PGlite" in row[0]


def test_start_twice_is_a_no_op(pglite_server: PGliteServer) -> None:
    url, pid = pglite_server.url, pglite_server.pid
    assert pglite_server.start() is pglite_server
    assert (pglite_server.url, pglite_server.pid) == (url, pid)


def test_url_before_start_is_an_error() -> None:
    with pytest.raises(Exception, match="not running"):
        _ = PGliteServer().url


def test_restart_on_the_same_data_dir_keeps_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "pgdata"
    with _start(PGliteServer(data_dir=data_dir)) as server:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (id int PRIMARY KEY, note text)")
            conn.execute("INSERT INTO kept VALUES (1, 'survives a restart')")
        # one server per directory: a second one is refused while the first runs
        with pytest.raises(ConfigError, match="in use"):
            PGliteServer(data_dir=data_dir).start()
        pid = server.pid
    assert pid is not None and not _alive(pid)
    # SIGTERM made the server close PGlite: PostgreSQL shut down with a checkpoint
    assert server.exit_code == 0
    assert _cluster_state(data_dir) == DB_SHUTDOWNED

    with _start(PGliteServer(data_dir=data_dir)) as again:

        async def read() -> list[dict[str, Any]]:
            database = await PGliteDatabase.connect(again.url)
            try:
                return await database.execute("SELECT id, note FROM kept")
            finally:
                await database.close()

        assert asyncio.run(read()) == [{"id": 1, "note": "survives a restart"}]


DB_SHUTDOWNED = 1  # ControlFileData.state after a clean shutdown (6 = in production)


def _cluster_state(data_dir: Path) -> int:
    """``state`` from global/pg_control: after the system identifier (8 bytes), the
    control file version and the catalog version (4 bytes each)."""
    raw = (data_dir / "global" / "pg_control").read_bytes()
    return int.from_bytes(raw[16:20], sys.byteorder)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL of the parent needs POSIX")
def test_server_stops_when_its_python_process_is_killed(pglite_server: PGliteServer) -> None:
    script = (
        "import os, signal, sys\n"
        "from qcore_backends.pglite.server import PGliteServer\n"
        "server = PGliteServer().start()\n"
        "print(server.pid, server.log_path, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid_text, log_path = done.stdout.split()
    pid = int(pid_text)
    deadline = time.monotonic() + 15
    while _alive(pid):
        assert time.monotonic() < deadline, "the orphaned PGlite server is still running"
        time.sleep(0.05)
    log = Path(log_path).read_text()
    Path(log_path).unlink()
    assert "Server stopped" in log  # it closed PGlite, it was not killed


def test_start_failure_reports_the_server_log(pglite_server: PGliteServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = PGliteServer(port=port)
        with pytest.raises(QcoreError, match="exited with code") as info:
            server.start()
    assert "EADDRINUSE" in str(info.value)  # the tail of the server's log
    assert server.log_path is None and server.pid is None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not running; on Linux look at its state
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_missing_node_executable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"nodejs\.org") as info:
        PGliteServer(node="/nonexistent/bin/node").start()
    assert "connection string" in str(info.value)


def test_node_not_on_path_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no node, no nodejs
    with pytest.raises(ConfigError, match="not on PATH") as info:
        PGliteServer().start()
    assert "nodejs.org" in str(info.value)


@pytest.mark.skipif(sys.platform == "win32", reason="a shell-script stand-in for node needs POSIX")
def test_old_node_is_a_config_error(tmp_path: Path) -> None:
    fake = tmp_path / "node"
    fake.write_text("#!/bin/sh\necho v16.20.2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ConfigError, match="18 or newer"):
        PGliteServer(node=str(fake)).start()


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="port"):
        PGliteServer(port=70000)
    with pytest.raises(ConfigError, match="startup_timeout_seconds"):
        PGliteServer(startup_timeout_seconds=0)


# -- values -------------------------------------------------------------------------------


@ROUND_TRIP_CASES
async def test_value_round_trip(
    db: PGliteDatabase, sql_type: str, value: Any, expected: Any
) -> None:
    await check_round_trip(db, sql_type, value, expected)


async def test_placeholders_and_percent_inside_literals_survive(db: PGliteDatabase) -> None:
    rows = await db.execute(
        "SELECT '100%' AS pct, '$1' AS dollar, $$a $2 % b$$ AS quoted,"
        " $1::int AS n, $1::int + 1 AS m",
        [41],
    )
    assert rows == [{"pct": "100%", "dollar": "$1", "quoted": "a $2 % b", "n": 41, "m": 42}]
    assert await db.execute("SELECT '50%' AS p") == [{"p": "50%"}]


async def test_statement_without_rows_returns_an_empty_list(db: PGliteDatabase) -> None:
    name = table_name()
    assert await db.execute(f"CREATE TABLE {name} (id int)") == []
    assert await db.execute(f"INSERT INTO {name} VALUES ($1)", [1]) == []


async def test_errors_are_mapped_and_the_connection_stays_usable(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    await db.execute(f"INSERT INTO {name} VALUES (1)")
    with pytest.raises(UniqueViolation) as info:
        await db.execute(f"INSERT INTO {name} VALUES (1)")
    assert info.value.sqlstate == "23505"
    with pytest.raises(DatabaseError) as syntax:
        await db.execute("SELEC 1")
    assert syntax.value.sqlstate == "42601"
    assert await db.execute("SELECT 1 AS one") == [{"one": 1}]


async def test_execute_script_with_do_block(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute_script(
        f"""
        CREATE TABLE {name} (id int PRIMARY KEY, note text);
        DO $$
        BEGIN
          FOR i IN 1..3 LOOP
            INSERT INTO {name} VALUES (i, 'row ' || i || ' 100%');
          END LOOP;
        END
        $$;
        CREATE FUNCTION {name}_count() RETURNS bigint LANGUAGE sql AS $body$
          SELECT count(*) FROM {name}
        $body$;
        """
    )
    assert await db.execute(f"SELECT {name}_count() AS n") == [{"n": 3}]
    assert (await db.execute(f"SELECT note FROM {name} WHERE id = 2"))[0]["note"] == "row 2 100%"


# -- one session, serialised --------------------------------------------------------------


async def test_a_transaction_holds_the_connection_until_it_commits(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute(f"CREATE TABLE {name} (id int)")
    events: list[str] = []
    inside = asyncio.Event()

    async def writer() -> None:
        async with db.transaction() as tx:
            await tx.execute(f"INSERT INTO {name} VALUES (1)")
            events.append("first inserted")
            inside.set()
            await asyncio.sleep(0.3)  # the reader is waiting for the connection meanwhile
            events.append("first committing")
        events.append("first committed")

    async def reader() -> int:
        await inside.wait()
        events.append("second sends")
        rows = await db.execute(f"SELECT count(*) AS n FROM {name}")
        events.append("second done")
        return int(rows[0]["n"])

    _, seen = await asyncio.gather(writer(), reader())
    assert events == [
        "first inserted",
        "second sends",
        "first committing",
        "first committed",
        "second done",
    ]
    assert seen == 1  # it ran after the commit and saw the row


async def test_concurrent_statements_all_complete(db: PGliteDatabase) -> None:
    results = await asyncio.gather(*(db.execute("SELECT $1::int AS i", [i]) for i in range(50)))
    assert [r[0]["i"] for r in results] == list(range(50))


async def test_rollback_on_exception(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute(f"CREATE TABLE {name} (id int)")
    with pytest.raises(RuntimeError, match="boom"):
        async with db.transaction() as tx:
            await tx.execute(f"INSERT INTO {name} VALUES (1)")
            raise RuntimeError("boom")
    assert await db.execute(f"SELECT count(*) AS n FROM {name}") == [{"n": 0}]
    # a failed statement inside a transaction rolls it back too
    with pytest.raises(UniqueViolation):
        async with db.transaction() as tx:
            await tx.execute(f"CREATE UNIQUE INDEX ON {name} (id)")
            await tx.execute(f"INSERT INTO {name} VALUES (2), (2)")
    assert await db.execute(f"SELECT count(*) AS n FROM {name}") == [{"n": 0}]


async def test_nested_transaction_joins_its_parent(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute(f"CREATE TABLE {name} (id int)")
    with pytest.raises(RuntimeError):
        async with db.transaction() as outer:
            assert db.in_transaction
            async with db.transaction() as inner:
                assert inner is outer
                await inner.execute(f"INSERT INTO {name} VALUES (1)")
            # the root adapter inside the transaction runs in it (no deadlock on the lock)
            assert await db.execute(f"SELECT count(*) AS n FROM {name}") == [{"n": 1}]
            raise RuntimeError("roll back both")
    assert not db.in_transaction
    assert await db.execute(f"SELECT count(*) AS n FROM {name}") == [{"n": 0}]

    async with db.transaction() as outer, outer.transaction() as inner:
        await inner.execute(f"INSERT INTO {name} VALUES (2)")
    assert await db.execute(f"SELECT id FROM {name}") == [{"id": 2}]


async def test_session_settings_are_shared_and_survive_between_statements(
    db: PGliteDatabase,
) -> None:
    await db.execute("SELECT set_config('qcore.test_marker', 'on', false)")
    assert await db.execute("SELECT current_setting('qcore.test_marker') AS v") == [{"v": "on"}]


# -- LISTEN in process --------------------------------------------------------------------


async def test_pg_notify_through_the_adapter_reaches_the_listener(db: PGliteDatabase) -> None:
    received: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    channel = f"qcore_{uuid.uuid4().hex[:8]}"

    async def on_message(ch: str, payload: str) -> None:
        await received.put((ch, payload))

    assert db.can_listen
    listener = await db.listen(channel, on_message)
    try:
        await db.execute("SELECT pg_notify($1, $2)", [channel, "hello"])
        assert await asyncio.wait_for(received.get(), 5) == (channel, "hello")

        # inside a transaction it arrives with the commit, and a callback may use the adapter
        async with db.transaction() as tx:
            await tx.execute(f"NOTIFY {channel}, 'from tx'")
            await asyncio.sleep(0.05)
            assert received.empty()
        assert await asyncio.wait_for(received.get(), 5) == (channel, "from tx")

        # other channels are not delivered
        await db.execute("SELECT pg_notify('qcore_other_channel', 'x')")
        await db.execute("SELECT pg_notify($1, 'second')", [channel])
        assert await asyncio.wait_for(received.get(), 5) == (channel, "second")
    finally:
        await listener.close()

    await db.execute("SELECT pg_notify($1, 'after close')", [channel])
    await asyncio.sleep(0.1)
    assert received.empty()
    rows = await db.execute("SELECT pg_listening_channels() AS ch")
    assert channel not in [r["ch"] for r in rows]


async def test_sync_callback_and_two_listeners_on_one_channel(db: PGliteDatabase) -> None:
    channel = f"qcore_{uuid.uuid4().hex[:8]}"
    first: list[str] = []
    second: list[str] = []
    one = await db.listen(channel, lambda _ch, p: first.append(p))
    two = await db.listen(channel, lambda _ch, p: second.append(p))
    await db.execute("SELECT pg_notify($1, 'both')", [channel])
    await _until(lambda: first == ["both"] and second == ["both"])
    await one.close()  # the channel stays LISTENed for the other
    await db.execute("SELECT pg_notify($1, 'only two')", [channel])
    await _until(lambda: second == ["both", "only two"])
    assert first == ["both"]
    await two.close()


# -- a lost connection --------------------------------------------------------------------


async def test_lost_connection_fails_once_then_reconnects_and_relistens(
    db: PGliteDatabase,
) -> None:
    channel = f"qcore_{uuid.uuid4().hex[:8]}"
    messages: list[str] = []
    reconnects: list[bool] = []
    listener = await db.listen(
        channel, lambda _ch, p: messages.append(p), lambda: reconnects.append(True)
    )
    try:
        cut_connection(db)
        with pytest.raises(ConnectionLostError):
            await db.execute("SELECT 1")
        assert await db.execute("SELECT 2 AS two") == [{"two": 2}]
        await _until(lambda: reconnects == [True])
        await db.execute("SELECT pg_notify($1, 'after reconnect')", [channel])
        await _until(lambda: messages == ["after reconnect"])
    finally:
        await listener.close()


async def test_lost_connection_inside_a_transaction(db: PGliteDatabase) -> None:
    name = table_name()
    await db.execute(f"CREATE TABLE {name} (id int)")
    with pytest.raises(ConnectionLostError):
        async with db.transaction() as tx:
            await tx.execute(f"INSERT INTO {name} VALUES (1)")
            cut_connection(db)
            await tx.execute(f"INSERT INTO {name} VALUES (2)")
    # the server rolled the open transaction back when the socket went away
    assert await db.execute(f"SELECT count(*) AS n FROM {name}") == [{"n": 0}]


async def test_close_then_use_is_an_error(pglite_server: PGliteServer) -> None:
    database = await PGliteDatabase.connect(pglite_server.url)
    await database.close()
    with pytest.raises(ConnectionLostError, match="closed"):
        await database.execute("SELECT 1")


async def _until(check: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)

"""A wrong DSN fails at once with the server's own words and the DSN without its
password: a configuration error (not retried) when the server refuses the settings, a
retryable connection error only when nothing answers."""

from __future__ import annotations

import logging
import time

import pytest

from qcore import Boss, db
from qcore.db._connect import connect_error
from qcore.errors import ConfigError, ConnectionLostError, ConnectionSettingsError, DatabaseError
from qcore.events import WarningEvent
from tests.conftest import with_database

pytestmark = [pytest.mark.feature("errors"), pytest.mark.postgres]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cases(pg_dsn: str) -> list[tuple[str, str, type[DatabaseError], str]]:
    refused = f"postgresql://postgres:s3cret@127.0.0.1:{_free_port()}/postgres"
    return [
        (
            "missing database",
            with_database(pg_dsn, "qcore_no_such_db"),
            ConnectionSettingsError,
            'database "qcore_no_such_db" does not exist',
        ),
        (
            "missing role",
            pg_dsn.replace("postgres@", "qcore_no_such_role:s3cret@", 1),
            ConnectionSettingsError,
            'role "qcore_no_such_role" does not exist',
        ),
        (
            "invalid option",
            pg_dsn + "?options=-c%20work_mem%3Dlots",
            ConnectionSettingsError,
            'invalid value for parameter "work_mem"',
        ),
        ("refused", refused, ConnectionLostError, "Connection refused"),
    ]


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
async def test_each_wrong_dsn_fails_fast_with_the_servers_message(pg_dsn: str, driver: str) -> None:
    for case, dsn, kind, said in _cases(pg_dsn):
        started = time.monotonic()
        with pytest.raises(kind) as info:
            await db.connect(dsn, driver=driver, connection_timeout=10)
        assert time.monotonic() - started < 2.0, case
        message = str(info.value)
        assert said.lower() in message.lower(), (case, message)
        assert message.startswith("cannot connect to postgresql://"), (case, message)
        assert "s3cret" not in message, case
        assert isinstance(info.value, ConfigError) is (kind is ConnectionSettingsError), case
        assert info.value.retryable is (kind is ConnectionLostError), case


async def test_start_does_not_retry_a_configuration_error(pg_dsn: str) -> None:
    boss = Boss(with_database(pg_dsn, "qcore_no_such_db"), supervise=False)
    warnings: list[WarningEvent] = []
    boss.on("warning", warnings.append)
    started = time.monotonic()
    with pytest.raises(ConnectionSettingsError, match="does not exist"):
        await boss.start(attempts=5)
    assert time.monotonic() - started < 2.0 and warnings == []


async def test_start_retries_a_refused_server_as_asked(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    boss = Boss(f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres", supervise=False)
    warnings: list[WarningEvent] = []
    boss.on("warning", warnings.append)
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(ConnectionLostError, match="Connection refused"),
    ):
        await boss.start(attempts=3)  # waits of 1 s and 2 s between the three
    assert [w.type for w in warnings] == ["start_retry"]
    # no log spam: the one start_retry line, nothing from the pool's reconnect loop
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in logged] == ["qcore"], [r.getMessage() for r in logged]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            'connection failed: connection to server at "db", port 5432 failed: FATAL:  password'
            ' authentication failed for user "app"',
            ConnectionSettingsError,
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  no pg_hba.conf entry for host',
            ConnectionSettingsError,
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  the database system is'
            " starting up",
            ConnectionLostError,
        ),
        ('connection to server at "db", port 5432 failed: timeout expired', ConnectionLostError),
    ],
)
def test_libpq_texts_the_local_server_cannot_produce(text: str, kind: type[Exception]) -> None:
    """A parser test (trust auth here gives no password failure to provoke)."""
    error = connect_error(OSError(text), "postgresql://app:pw@db:5432/app")
    assert type(error) is kind
    assert str(error).startswith("cannot connect to postgresql://app@db:5432/app: ")
    assert "FATAL" not in str(error) and "pw" not in str(error).split(": ", 1)[0]

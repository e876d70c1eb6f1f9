"""Boss refuses bad constructor options before it touches a database."""

from __future__ import annotations

import re
from typing import Any

import pytest

from qcore import Boss
from qcore.errors import ConfigError, NotStartedError, ValidationError

pytestmark = pytest.mark.feature("lifecycle")

DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


class ExecuteSql:
    def execute_sql(self, text: str, values: list[Any]) -> list[dict[str, Any]]:
        raise AssertionError("the constructor must not run SQL")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"backend": "oracle"}, ConfigError, "unknown backend 'oracle'; installed backends:"),
        ({"schema": "1bad"}, ValidationError, "not a bare identifier"),
        ({"schema": '"a.b"'}, ValidationError, "contains '.'"),
        ({"schema": "s" * 51}, ValidationError, "the limit is 50"),
        ({"max": 0}, ConfigError, "max must be a positive integer"),
        ({"max": True}, ConfigError, "max must be a positive integer"),
        ({"connection_timeout": -1}, ConfigError, "connection_timeout must be >= 0"),
        ({"db": ExecuteSql()}, ConfigError, "give either db="),
        ({"data_dir": "/somewhere"}, ConfigError, "data_dir is for an embedded backend"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        Boss(DSN, **kwargs)


def test_a_server_backend_needs_a_connection() -> None:
    with pytest.raises(ConfigError, match="the cockroachdb backend needs a connection"):
        Boss(backend="cockroachdb")


def test_an_embedded_backend_needs_none() -> None:
    boss = Boss(backend="pglite")
    assert boss.backend.name == "pglite" and not boss.started


async def test_verbs_before_start_say_so() -> None:
    boss = Boss(DSN)
    with pytest.raises(NotStartedError, match="not started"):
        boss.context()

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
        ({"connection_timeout": -1}, ConfigError, "connection_timeout must be from 0"),
        ({"connection_timeout": float("nan")}, ConfigError, "connection_timeout must be from 0"),
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


def test_work_options_dataclass_and_typed_dict_name_the_same_options() -> None:
    """``WorkArguments`` types ``work(**options)``; ``WorkOptions`` holds their defaults
    and validation: one may not gain an option the other lacks."""
    from dataclasses import fields

    from qcore.options import WORK_OPTIONS
    from qcore.worker import WorkOptions

    assert {f.name for f in fields(WorkOptions)} == set(WORK_OPTIONS)


def test_connection_options_are_refused_the_same_by_boss_and_connect() -> None:
    import asyncio

    from qcore.db import connect

    with pytest.raises(ConfigError, match="max must be a positive integer"):
        Boss("postgresql://localhost/x", max=0)
    with pytest.raises(ConfigError, match="max must be a positive integer"):
        asyncio.run(connect("postgresql://localhost/x", max=0))
    with pytest.raises(ConfigError, match="unknown connection option hots"):
        asyncio.run(connect("postgresql://localhost/x", hots="h"))  # type: ignore[call-arg]


def test_every_maintenance_setting_is_a_boss_option() -> None:
    """``Maintenance`` holds what ``Boss`` is given: one may not gain a setting the
    other lacks."""
    import inspect

    from qcore.services.maintenance import MAINTENANCE_OPTIONS

    taken = set(inspect.signature(Boss.__init__).parameters)
    assert set(MAINTENANCE_OPTIONS) <= taken
    boss = Boss("postgresql://localhost/x", persist_queue_stats=True, reindex={"min_pages": 5})
    assert boss.maintenance.persist_queue_stats
    assert boss.maintenance.reindex is not None and boss.maintenance.reindex.min_pages == 5
    assert Boss("postgresql://localhost/x", reindex=False).maintenance.reindex is None


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("cron_monitor_interval_seconds", 46),
        ("cron_monitor_interval_seconds", 0),
        ("cron_worker_interval_seconds", 46),
        ("clock_monitor_interval_seconds", 601),
        ("clock_monitor_interval_seconds", "10"),
        ("schedule", "yes"),
    ],
)
def test_timekeeper_options_are_checked(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=option.removesuffix("_seconds")):
        Boss("postgresql://localhost/x", **{option: value})  # type: ignore[arg-type]

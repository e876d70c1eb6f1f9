"""``work()`` options are checked before anything runs; the per-backend worker tests are
in the conformance suite (``qcore/conformance/suite/test_worker.py``)."""

from __future__ import annotations

import pytest

from qcore import Boss
from qcore.errors import ConfigError
from qcore.job import Job


async def test_work_options_are_checked_before_anything_runs() -> None:
    boss = Boss("postgresql://nobody@127.0.0.1:1/none", supervise=False)

    async def handler(batch: list[Job]) -> None:
        return None

    for bad in (
        {"batch_size": 0},
        {"local_concurrency": 0},
        {"local_concurrency": True},
        {"polling_interval_seconds": 0.1},
        {"heartbeat_refresh_seconds": 0},
        {"notify_polling_interval_seconds": 0.2},
        {"include_metadata": "yes"},
        {"min_priority": 5, "max_priority": 1},
    ):
        with pytest.raises(ConfigError):
            await boss.work("q", handler, **bad)
    with pytest.raises(ConfigError):
        await boss.work("bad name!", handler)
    with pytest.raises(ConfigError):
        await boss.work("q", "not callable")  # type: ignore[arg-type]
    assert boss.worker_statuses() == []

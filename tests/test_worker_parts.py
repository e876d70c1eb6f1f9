"""The worker's pieces that decide without I/O: who of the idle loops fetches when
(``Gate``), how concurrent statements are merged (``Coalescer``), the options and
the status report. Queue behaviour itself is tested on real databases in
``test_worker*.py``."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from qcore.errors import ConfigError
from qcore.job import Job
from qcore.worker import (
    Coalescer,
    Gate,
    WorkOptions,
    refresh_seconds,
)

pytestmark = pytest.mark.feature("workers")


def job(heartbeat: int | None = None) -> Job:
    return Job(uuid.uuid4(), "q", None, 0, 60, heartbeat_seconds=heartbeat)


async def test_the_gate_keeps_one_poller_and_wakes_one_loop_at_a_time() -> None:
    gate = Gate()
    fetched: list[int] = []

    async def idle(n: int) -> None:
        async def delay() -> float:
            return 30.0

        await gate.idle(delay)
        fetched.append(n)

    tasks = [asyncio.create_task(idle(n)) for n in range(4)]
    await asyncio.sleep(0.01)
    assert fetched == []  # one poller sleeping 30 s, three parked
    gate.wake_one(remember=False)
    await asyncio.sleep(0.01)
    assert len(fetched) == 1  # one loop, not a herd
    gate.wake_one(remember=False)
    gate.wake_one(remember=False)
    await asyncio.sleep(0.01)
    assert len(fetched) == 3
    gate.wake_one(remember=False)  # the last one (now the poller)
    await asyncio.sleep(0.01)
    assert sorted(fetched) == [0, 1, 2, 3]
    gate.wake_one(remember=False)  # nobody idle: forgotten
    gate.wake_one(remember=True)  # nobody idle: the next idle loop fetches at once
    await asyncio.wait_for(idle(9), 1)
    await asyncio.gather(*tasks)


async def test_the_poller_fetches_when_its_interval_is_over_and_close_releases_all() -> None:
    gate = Gate()
    done: list[str] = []

    async def idle(name: str, seconds: float) -> None:
        async def delay() -> float:
            return seconds

        await gate.idle(delay)
        done.append(name)

    poller = asyncio.create_task(idle("poller", 0.05))
    await asyncio.sleep(0)
    parked = asyncio.create_task(idle("parked", 0.05))
    await asyncio.wait_for(poller, 1)
    assert done == ["poller"]
    # the parked loop took over the poll: it fetches one interval later, not never
    await asyncio.wait_for(parked, 1)
    assert done == ["poller", "parked"]
    waiting = [asyncio.create_task(idle(f"w{i}", 60)) for i in range(3)]
    await asyncio.sleep(0.01)
    gate.close()
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    await asyncio.wait_for(idle("after close", 60), 1)


async def test_the_coalescer_merges_what_arrives_while_a_statement_runs() -> None:
    runs: list[list[int]] = []
    release = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        runs.append(items)
        await release.wait()
        return [i * 10 for i in items]

    merge: Coalescer[int, int] = Coalescer(run, lanes=1)
    calls = [asyncio.create_task(merge(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert runs == [[0]]  # the first runs at once, the rest wait
    release.set()
    assert await asyncio.gather(*calls) == [0, 10, 20, 30, 40]
    assert runs == [[0], [1, 2, 3, 4]]  # then they ran as one
    assert await merge(7) == 70  # alone: at once


async def test_the_coalescer_keeps_its_lanes_through_errors_and_cancellation() -> None:
    active = 0
    peak = 0
    fail = True
    gate = asyncio.Event()  # statements wait for it (set: they run through)
    gate.set()
    both_lanes_busy = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 2:
            both_lanes_busy.set()
        try:
            await asyncio.sleep(0.01)
            await gate.wait()
            if fail:
                raise RuntimeError("statement failed")
            return items
        finally:
            active -= 1

    merge: Coalescer[int, int] = Coalescer(run, lanes=2)
    results = await asyncio.gather(*(merge(i) for i in range(6)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)  # every caller learns it
    assert peak == 2
    fail = False
    gate.clear()
    both_lanes_busy.clear()
    waiting = [asyncio.create_task(merge(i)) for i in range(6)]
    await asyncio.sleep(0)
    waiting[3].cancel()  # a caller gives up while waiting
    await asyncio.wait_for(both_lanes_busy.wait(), 30)  # two statements held at the gate
    waiting[0].cancel()  # a caller is cancelled while its statement runs
    gate.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert isinstance(results[3], asyncio.CancelledError)
    # no lane was lost: later calls still run two at a time, at once
    peak = 0
    assert await asyncio.gather(*(merge(i) for i in range(4))) == [0, 1, 2, 3]
    assert peak == 2


def test_work_options_and_heartbeat_refresh() -> None:
    options = WorkOptions(polling_interval_seconds=5)
    assert options.relaxed_polling_interval_seconds == 30
    assert WorkOptions(polling_interval_seconds=45).relaxed_polling_interval_seconds == 45
    assert WorkOptions(notify_polling_interval_seconds=3).relaxed_polling_interval_seconds == 3
    assert options.changed() == {"polling_interval_seconds": 5}
    with pytest.raises(ConfigError, match="polling_interval_seconds"):
        WorkOptions(polling_interval_seconds=float("nan"))
    with pytest.raises(ConfigError, match="batch_size"):
        WorkOptions(batch_size=1.5)  # type: ignore[arg-type]
    assert refresh_seconds([job(), job()], None) is None
    assert refresh_seconds([job(30), job(20), job()], None) == 10
    assert refresh_seconds([job(30)], 0.5) == 0.5

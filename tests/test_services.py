"""The periodic service base: passes never overlap, an error is reported and the next
tick comes, stop() waits for the pass in flight and starts no new one, a disabled
service runs only the passes asked for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from qcore.conformance.helpers import until
from qcore.events import Events
from qcore.services import Periodic, Service
from qcore.services.monitor import Supervisor
from qcore.services.notifier import Notifier
from qcore.worker import WipReporter

pytestmark = pytest.mark.feature("workers")


class Counting(Periodic):
    name = "counting"

    def __init__(self, events: Events, *, fail_first: bool = False, **options: Any) -> None:
        super().__init__(events, 0.05, **options)
        self.passes = 0
        self.overlap = False
        self.fail_first = fail_first
        self.release = asyncio.Event()
        self.release.set()
        self.running = 0

    async def run_pass(self) -> None:
        self.running += 1
        self.overlap = self.overlap or self.running > 1
        try:
            self.passes += 1
            if self.fail_first and self.passes == 1:
                raise RuntimeError("the first pass fails")
            await self.release.wait()
        finally:
            self.running -= 1


async def test_an_error_is_reported_and_the_next_tick_comes() -> None:
    events = Events()
    errors: list[BaseException] = []
    events.on("error", errors.append)
    service = Counting(events, fail_first=True)
    await service.start()
    try:
        await until(lambda: service.passes >= 3, 30, what="passes after the failing one")
    finally:
        await service.stop()
    assert len(errors) == 1 and str(errors[0]) == "the first pass fails"
    assert service.last_pass_seconds is not None


async def test_passes_never_overlap_and_stop_waits_for_the_one_in_flight() -> None:
    service = Counting(Events())
    service.release.clear()  # the first pass is held
    await service.start()
    await until(lambda: service.busy, 30, what="a pass running")
    explicit = asyncio.ensure_future(service.exclusive(lambda: asyncio.sleep(0, "ran")))
    await asyncio.sleep(0.2)  # ticks come meanwhile: they skip
    assert service.passes == 1 and not explicit.done()
    stopping = asyncio.ensure_future(service.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # it waits for the pass in flight
    service.release.set()
    await asyncio.wait_for(stopping, 30)
    assert await explicit in ("ran", None) and not service.overlap
    passes = service.passes
    await asyncio.sleep(0.2)
    assert service.passes == passes  # no new pass after stop
    assert await service.exclusive(lambda: asyncio.sleep(0, "late")) is None


async def test_a_disabled_service_runs_only_explicit_passes() -> None:
    service = Counting(Events(), enabled=False)
    await service.start()
    await asyncio.sleep(0.2)
    assert service.passes == 0
    assert await service.exclusive(lambda: asyncio.sleep(0, "asked")) == "asked"
    await service.stop()


def test_the_boss_services_are_services() -> None:
    assert issubclass(Supervisor, Periodic)
    for kind in (Supervisor, Notifier, WipReporter):
        assert all(hasattr(kind, member) for member in ("name", "busy", "start", "stop"))
    assert isinstance(Counting(Events()), Service)

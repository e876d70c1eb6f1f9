"""Stopping a task that swallows its cancellation (what ``asyncio.wait_for`` does on
Python < 3.12 when the cancel lands as its inner call completes) still ends: the
listener's ``close()`` and a service's ``stop()`` cancel again until the task is done."""

from __future__ import annotations

import asyncio

import pytest

from qcore.db._listen import ReconnectingListener
from qcore.tasks import cancel_and_wait

#: generous: a re-cancel comes after RECANCEL_SECONDS (1 s)
DEADLINE = 30


class Stubborn:
    """A listen session whose ``run`` ignores the first cancellation it gets."""

    def __init__(self) -> None:
        self.cancels = 0
        self.closed = False

    async def run(self, _on_message: object) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancels += 1
                if self.cancels > 1:
                    raise

    async def close(self) -> None:
        self.closed = True


async def test_cancel_and_wait_ends_a_task_that_swallows_a_cancel() -> None:
    session = Stubborn()
    task = asyncio.ensure_future(session.run(None))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), DEADLINE)
    assert task.cancelled() and session.cancels == 2


async def test_cancel_and_wait_retrieves_what_a_task_raised() -> None:
    async def boom() -> None:
        raise RuntimeError("boom")

    task = asyncio.ensure_future(boom())
    await asyncio.sleep(0)
    await cancel_and_wait([task])  # does not raise, and asyncio logs nothing unretrieved
    assert isinstance(task.exception(), RuntimeError)


async def test_listener_close_returns_when_its_session_swallows_a_cancel() -> None:
    session = Stubborn()

    async def open_session() -> Stubborn:
        return session

    listener = await ReconnectingListener(open_session, lambda *_: None, None).start()
    await asyncio.sleep(0)
    await asyncio.wait_for(listener.close(), DEADLINE)
    assert session.cancels == 2 and session.closed


async def test_the_caller_can_still_cancel_the_wait() -> None:
    session = Stubborn()
    task = asyncio.ensure_future(session.run(None))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(cancel_and_wait(task))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await cancel_and_wait(task)

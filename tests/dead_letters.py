"""A job failed past its retry limit into a dead letter queue, with a traceback whose
message carries markup: what the dead-letter views of the board and the command line are
tested with."""

from __future__ import annotations

import uuid

from qcore import Boss
from qcore.job import Job

__all__ = ["MARKUP", "explode", "fail_into_dead_letter"]

#: the error's message: markup, an ampersand and quotes
MARKUP = '<b>bad & "worse"</b>'


def explode() -> None:
    raise RuntimeError(MARKUP)


async def fail_into_dead_letter(boss: Boss, queue: str, dlq: str) -> tuple[Job, uuid.UUID]:
    """A job of ``queue`` failed past its retry limit (with a traceback each time); the
    copy in ``dlq`` and the source job's id. ``queue`` retries without delay."""
    source = await boss.send(queue, {"to": "someone"})
    assert source is not None
    for _ in range(10):
        got = await boss.fetch(queue)
        if not got:
            break
        try:
            explode()
        except RuntimeError as exc:
            await boss.fail(queue, got[0].id, exc)
    copies = await boss.find_jobs(dlq)
    assert len(copies) == 1, copies
    return copies[0], source

"""How a batch ends: the decision (complete or fail, with what output) from its handler."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qcore.errors import (
    ConnectionLostError,
    DatabaseError,
)
from qcore.job import Job


@dataclass(frozen=True)
class _Settlement:
    """How a batch ends: ``complete`` or ``fail`` with ``data``; ``None`` verb: left alone."""

    verb: str | None
    data: Any = None


def _outcome_of(handler: asyncio.Future[Any], jobs: Sequence[Job]) -> _Settlement:
    """A finished handler's settlement: its return value completes the batch (stored as
    output when the batch is one job, as pg-boss does); an exception fails it."""
    if handler.cancelled():
        return _Settlement("fail", asyncio.CancelledError("the handler was cancelled"))
    error = handler.exception()
    if error is not None:
        return _Settlement("fail", error)
    return _Settlement("complete", handler.result() if len(jobs) == 1 else None)


#: the output of a failure whose own output the database refused
_UNSTORABLE = {"name": "Error", "message": "the handler failed; its error could not be stored"}


def _transient(exc: BaseException) -> bool:
    """Whether trying the same statement again later may succeed."""
    return isinstance(exc, ConnectionLostError) or (
        isinstance(exc, DatabaseError) and exc.retryable
    )


def _timed_out(seconds: float) -> _Settlement:
    shown = int(seconds) if float(seconds).is_integer() else seconds
    return _Settlement(
        "fail", {"name": "TimeoutError", "message": f"handler timed out after {shown} s"}
    )

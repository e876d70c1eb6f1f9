"""How a batch ends: the decision (complete or fail, with what output) from its handler."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qcore.errors import (
    ConnectionLostError,
    DatabaseError,
    ValidationError,
)
from qcore.job import JOB_RESULT_STATUSES, Job, JobResult


@dataclass(frozen=True)
class Settlement:
    """How a batch ends.

    ``complete`` or ``fail`` with ``data``, or ``each`` with ``(job, status, output)``
    for every job; ``None`` verb: left alone.
    """

    verb: str | None
    data: Any = None


def outcome_of(
    handler: asyncio.Future[Any], jobs: Sequence[Job], per_job: bool = False
) -> Settlement:
    """A finished handler's settlement.

    Its return value completes the batch (stored as output when the batch is one job, as
    pg-boss does), or with ``per_job`` settles each job as the value says
    (:func:`_each`); an exception fails the batch.
    """
    if handler.cancelled():
        return Settlement("fail", asyncio.CancelledError("the handler was cancelled"))
    error = handler.exception()
    if error is not None:
        return Settlement("fail", error)
    if per_job:
        return _each(handler.result(), jobs)
    return Settlement("complete", handler.result() if len(jobs) == 1 else None)


#: the output of a job a per-job results handler gave no (valid) result for
MISSING_RESULT = {"name": "MissingResult", "message": "the handler returned no result for this job"}


def _each(returned: Any, jobs: Sequence[Job]) -> Settlement:
    """A per-job results handler's value as the settlement ``each``.

    That is ``(job, status, output)`` for every job of the batch, in order. Each item is
    a :class:`JobResult` or a mapping with ``id``, ``status`` and optionally ``output``;
    the last for an id wins; a job with no item, or with an item of an unknown status,
    is failed with why. Anything but a list or tuple fails the whole batch.
    """
    if not isinstance(returned, (list, tuple)):
        return Settlement(
            "fail",
            ValidationError(
                "a per_job_results handler must return a list of JobResult (or of"
                f" {{'id', 'status', 'output'}}), got {type(returned).__name__}"
            ),
        )
    given: dict[str, tuple[Any, Any]] = {}
    for item in returned:
        if isinstance(item, JobResult):
            given[str(item.id)] = (item.status, item.output)
        elif isinstance(item, Mapping) and "id" in item:
            given[str(item["id"])] = (item.get("status"), item.get("output"))
    outcomes = []
    for job in jobs:
        status, output = given.get(str(job.id), (None, MISSING_RESULT))
        if status is not None and status not in JOB_RESULT_STATUSES:
            status, output = (
                "failed",
                {
                    "name": "ValidationError",
                    "message": f"unknown result status {status!r}; allowed:"
                    f" {', '.join(JOB_RESULT_STATUSES)}",
                },
            )
        outcomes.append((job, status or "failed", output))
    return Settlement("each", outcomes)


#: the output of a failure whose own output the database refused
UNSTORABLE = {"name": "Error", "message": "the handler failed; its error could not be stored"}


def transient(exc: BaseException) -> bool:
    """Whether trying the same statement again later may succeed."""
    return isinstance(exc, ConnectionLostError) or (
        isinstance(exc, DatabaseError) and exc.retryable
    )


def timed_out(seconds: float) -> Settlement:
    shown = int(seconds) if float(seconds).is_integer() else seconds
    return Settlement(
        "fail", {"name": "TimeoutError", "message": f"handler timed out after {shown} s"}
    )

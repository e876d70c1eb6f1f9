"""How a worker tells of its handlers' failed attempts: log lines and ``error`` events.

Every failed attempt is logged at WARNING on the ``qcore.worker`` logger: the queue,
the job (or the batch's jobs), the attempt (``retry_count`` + 1 of ``retry_limit`` +
1), the error's type and message, and, when no attempt is left, that retries are
exhausted and the dead letter queue the job is copied to. The traceback goes with the
first failure of each distinct error (same queue, exception type and message), and at
DEBUG with every line.

A poison queue cannot flood the log: at most :data:`FAILURE_LINES` lines per queue per
:data:`FAILURE_WINDOW_SECONDS`; the failures past them are counted, and once the window
ends one line says how many there were.

Library users get the same information as ``error`` events, one
:class:`~qcore.errors.JobFailedError` per failed job (never rate-limited).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from qcore.errors import JobFailedError, describe_error
from qcore.job import Job
from qcore.worker.settlement import Settlement

__all__ = [
    "FAILURE_LINES",
    "FAILURE_WINDOW_SECONDS",
    "Failure",
    "FailureLog",
    "failures_of",
]

log = logging.getLogger("qcore.worker")

#: the most lines a queue's failures take in one window
FAILURE_LINES = 10
#: the window of :data:`FAILURE_LINES`, in seconds
FAILURE_WINDOW_SECONDS = 60.0
#: distinct errors remembered (their traceback was logged); forgotten all at once past it
DISTINCT_ERRORS = 1024
#: job ids named in one line of a batch's failure
IDS_SHOWN = 5


@dataclass(frozen=True)
class Failure:
    """Jobs of one batch that failed alike: same error, same end (retried or not)."""

    jobs: list[Job]
    error: Any  # the exception the handler raised, or the failure output
    exhausted: bool  # no attempt left: failed for good
    dead_letter: str | None  # where such a job is copied, if anywhere


def _exhausted(job: Job, terminal: bool) -> bool:
    return terminal or (job.retry_limit is not None and job.retry_count >= job.retry_limit)


def _grouped(items: list[tuple[Job, Any, bool]]) -> Iterator[Failure]:
    """``(job, error, terminal)`` grouped by error and end, in order of first appearance."""
    groups: dict[tuple[str, bool, str | None], Failure] = {}
    for job, error, terminal in items:
        exhausted = _exhausted(job, terminal)
        letter = job.dead_letter if exhausted else None
        key = (describe_error(error), exhausted, letter)
        found = groups.get(key)
        if found is None:
            groups[key] = Failure([job], error, exhausted, letter)
        else:
            found.jobs.append(job)
    return iter(groups.values())


def failures_of(settlement: Settlement, jobs: list[Job]) -> list[Failure]:
    """The failed jobs of a batch ending so, grouped; empty when none failed."""
    if settlement.verb == "fail":
        return list(_grouped([(job, settlement.data, False) for job in jobs]))
    if settlement.verb == "each":
        return list(
            _grouped(
                [
                    (job, output, status == "dead_letter")
                    for job, status, output in settlement.data
                    if status != "completed"
                ]
            )
        )
    return []


def attempts_text(jobs: list[Job]) -> str:
    """``attempt 2 of 3`` for the jobs (a range where they differ)."""
    tried = sorted({job.retry_count + 1 for job in jobs})
    limits = sorted({job.retry_limit + 1 for job in jobs if job.retry_limit is not None})
    text = f"attempt {tried[0]}" if len(tried) == 1 else f"attempts {tried[0]}-{tried[-1]}"
    if len(limits) == 1:
        text += f" of {limits[0]}"
    elif limits:
        text += f" of {limits[0]}-{limits[-1]}"
    return text


def events_of(queue: str, failure: Failure) -> list[JobFailedError]:
    """One ``error`` event payload per job of ``failure``."""
    return [
        JobFailedError(
            queue,
            job.id,
            job.retry_count + 1,
            job.retry_limit + 1 if job.retry_limit is not None else None,
            failure.error,
            retries_exhausted=failure.exhausted,
            dead_letter=failure.dead_letter,
        )
        for job in failure.jobs
    ]


def _writable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass
class _Window:
    start: float
    lines: int = 0
    suppressed: int = 0  # failed jobs not logged in this window


class FailureLog:
    """The failure lines of a Boss's workers, at most ``lines`` per queue per ``window`` s.

    ``clock`` (seconds, monotonic) is what the windows are measured by.
    """

    def __init__(
        self,
        *,
        lines: int = FAILURE_LINES,
        window: float = FAILURE_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lines = lines
        self.window = window
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        self._seen: set[tuple[str, str, str]] = set()  # (queue, type, message) logged whole

    def failed(self, queue: str, failure: Failure) -> None:
        """Log ``failure`` of ``queue``'s handler, unless the queue's lines are spent."""
        if not self._allowed(queue, len(failure.jobs)):
            return
        jobs = failure.jobs
        if len(jobs) == 1:
            who = f"job {jobs[0].id}"
        else:
            shown = ", ".join(str(job.id) for job in jobs[:IDS_SHOWN])
            more = f" and {len(jobs) - IDS_SHOWN} more" if len(jobs) > IDS_SHOWN else ""
            who = f"{len(jobs)} jobs ({shown}{more})"
        end = ""
        if failure.exhausted:
            end = "; retries exhausted"
            if failure.dead_letter:
                end += f", copied to dead letter queue {failure.dead_letter!r}"
        error = failure.error
        traced = (
            isinstance(error, BaseException)
            and error.__traceback__ is not None
            and _writable(str(error))  # else the traceback would break the log's handlers
        )
        first = False
        if traced:
            key = (queue, type(error).__name__, str(error)[:200])
            first = key not in self._seen
            if first:
                if len(self._seen) >= DISTINCT_ERRORS:
                    self._seen.clear()
                self._seen.add(key)
        log.warning(
            "queue %r: %s failed (%s): %s%s",
            queue,
            who,
            attempts_text(jobs),
            describe_error(error),
            end,
            exc_info=error if first else None,
        )
        if traced and not first and log.isEnabledFor(logging.DEBUG):
            log.debug("queue %r: the traceback of %s", queue, who, exc_info=error)

    def _allowed(self, queue: str, jobs: int) -> bool:
        now = self.clock()
        window = self._windows.get(queue)
        if window is None or now - window.start >= self.window:
            if window is not None:
                self._summary(queue, window, self.window)
            window = self._windows[queue] = _Window(now)
        if window.lines < self.lines:
            window.lines += 1
            return True
        window.suppressed += jobs
        return False

    def flush(self) -> None:
        """Say how many failures went unlogged in each window that has ended."""
        now = self.clock()
        for queue, window in list(self._windows.items()):
            if now - window.start >= self.window:
                self._summary(queue, window, self.window)
                del self._windows[queue]

    def close(self) -> None:
        """Say how many failures went unlogged in the windows still open (a stop)."""
        now = self.clock()
        for queue, window in list(self._windows.items()):
            self._summary(queue, window, min(self.window, now - window.start))
        self._windows.clear()

    def _summary(self, queue: str, window: _Window, seconds: float) -> None:
        if window.suppressed:
            log.warning(
                "…and %d more failures on queue %r in the last %.0f s",
                window.suppressed,
                queue,
                max(1.0, seconds),
            )
            window.suppressed = 0

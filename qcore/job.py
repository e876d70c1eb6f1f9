"""The values the queue and job operations return: jobs, queues and command results.

Field names are Python's spelling of pg-boss's columns (snake_case, seconds).
Rows are turned into these values in one place, :meth:`Job.from_row` and
:meth:`Queue.from_row`, so a column rename touches one line.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

#: a claim's column holding ``data`` as JSON text (see :meth:`Job.from_row`)
LAZY_DATA_COLUMN = "data_text"

__all__ = [
    "LAZY_DATA_COLUMN",
    "POLICIES",
    "CommandResult",
    "DeadLetterOrigin",
    "Failure",
    "Job",
    "JobState",
    "Policy",
    "Queue",
]


class JobState(str, enum.Enum):
    """A job's state, in the order of pg-boss's ``job_state`` enum.

    The order is load-bearing: ``created`` and ``retry`` are *queued*
    (``state < 'active'``), ``completed``, ``cancelled`` and ``failed`` are
    *stored* (``state > 'active'``).
    """

    CREATED = "created"
    RETRY = "retry"
    ACTIVE = "active"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def rank(self) -> int:
        """1..6, the enum's sort order in the database."""
        return _RANK[self]

    @property
    def queued(self) -> bool:
        """Waiting to run: ``created`` or ``retry``."""
        return self.rank < _RANK[JobState.ACTIVE]

    @property
    def finished(self) -> bool:
        """Settled: ``completed``, ``cancelled`` or ``failed``."""
        return self.rank > _RANK[JobState.ACTIVE]


_RANK = {state: i for i, state in enumerate(JobState, start=1)}


class Policy(str, enum.Enum):
    """A queue's policy: which jobs its unique indexes let in and how they are fetched."""

    STANDARD = "standard"
    SHORT = "short"  # at most one queued (created) job per singleton key
    SINGLETON = "singleton"  # at most one active job per singleton key
    STATELY = "stately"  # at most one job per state (created, retry, active) per key
    EXCLUSIVE = "exclusive"  # at most one job queued or active per key
    KEY_STRICT_FIFO = "key_strict_fifo"  # a key is required; one job of a key at a time, in order


POLICIES: tuple[str, ...] = tuple(p.value for p in Policy)


@dataclass(frozen=True)  # no slots: from_row fills __dict__ directly, five times faster
class Job:
    """One job.

    ``fetch`` without ``include_metadata`` fills only the fields a worker
    needs (``id``, ``name``, ``data``, ``retry_count``, ``retry_limit``,
    ``dead_letter``, ``expire_in_seconds``, ``heartbeat_seconds``, ``group_id``,
    ``group_tier``) and its sort keys
    (``priority``, ``created_on``); the other fields are then None.
    ``get_job_by_id``, ``find_jobs`` and ``fetch(..., include_metadata=True)``
    fill every field. ``processed_on_instance_key`` is the claiming server's key (a
    claim by a keyed server fills it).

    Passing a ``Job`` (rather than its id) to ``complete``, ``fail``,
    ``cancel``, ``delete_job`` or ``touch`` fences the call on its
    ``retry_count``: it only acts if the job is still in that attempt.

    ``cancelled`` is set by a worker when the handler should give up on the
    job: it ran past its expiry, the worker is stopping past its timeout, or
    the job was lost (its heartbeat refresh found it no longer active in this
    attempt). A plain-function handler, which runs on a thread and cannot be
    interrupted, polls it (``job.cancelled.is_set()`` or ``.wait(seconds)``);
    an ``async def`` handler is also cancelled. It is not part of equality.
    """

    id: uuid.UUID
    name: str
    data: Any
    retry_count: int
    expire_in_seconds: int
    heartbeat_seconds: int | None = None
    group_id: str | None = None
    group_tier: str | None = None
    # -- metadata --------------------------------------------------------------------
    priority: int | None = None
    state: JobState | None = None
    retry_limit: int | None = None
    retry_delay: int | None = None
    retry_backoff: bool | None = None
    retry_delay_max: int | None = None
    deletion_seconds: int | None = None
    singleton_key: str | None = None
    #: the throttle slot's start, UTC wall time (a naive datetime, as PostgreSQL stores it)
    singleton_on: dt.datetime | None = None
    start_after: dt.datetime | None = None
    created_on: dt.datetime | None = None
    started_on: dt.datetime | None = None
    completed_on: dt.datetime | None = None
    keep_until: dt.datetime | None = None
    output: Any = None
    dead_letter: str | None = None
    policy: str | None = None
    heartbeat_on: dt.datetime | None = None
    blocked: bool | None = None
    blocking: bool | None = None
    pending_dependencies: int | None = None
    source_name: str | None = None
    source_id: uuid.UUID | None = None
    source_created_on: dt.datetime | None = None
    source_retry_count: int | None = None
    source_output: Any = None
    source_root_id: uuid.UUID | None = None
    trace_context: Any = None
    upsert_by_key: bool | None = None
    #: the instance key of the server that claimed the job last (qcore's own table: a
    #: plain string, never a reference; None for an anonymous server or pg-boss)
    processed_on_instance_key: str | None = None
    #: the regular expression a server's key must match to claim the job, as it was sent
    #: (qcore's own table; read by get_job_by_id and find_jobs while the job can still
    #: be claimed: the pattern is forgotten once it cannot)
    preferred_instance_key_pattern: str | None = None
    # -- run time (not a column) -----------------------------------------------------
    _cancelled: threading.Event | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the handler should give up on the job (made on first use)."""
        event = self._cancelled
        if event is None:
            with _CANCELLED_LOCK:
                event = self._cancelled
                if event is None:
                    event = threading.Event()
                    object.__setattr__(self, "_cancelled", event)
        return event

    def __getattr__(self, name: str) -> Any:
        # only for a claimed job's ``data``, left as JSON text until first read
        if name == "data" and "_data_text" in self.__dict__:
            text = self.__dict__["_data_text"]
            value = None if text is None else json.loads(text)
            object.__setattr__(self, "data", value)
            return value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        """A job from a row of the job table.

        The row holds any subset of its columns, named as there, with at least those of
        the required fields. A claim's ``data_text`` (the payload as JSON text) is
        decoded when ``data`` is first read: a handler that never reads it costs no
        decoding.
        """
        names = _FIELD_NAMES.get(tuple(row))
        if names is None:
            names = _field_names(tuple(row))
        values = dict(zip(names, row.values(), strict=True))
        values.pop("", None)  # the columns a Job does not carry
        state = values.get("state")
        if state is not None:
            values["state"] = JobState(state)
        missing = _REQUIRED_FIELDS.difference(values)
        if missing and not (missing == {"data"} and "_data_text" in values):
            values.pop("_data_text", None)
            return cls(**values)  # raises: names the missing fields
        # the generated __init__ would set the fields one by one; the fields not given
        # are read from their defaults on the class
        job = object.__new__(cls)
        job.__dict__.update(values)
        return job

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> list[Job]:
        """Jobs from the rows of one statement (the same columns in each).

        They are made as :meth:`from_row` makes them, skipping a row whose ``id`` is
        NULL (a claim's row when it found nothing). The hot path of every claim: the
        columns are looked at once per batch, not once per row.
        """
        kept = [r for r in rows if r["id"] is not None]
        if not kept:
            return []
        names = _field_names(tuple(kept[0]))
        given = set(names)
        if (
            "state" in given
            or not _REQUIRED_FIELDS.issubset(given | {"data"})
            or ("data" not in given and "_data_text" not in given)
        ):
            return [cls.from_row(r) for r in kept]  # states to convert, or fields missing
        jobs = []
        new = object.__new__
        for row in kept:
            # the fields a row does not give are read from their defaults on the class
            job = new(cls)
            job.__dict__.update(zip(names, row.values(), strict=True))
            jobs.append(job)
        if "" in given:  # the columns a Job does not carry
            for job in jobs:
                del job.__dict__[""]
        return jobs


_CANCELLED_LOCK = threading.Lock()
#: the columns a Job carries under another name (the claim's payload text: see from_row)
_RENAMED = {"expire_seconds": "expire_in_seconds", LAZY_DATA_COLUMN: "_data_text"}
_FIELDS = frozenset(f for f in Job.__dataclass_fields__ if not f.startswith("_"))
#: a row's column names -> the value names they fill ("" for a column a Job lacks)
_FIELD_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _field_names(columns: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(_RENAMED.get(c, c if c in _FIELDS else "") for c in columns)
    if len(_FIELD_NAMES) < 64:  # a statement's columns are few and fixed
        _FIELD_NAMES[columns] = names
    return names


_REQUIRED_FIELDS = frozenset(f.name for f in fields(Job) if f.default is MISSING and f.init)


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue's settings and its counts.

    The counts are those the monitor caches on the queue's row (``counted_on`` says when),
    or counted at the read (``live=True``).
    """

    name: str
    policy: str
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int | None
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    dead_letter: str | None
    partition: bool
    table_name: str
    warning_queue_size: int
    heartbeat_seconds: int | None
    notify: bool
    created_on: dt.datetime
    updated_on: dt.datetime
    # -- counts cached by the monitor (not live) ------------------------------------
    deferred_count: int = 0
    blocked_count: int = 0
    queued_count: int = 0
    ready_count: int = 0
    active_count: int = 0
    failed_count: int = 0
    total_count: int = 0
    retained_count: int | None = None
    #: how long the oldest job ready to run had waited at the last monitor pass (seconds)
    ready_oldest_seconds: int | None = None
    singletons_active: list[str] | None = field(default=None, compare=False)
    #: the ready counts of the last stats passes, newest first (at most 60)
    ready_history: list[int] | None = field(default=None, compare=False)
    #: when the counts were counted: the monitor's last pass (None: never counted yet),
    #: or the read itself for a live read (``get_queue(..., live=True)``)
    counted_on: dt.datetime | None = field(default=None, compare=False)
    #: how old the counts were when read, in seconds on the schema's clock (0 when live)
    counts_age_seconds: float | None = field(default=None, compare=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Queue:
        """A queue from a row of the queue table (named as there)."""
        values = {_QUEUE_FIELD.get(k, k): v for k, v in row.items()}
        return cls(**{k: v for k, v in values.items() if k in _QUEUE_FIELDS})


_QUEUE_FIELD = {
    "monitor_on": "counted_on",
    "expire_seconds": "expire_in_seconds",
    "deletion_seconds": "delete_after_seconds",
    "warning_queued": "warning_queue_size",
}
_QUEUE_FIELDS = frozenset(Queue.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Instance:
    """A row of the instance registry, as the object last reported itself.

    One ``Boss`` (or pg-boss) object sharing the database. ``node_version`` holds the
    runtime's version (``Python 3.11.7`` for qcore, Node's for pg-boss); ``workers``,
    ``metrics`` and ``config`` are pg-boss's JSON shapes (camelCase keys). ``live``: not
    stopped, and heard from within three heartbeats.
    """

    id: uuid.UUID
    name: str | None
    host: str
    pid: int
    version: str
    node_version: str
    application_name: str | None
    heartbeat_seconds: int
    supervise: bool
    schedule: bool
    migrate: bool
    persist_queue_stats: bool
    persist_warnings: bool
    pool_max: int | None
    pool_total: int | None
    pool_idle: int | None
    pool_waiting: int | None
    workers: list[dict[str, Any]]
    metrics: dict[str, Any] | None
    config: dict[str, Any]
    crash_restarts: int
    crash_restarts_since: dt.datetime | None
    started_on: dt.datetime
    heartbeat_on: dt.datetime
    stopped_on: dt.datetime | None
    live: bool
    #: a keyed server's ``instance_key`` (qcore's; None for pg-boss and anonymous ones)
    instance_key: str | None = None
    #: whether that key is paused (claims nothing until resumed)
    paused: bool = False
    #: jobs claimed by the servers with that key, as of their last heartbeats
    jobs_processed: int = 0
    #: when that key was last paused or resumed (None: never)
    pause_changed_on: dt.datetime | None = None
    #: when its server acknowledged that change (None: not yet, or never asked)
    pause_acknowledged_on: dt.datetime | None = None
    #: when any server with that key last beat (its current life, whichever row this is)
    key_seen_on: dt.datetime | None = None

    @property
    def pause_acknowledged(self) -> bool:
        """Whether the server follows the last pause or resume asked of its key.

        False between an operator's pause (or resume) and the server reading it: "pause
        requested" rather than "paused".
        """
        return pause_acknowledged(self.pause_changed_on, self.pause_acknowledged_on)

    @property
    def pause_status(self) -> str:
        """``paused``, ``pause requested``, ``resume requested`` or empty (running)."""
        if self.pause_acknowledged:
            return "paused" if self.paused else ""
        return "pause requested" if self.paused else "resume requested"

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Instance:
        values = {k: row[k] for k in _INSTANCE_FIELDS if k in row}
        for number in ("pid", "heartbeat_seconds", "crash_restarts", "jobs_processed"):
            values[number] = int(values[number])
        for key in ("workers", "metrics", "config"):
            if isinstance(values[key], str):  # engines that return JSON as text
                values[key] = json.loads(values[key])
        return cls(**values)


_INSTANCE_FIELDS = tuple(Instance.__dataclass_fields__)


def pause_acknowledged(changed_on: dt.datetime | None, acknowledged_on: dt.datetime | None) -> bool:
    """Whether a key's server acknowledged its last pause or resume (or none was asked)."""
    return changed_on is None or (acknowledged_on is not None and acknowledged_on >= changed_on)


class InstancePage(list[Instance]):
    """A page of :meth:`~qcore.Boss.get_instances`, with the registry's row count.

    The rows, and ``total``, how many rows the registry holds (every page, live or not).
    """

    total: int

    def __init__(self, rows: list[Instance], total: int) -> None:
        super().__init__(rows)
        self.total = total


class InstanceListing(list[Instance]):
    """A page of :meth:`~qcore.Boss.list_instances`: live rows first, then the latest heard.

    ``next`` is the cursor of the following page (None on the last).
    """

    next: str | None

    def __init__(self, rows: list[Instance], next: str | None) -> None:
        super().__init__(rows)
        self.next = next


@dataclass(frozen=True)
class InstanceCounts:
    """The registry in numbers, counted in one statement.

    ``total`` rows; ``live`` ones; ``keyed`` rows (a server with an instance key) and the
    live ones of them; live anonymous ones (no key: qcore scripts and pg-boss); live
    paused ones.
    """

    total: int
    live: int
    keyed: int
    keyed_live: int
    anonymous_live: int
    paused: int


#: the outcomes a per-job results handler may give a job
JOB_RESULT_STATUSES = ("completed", "failed", "dead_letter")


@dataclass(frozen=True, slots=True)
class JobResult:
    """One job's outcome, as a ``work(..., per_job_results=True)`` handler returns it.

    ``status``: ``completed`` (``output`` stored as its output), ``failed`` (retried
    while retries are left, ``output`` as its error) or ``dead_letter`` (failed now,
    retries left or not, and copied to its dead letter queue).
    """

    id: uuid.UUID | str
    status: str
    output: Any = None


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command on jobs by id did.

    ``requested``: how many distinct ids were given; ``affected``: how many
    jobs the command changed; ``ids``: those jobs' ids.
    """

    requested: int
    affected: int
    ids: list[uuid.UUID]


@dataclass(frozen=True, slots=True)
class EditResult:
    """What ``update`` or ``upsert`` did.

    ``ids`` of the jobs edited or inserted, ``updated`` and ``inserted`` how many of
    each (an upsert does one or the other).
    """

    ids: list[uuid.UUID]
    updated: int
    inserted: int


@dataclass(frozen=True, slots=True)
class RedrivePreview:
    """What a ``redrive`` with the same filters would do (``preview_redrive``).

    ``total`` jobs read, ``destinations`` (queue, how many) for those it would move, most
    first, ``unroutable`` for those it would leave: no queue to go to.
    """

    total: int
    destinations: list[tuple[str, int]]
    unroutable: int


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a job failed, as its ``output`` says.

    An exception qcore stored (``{"name", "message", "stack"}``), pg-boss's serialised
    ``Error`` (the same keys), the monitor's ``{"value": {"message": ...}}`` for an expiry,
    or any other value, shown whole as ``message``.
    """

    message: str
    #: the error's type (``RuntimeError``), when the output names one
    name: str | None = None
    #: the traceback (Python's, or a JavaScript stack), when the output holds one
    stack: str | None = None

    @property
    def title(self) -> str:
        """The error in one line: its type and message."""
        return f"{self.name}: {self.message}" if self.name else self.message

    @classmethod
    def of(cls, output: Any) -> Failure | None:
        """The failure ``output`` describes; None for no output."""
        if output is None:
            return None
        found = output
        if isinstance(found, dict) and set(found) == {"value"}:
            found = found["value"]
        if isinstance(found, dict) and isinstance(found.get("message"), str):
            stack, name = found.get("stack"), found.get("name")
            return cls(
                found["message"],
                name if isinstance(name, str) else None,
                stack if isinstance(stack, str) else None,
            )
        if isinstance(found, str):
            return cls(found)
        return cls(json.dumps(found, default=str, ensure_ascii=False))


@dataclass(frozen=True, slots=True)
class DeadLetterOrigin:
    """Where a job of a dead letter queue came from, and why that job died.

    ``queue`` and ``id`` name the job that failed (its copy's ``source_name`` and
    ``source_id``); ``failure`` is its last error (the copy's ``source_output``);
    ``attempts`` how many times it ran (its ``retry_count`` + 1); ``retry_limit`` the
    retries it was allowed, from the failed job when it is still kept, else from its
    queue's current setting (None when neither is there); ``kept``: the failed job is
    still there to look at.
    """

    queue: str
    id: uuid.UUID
    failure: Failure | None
    attempts: int | None
    retry_limit: int | None
    kept: bool

    @property
    def allowed(self) -> int | None:
        """How many runs the failed job was allowed (its retry limit + 1)."""
        return None if self.retry_limit is None else self.retry_limit + 1

    @classmethod
    def of(
        cls, job: Job, source: Job | None = None, queue: Queue | None = None
    ) -> DeadLetterOrigin | None:
        """The origin of ``job``, a dead letter copy (None for any other job).

        ``source``: the failed job, if still kept; ``queue``: its queue, if it exists.
        """
        if job.source_name is None or job.source_id is None:
            return None
        output = job.source_output
        if output is None and source is not None:
            output = source.output
        limit = source.retry_limit if source is not None else None
        if limit is None and queue is not None:
            limit = queue.retry_limit
        count = job.source_retry_count
        return cls(
            queue=job.source_name,
            id=job.source_id,
            failure=Failure.of(output),
            attempts=None if count is None else count + 1,
            retry_limit=limit,
            kept=source is not None,
        )

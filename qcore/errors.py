"""The exceptions every layer of qcore raises.

One tree, keyed by SQLSTATE for database errors: adapters translate their
driver's exceptions with :func:`database_error`, so no raw driver exception
escapes qcore and callers can catch by meaning (``UniqueViolation``,
``SerializationError``) or by the flag ``retryable``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHECK_VIOLATION",
    "FOREIGN_KEY_VIOLATION",
    "ConfigError",
    "ConnectionLostError",
    "ConnectionSettingsError",
    "DatabaseError",
    "JobFailedError",
    "NotInstalledError",
    "NotStartedError",
    "OrphanedThreadsError",
    "PublishError",
    "QcoreError",
    "QueueNotFoundError",
    "SchemaVersionError",
    "SerializationError",
    "UniqueViolation",
    "ValidationError",
    "database_error",
]


class QcoreError(Exception):
    """Base of every exception qcore raises."""


class ConfigError(QcoreError):
    """An option or argument is not acceptable; the message says what is allowed."""


class ValidationError(ConfigError, ValueError):
    """An argument of a verb is invalid.

    A bad value (a name, a payload, a number) or an option the verb does not take.
    Raised before anything is written.
    """


class NotStartedError(QcoreError):
    """A ``Boss`` was used before ``start()`` succeeded or after ``stop()`` closed it."""


class QueueNotFoundError(ValidationError):
    """An operation named a queue that does not exist.

    ``queues`` names the missing queues, where the operation knows them (``work()``,
    ``work_handlers()``).
    """

    def __init__(self, message: str, *, queues: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.queues = queues


class PublishError(QcoreError):
    """``publish`` could not send to every subscribed queue.

    The others got their job all the same: ``sent`` maps each of those queues to its job
    id (None where the queue's policy dropped it), ``failed`` each queue that did not to
    its exception.
    """

    def __init__(self, event: str, sent: dict[str, Any], failed: dict[str, BaseException]) -> None:
        what = "; ".join(f"{name}: {exc}" for name, exc in failed.items())
        total = len(sent) + len(failed)
        super().__init__(
            f"publish({event!r}) failed for {len(failed)} of {total} subscribed queue(s): {what}"
        )
        self.event = event
        self.sent = sent
        self.failed = failed


class OrphanedThreadsError(QcoreError):
    """A worker holds as many orphaned handler threads as it allows, and claims nothing.

    Its plain-function handlers ran on past the batches it gave up on (they do not
    return when ``job.cancelled`` is set); it claims nothing until one of them ends.
    Emitted as an ``error`` event.
    """


class JobFailedError(QcoreError):
    """A handler's attempt at a job failed; emitted as an ``error`` event, one per job.

    ``queue`` and ``job_id`` name the job, ``attempt`` is this attempt's number (its
    ``retry_count`` + 1) of ``attempts`` (its ``retry_limit`` + 1; None when unknown),
    ``error`` is what the handler raised (or the failure output stored, such as a
    timeout's), ``retries_exhausted`` whether no attempt is left (the job is failed for
    good), and ``dead_letter`` the dead letter queue it is copied to then, if any. The
    worker logs these itself (on ``qcore.worker``, rate-limited), so the ``error``
    event's own logging skips them.
    """

    def __init__(
        self,
        queue: str,
        job_id: Any,
        attempt: int,
        attempts: int | None,
        error: Any,
        *,
        retries_exhausted: bool = False,
        dead_letter: str | None = None,
    ) -> None:
        of = f" of {attempts}" if attempts is not None else ""
        super().__init__(
            f"job {job_id} of queue {queue!r} failed (attempt {attempt}{of}):"
            f" {describe_error(error)}"
        )
        self.queue = queue
        self.job_id = job_id
        self.attempt = attempt
        self.attempts = attempts
        self.error = error
        self.retries_exhausted = retries_exhausted
        self.dead_letter = dead_letter


def describe_error(error: Any, limit: int = 500) -> str:
    """``Type: message`` of an exception, or of a failure output (``{name, message}``)."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    elif isinstance(error, dict) and "message" in error:
        text = f"{error.get('name') or 'Error'}: {error['message']}"
    elif isinstance(error, str):
        text = error
    else:
        text = repr(error)
    # a lone surrogate (bytes decoded with surrogateescape) cannot be written as UTF-8
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class NotInstalledError(QcoreError):
    """The schema, an optional driver or an external tool is not installed.

    ``awaiting_migration`` is True when the schema is not installed (yet) and this
    instance may not install it: another process with ``migrate=True`` may be about to.
    """

    def __init__(self, *args: Any, awaiting_migration: bool = False) -> None:
        super().__init__(*args)
        self.awaiting_migration = awaiting_migration


class SchemaVersionError(QcoreError):
    """The installed schema version is not one this qcore can use as it is.

    ``awaiting_migration`` is True when it is older than this qcore's and this instance
    may not migrate it: another process with ``migrate=True`` may be migrating it.
    """

    def __init__(self, *args: Any, awaiting_migration: bool = False) -> None:
        super().__init__(*args)
        self.awaiting_migration = awaiting_migration


class DatabaseError(QcoreError):
    """A statement failed on the server or could not reach it.

    ``sqlstate`` is the five-character SQLSTATE when the server sent one,
    ``statement`` the first line of the statement that failed (given whole,
    kept short), and
    ``retryable`` whether running the same transaction again may succeed.
    """

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        statement: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.statement = first_line(statement)
        self.retryable = retryable

    def __str__(self) -> str:
        text = super().__str__()
        parts = [text]
        if self.sqlstate:
            parts.append(f"[SQLSTATE {self.sqlstate}]")
        if self.statement:
            parts.append(f"in: {self.statement}")
        return " ".join(parts)


class ConnectionLostError(DatabaseError):
    """The connection broke or could not be opened; a new one may succeed."""


class ConnectionSettingsError(DatabaseError, ConfigError):
    """The server refused the connection's settings.

    A database or role that does not exist, a wrong password, a refused host entry, an
    invalid option. Trying again changes nothing (not retryable); the message is the
    server's own.
    """


class SerializationError(DatabaseError):
    """The transaction lost a serialization race or a deadlock (40001, 40P01)."""


class UniqueViolation(DatabaseError):
    """A unique constraint rejected the row (23505)."""


#: the SQLSTATE of a foreign key violation (a row naming a queue that does not exist)
FOREIGN_KEY_VIOLATION = "23503"
#: the SQLSTATE of a check constraint violation (a row breaking a queue policy's rule)
CHECK_VIOLATION = "23514"

# SQLSTATE -> class. Exact codes first, then the two-character class.
_BY_CODE: dict[str, type[DatabaseError]] = {
    "40001": SerializationError,
    "40P01": SerializationError,
    "23505": UniqueViolation,
    "57P01": ConnectionLostError,  # admin_shutdown (pg_terminate_backend)
    "57P02": ConnectionLostError,  # crash_shutdown
    "57P03": ConnectionLostError,  # cannot_connect_now
    "3D000": ConnectionSettingsError,  # invalid_catalog_name: no such database
    "08004": ConnectionSettingsError,  # rejected_connection
}
_BY_CLASS: dict[str, type[DatabaseError]] = {
    "08": ConnectionLostError,
    "28": ConnectionSettingsError,  # invalid authorization: no such role, wrong password
}
_RETRYABLE_CLASSES = (SerializationError, ConnectionLostError)


def first_line(sql: str | None) -> str | None:
    """The first non-empty line of a statement, for error messages."""
    if not sql:
        return None
    for line in sql.strip().splitlines():
        if line.strip():
            return line.strip()[:200]
    return None


def database_error(
    message: str,
    *,
    sqlstate: str | None,
    sql: str | None = None,
    retryable_sqlstates: frozenset[str] = frozenset(),
) -> DatabaseError:
    """Build the right ``DatabaseError`` subclass for a SQLSTATE."""
    cls: type[DatabaseError] = DatabaseError
    if sqlstate:
        cls = _BY_CODE.get(sqlstate) or _BY_CLASS.get(sqlstate[:2], DatabaseError)
    retryable = issubclass(cls, _RETRYABLE_CLASSES) or (sqlstate in retryable_sqlstates)
    return cls(message, sqlstate=sqlstate, statement=sql, retryable=retryable)

"""Validation of queue and job options, before anything is written.

Every check raises :class:`qcore.errors.ValidationError` with a message that
says which value was wrong and what is allowed. The rules are pg-boss's
(``Attorney``), spelled in Python: snake_case names, durations in seconds.

The functions here return plain values ready for the SQL builders: a queue's
options as the camelCase JSON object pg-boss's ``create_queue(text, jsonb)``
reads, and each job as one record of the JSON array a send or insert expands
server-side.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from qcore.errors import ValidationError
from qcore.job import POLICIES, Job, Policy

__all__ = [
    "EDIT_OPTIONS",
    "FETCH_OPTIONS",
    "INT4_MAX",
    "MAX_DELAY_SECONDS",
    "MAX_EXPIRE_SECONDS",
    "MAX_JSON_DEPTH",
    "MAX_KEY_BYTES",
    "MAX_QUEUE_NAME_LENGTH",
    "MIN_HEARTBEAT_SECONDS",
    "QUEUE_OPTIONS",
    "SEND_OPTIONS",
    "WORK_OPTIONS",
    "EditOptions",
    "FetchOptions",
    "GroupConcurrency",
    "GroupLimits",
    "JobRecord",
    "QueueOptions",
    "ScheduledSendOptions",
    "SendOptions",
    "WorkArguments",
    "check_batch_size",
    "check_count",
    "check_json",
    "check_key",
    "check_seconds",
    "check_text",
    "fetch_options",
    "ids_and_fences",
    "job_id",
    "job_record",
    "known_only",
    "normalize_output",
    "page_keyset",
    "policy",
    "priority_bounds",
    "queue_name",
    "queue_options",
    "queue_options_json",
    "storable_text",
]

INT4_MAX: Final = 2**31 - 1
INT4_MIN: Final = -(2**31)
#: pg-boss sets no length limit; ours keeps names far below PostgreSQL's btree entry size
#: (a queue name is part of every job index key) and NOTIFY's 8000-byte payload.
MAX_QUEUE_NAME_LENGTH: Final = 255
MAX_EXPIRE_SECONDS: Final = 86_400  # 24 hours
MIN_HEARTBEAT_SECONDS: Final = 10
#: how deep lists and objects may nest in a job's data or output: far below the depth at
#: which Python's own JSON encoder and decoder give up (about 1,000 levels, less on a deep
#: stack), so what is stored can always be read back
MAX_JSON_DEPTH: Final = 100
#: the longest delay ``start_after`` may give in seconds: 100 years (far past any real
#: schedule, far below what a timestamp holds)
MAX_DELAY_SECONDS: Final = 100 * 365 * 86_400
#: the longest singleton key, group id or group tier, in UTF-8 bytes: they are index keys
#: (with the queue name), and PostgreSQL refuses an index row over about 2,700 bytes
MAX_KEY_BYTES: Final = 2048

_NAME = re.compile(r"[\w.\-/]+", re.ASCII)  # pg-boss: /^[\w.\-/]+$/ (JavaScript \w is ASCII)


class QueueOptions(TypedDict, total=False):
    """Options of ``create_queue`` and ``update_queue`` (seconds). Left out: the default
    on create, unchanged on update; None on create means the default, on update it
    clears ``retry_delay_max``, ``dead_letter`` or ``heartbeat_seconds``."""

    policy: str | Policy
    partition: bool
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int | None
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    warning_queue_size: int
    dead_letter: str | None
    heartbeat_seconds: int | None
    notify: bool


JobRecord = dict[str, Any]


# --------------------------------------------------------------------------- names


def queue_name(name: object, what: str = "queue name") -> str:
    """A valid queue name: ASCII letters, digits, ``_ . - /``; at most 255 characters."""
    if not isinstance(name, str):
        raise ValidationError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise ValidationError(f"{what} must not be empty")
    if len(name) > MAX_QUEUE_NAME_LENGTH:
        raise ValidationError(
            f"{what} {name[:40]!r}... is {len(name)} characters long; the limit is"
            f" {MAX_QUEUE_NAME_LENGTH}"
        )
    if not _NAME.fullmatch(name):
        bad = next(c for c in name if not _NAME.fullmatch(c))
        raise ValidationError(
            f"{what} {name!r} contains {bad!r}; a queue name may contain only ASCII letters,"
            " digits, underscores, hyphens, periods and forward slashes"
        )
    return name


def policy(value: object) -> str:
    """One of pg-boss's six queue policies."""
    if isinstance(value, Policy):
        return value.value
    if isinstance(value, str) and value in POLICIES:
        return value
    raise ValidationError(f"policy must be one of {', '.join(POLICIES)}; got {value!r}")


# --------------------------------------------------------------------------- scalars


def check_int(name: str, value: object, *, minimum: int = 0, maximum: int = INT4_MAX) -> int:
    """An integer option from ``minimum`` to ``maximum`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, got {value!r}")
    if value < minimum or value > maximum:
        if maximum == INT4_MAX and minimum != INT4_MIN:
            raise ValidationError(f"{name} must be an integer >= {minimum}, got {value}")
        raise ValidationError(f"{name} must be an integer from {minimum} to {maximum}, got {value}")
    return value


def check_flag(name: str, value: object) -> bool:
    """A flag option: True or False (not 0, 1 or None)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be True or False, got {value!r}")
    return value


def check_key(name: str, value: object) -> str:
    """A non-empty string the database can store and index: valid Unicode (no NUL, no
    lone surrogate) and at most :data:`MAX_KEY_BYTES` in UTF-8 (singleton keys, group
    ids and tiers are index keys, and PostgreSQL refuses an index row past ~2.7 kB)."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty string, got {value!r:.80}")
    problem = _text_problem(value)
    if problem is not None:
        raise ValidationError(f"{name} {problem}")
    size = len(value.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise ValidationError(
            f"{name} is {size} bytes long in UTF-8; the limit is {MAX_KEY_BYTES}"
            " (hash a longer key first)"
        )
    return value


def check_text(name: str, value: object) -> str:
    """A string the database can store (see :func:`_text_problem`), any length."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type(value).__name__}")
    problem = _text_problem(value)
    if problem is not None:
        raise ValidationError(f"{name} {problem}")
    return value


def _text_problem(text: str) -> str | None:
    """Why the database cannot store ``text``, or None: a NUL character (text and jsonb
    refuse it) or a lone surrogate (not Unicode: what ``os.fsdecode`` makes of a file
    name that is not UTF-8; the driver cannot encode it)."""
    if "\x00" in text:
        return "contains a NUL character, which the database cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate ({text[exc.start]!r} at index {exc.start}), which"
            " is not valid Unicode text: decode bytes with errors='replace' first"
        )
    return None


def check_json(name: str, value: Any) -> Any:
    """``value`` if it can be stored as jsonb (string keys; no NaN or Infinity, NUL or
    lone surrogate; nested at most :data:`MAX_JSON_DEPTH` levels); else ValidationError."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"{name} must be JSON-serialisable (dicts with string keys, lists, strings, numbers,"
            f" booleans, None; no NaN or Infinity): {exc}"
        ) from None
    except RecursionError:
        raise ValidationError(f"{name} {_TOO_DEEP}") from None
    problem = _json_problem(value)
    if problem is not None:
        raise ValidationError(f"{name} {problem}")
    return value


def records_json(records: list[JobRecord], *, numbered: bool) -> str:
    """The job records as one JSON array, encoded once; ValidationError (naming the job
    when ``numbered``) if a job's ``data`` cannot be stored as jsonb."""
    return _jsonb_array(records, lambda record: record["data"], numbered=numbered, wrappers=2)


def payloads_json(payloads: list[Any]) -> str:
    """Jobs given by their ``data`` alone as one JSON array of those payloads, checked
    as :func:`records_json` checks ``data``."""
    return _jsonb_array(payloads, lambda data: data, numbered=True, wrappers=1)


def _jsonb_array(
    items: list[Any], data_of: Callable[[Any], Any], *, numbered: bool, wrappers: int
) -> str:
    """The array encoded once; the checks of :func:`check_json` made on the encoded text
    where they can be (one C-speed search each), each job looked at alone only when one
    may fail. ``wrappers``: the levels the array puts around each job's data."""
    try:
        text = json.dumps(items, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = None
    if (
        text is None
        or "\\u0000" in text
        or ("\\ud" in text and _LONE_SURROGATE.search(text) is not None)
        or _may_nest_deeper(text, items, MAX_JSON_DEPTH + wrappers)
    ):  # find the job at fault (or a false alarm)
        for i, item in enumerate(items):
            try:
                check_json("data", data_of(item))
            except ValidationError as exc:
                raise ValidationError(f"jobs[{i}]: {exc}" if numbered else str(exc)) from None
    assert text is not None  # every other field is validated: only data can fail
    return text


#: a lone surrogate as json.dumps escapes it: a high one not followed by a low one, or
#: a low one not preceded by a high one (an escaped backslash before "ud800" may match:
#: a false alarm, which the slow check clears)
_LONE_SURROGATE = re.compile(
    r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})"
    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}"
)

_TOO_DEEP = f"nests lists and objects deeper than {MAX_JSON_DEPTH} levels, the limit"


def _may_nest_deeper(text: str, items: list[Any], limit: int) -> bool:
    """Whether ``items`` (encoded as ``text``) nest more than ``limit`` levels deep: at
    once when the text has no more opening brackets than that (a single send), else
    walked (measured: about half the encoding's time for 1,000 small jobs)."""
    return text.count("[") + text.count("{") > limit and _deeper_than(items, limit)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest in ``value`` more than ``limit`` levels deep, found
    level by level without recursion (``value`` encoded as JSON: no cycles)."""
    level = [value] if isinstance(value, (dict, list, tuple)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list, tuple))
        ]
    return False


def _json_problem(value: Any) -> str | None:
    """Why jsonb cannot store ``value`` (encodable as JSON), or None: too deep, or a
    string or key the database refuses (:func:`_text_problem`); walked without
    recursion."""
    if _deeper_than(value, MAX_JSON_DEPTH):
        return _TOO_DEEP
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            problem = _text_problem(node)
            if problem is not None:
                return problem
        elif isinstance(node, dict):
            stack.extend(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return None


def normalize_output(value: Any) -> Any:
    """What ``complete``/``fail`` store as ``output``: None stays None, a dict is kept, an
    exception becomes ``{"name", "message", "stack"}``, anything else ``{"value": x}``.
    An exception is always storable: what the database would refuse in its text (a NUL,
    a lone surrogate) is written as a backslash escape; any other value is checked
    (:func:`check_json`)."""
    if value is None:
        return None
    if isinstance(value, BaseException):
        import traceback

        stack = "".join(traceback.format_exception(type(value), value, value.__traceback__))
        return {
            "name": type(value).__name__,
            "message": storable_text(str(value)),
            "stack": storable_text(stack),
        }
    if isinstance(value, dict):
        return check_json("output", value)
    return check_json("output", {"value": value})


def storable_text(text: str) -> str:
    """``text`` with what the database refuses in it (NUL, lone surrogates) written as
    backslash escapes, for messages that must be stored whatever they hold."""
    if _text_problem(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


# --------------------------------------------------------------------------- queues

#: the keyword options of create_queue / update_queue -> pg-boss's JSON key
QUEUE_OPTIONS: Final[Mapping[str, str]] = {
    "policy": "policy",
    "partition": "partition",
    "retry_limit": "retryLimit",
    "retry_delay": "retryDelay",
    "retry_backoff": "retryBackoff",
    "retry_delay_max": "retryDelayMax",
    "expire_in_seconds": "expireInSeconds",
    "retention_seconds": "retentionSeconds",
    "delete_after_seconds": "deleteAfterSeconds",
    "warning_queue_size": "warningQueueSize",
    "dead_letter": "deadLetter",
    "heartbeat_seconds": "heartbeatSeconds",
    "notify": "notify",
}


def _retry(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if options.get("retry_limit") is not None:
        out["retry_limit"] = check_int("retry_limit", options["retry_limit"])
    if options.get("retry_delay") is not None:
        out["retry_delay"] = check_int("retry_delay", options["retry_delay"])
    if options.get("retry_backoff") is not None:
        out["retry_backoff"] = check_flag("retry_backoff", options["retry_backoff"])
    if options.get("retry_delay_max") is not None:
        if options.get("retry_backoff") is not True:
            raise ValidationError(
                "retry_delay_max caps the exponential backoff, so it can only be set together"
                " with retry_backoff=True"
            )
        out["retry_delay_max"] = check_int("retry_delay_max", options["retry_delay_max"])
    return out


def _lifetimes(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if options.get("expire_in_seconds") is not None:
        out["expire_in_seconds"] = check_int(
            "expire_in_seconds", options["expire_in_seconds"], minimum=1, maximum=MAX_EXPIRE_SECONDS
        )
    if options.get("retention_seconds") is not None:
        out["retention_seconds"] = check_int(
            "retention_seconds", options["retention_seconds"], minimum=1
        )
    if options.get("delete_after_seconds") is not None:
        out["delete_after_seconds"] = check_int(
            "delete_after_seconds (0 keeps finished jobs forever)", options["delete_after_seconds"]
        )
    if options.get("heartbeat_seconds") is not None:
        out["heartbeat_seconds"] = check_int(
            "heartbeat_seconds", options["heartbeat_seconds"], minimum=MIN_HEARTBEAT_SECONDS
        )
    return out


def queue_options(name: str, options: Mapping[str, Any], *, update: bool = False) -> dict[str, Any]:
    """The given queue options, validated, by their Python names.

    For ``create_queue`` (``update=False``) a None value means "the default"
    and is dropped. For ``update_queue`` an option left out is left alone and
    None is kept where it clears a setting (``retry_delay_max``,
    ``dead_letter``, ``heartbeat_seconds``).
    """
    known_only("queue", options, QUEUE_OPTIONS)
    given = dict(options)
    cleared = {k for k, v in given.items() if v is None}
    if update:
        not_nullable = sorted(cleared - {"retry_delay_max", "dead_letter", "heartbeat_seconds"})
        if not_nullable:
            raise ValidationError(
                f"{', '.join(not_nullable)} cannot be cleared with None; give a value"
            )
    values = {k: v for k, v in given.items() if v is not None}
    out: dict[str, Any] = {}
    if "policy" in values:
        out["policy"] = policy(values["policy"])
    if "partition" in values:
        out["partition"] = check_flag("partition", values["partition"])
    if "notify" in values:
        out["notify"] = check_flag("notify", values["notify"])
    if "warning_queue_size" in values:
        out["warning_queue_size"] = check_int(
            "warning_queue_size", values["warning_queue_size"], minimum=1
        )
    out.update(_retry(values))
    out.update(_lifetimes(values))
    if "dead_letter" in values:
        dead_letter = queue_name(values["dead_letter"], "dead_letter")
        if dead_letter == name:
            raise ValidationError(f"queue {name!r} cannot be its own dead letter queue")
        out["dead_letter"] = dead_letter
    if update:
        out.update({k: None for k in cleared})
    return out


def queue_options_json(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validated queue options as the JSON object ``create_queue(text, jsonb)`` reads."""
    return {QUEUE_OPTIONS[k]: v for k, v in options.items()}


# --------------------------------------------------------------------------- jobs


#: the options of send(), by their Python names (each job of insert() takes these too)
class ScheduledSendOptions(TypedDict, total=False):
    """Options of ``send_after``: those of ``send`` but ``start_after``."""

    priority: int
    singleton_key: str
    singleton_seconds: int
    singleton_next_slot: bool
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    heartbeat_seconds: int
    dead_letter: str
    id: uuid.UUID | str
    group_id: str
    group_tier: str


class SendOptions(ScheduledSendOptions, total=False):
    """Options of ``send``; each one left out is inherited from the queue."""

    start_after: dt.datetime | dt.timedelta | float | str
    #: a regular expression: only servers whose instance key it matches claim the job
    preferred_instance_key_pattern: str


class EditOptions(TypedDict, total=False):
    """Options of ``update`` and ``upsert``: what an edit may change (not what says
    which job it is, nor how it was throttled)."""

    priority: int
    start_after: dt.datetime | dt.timedelta | float | str
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    heartbeat_seconds: int
    dead_letter: str
    group_id: str
    group_tier: str


class GroupConcurrency(TypedDict, total=False):
    """A per-group limit with tiers: ``default`` for every group, ``tiers`` for the
    groups whose jobs carry that ``group_tier`` (pg-boss's ``{default, tiers}``)."""

    default: int
    tiers: Mapping[str, int]


class FetchOptions(TypedDict, total=False):
    """Options of ``fetch`` (and of ``work``, which fetches with them)."""

    batch_size: int
    priority: bool
    order_by_created_on: bool
    include_metadata: bool
    ignore_start_after: bool
    min_priority: int | None
    max_priority: int | None
    group_concurrency: int | GroupConcurrency | None
    ignore_groups: Collection[str] | None


class WorkArguments(FetchOptions, total=False):
    """Options of ``work`` and ``handler``: the fetch's, and how the worker runs."""

    local_concurrency: int
    polling_interval_seconds: float
    heartbeat_refresh_seconds: float | None
    notify_polling_interval_seconds: float | None
    local_group_concurrency: int | GroupConcurrency | None
    per_job_results: bool
    burst_when_ready_exceeds: int | None
    burst_when_batch_full: bool
    locked_fetch: bool


#: every option of a job (``send``'s), in their declaration order
SEND_OPTIONS: Final = tuple(SendOptions.__annotations__)
#: every option of an edit
EDIT_OPTIONS: Final = tuple(EditOptions.__annotations__)
#: every option of a fetch
FETCH_OPTIONS: Final = tuple(FetchOptions.__annotations__)
#: every option of ``work`` (and ``handler``)
WORK_OPTIONS: Final = tuple(WorkArguments.__annotations__)


def known_only(kind: str, options: Iterable[str], known: Collection[str]) -> None:
    """``ValidationError`` naming the ``kind`` options given that are not ``known``."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValidationError(
            f"unknown {kind} option {', '.join(unknown)}; known: {', '.join(known)}"
        )


def _start_after(value: object) -> dict[str, Any]:
    """The start_after fields of a job record: an absolute instant or a delay in seconds."""
    if value is None:
        return {}
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(
                f"start_after {value!r} is a naive datetime; give an aware one"
                " (e.g. datetime.now(timezone.utc) + timedelta(minutes=5)) or seconds"
            )
        return {"start_after": value.isoformat()}
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (0 <= value <= MAX_DELAY_SECONDS):  # NaN fails the comparison too
            raise ValidationError(
                f"start_after must be from 0 to {MAX_DELAY_SECONDS} seconds (100 years),"
                f" got {value!r}"
            )
        return {"start_after_seconds": float(value)} if value > 0 else {}
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValidationError(
                f"start_after {value!r} is not an ISO 8601 date time; give an aware datetime,"
                " seconds (int, float or timedelta) or an ISO string like"
                " '2030-01-01T08:00:00Z'"
            ) from None
        if parsed.tzinfo is None:  # pg-boss pins a zone-less date time to UTC
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return {"start_after": parsed.isoformat()}
    raise ValidationError(
        f"start_after must be an aware datetime, seconds (int, float or timedelta) or an ISO"
        f" 8601 string; got {type(value).__name__}"
    )


def job_id(value: object) -> uuid.UUID:
    """A job id from a UUID or its string form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ValidationError(f"a job id must be a UUID or a UUID string, got {value!r}")


def page_keyset(before: object, what: str) -> tuple[dt.datetime, uuid.UUID] | tuple[None, None]:
    """A page's ``before``: the ``(created_on, id)`` of the previous page's last
    ``what`` (an aware datetime and a UUID), or (None, None) for the first page."""
    if before is None:
        return None, None
    if (
        not isinstance(before, tuple)
        or len(before) != 2
        or not isinstance(before[0], dt.datetime)
        or before[0].tzinfo is None
    ):
        raise ValidationError(
            f"before must be (created_on, id) of a {what}: an aware datetime and a UUID,"
            f" got {before!r}"
        )
    return before[0], job_id(before[1])


def job_record(data: Any = None, **options: Any) -> JobRecord:
    """One job of a send or insert, validated but for ``data`` (see :func:`records_json`),
    as a record of the insert's JSON array.

    Keys are the insert statement's recordset columns; options left None are
    omitted so the statement inherits them from the queue (and an id left out is
    made by the server).
    """
    known_only("job", options, SEND_OPTIONS)
    if options.get("preferred_instance_key_pattern") is not None:
        # send and insert take it off before: elsewhere it would be lost
        raise ValidationError("preferred_instance_key_pattern is taken by send and insert only")
    given = {k: v for k, v in options.items() if v is not None}
    record: JobRecord = {"data": data}
    if not given:  # a payload alone (the bulk case): nothing more to check
        return record
    if "id" in given:
        record["id"] = str(job_id(given["id"]))
    if "priority" in given:
        record["priority"] = check_int("priority", given["priority"], minimum=INT4_MIN)
    record.update(_start_after(given.get("start_after")))
    if "singleton_key" in given:
        record["singleton_key"] = check_key("singleton_key", given["singleton_key"])
    if "singleton_seconds" in given:
        record["singleton_seconds"] = check_int(
            "singleton_seconds", given["singleton_seconds"], minimum=1
        )
    if given.get("singleton_next_slot") and "singleton_seconds" not in record:
        raise ValidationError("singleton_next_slot needs singleton_seconds (the slot length)")
    if "singleton_next_slot" in given:
        check_flag("singleton_next_slot", given["singleton_next_slot"])
    record.update(_retry(given))
    record.update(_lifetimes(given))
    if "dead_letter" in given:
        record["dead_letter"] = queue_name(given["dead_letter"], "dead_letter")
    if "group_id" in given:
        record["group_id"] = check_key("group_id", given["group_id"])
    if "group_tier" in given:
        if "group_id" not in record:
            raise ValidationError("group_tier needs group_id (the tier of which group)")
        record["group_tier"] = check_key("group_tier", given["group_tier"])
    return record


def check_seconds(name: str, value: object, minimum: float, *, inclusive: bool = True) -> float:
    """A duration option: a finite number of seconds >= ``minimum`` (> with
    ``inclusive=False``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value >= minimum if inclusive else value > minimum):  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    bound = f">= {minimum}" if inclusive else f"> {minimum}"
    raise ValidationError(f"{name} must be a number of seconds {bound}, got {value!r}")


def check_count(name: str, value: object, maximum: int) -> int:
    """A count option: an integer from 1 to ``maximum``."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise ValidationError(f"{name} must be an integer from 1 to {maximum}, got {value!r}")


def check_batch_size(value: object) -> int:
    """A fetch's ``batch_size``: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"batch_size must be an integer >= 1, got {value!r}")
    return value


#: a fetch's options left out take these
FETCH_DEFAULTS: Final[Mapping[str, Any]] = {
    "batch_size": 1,
    "priority": True,
    "order_by_created_on": True,
    "include_metadata": False,
    "ignore_start_after": False,
    "min_priority": None,
    "max_priority": None,
    "group_concurrency": None,
    "ignore_groups": None,
}


def fetch_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A fetch's options, validated, with the defaults of those left out (one set of
    checks for ``fetch`` and ``work``)."""
    known_only("fetch", options, FETCH_OPTIONS)
    merged = {**FETCH_DEFAULTS, **options}
    check_batch_size(merged["batch_size"])
    for flag in ("priority", "order_by_created_on", "include_metadata", "ignore_start_after"):
        check_flag(flag, merged[flag])
    priority_bounds(merged["min_priority"], merged["max_priority"])
    if merged["group_concurrency"] is not None:
        merged["group_concurrency"] = group_limits("group_concurrency", merged["group_concurrency"])
    if merged["ignore_groups"] is not None:
        merged["ignore_groups"] = ignored_groups(merged["ignore_groups"])
    return merged


@dataclass(frozen=True)
class GroupLimits:
    """A validated ``group_concurrency``: the limit of every group, and the tiers' own."""

    default: int
    tiers: tuple[tuple[str, int], ...] = ()

    def limit(self, tier: str | None) -> int:
        """The limit of a group whose jobs carry ``tier``."""
        return dict(self.tiers).get(tier, self.default) if tier is not None else self.default

    @property
    def largest(self) -> int:
        return max([self.default, *(n for _, n in self.tiers)])

    def as_option(self) -> int | dict[str, Any]:
        """The limits as the option is written: the integer, or ``{default, tiers}``."""
        if not self.tiers:
            return self.default
        return {"default": self.default, "tiers": dict(self.tiers)}

    def tiers_json(self) -> str:
        """The tiers as the JSON object the claim reads (tier -> limit)."""
        return json.dumps(dict(self.tiers))


def group_limits(name: str, value: object) -> GroupLimits:
    """``group_concurrency`` (or ``local_group_concurrency``): an integer >= 1, or
    ``{"default": n, "tiers": {tier: n}}`` with every limit an integer >= 1."""
    if isinstance(value, GroupLimits):
        return value
    if not isinstance(value, Mapping):
        return GroupLimits(check_int(name, value, minimum=1))
    known_only(name, value, ("default", "tiers"))
    if "default" not in value:
        raise ValidationError(f"{name} needs a default (the limit of a group with no tier)")
    default = check_int(f"{name}['default']", value["default"], minimum=1)
    tiers = value.get("tiers") or {}
    if not isinstance(tiers, Mapping):
        raise ValidationError(f"{name}['tiers'] must map tier names to limits, got {tiers!r}")
    checked = []
    for tier, limit in tiers.items():
        check_key(f"a {name} tier name", tier)
        checked.append((tier, check_int(f"{name}['tiers'][{tier!r}]", limit, minimum=1)))
    return GroupLimits(default, tuple(sorted(checked)))


def ignored_groups(value: object) -> tuple[str, ...]:
    """``ignore_groups``: the group ids a fetch leaves alone (a list of strings)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError(f"ignore_groups must be a list of group ids, got {value!r}")
    return tuple(check_key("an ignored group id", v) for v in value)


def priority_bounds(minimum: object, maximum: object) -> tuple[int | None, int | None]:
    """``min_priority``/``max_priority`` of a fetch, each optional, min <= max."""
    low = None if minimum is None else check_int("min_priority", minimum, minimum=INT4_MIN)
    high = None if maximum is None else check_int("max_priority", maximum, minimum=INT4_MIN)
    if low is not None and high is not None and low > high:
        raise ValidationError(f"min_priority ({low}) must be <= max_priority ({high})")
    return low, high


def ids_and_fences(
    ids: object,
) -> tuple[list[uuid.UUID], list[uuid.UUID], list[tuple[uuid.UUID, int]]]:
    """Job ids given as a UUID, a string, a :class:`Job`, or an iterable of them.

    Returns every distinct id, the ids to act on whatever their attempt, and
    ``(id, retry_count)`` for each :class:`Job` given (its attempt fence).
    """
    items: Iterable[object]
    if isinstance(ids, (uuid.UUID, str, Job)):
        items = [ids]
    elif isinstance(ids, Iterable) and not isinstance(ids, (bytes, Mapping)):
        items = list(ids)
    else:
        raise ValidationError(
            f"ids must be a UUID, a UUID string, a Job or a list of them, got {type(ids).__name__}"
        )
    every: dict[uuid.UUID, None] = {}
    plain: list[uuid.UUID] = []
    fences: list[tuple[uuid.UUID, int]] = []
    for item in items:
        if isinstance(item, Job):
            fences.append((item.id, item.retry_count))
            every[item.id] = None
        else:
            value = job_id(item)
            plain.append(value)
            every[value] = None
    if not every:
        raise ValidationError("no job ids given")
    return list(every), plain, fences

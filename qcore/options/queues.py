"""A queue's options (``create_queue``, ``update_queue``), validated for pg-boss.

They are written as the camelCase JSON object pg-boss's ``create_queue(text, jsonb)``
reads. The retry and lifetime checks serve a job's options too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypedDict

from qcore.errors import ValidationError
from qcore.job import POLICIES, Policy
from qcore.options.scalars import check_flag, check_int, known_only
from qcore.options.text import queue_name

__all__ = [
    "MAX_EXPIRE_SECONDS",
    "MIN_HEARTBEAT_SECONDS",
    "QUEUE_OPTIONS",
    "QueueOptions",
    "lifetime_fields",
    "policy",
    "queue_options",
    "queue_options_json",
    "retry_fields",
]

MAX_EXPIRE_SECONDS: Final = 86_400  # 24 hours
MIN_HEARTBEAT_SECONDS: Final = 10


class QueueOptions(TypedDict, total=False):
    """Options of ``create_queue`` and ``update_queue`` (seconds).

    Left out: the default on create, unchanged on update; None on create means the
    default, on update it clears ``retry_delay_max``, ``dead_letter`` or
    ``heartbeat_seconds``.
    """

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


def policy(value: object) -> str:
    """One of pg-boss's six queue policies."""
    if isinstance(value, Policy):
        return value.value
    if isinstance(value, str) and value in POLICIES:
        return value
    raise ValidationError(f"policy must be one of {', '.join(POLICIES)}; got {value!r}")


def retry_fields(options: Mapping[str, Any]) -> dict[str, Any]:
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


def lifetime_fields(options: Mapping[str, Any]) -> dict[str, Any]:
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
    out.update(retry_fields(values))
    out.update(lifetime_fields(values))
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

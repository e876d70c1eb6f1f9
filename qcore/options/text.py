"""Names, keys and text: what the database can store and index.

A queue name follows pg-boss's rule; a key (singleton key, group id, group tier) is an
index key, so it has a length limit; any text must be valid Unicode without NUL.
"""

from __future__ import annotations

import re
from typing import Final

from qcore.errors import ValidationError

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_QUEUE_NAME_LENGTH",
    "check_key",
    "check_text",
    "queue_name",
    "storable_text",
    "text_problem",
]

#: pg-boss sets no length limit; ours keeps names far below PostgreSQL's btree entry size
#: (a queue name is part of every job index key) and NOTIFY's 8000-byte payload.
MAX_QUEUE_NAME_LENGTH: Final = 255

#: the longest singleton key, group id or group tier, in UTF-8 bytes: they are index keys
#: (with the queue name), and PostgreSQL refuses an index row over about 2,700 bytes
MAX_KEY_BYTES: Final = 2048
_NAME = re.compile(r"[\w.\-/]+", re.ASCII)  # pg-boss: /^[\w.\-/]+$/ (JavaScript \w is ASCII)


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


def check_key(name: str, value: object) -> str:
    """Check a key: a non-empty string the database can store and index.

    Valid Unicode (no NUL, no lone surrogate) and at most :data:`MAX_KEY_BYTES` in UTF-8
    (singleton keys, group ids and tiers are index keys, and PostgreSQL refuses an index
    row past ~2.7 kB).
    """
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty string, got {value!r:.80}")
    problem = text_problem(value)
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
    """A string the database can store (see :func:`text_problem`), any length."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem is not None:
        raise ValidationError(f"{name} {problem}")
    return value


def text_problem(text: str) -> str | None:
    """Why the database cannot store ``text``, or None.

    A NUL character (text and jsonb refuse it) or a lone surrogate (not Unicode: what
    ``os.fsdecode`` makes of a file name that is not UTF-8; the driver cannot encode
    it).
    """
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


def storable_text(text: str) -> str:
    """``text`` with what the database refuses in it written as backslash escapes.

    That is NUL and lone surrogates; this is for messages that must be stored whatever
    they hold.
    """
    if text_problem(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")

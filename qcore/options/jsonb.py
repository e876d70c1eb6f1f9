"""What jsonb can store: a job's data and output, checked before anything is written.

A batch of jobs is encoded once and checked on the encoded text where it can be; a job
is looked at alone only when one may fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from qcore.errors import ValidationError
from qcore.options.jobs import JobRecord
from qcore.options.text import storable_text, text_problem

__all__ = ["MAX_JSON_DEPTH", "check_json", "normalize_output", "payloads_json", "records_json"]

#: how deep lists and objects may nest in a job's data or output: far below the depth at
#: which Python's own JSON encoder and decoder give up (about 1,000 levels, less on a deep
#: stack), so what is stored can always be read back
MAX_JSON_DEPTH: Final = 100


def check_json(name: str, value: Any) -> Any:
    """``value`` if it can be stored as jsonb; else ValidationError.

    Storable: string keys; no NaN or Infinity, NUL or lone surrogate; nested at most
    :data:`MAX_JSON_DEPTH` levels.
    """
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
    """The job records as one JSON array, encoded once.

    ValidationError (naming the job when ``numbered``) if a job's ``data`` cannot be
    stored as jsonb.
    """
    return _jsonb_array(records, lambda record: record["data"], numbered=numbered, wrappers=2)


def payloads_json(payloads: list[Any]) -> str:
    """Jobs given by their ``data`` alone, as one JSON array of those payloads.

    They are checked as :func:`records_json` checks ``data``.
    """
    return _jsonb_array(payloads, lambda data: data, numbered=True, wrappers=1)


def _jsonb_array(
    items: list[Any], data_of: Callable[[Any], Any], *, numbered: bool, wrappers: int
) -> str:
    """The array encoded once, checked on the encoded text where it can be.

    The checks of :func:`check_json` are made on the text where they can be (one C-speed
    search each), each job looked at alone only when one may fail. ``wrappers``: the
    levels the array puts around each job's data.
    """
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
    """Whether ``items`` (encoded as ``text``) nest more than ``limit`` levels deep.

    Answered at once when the text has no more opening brackets than that (a single
    send), else walked (measured: about half the encoding's time for 1,000 small jobs).
    """
    return text.count("[") + text.count("{") > limit and _deeper_than(items, limit)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest in ``value`` more than ``limit`` levels deep.

    Found level by level without recursion (``value`` encoded as JSON: no cycles).
    """
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
    """Why jsonb cannot store ``value`` (encodable as JSON), or None.

    Too deep, or a string or key the database refuses (:func:`text_problem`); walked
    without recursion.
    """
    if _deeper_than(value, MAX_JSON_DEPTH):
        return _TOO_DEEP
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            problem = text_problem(node)
            if problem is not None:
                return problem
        elif isinstance(node, dict):
            stack.extend(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return None


def normalize_output(value: Any) -> Any:
    """What ``complete``/``fail`` store as ``output``.

    None stays None, a dict is kept, an exception becomes ``{"name", "message",
    "stack"}``, anything else ``{"value": x}``. An exception is always storable: what the
    database would refuse in its text (a NUL, a lone surrogate) is written as a backslash
    escape; any other value is checked (:func:`check_json`).
    """
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

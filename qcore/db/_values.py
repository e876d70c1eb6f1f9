"""Values crossing the adapter boundary, the same for every driver.

Parameters: ``dict`` and :class:`Json` travel as jsonb, ``list``/``tuple`` as
arrays, ``uuid.UUID``, aware ``datetime``, ``None``, ``bool``, ``int``,
``float`` and ``str`` as themselves. Wrap a list in :class:`Json` to send it
as a JSON array rather than a PostgreSQL array.

Rows come back as plain dicts of plain values: jsonb decoded, ``uuid.UUID``
(not a driver subclass), aware ``datetime``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["JSON_OIDS", "Json", "dumps", "is_json", "json_value", "normalize_rows", "verbatim"]

JSON_OIDS = frozenset({114, 3802})  # json, jsonb


@dataclass(frozen=True, slots=True)
class Json:
    """A parameter to send as jsonb, whatever its Python type.

    ``text``, when the caller has encoded ``value`` already, is sent as it is.
    """

    value: Any
    text: str | None = None


def is_json(value: Any) -> bool:
    """Whether a parameter travels as jsonb."""
    return isinstance(value, (dict, Json))


def json_value(value: Any) -> Any:
    """The Python object a jsonb parameter stands for."""
    return value.value if isinstance(value, Json) else value


def dumps(value: Any) -> str:
    """JSON text of a jsonb parameter (encoded once: drivers are handed this text)."""
    if isinstance(value, Json) and value.text is not None:
        return value.text
    return json.dumps(json_value(value), separators=(",", ":"))


def verbatim(text: str) -> str:
    """The ``dumps`` a driver's JSON wrapper gets for text that :func:`dumps` made."""
    return text


def normalize_rows(
    rows: Iterable[dict[str, Any]], json_columns: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Turn driver values into plain ones, in place.

    JSON text of ``json_columns`` is decoded (text that is not JSON left as it is), UUID
    subclasses made ``uuid.UUID``, recursing into arrays.
    """
    out = rows if isinstance(rows, list) else list(rows)
    for row in out:
        for key, value in row.items():
            if key in json_columns and isinstance(value, str):
                with contextlib.suppress(ValueError):
                    row[key] = json.loads(value)
            elif value is not None and not isinstance(value, (str, int, float, dict)):
                row[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID) and type(value) is not uuid.UUID:
        return uuid.UUID(bytes=value.bytes)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value

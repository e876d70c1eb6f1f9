"""How the operator's commands print: aligned columns for people, JSON for scripts."""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from collections.abc import Sequence
from typing import Any

__all__ = ["format_table", "print_json"]


def format_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under ``columns``, each column padded to its widest cell."""
    lines = [tuple(columns), *(tuple(r) for r in rows)]
    widths = [max(len(line[k]) for line in lines) for k in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _plain(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"not JSON: {type(value).__name__}")


def print_json(value: Any) -> None:
    """``value`` as indented JSON on standard output (dates ISO 8601, ids as strings)."""
    print(json.dumps(value, indent=2, default=_plain))

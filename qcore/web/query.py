"""What the board accepts in a request: each query parameter and form value checked, and
refused with a :class:`~qcore.errors.ValidationError` that says what is allowed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from starlette.requests import Request

from qcore.errors import ValidationError
from qcore.web.board import RANGES

__all__ = [
    "HISTORY_TABS",
    "KEEP_CHOICES",
    "chart_tab",
    "check_query",
    "integer",
    "one_of",
    "purge_cutoff",
]

#: what a history purge keeps, by choice on the storage panel: the charts' ranges of days
#: (so the trims follow what a chart can show)
KEEP_CHOICES = {r: int(r[:-1]) for r in RANGES if r.endswith("d")}
#: the tabs of a history chart area (queue page and history page), the first the default
HISTORY_TABS = ("throughput", "latency")


def integer(name: str, text: str) -> int:
    """Value ``text`` of ``name`` as a whole number."""
    try:
        return int(text)
    except ValueError:
        raise ValidationError(f"{name} must be a whole number, got {text!r}") from None


def purge_cutoff(keep: str) -> dt.date | None:
    """The first day a purge keeping ``keep`` leaves (None: it keeps nothing)."""
    if keep == "all":
        return None
    if keep not in KEEP_CHOICES:
        raise ValidationError(f"keep must be one of {', '.join(KEEP_CHOICES)} or all")
    return dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=KEEP_CHOICES[keep])


def one_of(query: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    """Query parameter ``name``, which must be one of ``allowed`` (``default`` when absent)."""
    value = query.get(name, default)
    if value not in allowed:
        raise ValidationError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def chart_tab(query: Mapping[str, str]) -> str:
    """The chart tab a page shows: ``chart`` (or the older ``tab``), else the default.

    An unknown value is not an error: a tab is only a view, so the page shows the default.
    """
    value = query.get("chart") or query.get("tab") or HISTORY_TABS[0]
    return value if value in HISTORY_TABS else HISTORY_TABS[0]


def check_query(request: Request) -> None:
    """Refuse a query parameter no database can hold (a NUL character).

    This is done whatever the page does with it, so it reads as the bad input it is.
    """
    for name, value in request.query_params.multi_items():
        if "\x00" in name or "\x00" in value:
            raise ValidationError(
                f"query parameter {name.replace(chr(0), '')!r} holds a NUL character"
            )

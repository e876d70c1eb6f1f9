"""Warnings a ``Boss`` raises about its database, and their persistence.

``slow_query`` for any statement run through the retry policy that took longer than
``warning_slow_query_seconds``, and, with ``persist_warnings``, every ``warning`` event
written to the ``warning`` table (pg-boss's row: type, message, data), which maintenance
prunes after ``warning_retention_days``.

A slow statement's values are never copied into the warning: each is shown as its
type (``<str>``, ``<int>`` …), since they hold job payloads and keys.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from qcore.context import Context, Watch
from qcore.db import Json
from qcore.events import Events, WarningEvent
from qcore.sql import maintenance as sql

__all__ = [
    "SLOW_QUERY",
    "WarningRecorder",
    "redacted",
    "slow_query_watch",
]

log = logging.getLogger("qcore")

#: the type of the warning about a slow statement
SLOW_QUERY = "slow_query"


def redacted(values: Sequence[Any]) -> list[str]:
    """A statement's values as their types only."""
    return [f"<{type(v).__name__}>" for v in values]


def slow_query_watch(events: Events, threshold_seconds: float) -> Watch:
    """A :data:`~qcore.context.Watch` that warns ``slow_query`` past the threshold."""

    def watch(seconds: float, text: str, values: Sequence[Any]) -> None:
        if seconds > threshold_seconds:
            events.warn(
                SLOW_QUERY,
                f"slow query: {seconds:.1f} s, over warning_slow_query_seconds"
                f" ({threshold_seconds:g} s); your queues and/or database server should be"
                " reviewed",
                elapsed=seconds,
                sql=text,
                values=redacted(values),
            )

    return watch


class WarningRecorder:
    """A ``warning`` listener that writes each warning to the ``warning`` table.

    A failed write is logged (it cannot be a warning of its own).
    """

    def __init__(self, context: Callable[[], Context]) -> None:
        self._context = context

    async def __call__(self, warning: WarningEvent) -> None:
        try:
            ctx = self._context()
            statement = sql.insert_warning(ctx.q)
            data = Json(None, text=json.dumps(warning.data, default=str))
            values = statement.bind(type=warning.type, message=warning.message, data=data)
            await ctx.db.execute(statement.sql, values)
        except Exception:
            log.exception("could not persist the %s warning", warning.type)

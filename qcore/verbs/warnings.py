"""The warnings a verb reads: the rows of the ``warning`` table, newest first.

The ``Boss`` writes them with ``persist_warnings`` (see :mod:`qcore.services.warnings`).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from qcore import retry
from qcore.context import Context
from qcore.options import check_count, page_keyset
from qcore.sql import maintenance as sql

__all__ = ["MAX_WARNINGS", "StoredWarning", "read_warnings"]


@dataclass(frozen=True)
class StoredWarning:
    """A row of the ``warning`` table."""

    id: uuid.UUID
    type: str
    message: str
    data: Any
    created_on: dt.datetime


#: the most warnings one page holds
MAX_WARNINGS = 1_000


async def read_warnings(
    ctx: Context, *, limit: int = 100, before: tuple[dt.datetime, uuid.UUID | str] | None = None
) -> list[StoredWarning]:
    """Persisted warnings, newest first.

    At most ``limit`` (1 to 1,000), after ``before``, the ``(created_on, id)`` of the
    previous page's last one.
    """
    check_count("limit", limit, MAX_WARNINGS)
    created, anchor = page_keyset(before, "warning")
    statement = sql.recent_warnings(ctx.q, paged=before is not None)
    rows = await retry.run(ctx, statement, before_created=created, before_id=anchor, limit=limit)
    return [
        StoredWarning(
            id=r["id"] if isinstance(r["id"], uuid.UUID) else uuid.UUID(str(r["id"])),
            type=r["type"],
            message=r["message"],
            data=json.loads(r["data"]) if isinstance(r["data"], str) else r["data"],
            created_on=r["created_on"],
        )
        for r in rows
    ]

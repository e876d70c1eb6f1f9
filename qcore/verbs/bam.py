"""The async migrations' state for an operator.

A summary per status and the entries a page at a time (the worker that runs them is
:mod:`qcore.services.bam`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from qcore import retry
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.options import LIST_LIMIT_MAX, check_count
from qcore.sql import bam as sql

__all__ = ["MAX_BAM_PAGE", "BamEntry", "BamStatus", "get_bam_entries", "get_bam_status"]

#: the most entries one ``get_bam_entries`` call returns
MAX_BAM_PAGE = LIST_LIMIT_MAX


@dataclass(frozen=True)
class BamStatus:
    """How many commands have one status, and when the newest of them was queued."""

    status: str
    count: int
    last_created_on: dt.datetime


@dataclass(frozen=True)
class BamEntry:
    """One async migration command: what it runs, where, and how it went."""

    id: uuid.UUID
    name: str
    version: int
    status: str
    queue: str | None
    table: str
    command: str
    error: str | None
    created_on: dt.datetime
    started_on: dt.datetime | None
    completed_on: dt.datetime | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BamEntry:
        return cls(
            id=row["id"] if isinstance(row["id"], uuid.UUID) else uuid.UUID(str(row["id"])),
            name=row["name"],
            version=int(row["version"]),
            status=row["status"],
            queue=row["queue"],
            table=row["table_name"],
            command=row["command"],
            error=row["error"],
            created_on=row["created_on"],
            started_on=row["started_on"],
            completed_on=row["completed_on"],
        )


async def get_bam_status(ctx: Context) -> list[BamStatus]:
    """One summary per status present, in status order."""
    rows = await retry.run(ctx, sql.bam_status(ctx.q))
    return [BamStatus(r["status"], int(r["count"]), r["last_created_on"]) for r in rows]


async def get_bam_entries(
    ctx: Context, *, limit: int = 1000, after: uuid.UUID | str | None = None
) -> list[BamEntry]:
    """The async migration entries, oldest version first, a page at a time.

    Up to ``limit`` entries (1 to 100,000); ``after`` (the last id of the previous page)
    reads the next page and raises ``ValidationError`` when that entry has been deleted
    since.
    """
    check_count("limit", limit, MAX_BAM_PAGE)
    if after is not None and not isinstance(after, uuid.UUID):
        try:
            after = uuid.UUID(str(after))
        except ValueError:
            raise ValidationError(f"after must be a BAM entry id (a UUID), got {after!r}") from None
    rows = await retry.run(ctx, sql.bam_entries(ctx.q), after=after, limit=limit)
    if after is not None and not rows:
        [found] = await retry.run(ctx, sql.bam_entry_exists(ctx.q), id=after)
        if not found["present"]:
            raise ValidationError(
                f"after names BAM entry {after}, which no longer exists (deleted since the"
                " previous page): start again without after"
            )
    return [BamEntry.from_row(r) for r in rows]

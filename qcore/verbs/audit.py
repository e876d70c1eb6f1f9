"""The board's audit log: who did what, to what, and when.

The dashboard records each operator action it carries out (pausing, resuming and
removing servers, job actions, creating jobs, redriving, purging history) with
:func:`record`, and shows the log with :func:`list_audit`. Maintenance forgets rows
after :data:`~qcore.sql.audit.AUDIT_RETENTION_DAYS` days. A schema qcore has not
installed its own tables into (one pg-boss made, read by a read-only board) has no log:
nothing is recorded and the log reads empty.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from qcore import retry
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.options import check_count
from qcore.sql import audit as sql
from qcore.verbs.schema import table_present

__all__ = ["MAX_AUDIT_PAGE", "AuditEntry", "AuditPage", "list_audit", "prune", "record"]

#: the most rows one page of the log holds
MAX_AUDIT_PAGE = 1000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One action: when, who (as the board knew them), what, on what, and its details."""

    id: uuid.UUID
    at: dt.datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any] | None


class AuditPage(list[AuditEntry]):
    """A page of the log, newest first; ``next`` is the cursor of the older page."""

    next: str | None

    def __init__(self, rows: list[AuditEntry], next: str | None) -> None:
        super().__init__(rows)
        self.next = next


async def record(
    ctx: Context, actor: str, action: str, target: str, detail: dict[str, Any] | None = None
) -> bool:
    """Record one action; False where the schema has no log."""
    if not await table_present(ctx, sql.AUDIT_TABLE):
        return False
    text = None if detail is None else json.dumps(detail, default=str)
    await retry.run(
        ctx, sql.record_audit(ctx.q), actor=actor, action=action, target=target, detail=text
    )
    return True


async def list_audit(ctx: Context, *, limit: int = 50, after: str | None = None) -> AuditPage:
    """The log newest first, ``limit`` rows (1 to 1,000) after the cursor ``after``."""
    check_count("limit", limit, MAX_AUDIT_PAGE)
    values: dict[str, Any] = {"limit": limit + 1}
    if after is not None:
        at, _, ident = after.partition("|")
        try:
            values.update(at=dt.datetime.fromisoformat(at), id=uuid.UUID(ident))
        except ValueError:
            raise ValidationError(
                f"after must be a cursor of the audit log, got {after!r}"
            ) from None
    if not await table_present(ctx, sql.AUDIT_TABLE):
        return AuditPage([], None)
    rows = await retry.run(ctx, sql.list_audit(ctx.q, after=after is not None), **values)
    entries = [
        AuditEntry(
            id=r["id"],
            at=r["at"],
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            detail=json.loads(r["detail"]) if isinstance(r["detail"], str) else r["detail"],
        )
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    last = entries[-1] if entries else None
    return AuditPage(entries, f"{last.at.isoformat()}|{last.id}" if more and last else None)


async def prune(ctx: Context) -> None:
    """Forget the rows past :data:`~qcore.sql.audit.AUDIT_RETENTION_DAYS` (maintenance's)."""
    if await table_present(ctx, sql.AUDIT_TABLE):
        await retry.run(ctx, sql.prune_audit(ctx.q), days=sql.AUDIT_RETENTION_DAYS)

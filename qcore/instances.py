"""The instance registry's reads: the ``Boss`` and pg-boss objects sharing the database
(their rows are written by each object's own registry service)."""

from __future__ import annotations

import uuid

from qcore import retry
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.job import Instance
from qcore.options import check_count
from qcore.sql import instances as sql

__all__ = ["MAX_INSTANCES_PAGE", "get_instances"]

#: the most rows one page of ``get_instances`` returns (pg-boss's bound)
MAX_INSTANCES_PAGE = 100_000


async def get_instances(
    ctx: Context, *, limit: int = 1000, after: uuid.UUID | str | None = None
) -> list[Instance]:
    """The registered instances, oldest start first, at most ``limit`` (1 to 100,000);
    ``after`` (the last id of the previous page) reads the next page, and raises
    ``ValidationError`` when that instance's row has been deleted since."""
    check_count("limit", limit, MAX_INSTANCES_PAGE)
    if after is not None:
        try:
            after = after if isinstance(after, uuid.UUID) else uuid.UUID(str(after))
        except ValueError:
            raise ValidationError(f"after must be an instance id (a UUID), got {after!r}") from None
    rows = await retry.run(
        ctx, sql.get_instances(ctx.q, after=after is not None), limit=limit, after=after
    )
    if after is not None and not rows:
        [found] = await retry.run(ctx, sql.instance_exists(ctx.q), id=after)
        if not found["present"]:
            raise ValidationError(
                f"after names instance {after}, whose row no longer exists (deleted since"
                " the previous page): start again from the first page"
            )
    return [Instance.from_row(r) for r in rows]

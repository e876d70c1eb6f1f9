"""The instance registry's verbs.

They list the ``Boss`` and pg-boss objects sharing the database (their rows are written by
each object's own registry service), and carry out the operator's pause, resume and
removal of a keyed server (qcore's own ``qcore_instance_key`` table).
"""

from __future__ import annotations

import uuid

from qcore import retry
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.job import Instance, InstancePage
from qcore.options import check_count, check_int, check_text
from qcore.sql import instances as sql
from qcore.sql.probes import table_in_schema

__all__ = [
    "INSTANCE_KEY_ENV",
    "MAX_INSTANCES_PAGE",
    "REMOVE_AFTER_MINUTES",
    "get_instances",
    "instance_key",
    "pause_instance",
    "remove_instance",
    "resume_instance",
]

#: the most rows one page of ``get_instances`` returns (pg-boss's bound)
MAX_INSTANCES_PAGE = 100_000
#: a key can be removed once no server with it has been seen for this long
REMOVE_AFTER_MINUTES = 30
#: where a server's instance key comes from when ``Boss(instance_key=...)`` is not given
INSTANCE_KEY_ENV = "QCORE_INSTANCE_KEY"
#: the longest instance key
MAX_INSTANCE_KEY_LENGTH = 200


def instance_key(value: object) -> str:
    """Check an instance key and return it.

    A key is a non-empty string of at most 200 characters that the database can store
    (no NUL, no lone surrogate).
    """
    if not isinstance(value, str) or not value:
        raise ValidationError(f"instance_key must be a non-empty string, got {value!r}")
    if len(value) > MAX_INSTANCE_KEY_LENGTH:
        raise ValidationError(
            f"instance_key must be at most {MAX_INSTANCE_KEY_LENGTH} characters,"
            f" got {value[:40]!r}..."
        )
    return check_text("instance_key", value)


async def _has_key_table(ctx: Context) -> bool:
    [row] = await retry.run(ctx, table_in_schema, schema=ctx.schema, name=sql.INSTANCE_KEY_TABLE)
    return bool(row["present"])


async def get_instances(
    ctx: Context,
    *,
    limit: int = 1000,
    after: uuid.UUID | str | None = None,
    offset: int | None = None,
) -> InstancePage:
    """The registered instances, oldest start first, a page at a time.

    At most ``limit`` (1 to 100,000), with ``total`` (the registry's row count);
    ``after`` (the last id of the previous page) reads the next page, and raises
    ``ValidationError`` when that instance's row has been deleted since; ``offset`` (0
    or more; not with ``after``) skips that many rows, for a numbered page.
    """
    check_count("limit", limit, MAX_INSTANCES_PAGE)
    if offset is not None:
        check_int("offset", offset)
        if after is not None:
            raise ValidationError("give after or offset, not both")
    if after is not None:
        try:
            after = after if isinstance(after, uuid.UUID) else uuid.UUID(str(after))
        except ValueError:
            raise ValidationError(f"after must be an instance id (a UUID), got {after!r}") from None
    statement = sql.get_instances(
        ctx.q, after=after is not None, offset=offset is not None, keys=await _has_key_table(ctx)
    )
    rows = await retry.run(ctx, statement, limit=limit, after=after, offset=offset)
    if after is not None and not rows:
        [found] = await retry.run(ctx, sql.instance_exists(ctx.q), id=after)
        if not found["present"]:
            raise ValidationError(
                f"after names instance {after}, whose row no longer exists (deleted since"
                " the previous page): start again from the first page"
            )
    if rows:
        total = int(rows[0]["total"])
    else:
        [row] = await retry.run(ctx, sql.count_instances(ctx.q))
        total = int(row["total"])
    return InstancePage([Instance.from_row(r) for r in rows], total)


async def pause_instance(ctx: Context, key: str) -> None:
    """Pause the server with ``key`` until it is resumed.

    It keeps heartbeating and claims nothing (from its next heartbeat); the pause is
    persisted, so a restart stays paused. A key no server has used yet is paused ahead
    of it.
    """
    await retry.run(
        ctx, sql.set_instance_paused(ctx.q, create=True), key=instance_key(key), paused=True
    )


async def resume_instance(ctx: Context, key: str) -> None:
    """Let the server with ``key`` claim again.

    It does so from its next heartbeat; ``ValidationError`` for a key no server has used or
    paused.
    """
    rows = await retry.run(
        ctx, sql.set_instance_paused(ctx.q, create=False), key=instance_key(key), paused=False
    )
    if not rows:
        raise ValidationError(f"no server has instance key {key!r}: nothing to resume")


async def remove_instance(ctx: Context, key: str) -> None:
    """Forget ``key``, its pause state with it.

    Refused with ``ValidationError`` while a server with it was seen within the last 30
    minutes, or for an unknown key. Jobs are never touched.
    """
    [row] = await retry.run(
        ctx, sql.remove_instance_key(ctx.q), key=instance_key(key), minutes=REMOVE_AFTER_MINUTES
    )
    if not row["found"]:
        raise ValidationError(f"no server has instance key {key!r}: nothing to remove")
    if not row["removed"]:
        raise ValidationError(
            f"the server with instance key {key!r} was seen {row['seen_minutes_ago']:.0f}"
            f" minutes ago; it can be removed once it has been gone {REMOVE_AFTER_MINUTES}"
            " minutes (stop it first)"
        )

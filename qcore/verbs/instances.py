"""The instance registry's verbs.

They list the ``Boss`` and pg-boss objects sharing the database (their rows are written by
each object's own registry service), and carry out the operator's pause, resume and
removal of a keyed server (qcore's own ``qcore_instance_key`` table).
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
from qcore.job import (
    Instance,
    InstanceCounts,
    InstanceListing,
    InstancePage,
    pause_acknowledged,
)
from qcore.options import LIST_LIMIT_MAX, check_count, check_int, check_text
from qcore.sql import instance_notices as notices_sql
from qcore.sql import instances as sql
from qcore.sql.locks import notify_channel
from qcore.verbs.schema import table_present

__all__ = [
    "INSTANCE_KEY_ENV",
    "MAX_INSTANCES_PAGE",
    "NOTICE_MARGIN_SECONDS",
    "REMOVE_AFTER_MINUTES",
    "InstanceNotice",
    "NoticeReader",
    "PauseState",
    "acknowledge_pause",
    "forget_notices",
    "get_instances",
    "instance_counts",
    "instance_key",
    "list_instances",
    "pause_instance",
    "read_pause",
    "remove_instance",
    "resume_instance",
]

#: the most rows one page of ``get_instances`` returns (pg-boss's bound)
MAX_INSTANCES_PAGE = LIST_LIMIT_MAX
#: a key can be removed once no server with it has been seen for this long
REMOVE_AFTER_MINUTES = 30
#: where a server's instance key comes from when ``Boss(instance_key=...)`` is not given
INSTANCE_KEY_ENV = "QCORE_INSTANCE_KEY"
#: the longest instance key
MAX_INSTANCE_KEY_LENGTH = 200
#: the most rows one page of ``list_instances`` returns
MAX_LISTING_PAGE = 1000
#: the longest ``search`` text
MAX_SEARCH_LENGTH = 200


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
    return await table_present(ctx, sql.INSTANCE_KEY_TABLE)


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


def _flag(name: str, value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValidationError(f"{name} must be True, False or None (either), got {value!r}")
    return value


def _listing_cursor(row: Instance) -> str:
    """The cursor of the page after ``row``: its rank (live first), heartbeat and id."""
    return f"{0 if row.live else 1}|{row.heartbeat_on.isoformat()}|{row.id}"


def _parse_listing_cursor(value: object) -> dict[str, object]:
    try:
        assert isinstance(value, str)
        dead, heard, last = value.split("|")
        parsed = {
            "after_dead": int(dead),
            "after_heard": dt.datetime.fromisoformat(heard),
            "after_id": uuid.UUID(last),
        }
        assert parsed["after_dead"] in (0, 1)
    except (AssertionError, ValueError):
        raise ValidationError(
            f"after must be the next cursor of a previous page, got {value!r}"
        ) from None
    return parsed


async def list_instances(
    ctx: Context,
    *,
    live: bool | None = None,
    keyed: bool | None = None,
    paused: bool | None = None,
    search: str | None = None,
    limit: int = 50,
    after: str | None = None,
) -> InstanceListing:
    """The registry as an operator reads it: live servers first, then the latest heard.

    Filters (None: either): ``live``; ``keyed``, a server with an instance key (False:
    the anonymous ones, qcore scripts and pg-boss instances); ``paused``; ``search``, a
    case-insensitive piece of the key, name or host. At most ``limit`` rows (1 to
    1,000); ``after`` is the previous page's ``next``. A page of a thousand-row registry
    costs one statement.
    """
    check_count("limit", limit, MAX_LISTING_PAGE)
    if search is not None:
        if not isinstance(search, str) or len(search) > MAX_SEARCH_LENGTH:
            raise ValidationError(
                f"search must be a string of at most {MAX_SEARCH_LENGTH} characters,"
                f" got {search!r:.60}"
            )
        search = check_text("search", search) or None
    cursor = {} if after is None else _parse_listing_cursor(after)
    statement = sql.list_instances(ctx.q, after=after is not None, keys=await _has_key_table(ctx))
    rows = await retry.run(
        ctx,
        statement,
        live=_flag("live", live),
        keyed=_flag("keyed", keyed),
        paused=_flag("paused", paused),
        search=search,
        limit=limit + 1,
        **cursor,
    )
    page = [Instance.from_row(r) for r in rows[:limit]]
    return InstanceListing(page, _listing_cursor(page[-1]) if len(rows) > limit else None)


async def instance_counts(ctx: Context) -> InstanceCounts:
    """The registry's counts (every row, live, keyed, anonymous live, paused) in one read."""
    [row] = await retry.run(ctx, sql.instance_counts(ctx.q, keys=await _has_key_table(ctx)))
    return InstanceCounts(**{k: int(v) for k, v in row.items()})


#: what an instance notice says was done to a key (each also an event of that name,
#: ``instance_<action>``)
NOTICE_ACTIONS = ("paused", "resumed", "removed")


@dataclass(frozen=True, slots=True)
class InstanceNotice:
    """A NOTIFY payload telling every listening server a key was paused, resumed or removed.

    ``by``: the instance id of the ``Boss`` that did it (it told its own listeners
    already). JSON with an ``instanceKey`` field: never read as a queue name (a job's
    payload is a queue name or ``{"queue": ..., "pattern": ...}``); pg-boss ignores it.
    """

    key: str
    action: str
    by: str | None = None

    def payload(self) -> str:
        body = {"instanceKey": self.key, "action": self.action, "by": self.by}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> InstanceNotice | None:
        """The notice ``payload`` holds (None: another payload)."""
        if not payload.startswith("{"):
            return None
        try:
            decoded = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(decoded, dict):
            return None
        key, action, by = decoded.get("instanceKey"), decoded.get("action"), decoded.get("by")
        if not isinstance(key, str) or action not in NOTICE_ACTIONS:
            return None
        return cls(key, action, by if isinstance(by, str) else None)


def _notice(ctx: Context, notice: InstanceNotice) -> dict[str, Any]:
    """The values that send ``notice`` with a statement (none where nothing listens)."""
    if not ctx.backend.capabilities.listen_notify:
        return {}
    return {"channel": notify_channel(ctx.schema_spec), "payload": notice.payload()}


async def _tells(ctx: Context) -> bool:
    """Whether a change can write its notice for servers that hear no NOTIFY (a schema
    installed before the notice table came has none until an instance migrates it)."""
    return await table_present(ctx, notices_sql.NOTICE_TABLE)


async def _set_paused(
    ctx: Context, key: str, paused: bool, *, own: bool, by: str | None
) -> list[Any]:
    """Store a pause or resume of ``key``, told to every server: at once to a listening
    one, at its next heartbeat to one that hears no NOTIFY."""
    told = _notice(ctx, InstanceNotice(key, "paused" if paused else "resumed", by))
    tell = await _tells(ctx)
    statement = sql.set_instance_paused(ctx.q, create=paused, own=own, notify=bool(told), tell=tell)
    return await retry.run(ctx, statement, key=key, paused=paused, by=by, **told)


async def pause_instance(
    ctx: Context, key: str, *, own: bool = False, by: str | None = None
) -> None:
    """Pause the server with ``key`` until it is resumed.

    It keeps heartbeating and claims nothing: at once where LISTEN/NOTIFY reaches it,
    else from its next poll. The pause is persisted, so a restart stays paused. A key no
    server has used yet is paused ahead of it. ``own``: the server itself asks (it
    acknowledges the pause as it is stored); ``by``: the asking instance's id, in the notice.
    """
    await _set_paused(ctx, instance_key(key), True, own=own, by=by)


async def resume_instance(
    ctx: Context, key: str, *, own: bool = False, by: str | None = None
) -> None:
    """Let the server with ``key`` claim again.

    As a pause, at once or from its next poll; ``ValidationError`` for a key no server
    has used or paused.
    """
    if not await _set_paused(ctx, instance_key(key), False, own=own, by=by):
        raise ValidationError(f"no server has instance key {key!r}: nothing to resume")


@dataclass(frozen=True, slots=True)
class PauseState:
    """A key's pause as stored: paused or not, when that was asked, when acknowledged."""

    paused: bool
    changed_on: dt.datetime | None
    acknowledged_on: dt.datetime | None

    @property
    def acknowledged(self) -> bool:
        """Whether the server has acknowledged the last change (or none was asked)."""
        return pause_acknowledged(self.changed_on, self.acknowledged_on)

    @classmethod
    def from_row(cls, row: Any) -> PauseState:
        return cls(bool(row["paused"]), row["changed_on"], row["acknowledged_on"])


async def read_pause(ctx: Context, key: str) -> PauseState:
    """The pause state of ``key`` (a key never seen nor paused: not paused)."""
    rows = await retry.run(ctx, sql.read_instance_pause(ctx.q), key=key)
    return PauseState.from_row(rows[0]) if rows else PauseState(False, None, None)


async def acknowledge_pause(ctx: Context, key: str, state: PauseState) -> None:
    """The server with ``key`` follows ``state``: acknowledge it, unless already done."""
    if not state.acknowledged:
        await retry.run(
            ctx, sql.acknowledge_instance_pause(ctx.q), key=key, changed_on=state.changed_on
        )


async def remove_instance(ctx: Context, key: str, *, by: str | None = None) -> int:
    """Forget ``key`` and its pause state, and delete its servers' rows from the registry.

    Refused with ``ValidationError`` while a server with it was seen within the last 30
    minutes, or for an unknown key. Jobs are never touched. Returns the rows deleted.
    Every server is told, as of a pause (``by``: the asking instance's id).
    """
    [row] = await retry.run(
        ctx,
        sql.remove_instance_key(ctx.q, tell=await _tells(ctx)),
        key=instance_key(key),
        minutes=REMOVE_AFTER_MINUTES,
        by=by,
    )
    if not row["found"]:
        raise ValidationError(f"no server has instance key {key!r}: nothing to remove")
    if not row["removed"]:
        raise ValidationError(
            f"the server with instance key {key!r} was seen {row['seen_minutes_ago']:.0f}"
            f" minutes ago; it can be removed once it has been gone {REMOVE_AFTER_MINUTES}"
            " minutes (stop it first)"
        )
    told = _notice(ctx, InstanceNotice(key, "removed", by))
    if told:
        await retry.run(ctx, notices_sql.notify_instances(), **told)
    return int(row["rows_removed"])


async def forget_notices(ctx: Context) -> None:
    """Forget the notices past their day (maintenance's)."""
    if await _tells(ctx):
        await retry.run(ctx, notices_sql.forget_notices(ctx.q))


#: how far back a reader of the notices looks before its last read: a change whose
#: transaction began up to this long before it committed is still heard
NOTICE_MARGIN_SECONDS = 60.0


class NoticeReader:
    """The notices written since the last read, each once: what a server that hears no
    NOTIFY learns of pauses, resumes and removals, read at its heartbeat.

    Its first read only marks where it starts (a change from before it is not news).
    Each read looks :data:`NOTICE_MARGIN_SECONDS` before the last and passes over the
    notices it has returned already.
    """

    def __init__(self) -> None:
        self._since: dt.datetime | None = None
        self._seen: dict[Any, dt.datetime] = {}  # notice id -> its moment, within the margin
        self._table = False  # the schema has the notice table (looked for until it has)

    def restart(self) -> None:
        """Forget where it was: the next read starts afresh (while NOTIFY was heard)."""
        self._since = None
        self._seen.clear()

    async def read(self, ctx: Context) -> list[InstanceNotice]:
        """The notices new since the last read, oldest first (none at the first read, or
        where the schema has no notice table yet)."""
        if not self._table:
            self._table = await _tells(ctx)
            if not self._table:
                return []
        first = self._since is None
        rows = await retry.run(
            ctx,
            notices_sql.read_notices(ctx.q),
            since=self._since,
            margin_seconds=NOTICE_MARGIN_SECONDS,
        )
        read_at: dt.datetime = rows[0]["read_at"]
        self._since = read_at - dt.timedelta(seconds=NOTICE_MARGIN_SECONDS)
        fresh = [r for r in rows if r["id"] is not None and r["id"] not in self._seen]
        self._seen = {k: at for k, at in self._seen.items() if at > self._since}
        self._seen.update((r["id"], r["at"]) for r in fresh)
        if first:
            return []
        return [
            InstanceNotice(str(r["instance_key"]), str(r["action"]), r["by"])
            for r in fresh
            if r["action"] in NOTICE_ACTIONS
        ]

"""Bloated job indexes, the statements that rebuild them, and the background rebuild.

Which indexes are bloated, the statements that rebuild them, and the background rebuild
of the supervise pass.

Autovacuum reclaims heap space but never shrinks a btree, so a job index keeps the
size of the largest backlog its queue ever held. An index counts as bloated when it
has at least ``min_pages`` pages, fewer than ``max_entries_per_page`` live entries per
page, and at least ``min_size_ratio`` times the pages its entries need (pg-boss 12.38's
rule; a healthy installation never rebuilds). Each bloated index raises an
``index_bloat`` warning whether or not it is rebuilt.

The background rebuild runs once per ``reindex_interval_seconds`` between all
instances (pg-boss's ``reindex_on`` claim), rebuilds with ``REINDEX INDEX
CONCURRENTLY`` only the indexes the connected role owns and that are at most
``max_index_bytes``, and first drops the invalid stub an interrupted rebuild left
(``<index>_ccnew``, ``<index>_ccold``). Any other invalid job index is rebuilt, unless
an unfinished background migration is building it.
Backends without the ``reindex`` capability (no btree bloat to reclaim, no REINDEX)
skip all of it: :func:`reindex_commands` returns nothing there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from qcore import backends, retry
from qcore.backend import Backend
from qcore.context import Context
from qcore.errors import ConfigError, ValidationError
from qcore.events import Events
from qcore.identifiers import schema_name
from qcore.options import check_number
from qcore.sql import reindex as sql

__all__ = [
    "INDEX_BLOAT",
    "BloatedIndex",
    "Reindex",
    "bloated_indexes",
    "check_number",
    "get_index_bloat_plans",
    "rebuild",
    "reindex_commands",
    "thresholds",
]

#: the type of the warning a bloated job index raises
INDEX_BLOAT = "index_bloat"
#: the names an interrupted ``REINDEX CONCURRENTLY`` leaves: the new index it was
#: building, or the old one it had swapped out (PostgreSQL numbers them on a clash)
STUB_NAME = re.compile(r"_cc(new|old)[0-9]*$")


@dataclass(frozen=True)
class Reindex:
    """When a job index counts as bloated (pg-boss's thresholds).

    At least ``min_pages`` pages of 8 kB, fewer than ``max_entries_per_page`` live
    entries per page, at least ``min_size_ratio`` times the size its entries need; never
    one over ``max_index_bytes`` (the background rebuild's cap).
    """

    min_pages: int = 128
    max_entries_per_page: float = 5.0
    min_size_ratio: float = 4.0
    max_index_bytes: int = 2**31

    def __post_init__(self) -> None:
        check_number("reindex min_pages", self.min_pages, 0, 2**31 - 1, integer=True)
        entries = self.max_entries_per_page
        if isinstance(entries, bool) or not (isinstance(entries, (int, float)) and entries > 0):
            raise ConfigError(f"reindex max_entries_per_page must be a number > 0, got {entries!r}")
        check_number("reindex min_size_ratio", self.min_size_ratio, 0, 1e9, integer=False)
        check_number("reindex max_index_bytes", self.max_index_bytes, 1, 2**63 - 1, integer=True)

    @classmethod
    def of(cls, value: object) -> Reindex | None:
        """Read the ``reindex`` option.

        True (the defaults), False (None: no rebuilds), or a mapping of thresholds.
        """
        if value is True:
            return cls()
        if value is False:
            return None
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ConfigError(
                    f"unknown reindex option {', '.join(map(str, unknown))};"
                    f" known: {', '.join(sorted(known))} (force is only for supervise())"
                )
            return cls(**value)
        raise ConfigError(f"reindex must be True, False or a mapping of thresholds, got {value!r}")


@dataclass(frozen=True)
class BloatedIndex:
    """A job index the check found: bloated, invalid (to rebuild), or a stub to drop."""

    index: str
    table: str
    pages: int
    entries: float
    bytes: int
    owned: bool
    stub: bool = False
    invalid: bool = False


def thresholds(options: Mapping[str, Any], base: Reindex | None = None) -> tuple[Reindex, bool]:
    """The thresholds ``options`` set over ``base``, and ``force``.

    Without ``base``, over the defaults; a bad one raises ``ValidationError`` (these are
    a verb's arguments).
    """
    given = dict(options)
    force = given.pop("force", False)
    if not isinstance(force, bool):
        raise ValidationError(f"force must be True or False, got {force!r}")
    try:
        merged = Reindex.of({**asdict(base or Reindex()), **given})
    except ConfigError as exc:
        raise ValidationError(str(exc)) from None
    assert merged is not None
    return merged, force


async def bloated_indexes(
    ctx: Context, limits: Reindex, *, force: bool = False
) -> list[BloatedIndex]:
    """The job indexes past ``limits``, the invalid ones, and the stubs of interrupted rebuilds.

    Every valid one with ``force``; in table then index order. An invalid index an
    unfinished background migration is building is left to it.
    """
    if not ctx.backend.capabilities.reindex:
        return []
    rows = await retry.run(ctx, sql.job_indexes(ctx.q), schema=ctx.schema)
    found: list[BloatedIndex] = []
    for r in rows:
        pages, entries = int(r["pages"]), float(r["entries"])
        name = str(r["index"])
        invalid = not r["valid"]
        index = BloatedIndex(
            index=name,
            table=str(r["table_name"]),
            pages=pages,
            entries=entries,
            bytes=int(r["bytes"]),
            owned=bool(r["owned"]),
            stub=invalid and STUB_NAME.search(name) is not None,
            invalid=invalid,
        )
        bloated = (
            pages >= max(limits.min_pages, 1)
            and entries / pages < limits.max_entries_per_page
            and pages >= limits.min_size_ratio * int(r["needed_pages"])
        )
        if invalid or force or bloated:
            found.append(index)
    building = [i for i in found if i.invalid and not i.stub]
    if building:
        tables = sorted({i.table for i in building})
        rows = await retry.run(ctx, sql.unfinished_migrations(ctx.q), tables=tables)
        commands = [str(r["command"]) for r in rows]

        def migrating(index: str) -> bool:
            word = re.compile(rf"(?<![\w$]){re.escape(index)}(?![\w$])")
            return any(word.search(command) for command in commands)

        found = [i for i in found if not (i.invalid and not i.stub and migrating(i.index))]
    return found


def get_index_bloat_plans(
    schema: str = "pgboss", backend: Backend | str = "postgres", **given: Any
) -> str:
    """The bloat check of ``schema``'s job indexes as SQL to run by hand, no connection
    needed: the query the supervise pass reads, with the rule it applies and
    the thresholds ``given`` (:class:`Reindex`'s ``min_pages``, ``max_entries_per_page``,
    ``min_size_ratio``; pg-boss's defaults; a bad one is a ``ValidationError`` as for
    :meth:`~qcore.Boss.get_reindex_commands`) written into it. PostgreSQL and the
    engines built on it only: ``ConfigError`` for a backend without index rebuilds (no
    btree bloat to read).
    """
    chosen = backends.get(backend)
    if not chosen.capabilities.reindex:
        raise ConfigError(
            f"the {chosen.name} backend has no index rebuilds: there is no bloat check to plan"
        )
    if "force" in given:
        raise ValidationError("force is for a rebuild, not for the bloat check's plan")
    limits, _ = thresholds(given)
    return sql.bloat_plan(
        schema_name(schema),
        min_pages=limits.min_pages,
        max_entries_per_page=limits.max_entries_per_page,
        ratio=limits.min_size_ratio,
    )


def _statements(ctx: Context, found: list[BloatedIndex]) -> list[str]:
    stubs = [sql.drop_stub(ctx.q, i.index) for i in found if i.stub]
    return stubs + [sql.rebuild(ctx.q, i.index) for i in found if not i.stub]


async def reindex_commands(
    ctx: Context, limits: Reindex, *, force: bool, capped: bool
) -> list[str]:
    """The statements that rebuild the bloated job indexes, stubs dropped first.

    Each must run outside a transaction. ``capped``: leave out indexes over
    ``max_index_bytes`` (only when the caller gave that threshold).
    """
    found = await bloated_indexes(ctx, limits, force=force)
    if capped:
        found = [i for i in found if i.stub or i.bytes <= limits.max_index_bytes]
    return _statements(ctx, found)


async def rebuild(
    ctx: Context,
    limits: Reindex,
    *,
    rebuilding: bool,
    interval_seconds: float | None,
    force: bool,
    events: Events | None,
) -> list[str]:
    """The supervise pass's check and rebuild of bloated indexes; the statements it ran.

    It warns ``index_bloat`` for each index past ``limits``, then, when ``rebuilding``
    and this instance claims the interval (not needed with ``force`` or
    ``interval_seconds`` None), rebuilds what it owns within the cap.
    """
    if not ctx.backend.capabilities.reindex:
        return []
    found = await bloated_indexes(ctx, limits, force=force)
    if events is not None:
        for i in found:
            if not i.invalid and not force:
                events.warn(
                    INDEX_BLOAT,
                    f"job index {i.index} on {i.table} is bloated: {i.pages} pages for"
                    f" {i.entries:.0f} live entries",
                    index=i.index,
                    table=i.table,
                    pages=i.pages,
                    entries=i.entries,
                    bytes=i.bytes,
                )
    if not rebuilding or not found:
        return []
    claiming = interval_seconds is not None and not force
    if claiming and not await retry.run(ctx, sql.claim_reindex(ctx.q), seconds=interval_seconds):
        return []
    mine = [i for i in found if i.owned and (i.stub or i.bytes <= limits.max_index_bytes)]
    ran: list[str] = []
    for statement in _statements(ctx, mine):
        try:
            await ctx.db.execute(statement)  # not through retry: never inside a transaction
        except Exception as exc:  # a caller's transaction, a privilege: report, go on
            if events is not None:
                events.emit("error", exc)
            continue
        ran.append(statement)
    return ran

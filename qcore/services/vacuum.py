"""The vacuum checks of the supervise pass (``monitor_vacuum``).

Is vacuum keeping up with the job tables?

One measurement, two diagnoses with opposite fixes. A job table is *over budget* when
its dead rows pass the point PostgreSQL itself would vacuum it (``threshold +
scale_factor × live rows``, the table's storage parameters over the server's). Two
consecutive passes then decide:

- ``xmin_horizon``: a vacuum ran on the table between them and the dead rows did not
  fall (it tried and reclaimed nothing), and something old enough to explain it holds
  the horizon back: a backend whose transaction was open before that vacuum, a
  replication slot, a standby with ``hot_standby_feedback``, a prepared transaction.
  The warning names the holder (never its query text) and lists the sources this role
  could not read (``unreadable_sources``), so a partial answer never reads as clean.
- ``autovacuum_disabled``: the table has ``autovacuum_enabled = false``, no vacuum ran
  between the passes, and the dead rows grew (a manual vacuum schedule that keeps up
  stays quiet).

The first pass over budget only records; each diagnosis warns once per episode (until
no table is over budget for it). The evidence is this instance's own, kept by its
supervisor. Backends without ``vacuum_stats`` skip the checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcore import retry
from qcore.context import Context
from qcore.errors import DatabaseError
from qcore.events import Events
from qcore.sql import vacuum as sql

__all__ = ["AUTOVACUUM_DISABLED", "XMIN_HORIZON", "VacuumWatch"]

XMIN_HORIZON = "xmin_horizon"
AUTOVACUUM_DISABLED = "autovacuum_disabled"

#: how each horizon holder is named in a warning
_HOLDERS = {
    "backends": "a backend holding an open transaction",
    "slots": "a replication slot",
    "slots_catalog": "a replication slot (catalog xmin)",
    "standbys": "a standby with hot_standby_feedback enabled",
    "prepared": "a prepared transaction",
}


#: what a warning says of the table with the most dead rows
_REPORTED = ("table", "live", "dead", "budget", "vacuum_age_seconds")


@dataclass
class _Seen:
    dead: int
    last_vacuum: float


@dataclass
class VacuumWatch:
    """The evidence of earlier passes, per job table, and the once-per-episode latches."""

    seen: dict[str, _Seen] = field(default_factory=dict)
    warned_horizon: bool = False
    warned_disabled: bool = False
    #: the horizon sources this role can read (narrowed after a refusal)
    sources: tuple[str, ...] = tuple(sql.HORIZON_SOURCES)

    async def check(self, ctx: Context, events: Events | None) -> list[str]:
        """One observation; the warnings it raised (their types)."""
        if not ctx.backend.capabilities.vacuum_stats:
            return []
        rows = await retry.run(ctx, sql.job_table_garbage(ctx.q), schema=ctx.schema)
        present = {str(r["table_name"]) for r in rows}
        for gone in set(self.seen) - present:  # a partition dropped since
            del self.seen[gone]
        stuck: list[dict[str, Any]] = []
        unvacuumed: list[dict[str, Any]] = []
        over_enabled = over_disabled = False
        for r in rows:
            name, live, dead = str(r["table_name"]), int(r["live"]), int(r["dead"])
            budget = float(r["threshold"]) + float(r["scale_factor"]) * live
            last = float(r["last_vacuum"] or 0)
            if dead <= budget:
                self.seen.pop(name, None)
                continue
            disabled = r["autovacuum_enabled"] is False
            over_disabled |= disabled
            over_enabled |= not disabled
            before = self.seen.get(name)
            self.seen[name] = _Seen(dead, last)
            if before is None:
                continue
            table = {
                "table": name,
                "live": live,
                "dead": dead,
                "budget": round(budget),
                "vacuum_age_seconds": r["vacuum_age_seconds"],
                "last_vacuum": last,
            }
            if disabled and last == before.last_vacuum and dead > before.dead:
                unvacuumed.append(table)
            elif not disabled and last > before.last_vacuum and dead >= before.dead:
                stuck.append(table)
        self.warned_horizon &= over_enabled
        self.warned_disabled &= over_disabled
        raised = []
        if unvacuumed and not self.warned_disabled:
            self.warned_disabled = True
            raised.append(AUTOVACUUM_DISABLED)
            if events is not None:
                _warn_disabled(events, unvacuumed)
        if stuck and not self.warned_horizon and await self._warn_horizon(ctx, events, stuck):
            self.warned_horizon = True
            raised.append(XMIN_HORIZON)
        return raised

    async def _warn_horizon(
        self, ctx: Context, events: Events | None, stuck: list[dict[str, Any]]
    ) -> bool:
        since = max(t["last_vacuum"] for t in stuck)
        row, unreadable = await self._horizon(ctx, since)
        ages = {s: int(row[s]) for s in self.sources if row.get(s) is not None}
        if not ages:  # garbage no holder explains: a real problem, but not this one
            return False
        source = max(ages, key=lambda s: ages[s])
        worst = max(stuck, key=lambda t: t["dead"])
        holder = row.get("holder") if source == "backends" else None
        who = _HOLDERS[source]
        if holder:
            who += (
                f" (pid {holder['pid']}, application {holder['application_name']!r},"
                f" {holder['state']})"
            )
        if events is not None:
            events.warn(
                XMIN_HORIZON,
                f"vacuum cannot reclaim the job tables' dead rows: {who} holds the horizon"
                f" {ages[source]} transactions back; {worst['table']} has {worst['dead']} dead"
                f" rows that a vacuum {worst['vacuum_age_seconds']} s ago could not reclaim",
                source=source,
                holder=holder,
                transactions=ages[source],
                tables=[t["table"] for t in stuck],
                unreadable_sources=unreadable,
                **{k: worst[k] for k in _REPORTED},
            )
        return True

    async def _horizon(self, ctx: Context, since: float) -> tuple[dict[str, Any], list[str]]:
        """The horizon row from the sources this role can read, and those it cannot."""
        try:
            rows = await retry.run(ctx, sql.horizon(self.sources), since=since)
        except DatabaseError:  # one unreadable catalog fails the whole statement
            readable = []
            for source in self.sources:
                try:
                    await retry.run(ctx, sql.horizon((source,)), since=since)
                except DatabaseError:
                    continue
                readable.append(source)
            self.sources = tuple(readable)
            if not readable:
                return {}, list(sql.HORIZON_SOURCES)
            rows = await retry.run(ctx, sql.horizon(self.sources), since=since)
        unreadable = [s for s in sql.HORIZON_SOURCES if s not in self.sources]
        return dict(rows[0]) if rows else {}, unreadable


def _warn_disabled(events: Events, unvacuumed: list[dict[str, Any]]) -> None:
    worst = max(unvacuumed, key=lambda t: t["dead"])
    age = worst["vacuum_age_seconds"]
    since = "has never been vacuumed" if age is None else f"was last vacuumed {age} s ago"
    events.warn(
        AUTOVACUUM_DISABLED,
        f"nothing vacuums {worst['table']}: it has autovacuum_enabled = false, holds"
        f" {worst['dead']} dead rows and is still growing, and {since} (PostgreSQL would"
        f" vacuum it at {worst['budget']})",
        tables=[t["table"] for t in unvacuumed],
        **{k: worst[k] for k in _REPORTED},
    )

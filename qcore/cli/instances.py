"""``qcore instances`` and the commands that pause, resume and remove a keyed server.

``qcore instances`` shows the instances registered in a database, as a table; ``qcore
pause-instance KEY``, ``qcore resume-instance KEY``, ``qcore remove-instance
--instance-key KEY`` act on the servers with an instance key.

The table has one line per server with an instance key (``--all`` adds the anonymous
ones: qcore scripts and pg-boss instances; ``--anonymous`` shows only those), live ones
first, then the latest heard; ``--live``, ``--paused`` and ``--search TEXT`` (a piece of
the key, name or host) narrow it, and a last line counts the whole registry. Each line
tells whether it is live, its name, instance key, its pause (yes; requested or resuming
until the server acknowledges the change; no), host and
pid, the CPU cores it used and its memory against its container's limit at its last
heartbeat, its worker loops, its crash restarts, the jobs its key's servers have claimed
(a keyed server) and how long ago it was heard from. The database is
``--url``, ``$QCORE_DATABASE_URL`` or ``$DATABASE_URL``, libpq's ``PG*`` variables, or
``[tool.qcore]`` in pyproject.toml; the table writes nothing (no row of its own, no
migration). Exit status 0; 1 when the database cannot be read or the change is refused
(a server seen too recently to remove, an unknown key); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from qcore.cli.connection import Target, add_database_arguments, observer, run_command
from qcore.cli.table import format_table
from qcore.job import Instance, InstanceCounts

__all__ = ["add_parser", "format_counts", "format_instances", "run"]

#: the ``paused`` column: yes, or asked and not yet read by the server, or no
PAUSE_COLUMN = {
    "paused": "yes",
    "pause requested": "requested",
    "resume requested": "resuming",
    "": "no",
}

COLUMNS = (
    "live",
    "name",
    "key",
    "paused",
    "host",
    "pid",
    "cpu",
    "memory",
    "workers",
    "crashes",
    "jobs",
    "heard",
)


def add_parser(commands: Any) -> None:
    """The arguments of ``qcore instances`` and of the pause, resume and remove commands."""
    instances = commands.add_parser(
        "instances",
        help="list the instances registered in a database",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_database_arguments(instances)
    instances.add_argument("--live", action="store_true", help="only the live instances")
    instances.add_argument("--paused", action="store_true", help="only the paused servers")
    shown = instances.add_mutually_exclusive_group()
    shown.add_argument("--all", action="store_true", help="the anonymous instances too")
    shown.add_argument("--anonymous", action="store_true", help="only the anonymous ones")
    instances.add_argument("--search", metavar="TEXT", help="a piece of the key, name or host")
    instances.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="at most N lines (default 1000)"
    )
    instances.set_defaults(run=run)
    for verb, what in (("pause", "stop claiming"), ("resume", "claim again")):
        command = commands.add_parser(
            f"{verb}-instance", help=f"make the server with an instance key {what}"
        )
        command.add_argument("instance_key", metavar="KEY", help="the server's instance key")
        add_database_arguments(command)
        command.set_defaults(run=_change, verb=f"{verb}_instance")
    remove = commands.add_parser(
        "remove-instance",
        help="remove a server's rows, key and pause state (once it has been gone 30 minutes)",
    )
    remove.add_argument("--instance-key", required=True, metavar="KEY")
    add_database_arguments(remove)
    remove.set_defaults(run=_change, verb="remove_instance")


def _megabytes(value: Any) -> str:
    return "-" if value is None else f"{int(value) / 2**20:,.0f}M"


def _row(instance: Instance, now: dt.datetime) -> tuple[str, ...]:
    metrics = instance.metrics or {}
    cpu = metrics.get("cpu")
    limit = metrics.get("cpuLimit")
    used = (
        metrics.get("memoryUsed") if metrics.get("memoryUsed") is not None else metrics.get("rss")
    )
    heard = int((now - instance.heartbeat_on).total_seconds())
    return (
        "yes" if instance.live else ("stopped" if instance.stopped_on else "quiet"),
        instance.name or "-",
        instance.instance_key or "-",
        PAUSE_COLUMN[instance.pause_status],
        instance.host,
        str(instance.pid),
        "-" if cpu is None else f"{cpu:.2f}/{limit:g}" if limit else f"{cpu:.2f}",
        f"{_megabytes(used)}/{_megabytes(metrics.get('memoryLimit'))}" if metrics else "-",
        str(sum(int(w.get("localConcurrency", 0)) for w in instance.workers)),
        str(instance.crash_restarts),
        str(instance.jobs_processed) if instance.instance_key else "-",
        f"{max(0, heard)}s ago",
    )


def format_instances(instances: list[Instance], now: dt.datetime) -> str:
    """The table ``qcore instances`` prints."""
    return format_table(COLUMNS, [_row(i, now) for i in instances])


def format_counts(counts: InstanceCounts, shown: int) -> str:
    """The line under the table: what the whole registry holds, and what is hidden."""
    return (
        f"{shown} shown; the registry holds {counts.total:,} rows, {counts.live:,} live:"
        f" {counts.keyed_live:,} keyed ({counts.paused:,} paused),"
        f" {counts.anonymous_live:,} anonymous (shown with --all)"
    )


async def _read(
    target: Target, args: argparse.Namespace
) -> tuple[list[Instance], InstanceCounts, dt.datetime]:
    keyed = None if args.all else not args.anonymous
    async with observer(target) as boss:
        instances: list[Instance] = []
        after = None
        while len(instances) < args.limit:
            page = await boss.list_instances(
                live=True if args.live else None,
                keyed=keyed,
                paused=True if args.paused else None,
                search=args.search,
                limit=min(1000, args.limit - len(instances)),
                after=after,
            )
            instances.extend(page)
            if page.next is None:
                break
            after = page.next
        counts = await boss.instance_counts()
        [row] = await boss.db.execute(f"SELECT {boss.context().q}.job_now() AS now")
    return instances, counts, row["now"]


def _change(args: argparse.Namespace) -> int:
    """``pause-instance``, ``resume-instance``, ``remove-instance``."""

    async def apply(target: Target) -> int:
        async with observer(target) as boss:
            removed = await getattr(boss, args.verb)(args.instance_key)
        done = f"{args.verb.removesuffix('_instance')}d: {args.instance_key}"
        if args.verb == "remove_instance":
            done += f" ({removed} registry row{'' if removed == 1 else 's'} deleted)"
        print(done)
        return 0

    return run_command(args, apply)


def run(args: argparse.Namespace) -> int:
    async def show(target: Target) -> int:
        instances, counts, now = await _read(target, args)
        print(format_instances(instances, now))
        print(format_counts(counts, len(instances)))
        return 0

    return run_command(args, show)

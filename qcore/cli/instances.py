"""``qcore instances``: the instances registered in a database, as a table.

One line per row of the registry, oldest start first: whether it is live, its name,
host and pid, the CPU cores it used and its memory against its container's limit at
its last heartbeat, its workers, its crash restarts and how long ago it was heard from.
The database is ``--url`` or ``$DATABASE_URL``; nothing is written (no row of its own,
no migration). Exit status 0; 1 when the database cannot be read; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from typing import Any

from qcore.boss import Boss
from qcore.errors import QcoreError
from qcore.job import Instance

__all__ = ["add_parser", "format_table", "run"]

COLUMNS = ("live", "name", "host", "pid", "cpu", "memory", "workers", "crashes", "heard")


def add_parser(commands: Any) -> None:
    """``qcore instances``'s arguments."""
    instances = commands.add_parser(
        "instances",
        help="list the instances registered in a database",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    instances.add_argument("--url", help="the database (default: $DATABASE_URL)")
    instances.add_argument("--schema", default="pgboss", help="the schema (default pgboss)")
    instances.add_argument("--live", action="store_true", help="only the live instances")
    instances.set_defaults(run=run)


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
        instance.host,
        str(instance.pid),
        "-" if cpu is None else f"{cpu:.2f}/{limit:g}" if limit else f"{cpu:.2f}",
        f"{_megabytes(used)}/{_megabytes(metrics.get('memoryLimit'))}" if metrics else "-",
        str(sum(int(w.get("localConcurrency", 0)) for w in instance.workers)),
        str(instance.crash_restarts),
        f"{max(0, heard)}s ago",
    )


def format_table(instances: list[Instance], now: dt.datetime) -> str:
    """The table ``qcore instances`` prints (columns padded to their widest cell)."""
    rows = [COLUMNS, *(_row(i, now) for i in instances)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


async def _read(url: str, schema: str) -> tuple[list[Instance], dt.datetime]:
    boss = Boss(
        url,
        schema=schema,
        migrate=False,
        supervise=False,
        schedule=False,
        register_instance=False,
        max=1,
    )
    async with boss:
        instances = await boss.get_instances(limit=100_000)
        [row] = await boss.db.execute(f"SELECT {boss.context().q}.job_now() AS now")
    return instances, row["now"]


def run(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("DATABASE_URL")
    if not url:
        print("qcore instances: give --url or set DATABASE_URL", file=sys.stderr)
        return 2
    try:
        instances, now = asyncio.run(_read(url, args.schema))
    except QcoreError as exc:
        print(f"qcore instances: {exc}", file=sys.stderr)
        return 1
    if args.live:
        instances = [i for i in instances if i.live]
    print(format_table(instances, now))
    return 0

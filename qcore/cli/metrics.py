"""``qcore metrics``: metrics history from the command line.

``qcore metrics record`` runs the recorder in this process (every ``--interval``
seconds until interrupted; ``--once``: one tick; its retention ``--retention-days`` or
``--retain-minutes``/``--retain-hours``/``--retain-days``, ``--no-latency`` for counts
only: :mod:`qcore.cli.history`), ``stats`` prints the store's
footprint by tier and queue, ``purge [QUEUE] [--before DATE] --yes`` deletes history,
``index [QUEUE ...] [--run]`` prints (or runs) the statements that give queues the
index their counts need. The store lives in ``--store-schema`` (default: the queues'
schema), or in Redis with ``--redis URL`` (``--redis-prefix``, ``--redis-cluster``).
Wherever it lives, the history is that of the job schema ``--schema`` (its queues are
keyed ``pgboss:<schema>:`` in the store), so every verb reads and deletes the same rows
whatever ``--store-schema`` is. A purge says how many rows the store deleted.
Exit status 0; 1 when the database cannot be read or qcore refuses; 2 for a usage error
(a purge without ``--yes``, a value out of range, ``--redis`` with ``--store-schema``);
3 when a purge found nothing to delete.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import sys
from typing import Any

from qcore.cli import history
from qcore.cli.connection import Target, add_database_arguments, open_context, run_command
from qcore.cli.table import format_table, print_json
from qcore.context import Context
from qcore.errors import ValidationError
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsStore,
    PgBossQueues,
    PostgresMetricsStore,
    RedisMetricsStore,
)

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    metrics = commands.add_parser(
        "metrics",
        help="metrics history: record it, see its footprint, purge it, check its index",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    verbs = metrics.add_subparsers(dest="verb", metavar="VERB", required=True)
    record = verbs.add_parser("record", help="run the recorder in this process")
    history.add_recorder_arguments(record)
    record.add_argument("--once", action="store_true", help="one tick, then exit")
    stats = verbs.add_parser("stats", help="rows and bytes by tier and queue")
    stats.add_argument("--json", action="store_true")
    purge = verbs.add_parser("purge", help="delete history (one queue's, or before a day)")
    purge.add_argument("queue", nargs="?", default=None)
    purge.add_argument("--before", default=None, metavar="YYYY-MM-DD")
    purge.add_argument("--yes", action="store_true", help="really delete")
    index = verbs.add_parser("index", help="the index the counts need, for queues lacking it")
    index.add_argument("queues", nargs="*", metavar="QUEUE")
    index.add_argument(
        "--run", dest="build", action="store_true", help="build it (without blocking writes)"
    )
    for verb in (record, stats, purge, index):
        add_database_arguments(verb)
        history.add_store_arguments(verb)
        verb.set_defaults(run=run)


def _where(ctx: Context, store: MetricsStore) -> str:
    """Whose history, in which store: for what a verb prints."""
    if isinstance(store, PostgresMetricsStore):
        return f"schema {ctx.schema!r} in the store in schema {store.schema!r}"
    if isinstance(store, RedisMetricsStore):
        return f"schema {ctx.schema!r} in the Redis store {store.prefix!r}"
    return f"schema {ctx.schema!r}"


async def _record(ctx: Context, store: MetricsStore, args: argparse.Namespace) -> int:
    recorder = history.recording_from(args).recorder(store, PgBossQueues(ctx))
    if args.once:
        changed = await recorder.tick()
        print(f"recorded: {changed} queue-minute(s) changed")
        return 0
    await recorder.start()
    try:
        await asyncio.Event().wait()  # until interrupted
    finally:
        await recorder.stop()
    return 0


async def _stats(ctx: Context, store: MetricsStore, args: argparse.Namespace) -> int:
    usage = await MetricsHistoryAdmin(store).stats()
    if args.json:
        print_json(dataclasses.asdict(usage))
        return 0
    rows = [
        (
            u.queue or "",
            str(u.rows),
            f"{u.bytes:,}",
            *(str(u.tiers[t].rows) if t in u.tiers else "0" for t in ("minute", "hour", "day")),
            f"{u.oldest_day or '-'}..{u.newest_day or '-'}",
        )
        for u in usage.queues
    ]
    print(format_table(("queue", "rows", "bytes", "minute", "hour", "day", "days"), rows))
    estimate = " (estimated from row sizes)" if usage.estimated else ""
    print(f"total: {usage.rows} rows, {usage.bytes:,} bytes{estimate}")
    if not usage.rows:
        print(f"no history rows for {_where(ctx, store)}")
    return 0


async def _purge(ctx: Context, store: MetricsStore, args: argparse.Namespace) -> int:
    before = None
    if args.before is not None:
        try:
            before = dt.date.fromisoformat(args.before)
        except ValueError as exc:
            raise ValidationError(
                f"--before must be a date YYYY-MM-DD, got {args.before!r}"
            ) from exc
    what = f"queue {args.queue!r}" if args.queue else "every queue"
    what += f", buckets ended before {before}" if before else ", all of it"
    if not args.yes:
        print(f"qcore metrics purge: this deletes the metrics history of {what}; add --yes")
        return 2
    deleted = await MetricsHistoryAdmin(store).purge(args.queue, before=before)
    if not deleted:
        print(f"nothing to purge: no history rows for {_where(ctx, store)} ({what})")
        return 3
    rows = "row" if deleted == 1 else "rows"
    print(f"deleted {deleted} {rows} of the metrics history for {_where(ctx, store)} ({what})")
    return 0


async def _index(ctx: Context, store: MetricsStore, args: argparse.Namespace) -> int:
    sources = PgBossQueues(ctx)
    indexed = await sources.indexed()
    wanted = args.queues or sorted(indexed)
    unknown = [q for q in wanted if q not in indexed]
    if unknown:
        raise ValidationError(f"no such queue: {', '.join(unknown)}")
    lacking = [q for q in wanted if not indexed[q]]
    if not lacking:
        print("every queue has the index its counts need")
        return 0
    if args.build:
        for statement in await sources.build_indexes(lacking):
            print(f"built: {statement}")
    else:
        print("\n".join(s + ";" for s in await sources.index_statements(lacking)))
    return 0


_VERBS = {"record": _record, "stats": _stats, "purge": _purge, "index": _index}


def run(args: argparse.Namespace) -> int:
    try:  # the options' own checks, before anything connects
        history.check_store(args)
        if args.verb == "record":
            history.recording_from(args)
    except history.UsageError as exc:
        print(f"qcore metrics: {exc}", file=sys.stderr)
        return 2

    async def work(target: Target) -> int:
        async with open_context(target) as ctx:
            store = history.store_from(args, ctx)
            try:
                return await _VERBS[args.verb](ctx, store, args)
            finally:
                await store.close()

    return run_command(args, work)

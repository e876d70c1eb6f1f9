"""``qcore reindex``: rebuild the bloated job indexes now, or print what it would run.

The supervise pass's check and rebuild (:mod:`qcore.verbs.reindex`), run once by hand
outside its shared interval: each bloated index rebuilt with ``REINDEX CONCURRENTLY``
(the stub of an interrupted rebuild dropped first), ``--force`` every job index,
``--dry-run`` only the statements. A backend without index rebuilds has nothing to do.
"""

from __future__ import annotations

import argparse
from typing import Any

from qcore.cli.connection import Target, add_database_arguments, open_context, run_command
from qcore.verbs.reindex import rebuild, reindex_commands, thresholds

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    command = commands.add_parser(
        "reindex", help="rebuild the bloated job indexes now (--dry-run: print the SQL)"
    )
    add_database_arguments(command)
    command.add_argument("--dry-run", action="store_true", help="print the SQL, change nothing")
    command.add_argument("--force", action="store_true", help="every job index, bloated or not")
    command.add_argument("--min-pages", type=int, help="ignore indexes smaller (8 kB pages)")
    command.add_argument(
        "--max-entries-per-page", type=float, help="bloated below this many live entries a page"
    )
    command.set_defaults(run=lambda args: run_command(args, lambda t: _reindex(t, args)))


async def _reindex(target: Target, args: argparse.Namespace) -> int:
    given = {"min_pages": args.min_pages, "max_entries_per_page": args.max_entries_per_page}
    limits, _ = thresholds({k: v for k, v in given.items() if v is not None})
    async with open_context(target) as ctx:
        if args.dry_run:
            statements = await reindex_commands(ctx, limits, force=args.force, capped=False)
        else:
            statements = await rebuild(
                ctx, limits, rebuilding=True, interval_seconds=None, force=args.force, events=None
            )
    for statement in statements:
        print(f"{statement};")
    if not args.dry_run:
        print(f"rebuilt {len(statements)} index(es) in schema {target.schema!r}")
    return 0

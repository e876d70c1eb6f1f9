"""The schema commands:

- ``qcore version``: the schema version installed and the one this qcore installs, the
  migrations between them, and the async migrations' state;
- ``qcore create [--dry-run]``: install the schema (``--dry-run``: print its SQL);
- ``qcore migrate [--dry-run]``: migrate an older schema (``--dry-run``: print the SQL);
- ``qcore rollback [--dry-run]``: take the schema back one version (46 to 45, as
  pg-boss 12.38's rollback does; ``--dry-run``: print the SQL);
- ``qcore plans create|migrate|rollback``: the SQL of any of them, without a connection.

Each takes ``--url``, ``--schema``, ``--backend``; ``version`` also ``--json``. Exit
status 0; 1 when the database refuses or qcore has no migration for the installed
version; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from qcore.cli.connection import Target, add_database_arguments, open_context, run_command
from qcore.cli.table import print_json
from qcore.context import Context
from qcore.errors import QcoreError
from qcore.sql.probes import table_in_schema
from qcore.verbs.bam import get_bam_status
from qcore.verbs.schema import (
    SCHEMA_VERSION,
    get_construction_plans,
    get_migration_plans,
    get_rollback_plans,
    get_uninstall_plans,
    install_or_migrate,
    rollback,
    schema_version,
)

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    version = commands.add_parser("version", help="the schema version installed, and what is due")
    add_database_arguments(version)
    version.add_argument("--json", action="store_true", help="print JSON")
    version.set_defaults(run=_connected(_version))
    for name, what, action in (
        ("create", "install the schema", _create),
        ("migrate", "migrate the schema", _migrate),
        ("rollback", "roll the schema back one version", _rollback),
    ):
        command = commands.add_parser(name, help=what)
        add_database_arguments(command)
        command.add_argument("--dry-run", action="store_true", help="print the SQL, change nothing")
        command.set_defaults(run=_connected(action))
    plans = commands.add_parser(
        "plans",
        help="the SQL of an install, a migration, a rollback or an uninstall, offline",
    )
    # construct: pg-boss's name for create
    plans.add_argument("which", choices=["create", "construct", "migrate", "rollback", "uninstall"])
    plans.add_argument("--schema", default="pgboss", help="the schema (default pgboss)")
    plans.add_argument("--backend", default="postgres", help="the backend (default postgres)")
    plans.add_argument(
        "--from-version",
        type=int,
        default=SCHEMA_VERSION,
        help="migrate, rollback: the installed version",
    )
    plans.set_defaults(run=_plans)


def _connected(
    action: Callable[[Target, argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return run_command(args, lambda target: action(target, args))

    return run


async def _version(target: Target, args: argparse.Namespace) -> int:
    async with open_context(target) as ctx:
        installed = await schema_version(ctx)
        pending: list[int] | str = []
        if installed is not None and installed < SCHEMA_VERSION:
            try:
                plans = get_migration_plans(target.schema, installed, SCHEMA_VERSION, ctx.backend)
                pending = list(range(installed + 1, SCHEMA_VERSION + 1)) if plans else []
            except QcoreError as exc:
                pending = str(exc)
        [bam] = await ctx.db.execute(
            table_in_schema.sql, table_in_schema.bind(schema=ctx.schema, name="bam")
        )
        statuses = await get_bam_status(ctx) if bam["present"] else []
    counts = {s.status: s.count for s in statuses}
    report = {
        "schema": target.schema,
        "installed": installed,
        "latest": SCHEMA_VERSION,
        "pending_migrations": pending,
        "bam": counts,
    }
    if args.json:
        print_json(report)
    else:
        print(
            f"schema {target.schema!r}: installed {installed or 'nothing'}, latest {SCHEMA_VERSION}"
        )
        if isinstance(pending, str):
            print(f"  migrations: {pending}")
        elif pending:
            print(f"  migrations due: {', '.join(map(str, pending))}")
        print("  async migrations: " + (", ".join(f"{k} {v}" for k, v in counts.items()) or "none"))
    return 0


async def _create(target: Target, args: argparse.Namespace) -> int:
    if args.dry_run:
        print(get_construction_plans(target.backend, target.schema))
        return 0
    async with open_context(target) as ctx:
        if await schema_version(ctx) is not None:
            print(f"schema {target.schema!r} is installed already")
            return 0
        await install_or_migrate(ctx)
    print(f"installed schema {target.schema!r} at version {SCHEMA_VERSION}")
    return 0


async def _installed_version(ctx: Context, command: str) -> int | None:
    """The installed version, or None after saying on stderr that there is no install."""
    installed = await schema_version(ctx)
    if installed is None:
        print(f"qcore {command}: schema {ctx.schema!r} holds no install", file=sys.stderr)
    return installed


async def _migrate(target: Target, args: argparse.Namespace) -> int:
    async with open_context(target) as ctx:
        installed = await _installed_version(ctx, "migrate")
        if installed is None:
            return 1
        plans = get_migration_plans(target.schema, installed, SCHEMA_VERSION, ctx.backend)
        if args.dry_run:
            print(plans or f"-- schema {target.schema!r} is at version {installed}: nothing to do")
            return 0
        if installed == SCHEMA_VERSION:
            print(f"schema {target.schema!r} is at version {installed}: nothing to do")
            return 0
        await install_or_migrate(ctx)
    print(f"migrated schema {target.schema!r} to version {SCHEMA_VERSION}")
    return 0


async def _rollback(target: Target, args: argparse.Namespace) -> int:
    async with open_context(target) as ctx:
        installed = await _installed_version(ctx, "rollback")
        if installed is None:
            return 1
        plans = get_rollback_plans(target.schema, installed, ctx.backend)
        if args.dry_run:
            print(plans)
            return 0
        version = await rollback(ctx)
    print(f"rolled schema {target.schema!r} back to version {version}")
    return 0


def _plans(args: argparse.Namespace) -> int:
    try:
        if args.which in ("create", "construct"):
            print(get_construction_plans(args.backend, args.schema))
        elif args.which == "uninstall":
            print(get_uninstall_plans(args.schema, args.backend))
        elif args.which == "rollback":
            print(get_rollback_plans(args.schema, args.from_version, args.backend))
        else:
            print(get_migration_plans(args.schema, args.from_version, SCHEMA_VERSION, args.backend))
    except QcoreError as exc:
        print(f"qcore plans: {exc}", file=sys.stderr)
        return 1
    return 0

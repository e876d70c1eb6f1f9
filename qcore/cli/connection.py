"""Where an operator's command connects: the database, schema and backend.

They come from the command line first, then the environment (``QCORE_DATABASE_URL``,
``DATABASE_URL``, the ``PG*`` variables libpq reads), then a ``[tool.qcore]`` table in
the ``pyproject.toml`` of the current directory or a parent (``url``, ``schema``,
``backend``).

:func:`open_context` gives a :class:`~qcore.context.Context` on one connection without
starting a ``Boss``: nothing installed, migrated or registered, so it works on a schema
too broken to start on."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qcore import backends
from qcore.boss import Boss
from qcore.context import Context
from qcore.db import check_url, connect
from qcore.engine import identify
from qcore.errors import ConfigError, QcoreError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "Target",
    "add_database_arguments",
    "observer",
    "open_context",
    "resolve",
    "run_command",
]

#: libpq's connection variables: any of them set lets an empty URL connect
LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


@dataclass(frozen=True)
class Target:
    """Where to connect, and where each value came from (for error messages)."""

    url: str
    schema: str
    backend: str
    source: str


def add_database_arguments(parser: Any) -> None:
    """``--url`` (or ``--dsn``), ``--schema`` and ``--backend`` on a command's parser."""
    parser.add_argument(
        "--url",
        "--dsn",
        dest="url",
        help="the database (default: $QCORE_DATABASE_URL, $DATABASE_URL, PG* variables)",
    )
    parser.add_argument("--schema", help="the schema (default: pgboss)")
    parser.add_argument(
        "--backend", help="the backend, or auto to detect it from the server (default: postgres)"
    )


def _pyproject(start: Path) -> dict[str, Any]:
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                table = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{path} cannot be read: {exc}") from None
            found = table.get("tool", {}).get("qcore", {})
            if not isinstance(found, dict):
                raise ConfigError(f"{path}: [tool.qcore] must be a table")
            return found
    return {}


def resolve(args: argparse.Namespace, *, cwd: Path | None = None) -> Target:
    """The connection ``args`` ask for, filled in from the environment and pyproject.toml.

    They are read in that order; ``ConfigError`` when no database is named anywhere.
    """
    config = _pyproject(cwd or Path.cwd())
    for key in ("url", "schema", "backend"):
        if key in config and not isinstance(config[key], str):
            raise ConfigError(f"[tool.qcore] {key} must be a string, got {config[key]!r}")
    environment = os.environ.get("QCORE_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if args.url:
        url, source = args.url, "--url"
    elif environment:
        url, source = environment, "the environment"
    elif any(os.environ.get(v) for v in LIBPQ_VARIABLES):
        url, source = "postgresql://", "the PG* variables"
    elif config.get("url"):
        url, source = config["url"], "pyproject.toml [tool.qcore]"
    else:
        raise ConfigError(
            "no database given: pass --url, set QCORE_DATABASE_URL (or DATABASE_URL, or"
            " libpq's PGHOST and friends), or put url in [tool.qcore] of pyproject.toml"
        )
    try:
        check_url(url)  # a scheme typo: a usage error, before any connection
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from {source})") from None
    schema = args.schema or config.get("schema") or "pgboss"
    backend = args.backend or config.get("backend") or "postgres"
    return Target(url=url, schema=schema, backend=backend, source=source)


def run_command(
    args: argparse.Namespace, work: Callable[[Target], Coroutine[Any, Any, int]]
) -> int:
    """Run a command's ``work`` on the target ``args`` name; its exit status.

    2 when no database is given, 1 when qcore refuses (the message on stderr, no
    traceback).
    """
    try:
        target = resolve(args)
    except ConfigError as exc:
        print(f"qcore {args.command}: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(work(target))
    except QcoreError as exc:
        print(f"qcore {args.command}: {exc}", file=sys.stderr)
        return 1


def observer(target: Target, *, connections: int = 1) -> Boss:
    """A ``Boss`` on ``target`` for one command, with no duty of its own.

    It has ``connections`` connections, and nothing is installed, migrated, supervised,
    scheduled or registered.
    """
    return Boss(
        target.url,
        schema=target.schema,
        backend=target.backend,
        migrate=False,
        supervise=False,
        schedule=False,
        register_instance=False,
        max=connections,
    )


@asynccontextmanager
async def open_context(target: Target) -> AsyncIterator[Context]:
    """A context on one connection to ``target`` (the backend detected for ``auto``)."""
    db = await connect(target.url, max=1)
    try:
        if target.backend == "auto":
            backend = backends.for_engine(await identify(db))
        else:
            backend = backends.get(target.backend)
        yield Context(db=db, backend=backend, schema_spec=target.schema)
    finally:
        await db.close()

"""``qcore dashboard``: the web board (``qcore-queue[web]``), served by uvicorn.

Listens on 127.0.0.1:8080 by default. Anywhere else it needs credentials:
``QCORE_DASHBOARD_TOKEN`` (or ``--token``) or ``QCORE_DASHBOARD_BASIC_AUTH=user:password``
(or ``--basic-auth``); given as options they show in every user's process list, so the
command warns. It answers to ``localhost``, to addresses written as digits and to the
DNS names given with ``--allowed-host`` (repeatable; ``--host`` when it is a name):
any other ``Host`` is refused, so a rebound DNS name cannot reach it from a browser.
``--read-only`` hides and refuses every action;
``--history`` adds the metrics-history views, read from the store in
``--store-schema`` (default: the queues' schema): the history of the queues' schema
(``--schema``) wherever its store lives. ``--database NAME=URL`` (repeatable)
puts more databases on the same board, switched from its sidebar. Exit status 2 when the extra is
missing or the options are refused, 1 when the database cannot be used.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from typing import Any

from qcore.cli.connection import Target, add_database_arguments, observer, run_command
from qcore.errors import ConfigError

__all__ = ["add_parser", "open_board", "run"]


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "dashboard",
        help="serve the web dashboard (pip install 'qcore-queue[web]')",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_database_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--read-only", action="store_true", help="no actions")
    parser.add_argument("--history", action="store_true", help="metrics-history views")
    parser.add_argument(
        "--store-schema",
        default=None,
        help="the schema holding the metrics store's tables (default: --schema); the history"
        " shown is still that of --schema's queues",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="a bearer token (16+ characters); prefer QCORE_DASHBOARD_TOKEN (ps shows options)",
    )
    parser.add_argument(
        "--basic-auth",
        default=None,
        metavar="USER:PASSWORD",
        help="prefer QCORE_DASHBOARD_BASIC_AUTH (ps shows options)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a DNS name the board is reached by (repeatable; .example.com: every name"
        " under it); localhost and IP addresses always pass",
    )
    parser.add_argument(
        "--database",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="another database on the same board (repeatable; same schema and backend);"
        " the one of --url is named main",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from qcore.web import combine
        from qcore.web.security import Access, AllowedHosts, check_bind, is_wildcard
    except ImportError as exc:
        print(
            f"qcore dashboard: {exc.name} is missing: pip install 'qcore-queue[web]'",
            file=sys.stderr,
        )
        return 2
    for option, variable in (("token", "TOKEN"), ("basic_auth", "BASIC_AUTH")):
        if getattr(args, option) is not None:
            print(
                f"qcore dashboard: warning: --{option.replace('_', '-')} is visible to every"
                f" user of this machine in the process list (ps); set QCORE_DASHBOARD_{variable}"
                " in the environment instead",
                file=sys.stderr,
            )
    token = args.token or os.environ.get("QCORE_DASHBOARD_TOKEN") or None
    basic = args.basic_auth or os.environ.get("QCORE_DASHBOARD_BASIC_AUTH") or None
    names = list(args.allowed_host)
    if not is_wildcard(args.host):
        names.append(args.host)  # the name it listens on is one it is reached by
    try:
        check_bind(args.host, Access.of(token, basic))
        AllowedHosts(names)  # refused here, before connecting, if a name is not one
        others = [_named(value) for value in args.database]
    except ConfigError as exc:
        print(f"qcore dashboard: {exc}", file=sys.stderr)
        return 2
    if is_wildcard(args.host) and not args.allowed_host:
        print(
            f"qcore dashboard: listening on {args.host or 'every address'}: requests are"
            " answered when addressed to localhost or an IP address; give the DNS names"
            " it is reached by with --allowed-host NAME",
            file=sys.stderr,
        )

    async def serve(target: Target) -> int:
        options: dict[str, Any] = {"token": token, "basic_auth": basic, "allowed_hosts": names}
        async with contextlib.AsyncExitStack() as stack:
            app = await open_board(target, args, stack, **options)
            if others:
                boards = {"main": app}
                for name, url in others:
                    other = dataclasses.replace(target, url=url)
                    boards[name] = await open_board(other, args, stack, **options)
                app = combine(boards)
            config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info")
            print(f"qcore dashboard on http://{args.host}:{args.port}/", flush=True)
            await uvicorn.Server(config).serve()
        return 0

    return run_command(args, serve)


async def open_board(
    target: Target, args: argparse.Namespace, stack: contextlib.AsyncExitStack, **options: Any
) -> Any:
    """The board of one database as ``args`` ask (its connections closed with ``stack``).

    With ``--history`` its metrics history is read from the store in ``--store-schema``
    (default: the queues' schema); either way the history shown is that of the queues'
    schema ``target.schema``, the job schema the store's rows are keyed by. ``options``
    go to :func:`qcore.web.create_app` (credentials, allowed hosts).
    """
    from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider, PostgresMetricsStore
    from qcore.web import create_app

    # four connections: a page reads while another does
    boss = await stack.enter_async_context(observer(target, connections=4))
    history = admin = None
    if args.history:
        store = PostgresMetricsStore(
            boss.db,
            schema=args.store_schema or target.schema,
            backend=boss.backend,
            migrate=not args.read_only,  # a read-only board creates nothing
            queue_schema=target.schema,
        )
        history, admin = MetricsHistoryProvider(store), MetricsHistoryAdmin(store)
    return create_app(boss, history=history, admin=admin, read_only=args.read_only, **options)


def _named(value: str) -> tuple[str, str]:
    """``NAME=URL`` of ``--database``."""
    name, equals, url = value.partition("=")
    if not equals or not name or not url:
        raise ConfigError(f"--database takes NAME=URL, got {value!r}")
    if name == "main":
        raise ConfigError("--database main: that name is the database of --url")
    return name, url

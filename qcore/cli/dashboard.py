"""``qcore dashboard``: the web board (``qcore-queue[web]``), served by uvicorn.

Listens on 127.0.0.1:8080 by default. Anywhere else it needs credentials:
``QCORE_DASHBOARD_TOKEN`` (or ``--token``) or ``QCORE_DASHBOARD_BASIC_AUTH=user:password``
(or ``--basic-auth``); given as options they show in every user's process list, so the
command warns. It answers to ``localhost``, to addresses written as digits and to the
DNS names given with ``--allowed-host`` (repeatable; ``--host`` when it is a name):
any other ``Host`` is refused, so a rebound DNS name cannot reach it from a browser.
``--read-only`` hides and refuses every action;
``--history`` adds the metrics-history views, read from the store in
``--store-schema`` (default: the queues' schema) or in Redis (``--redis URL``,
``--redis-prefix``, ``--redis-cluster``): the history of the queues' schema
(``--schema``) wherever its store lives. With ``--history`` the board also records it:
a :class:`~qcore.metrics.MetricsRecorder` per database runs in this process, started
with the server and stopped with it (``--interval``, ``--retention-days`` or
``--retain-minutes``/``--retain-hours``/``--retain-days``, ``--no-latency``; the views
read with the same retention), its failures one line on stderr that never stop the
board. ``--read-only`` keeps the views and records nothing, creates nothing: for a
board beside workers that record. ``--database NAME=URL`` (repeatable)
puts more databases on the same board, switched from its sidebar. Exit status 2 when the extra is
missing or the options are refused, 1 when the database cannot be used.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from qcore.cli import history as options
from qcore.cli.connection import Target, add_database_arguments, observer, run_command
from qcore.errors import ConfigError, ValidationError
from qcore.metrics import MetricsRecorder

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
    parser.add_argument(
        "--history",
        action="store_true",
        help="metrics-history views, recorded by this process unless --read-only",
    )
    options.add_store_arguments(parser)
    options.add_recorder_arguments(parser)
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
        _check_history(args)
    except (ConfigError, ValidationError) as exc:
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
        given: dict[str, Any] = {"token": token, "basic_auth": basic, "allowed_hosts": names}
        recorders: list[MetricsRecorder] = []
        async with contextlib.AsyncExitStack() as stack:
            app = await open_board(target, args, stack, recorders=recorders, **given)
            if others:
                boards = {"main": app}
                for name, url in others:
                    other = dataclasses.replace(target, url=url)
                    boards[name] = await open_board(
                        other, args, stack, recorders=recorders, database=name, **given
                    )
                app = combine(boards)
            config = uvicorn.Config(
                _Recorders(app, recorders), host=args.host, port=args.port, log_level="info"
            )
            print(f"qcore dashboard on http://{args.host}:{args.port}/", flush=True)
            if recorders:
                every = recorders[0].interval_seconds
                print(f"qcore dashboard: recording the metrics history every {every:g} s")
            await uvicorn.Server(config).serve()
        return 0

    return run_command(args, serve)


async def open_board(
    target: Target,
    args: argparse.Namespace,
    stack: contextlib.AsyncExitStack,
    *,
    recorders: list[MetricsRecorder] | None = None,
    database: str | None = None,
    **given: Any,
) -> Any:
    """The board of one database as ``args`` ask (its connections closed with ``stack``).

    With ``--history`` its metrics history is read from the store in ``--store-schema``
    (default: the queues' schema) or in Redis; either way the history shown is that of
    the queues' schema ``target.schema``, the job schema the store's rows are keyed by,
    over the retention the options give. Given ``recorders`` (and unless
    ``--read-only``), the recorder of this database into that store is added to them,
    not started (stopped with ``stack``). ``database``: the board's name for it, when
    not the main one. ``given`` goes to :func:`qcore.web.create_app` (credentials,
    allowed hosts).
    """
    from qcore.metrics import MetricsHistoryAdmin, MetricsHistoryProvider, PgBossQueues
    from qcore.web import create_app

    record = args.history and not args.read_only and recorders is not None
    # four connections: a page reads while another does (and one for the recorder)
    boss = await stack.enter_async_context(observer(target, connections=5 if record else 4))
    history = admin = None
    if args.history:
        recording = options.recording_from(args)
        ctx = boss.context()
        # a read-only board creates nothing
        store = options.store_from(args, ctx, migrate=not args.read_only, database=database)
        stack.push_async_callback(store.close)
        history = MetricsHistoryProvider(store, retention=recording.retention)
        admin = MetricsHistoryAdmin(store)
        if record and recorders is not None:
            report = _Report(database or "main")
            recorder = recording.recorder(
                store, PgBossQueues(ctx), on_snapshot_error=report, on_latency_error=report
            )
            stack.push_async_callback(recorder.stop)  # stopped before its connections close
            recorders.append(recorder)
    return create_app(boss, history=history, admin=admin, read_only=args.read_only, **given)


#: the options that mean something only with ``--history``: dest -> option
_HISTORY_ONLY = {
    "store_schema": "--store-schema",
    "redis": "--redis",
    "interval": "--interval",
    "retention_days": "--retention-days",
    "retain_minutes": "--retain-minutes",
    "retain_hours": "--retain-hours",
    "retain_days": "--retain-days",
}


def _check_history(args: argparse.Namespace) -> None:
    """The history options' usage errors, before anything connects."""
    if args.history:
        options.check_store(args)
        options.recording_from(args)
        return
    given = [option for dest, option in _HISTORY_ONLY.items() if getattr(args, dest) is not None]
    given += ["--no-latency"] if not args.latency else []
    given += ["--redis-cluster"] if args.redis_cluster else []
    given += ["--redis-prefix"] if args.redis_prefix != options.REDIS_PREFIX else []
    if given:
        raise options.UsageError(f"{', '.join(given)}: only with --history")


#: a recorder's failure said again at most this often, when it repeats itself
REPEAT_SECONDS = 600.0


class _Report:
    """A recorder's failures, one line each on stderr; a repeat at most every 10 minutes.

    A failed tick (the database away) never stops the board: the next tick tries again.
    """

    def __init__(self, database: str) -> None:
        self.database = database
        self._last: str | None = None
        self._said = 0.0
        self._quiet = 0

    def __call__(self, exc: BaseException, queue: str) -> None:
        what = (str(exc).strip().splitlines() or [""])[0] or type(exc).__name__
        where = f"{self.database}, queue {queue!r}" if queue else self.database
        line = f"metrics recorder ({where}): {what}"
        now = time.monotonic()
        again = ""
        if line == self._last:
            if now - self._said < REPEAT_SECONDS:
                self._quiet += 1
                return
            if self._quiet:
                again = f" (and {self._quiet} time(s) more since it was last said)"
        print(f"qcore dashboard: {line}{again}", file=sys.stderr, flush=True)
        self._last, self._said, self._quiet = line, now, 0


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Recorders:
    """``app`` with ``recorders`` started when the server starts and stopped when it stops.

    Through the ASGI lifespan, so a signal that ends the server (uvicorn's shutdown,
    then the signal again) leaves each recorder stopped, its leases handed back.
    """

    def __init__(self, app: Any, recorders: list[MetricsRecorder]) -> None:
        self.app = app
        self.recorders = recorders

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for recorder in self.recorders:
                    await recorder.start()  # a tick now, in the background
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for recorder in self.recorders:
                    await recorder.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _named(value: str) -> tuple[str, str]:
    """``NAME=URL`` of ``--database``."""
    name, equals, url = value.partition("=")
    if not equals or not name or not url:
        raise ConfigError(f"--database takes NAME=URL, got {value!r}")
    if name == "main":
        raise ConfigError("--database main: that name is the database of --url")
    return name, url

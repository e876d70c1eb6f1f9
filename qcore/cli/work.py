"""``qcore work TARGET``: run the handlers an application registered, until a signal.

TARGET names where the application's ``Boss`` (or ``SyncBoss``) is, as
``package.module:attribute`` — the attribute may also be a function that returns one —
or ``package.module`` alone, for its attribute ``boss``. The current directory is on
the import path. Handlers are registered with the ``handler`` decorator::

    # myapp/jobs.py
    boss = Boss(os.environ["DATABASE_URL"])

    @boss.handler("email", batch_size=10)
    async def send_email(jobs): ...

    $ qcore work myapp.jobs:boss --concurrency 4

The first SIGTERM or SIGINT stops gracefully: no new jobs are fetched and running
handlers may finish within ``--stop-timeout`` seconds (then their jobs are failed, to
be retried). The whole stop takes at most ``--stop-timeout`` plus a short last try to
store how the held jobs ended (:data:`~qcore.worker.loops.STOP_SETTLE_SECONDS`), even
when the database does not answer. Exit status: 0 after a graceful stop, 75
(EX_TEMPFAIL) after one that left held jobs unsettled (the log names them; they retry
once they expire), 128 + the signal's number after a forced one, 1 when the workers
cannot start or stop with an error, 2 for a usage error (a target that does not load,
an unknown queue, a handler whose queue does not exist in the database).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import Any

from qcore.boss import Boss
from qcore.errors import ConfigError, QcoreError, QueueNotFoundError, ValidationError
from qcore.sync import SyncBoss

__all__ = ["add_parser", "load_boss", "run"]

log = logging.getLogger("qcore.work")

#: the exit status of a stop that left held jobs unsettled (sysexits.h: try again later)
EX_TEMPFAIL = 75


class TargetError(Exception):
    """TARGET does not name a Boss."""


def add_parser(commands: Any) -> None:
    """``qcore work``'s arguments."""
    work = commands.add_parser(
        "work",
        help="run the handlers registered on an application's Boss until SIGTERM/SIGINT",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    work.add_argument("target", metavar="TARGET", help="module:attribute of a Boss or SyncBoss")
    work.add_argument(
        "--queues", help="comma-separated queues to work (default: every registered handler)"
    )
    work.add_argument(
        "--concurrency", type=int, help="handler loops per queue (overrides each handler's)"
    )
    work.add_argument(
        "--stop-timeout",
        type=float,
        default=30.0,
        help="seconds running handlers may take to finish on a graceful stop (default 30)",
    )
    work.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO)",
    )
    work.set_defaults(run=run)


def load_boss(target: str) -> Boss:
    """The ``Boss`` TARGET names (a ``SyncBoss``'s own, for one)."""
    module_name, _, attribute = target.partition(":")
    if not module_name:
        raise TargetError(f"TARGET must be module:attribute, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetError(f"cannot import {module_name!r}: {exc}") from exc
    except ConfigError as exc:  # its Boss(...) refused its settings (say, a URL typo)
        raise TargetError(f"{module_name}: {exc}") from exc
    name = attribute or "boss"
    try:
        found: Any = getattr(module, name)
    except AttributeError:
        raise TargetError(f"module {module_name!r} has no attribute {name!r}") from None
    if callable(found) and not isinstance(found, (Boss, SyncBoss)):
        try:
            found = found()
        except ConfigError as exc:
            raise TargetError(f"{target}: {exc}") from exc
    if isinstance(found, SyncBoss):
        found = found.boss
    if not isinstance(found, Boss):
        raise TargetError(f"{target} is a {type(found).__name__}, not a qcore Boss or SyncBoss")
    return found


async def serve(
    boss: Boss, queues: list[str] | None, concurrency: int | None, stop_timeout: float
) -> int:
    """Start, work the handlers, stop on signals; the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    forced: list[int] = []
    hurry: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if not stop.is_set():
            log.info(
                "%s: stopping gracefully (handlers have %.0f s; signal again to stop now)",
                signal.Signals(signum).name,
                stop_timeout,
            )
            stop.set()
        elif not forced:
            forced.append(signum)
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            hurry.append(loop.create_task(boss.stop(graceful=False)))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        try:
            await boss.start()
            await boss.work_handlers(queues, local_concurrency=concurrency)
        except QueueNotFoundError as exc:
            await boss.stop(graceful=False)
            log.error("%s", _missing_queues(exc, boss.schema))
            return 2
        except ValidationError as exc:
            await boss.stop(graceful=False)
            log.error("%s", exc)
            return 2
        except QcoreError as exc:
            await boss.stop(graceful=False)
            log.error("cannot start: %s", exc)
            return 1
        working = sorted({h.queue for h in boss.handlers if queues is None or h.queue in queues})
        engine = boss.engine.describe() if boss.engine else boss.backend.name
        log.info(
            "qcore work: pid %d, %s backend on %s, schema %s, queues %s",
            os.getpid(),
            boss.backend.name,
            engine,
            boss.schema,
            ", ".join(working),
        )
        await stop.wait()
        await boss.stop(timeout=stop_timeout)
        await asyncio.gather(*hurry)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    if forced:
        return 128 + forced[0]
    unsettled = boss.unsettled_jobs
    if unsettled:
        log.error(
            "stopped, leaving %d held job(s) unsettled (the database did not answer): %s;"
            " they stay active until they expire, then retry",
            len(unsettled),
            ", ".join(f"{job.name}/{job.id}" for job in unsettled),
        )
        return EX_TEMPFAIL
    log.info("stopped")
    return 0


def _missing_queues(exc: QueueNotFoundError, schema: str) -> str:
    """The one line saying which handlers' queues do not exist, and how to create them."""
    if not exc.queues:
        return str(exc)
    names = exc.queues
    one = len(names) == 1
    listed = ", ".join(names)
    return (
        f"{'queue' if one else 'queues'} {listed} {'does' if one else 'do'} not exist in schema"
        f" {schema!r}; create {'it' if one else 'them'} first with"
        f" `qcore queue create {names[0]}`{'' if one else ' (and so on)'} or, in the"
        f" application, boss.create_queue({names[0]!r}) before work"
    )


def run(args: argparse.Namespace) -> int:
    """``qcore work``: its exit status."""
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.concurrency is not None and args.concurrency < 1:
        log.error("--concurrency must be at least 1, got %d", args.concurrency)
        return 2
    try:
        boss = load_boss(args.target)
    except TargetError as exc:
        log.error("%s", exc)
        return 2
    if not boss.handlers:
        log.error("%s has no handlers: register them with @boss.handler(queue, ...)", args.target)
        return 2
    queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
    return asyncio.run(serve(boss, queues, args.concurrency, args.stop_timeout))

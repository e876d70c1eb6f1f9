"""The ``qcore`` command line, one module per command or family.

The modules are ``demo``, ``work``, ``instances``, ``jobs`` for the queue and job
commands, ``queue`` for one queue (show, create, update, delete), ``schema`` for
version, create, migrate and plans, ``doctor``, ``reindex``, ``metrics``,
``dashboard``; each gives its arguments (``add_parser``) and its run (``run(args) ->
exit status``).

Exit status as argparse gives it for the command line itself: 0 after ``--help`` or
``--version``, 2 for a usage error (no command given: the help, on stderr).
"""

from __future__ import annotations

import argparse
import sys

from qcore._version import __version__
from qcore.cli import (
    dashboard,
    demo,
    doctor,
    instances,
    jobs,
    metrics,
    queue,
    reindex,
    schema,
    work,
)

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qcore", description="qcore: a job queue on PostgreSQL")
    parser.add_argument("--version", action="version", version=f"qcore {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    every = (demo, work, instances, jobs, queue, schema, doctor, reindex, metrics, dashboard)
    for command in every:
        command.add_parser(commands)
    args = parser.parse_args(queue.with_show(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    status: int = args.run(args)
    return status

"""``qcore queue``: one queue, shown, created, changed or deleted.

- ``qcore queue NAME`` (or ``qcore queue show NAME``): its settings and its counts,
  counted now;
- ``qcore queue create NAME [options]``: a new queue, with the options of
  ``Boss.create_queue``; refused (exit status 1) when it exists already, as nothing would
  change;
- ``qcore queue update NAME [options]``: change the given options, as
  ``Boss.update_queue``; ``--no-dead-letter``, ``--no-heartbeat`` and
  ``--no-retry-delay-max`` clear a setting;
- ``qcore queue delete NAME --yes``: the queue and all its jobs.

Each takes ``--url``, ``--schema``, ``--backend`` (see :mod:`qcore.cli.connection`);
``show`` also ``--json``. The options are checked as the Python verbs check them, before
anything is written: a bad value is the same error, one line on stderr, exit status 2.
A queue named like an action (``create``) is shown with ``qcore queue show create``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from qcore.boss import Boss
from qcore.cli.connection import Target, add_database_arguments, observer, run_command
from qcore.cli.table import format_table, print_json
from qcore.errors import QcoreError, QueueNotFoundError, ValidationError
from qcore.job import POLICIES
from qcore.options import QUEUE_OPTIONS, queue_name, queue_options

__all__ = ["ACTIONS", "add_parser", "with_show"]

ACTIONS = ("show", "create", "update", "delete")

#: what an option left out reads as (None would clear a setting on update)
_UNSET = object()


def with_show(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``qcore queue NAME`` spelled ``qcore queue show NAME``."""
    args = list(argv)
    if len(args) > 1 and args[0] == "queue" and args[1] not in ACTIONS and args[1][:1] != "-":
        args.insert(1, "show")
    return args


def _number(text: str) -> int | str:
    """An integer option's value: the integer, or the text for the verb's check to refuse
    (so a bad value reads as the Python verb's error)."""
    try:
        return int(text)
    except ValueError:
        return text


def _options(parser: Any, *, update: bool) -> None:
    """The queue options, as ``create_queue`` and ``update_queue`` take them."""
    group = parser.add_argument_group("queue options (seconds for times)")
    add = group.add_argument
    if not update:  # neither can change once the queue is made
        add("--policy", metavar="POLICY", help=f"one of {', '.join(POLICIES)} (standard)")
        add("--partition", action="store_const", const=True, help="a table of its own")
    add("--retry-limit", type=_number, metavar="N", help="retries after the first run (2)")
    add("--retry-delay", type=_number, metavar="S", help="seconds before a retry (0)")
    add(
        "--retry-backoff",
        action=argparse.BooleanOptionalAction,
        help="double the delay each retry (off)",
    )
    add("--retry-delay-max", type=_number, metavar="S", help="cap of the backoff's delay")
    add(
        "--expire-in",
        dest="expire_in_seconds",
        type=_number,
        metavar="S",
        help="a run fails after this long (900)",
    )
    add(
        "--retention",
        dest="retention_seconds",
        type=_number,
        metavar="S",
        help="a queued job is kept this long (14 days)",
    )
    add(
        "--delete-after",
        dest="delete_after_seconds",
        type=_number,
        metavar="S",
        help="a finished job is kept this long (7 days; 0: forever)",
    )
    add("--warning-queue-size", type=_number, metavar="N", help="warn at this many queued")
    add("--dead-letter", metavar="QUEUE", help="where a job out of retries is copied")
    add(
        "--heartbeat",
        dest="heartbeat_seconds",
        type=_number,
        metavar="S",
        help="a run fails without a heartbeat this long (at least 10)",
    )
    add("--notify", action=argparse.BooleanOptionalAction, help="wake workers on send (on)")
    if update:
        for option, dest in (
            ("--no-dead-letter", "dead_letter"),
            ("--no-heartbeat", "heartbeat_seconds"),
            ("--no-retry-delay-max", "retry_delay_max"),
        ):
            add(option, dest=dest, action="store_const", const=None, help="clear it")
    parser.set_defaults(**{k: _UNSET for k in QUEUE_OPTIONS})


def add_parser(commands: Any) -> None:
    queue = commands.add_parser(
        "queue",
        help="show, create, update or delete one queue",
        description="One queue: qcore queue NAME shows it (as qcore queue show NAME).",
    )
    actions = queue.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="its settings and its counts, counted now")
    create = actions.add_parser("create", help="a new queue")
    update = actions.add_parser("update", help="change the given options")
    delete = actions.add_parser("delete", help="the queue and all its jobs")
    for parser in (show, create, update, delete):
        parser.add_argument("name", metavar="NAME")
        add_database_arguments(parser)
        parser.set_defaults(run=_run)
    show.add_argument("--json", action="store_true", help="print JSON")
    _options(create, update=False)
    _options(update, update=True)
    delete.add_argument("--yes", action="store_true", help="really delete it")


def _given(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k in QUEUE_OPTIONS if (v := getattr(args, k, _UNSET)) is not _UNSET}


def _run(args: argparse.Namespace) -> int:
    label = f"qcore queue {args.action}"

    def refuse(message: str) -> int:
        print(f"{label}: {message}", file=sys.stderr)
        return 2

    options = _given(args)
    try:  # the verbs' own checks, before anything connects
        queue_name(args.name)
        if args.action in ("create", "update"):
            queue_options(args.name, options, update=args.action == "update")
    except ValidationError as exc:
        return refuse(str(exc))
    if args.action == "update" and not options:
        return refuse("nothing to change: give at least one option (see --help)")
    if args.action == "delete" and not args.yes:
        return refuse(f"this deletes queue {args.name!r} and all its jobs; add --yes")

    async def with_boss(target: Target) -> int:
        async with observer(target) as boss:
            try:
                return await _ACTIONS[args.action](boss, args, options)
            except QueueNotFoundError as exc:  # a ValidationError, yet not a bad value
                print(f"{label}: {exc}", file=sys.stderr)
                return 1
            except ValidationError as exc:  # what only the database can tell (partition)
                return refuse(str(exc))
            except QcoreError as exc:
                print(f"{label}: {exc}", file=sys.stderr)
                return 1

    return run_command(args, with_boss)


class _Refused(QcoreError):
    """The queue a command names is not there, or is there already."""


async def _show(boss: Boss, args: argparse.Namespace, options: dict[str, Any]) -> int:
    queue = await boss.get_queue(args.name, live=True)
    if queue is None:
        raise _Refused(f"queue {args.name!r} does not exist")
    fields = dataclasses.asdict(queue)
    if args.json:
        print_json(fields)
    else:
        rows = [(k, "-" if v is None else str(v)) for k, v in fields.items()]
        print(format_table(("field", "value"), rows))
    return 0


async def _create(boss: Boss, args: argparse.Namespace, options: dict[str, Any]) -> int:
    if await boss.get_queue(args.name) is not None:
        raise _Refused(
            f"queue {args.name!r} exists already; nothing was changed (change its options"
            f" with qcore queue update {args.name})"
        )
    await boss.create_queue(args.name, **options)
    print(f"created queue {args.name}")
    return 0


async def _update(boss: Boss, args: argparse.Namespace, options: dict[str, Any]) -> int:
    await boss.update_queue(args.name, **options)
    print(f"updated queue {args.name}")
    return 0


async def _delete(boss: Boss, args: argparse.Namespace, options: dict[str, Any]) -> int:
    if await boss.get_queue(args.name) is None:
        raise _Refused(f"queue {args.name!r} does not exist")
    await boss.delete_queue(args.name)
    print(f"deleted queue {args.name}")
    return 0


_ACTIONS = {"show": _show, "create": _create, "update": _update, "delete": _delete}

"""The operator's queue and job commands:

- ``qcore queues``: each queue's policy, its counts (counted now, not the monitor's
  cached ones) and how long its oldest ready job has waited;
- ``qcore jobs QUEUE [--state STATE ...] [--limit N]``: a queue's jobs, oldest first;
- ``qcore job QUEUE ID``: one job, every field; for a job of a dead letter queue also
  the job it is a copy of, how often that ran and its last error with the traceback;
- ``qcore retry|cancel|resume|delete QUEUE ID...``: the job commands;
- ``qcore purge QUEUE --state queued|stored|all --yes``: delete a queue's jobs.

Each takes ``--url``, ``--schema``, ``--backend`` (see :mod:`qcore.cli.connection`) and
``--json``; nothing is installed, migrated or registered. Exit status 0; 1 when the
database refuses (an unknown queue, a bad id: the message on stderr, no traceback); 2
for a usage error (no database, a purge without ``--yes``).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
from collections.abc import Awaitable, Callable
from typing import Any

from qcore.boss import Boss
from qcore.cli.connection import Target, add_database_arguments, observer, run_command
from qcore.cli.table import format_table, print_json
from qcore.errors import QcoreError, QueueNotFoundError
from qcore.job import DeadLetterOrigin, Job, JobState, Queue

__all__ = ["add_parser"]

QUEUE_COLUMNS = ("name", "policy", "queued", "ready", "active", "failed", "total", "oldest")
JOB_COLUMNS = ("id", "state", "priority", "retries", "created", "started", "completed")
COMMANDS = {
    "retry": "retry failed jobs",
    "cancel": "cancel jobs that have not finished",
    "resume": "bring cancelled jobs back",
    "delete": "delete jobs whatever their state",
}
PURGES = {
    "queued": "delete_queued_jobs",
    "stored": "delete_stored_jobs",
    "all": "delete_all_jobs",
}


def add_parser(commands: Any) -> None:
    queues = commands.add_parser("queues", help="list the queues with their counts")
    _common(queues, _queues)
    jobs = commands.add_parser("jobs", help="list a queue's jobs, oldest first")
    jobs.add_argument("queue")
    jobs.add_argument(
        "--state", action="append", choices=[s.value for s in JobState], help="repeatable"
    )
    jobs.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    _common(jobs, _jobs)
    job = commands.add_parser("job", help="one job, every field")
    job.add_argument("queue")
    job.add_argument("id")
    _common(job, _job)
    for verb, what in COMMANDS.items():
        command = commands.add_parser(verb, help=what)
        command.add_argument("queue")
        command.add_argument("ids", nargs="+", metavar="ID")
        _common(command, _command)
    purge = commands.add_parser("purge", help="delete a queue's jobs (queued, stored or all)")
    purge.add_argument("queue")
    purge.add_argument("--state", required=True, choices=sorted(PURGES))
    purge.add_argument("--yes", action="store_true", help="really delete them")
    _common(purge, _purge)


def _common(parser: Any, action: Callable[[Boss, argparse.Namespace], Awaitable[Any]]) -> None:
    add_database_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=_runner(action))


def _runner(
    action: Callable[[Boss, argparse.Namespace], Awaitable[Any]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if args.command == "purge" and not args.yes:
            print(f"qcore purge: this deletes {args.state} jobs of {args.queue!r}; add --yes")
            return 2

        async def with_boss(target: Target) -> int:
            async with observer(target) as boss:
                await action(boss, args)
            return 0

        return run_command(args, with_boss)

    return run


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _text(value: Any) -> str:
    """A field's value as one cell: JSON for data, the name of a state."""
    if value is None:
        return "-"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _queue_row(queue: Queue) -> tuple[str, ...]:
    oldest = queue.ready_oldest_seconds
    return (
        queue.name,
        queue.policy,
        str(queue.queued_count),
        str(queue.ready_count),
        str(queue.active_count),
        str(queue.failed_count),
        str(queue.total_count),
        "-" if oldest is None else f"{oldest}s",
    )


async def _queues(boss: Boss, args: argparse.Namespace) -> None:
    found = await boss.get_queues(live=True)
    if args.json:
        print_json([dataclasses.asdict(q) for q in found])
    else:
        print(format_table(QUEUE_COLUMNS, [_queue_row(q) for q in found]))


def _fields(job: Job) -> dict[str, Any]:
    """A job's fields (not its run-time state)."""
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(job) if f.name[0] != "_"}


def _job_row(job: Job) -> tuple[str, ...]:
    return (
        str(job.id),
        _text(job.state),
        str(job.priority),
        str(job.retry_count),
        _when(job.created_on),
        _when(job.started_on),
        _when(job.completed_on),
    )


async def _jobs(boss: Boss, args: argparse.Namespace) -> None:
    found = await boss.find_jobs(args.queue, states=args.state, limit=args.limit)
    if args.json:
        print_json([_fields(j) for j in found])
    else:
        print(format_table(JOB_COLUMNS, [_job_row(j) for j in found]))


async def _job(boss: Boss, args: argparse.Namespace) -> None:
    job = await boss.get_job_by_id(args.queue, args.id)
    if job is None:
        raise _NotFound(f"queue {args.queue!r} holds no job {args.id}")
    fields = _fields(job)
    origin = await dead_letter_origin(boss, job)
    if args.json:
        if origin is not None:
            fields["dead_letter_of"] = _origin_fields(origin)
        print_json(fields)
        return
    rows = [(k, _text(v)) for k, v in fields.items()]
    print(format_table(("field", "value"), rows))
    if origin is not None:
        print()
        print(_origin_text(origin))


async def dead_letter_origin(boss: Boss, job: Job) -> DeadLetterOrigin | None:
    """Where ``job`` came from when it is a dead letter copy (None otherwise).

    The failed job is read when it is still kept, else its queue's retry limit.
    """
    if job.source_name is None or job.source_id is None:
        return None
    try:
        source = await boss.get_job_by_id(job.source_name, job.source_id)
    except QueueNotFoundError:  # the source queue is gone, and its jobs with it
        return DeadLetterOrigin.of(job)
    queue = None if source is not None else await boss.get_queue(job.source_name)
    return DeadLetterOrigin.of(job, source, queue)


def _origin_fields(origin: DeadLetterOrigin) -> dict[str, Any]:
    failure = origin.failure
    return {
        "queue": origin.queue,
        "id": str(origin.id),
        "kept": origin.kept,
        "attempts": origin.attempts,
        "retry_limit": origin.retry_limit,
        "name": failure.name if failure else None,
        "message": failure.message if failure else None,
        "stack": failure.stack if failure else None,
    }


def _origin_text(origin: DeadLetterOrigin) -> str:
    """The dead letter copy's origin for people: the failed job, its runs, its error."""
    kept = "" if origin.kept else " (no longer kept)"
    allowed = "-" if origin.allowed is None else str(origin.allowed)
    runs = "-" if origin.attempts is None else f"{origin.attempts} of {allowed}"
    failure = origin.failure
    rows = [
        ("dead letter of", f"{origin.queue} {origin.id}{kept}"),
        ("attempts", runs),
        ("last error", failure.title if failure else "-"),
    ]
    text = "\n".join(f"{k:<16}{v}" for k, v in rows)
    if failure is not None and failure.stack:
        text += "\n\n" + failure.stack.rstrip()
    return text


class _NotFound(QcoreError):
    """A job the command names is not there."""


async def _command(boss: Boss, args: argparse.Namespace) -> None:
    verb = "delete_job" if args.command == "delete" else args.command
    result = await getattr(boss, verb)(args.queue, args.ids)
    if args.json:
        print_json(dataclasses.asdict(result))
    else:
        print(f"{args.command}: {result.affected} of {result.requested} jobs")


async def _purge(boss: Boss, args: argparse.Namespace) -> None:
    deleted = await getattr(boss, PURGES[args.state])(args.queue)
    if args.json:
        print_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} {args.state} jobs of {args.queue}")

"""``qcore demo``: a queue end to end.

It runs a queue end to end: it starts the embedded PGlite (or
uses ``--dsn``), creates a queue with retries and a dead-letter queue, sends
10,000 jobs in batches, works them with a few workers while a progress line
shows what is done, injects failures (a few percent fail once and are
retried, a handful always fail and end in the dead-letter queue), and prints
a summary read back from the database.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from qcore import Boss, Job, JobState
from qcore.errors import QcoreError

SCHEMA = "qcore_demo"  # its own schema: the demo never touches an application's queues
QUEUE = "demo"
DEAD_LETTER = "demo_dead"
RETRY_LIMIT = 2  # three attempts in all
INSERT_BATCH = 1000
STALL_SECONDS = 60.0  # no progress for this long: report and give up


# --------------------------------------------------------------------------- the failures


def always_fails(n: int, jobs: int) -> bool:
    """About five jobs of the run fail on every attempt and end in the dead-letter queue."""
    step = max(jobs // 5, 2)
    return n % step == step // 2


def fails_once(n: int, jobs: int) -> bool:
    """About 3% of the jobs fail on their first attempt and succeed on the retry."""
    return n % 29 == 7 and not always_fails(n, jobs)


# --------------------------------------------------------------------------- the run


class DemoStalled(Exception):
    """No job moved for ``STALL_SECONDS``."""


@dataclass
class Progress:
    """What the handlers saw: the progress line reads it (the summary reads the database)."""

    jobs: int
    completed: int = 0
    dead: int = 0
    failed_attempts: int = 0
    retrying: set[int] = field(default_factory=set)  # failed, waiting for their next attempt
    errors: list[object] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def done(self) -> int:
        return self.completed + self.dead

    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.started, 1e-9)


@dataclass(frozen=True)
class Summary:
    jobs: int
    completed: int
    retried: int
    dead_lettered: int
    send_seconds: float
    work_seconds: float
    engine: str

    @property
    def elapsed(self) -> float:
        return self.send_seconds + self.work_seconds


async def run_demo(
    dsn: str | None, jobs: int, workers: int, batch_size: int, *, bar: bool
) -> Summary:
    """The whole demo on a started ``Boss``; the summary as the database has it."""
    if dsn is None:
        say("starting the embedded PGlite (Node.js) ...")
        boss = Boss(backend="pglite", schema=SCHEMA)
    else:
        say(f"connecting to {_redacted(dsn)} ...")
        boss = Boss(dsn, schema=SCHEMA)
    await boss.start()
    try:
        engine = await _engine_version(boss)
        say(f"engine: {engine}")
        for name in (QUEUE, DEAD_LETTER):  # what an earlier run left
            await boss.delete_queue(name)
        await boss.create_queue(DEAD_LETTER)
        await boss.create_queue(
            QUEUE, retry_limit=RETRY_LIMIT, retry_delay=1, dead_letter=DEAD_LETTER
        )
        say(
            f"queue {QUEUE!r}: {RETRY_LIMIT} retries 1 s apart, then the dead-letter queue"
            f" {DEAD_LETTER!r} (schema {SCHEMA!r})"
        )

        started = time.perf_counter()
        for first in range(0, jobs, INSERT_BATCH):
            batch = [{"data": {"n": n}} for n in range(first, min(first + INSERT_BATCH, jobs))]
            await boss.insert(QUEUE, batch, return_id=False)
        send_seconds = time.perf_counter() - started
        say(
            f"sent {jobs:,} jobs in batches of {INSERT_BATCH:,} in {send_seconds:.2f} s"
            f" ({jobs / max(send_seconds, 1e-9):,.0f} jobs/s)"
        )

        say(f"working them: {workers} workers, batches of {batch_size}")
        progress = Progress(jobs)
        boss.on("error", progress.errors.append)

        async def handler(batch: list[Job]) -> None:
            failing = [
                job
                for job in batch
                if always_fails(job.data["n"], jobs)
                or (job.retry_count == 0 and fails_once(job.data["n"], jobs))
            ]
            if failing:  # the rest of the batch is completed when the handler returns
                await boss.fail(QUEUE, failing, {"error": "failure injected by the demo"})
                progress.failed_attempts += len(failing)
                for job in failing:
                    if job.retry_count >= RETRY_LIMIT:
                        progress.dead += 1
                        progress.retrying.discard(job.data["n"])
                    else:
                        progress.retrying.add(job.data["n"])
            succeeded = {job.data["n"] for job in batch} - {job.data["n"] for job in failing}
            progress.completed += len(succeeded)
            progress.retrying -= succeeded

        progress.started = time.perf_counter()
        await boss.work(
            QUEUE,
            handler,
            batch_size=batch_size,
            local_concurrency=workers,
            polling_interval_seconds=0.5,
        )
        final = await _watch(boss, progress, bar=bar)
        work_seconds = time.perf_counter() - progress.started
        await boss.off_work(QUEUE)

        dead_lettered = await boss.find_jobs(DEAD_LETTER)
        summary = Summary(
            jobs=len(final),
            completed=sum(job.state is JobState.COMPLETED for job in final),
            retried=sum(job.retry_count > 0 for job in final),
            dead_lettered=len(dead_lettered),
            send_seconds=send_seconds,
            work_seconds=work_seconds,
            engine=engine,
        )
        for name in (QUEUE, DEAD_LETTER):  # leave nothing behind
            await boss.delete_queue(name)
        return summary
    finally:
        await boss.stop()


async def _watch(boss: Boss, progress: Progress, *, bar: bool) -> list[Job]:
    """Show progress until every job is settled in the database; the queue's jobs then."""
    interval = 0.2 if bar else 1.0
    last_done, last_change = -1, time.perf_counter()
    while True:
        await asyncio.sleep(interval)
        _show(progress, bar=bar)
        if progress.done != last_done:
            last_done, last_change = progress.done, time.perf_counter()
        if progress.done >= progress.jobs:  # the handlers saw every job to its end
            final = await boss.find_jobs(QUEUE)
            if all(job.state is not None and job.state.finished for job in final):
                if bar:
                    sys.stderr.write("\n")
                return final
        if time.perf_counter() - last_change > STALL_SECONDS:
            if bar:
                sys.stderr.write("\n")
            cause = f"; last error: {progress.errors[-1]}" if progress.errors else ""
            raise DemoStalled(f"no progress for {STALL_SECONDS:.0f} s{cause}")


def _show(progress: Progress, *, bar: bool) -> None:
    done, total = progress.done, progress.jobs
    counts = (
        f"{done:,}/{total:,} done  {progress.failed_attempts:,} failed"
        f"  {len(progress.retrying):,} to retry  {progress.rate():,.0f} jobs/s"
    )
    if progress.errors:
        counts += f"  {len(progress.errors)} errors"
    if bar:
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {counts}\x1b[K")
    else:
        sys.stderr.write(f"progress: {counts}\n")
    sys.stderr.flush()


async def _engine_version(boss: Boss) -> str:
    # the one statement of the demo: qcore has no verb for the server's version
    rows = await boss.db.execute("SELECT version() AS version")
    return str(rows[0]["version"]).split(" on ", 1)[0]  # "PostgreSQL 18.6 (PGlite 0.5.14)"


def _redacted(dsn: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)


def say(message: str) -> None:
    print(message, flush=True)


def print_summary(summary: Summary) -> None:
    recovered = summary.retried - summary.dead_lettered
    rate = summary.jobs / max(summary.work_seconds, 1e-9)
    print(
        "\n".join(
            [
                "summary",
                f"  jobs            {summary.jobs:>9,}",
                f"  completed       {summary.completed:>9,}",
                f"  retried         {summary.retried:>9,}   ({recovered:,} then succeeded)",
                f"  dead-lettered   {summary.dead_lettered:>9,}   (in queue {DEAD_LETTER!r})",
                f"  elapsed         {summary.elapsed:>9.1f} s (sending {summary.send_seconds:.1f}"
                f" s, working {summary.work_seconds:.1f} s)",
                f"  throughput      {rate:>9,.0f} jobs/s worked",
                f"  engine          {summary.engine}",
            ]
        ),
        flush=True,
    )


# --------------------------------------------------------------------------- the command


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parser(commands: Any) -> None:
    """``qcore demo``'s arguments."""
    demo = commands.add_parser(
        "demo", help="run a queue end to end on an embedded PGlite (or --dsn)"
    )
    demo.add_argument("--dsn", help="run against this PostgreSQL instead of PGlite")
    demo.add_argument("--jobs", type=_positive, default=10_000, help="jobs to send (10000)")
    demo.add_argument("--workers", type=_positive, default=4, help="concurrent workers (4)")
    demo.add_argument("--batch-size", type=_positive, default=50, help="jobs per fetch (50)")
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; its exit status."""
    bar = sys.stdout.isatty() and sys.stderr.isatty()
    try:
        summary = asyncio.run(run_demo(args.dsn, args.jobs, args.workers, args.batch_size, bar=bar))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (QcoreError, DemoStalled) as exc:
        print(f"qcore demo failed: {exc}", file=sys.stderr)
        return 1
    print_summary(summary)
    return 0

"""``qcore queues`` counting live, ``qcore queue`` (show, create, update, delete) and
``qcore job`` on a dead-letter job, in a subprocess against the local PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from qcore import Boss
from qcore.job import Queue
from tests.cli import run_qcore
from tests.conftest import admin_execute
from tests.dead_letters import MARKUP, fail_into_dead_letter

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"cli_queue_{uuid.uuid4().hex[:8]}"

    async def install() -> None:
        async with Boss(pg_dsn, schema=name, supervise=False, schedule=False):
            pass

    asyncio.run(install())
    try:
        yield name
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {name} CASCADE", pg_dsn)


def qcore(*args: str, dsn: str, schema: str) -> subprocess.CompletedProcess[str]:
    return run_qcore(*args, "--schema", schema, env={"QCORE_DATABASE_URL": dsn})


def read_queue(dsn: str, schema: str, name: str) -> Queue | None:
    async def read() -> Queue | None:
        async with Boss(dsn, schema=schema, supervise=False, schedule=False) as boss:
            return await boss.get_queue(name)

    return asyncio.run(read())


def test_queues_counts_jobs_sent_a_moment_ago(pg_dsn: str, schema: str) -> None:
    async def send() -> None:
        async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
            await boss.create_queue("mail")
            await boss.supervise()  # counted once, with nothing in it
            for n in range(3):
                await boss.send("mail", {"n": n})

    asyncio.run(send())
    done = qcore("queues", dsn=pg_dsn, schema=schema)
    assert done.returncode == 0, done.stderr
    header, line = done.stdout.splitlines()
    row = dict(zip(header.split(), line.split(), strict=False))
    assert row["name"] == "mail" and row["queued"] == "3" and row["ready"] == "3", done.stdout
    [as_json] = json.loads(qcore("queues", "--json", dsn=pg_dsn, schema=schema).stdout)
    assert as_json["queued_count"] == 3 and as_json["total_count"] == 3
    one = json.loads(qcore("queue", "mail", "--json", dsn=pg_dsn, schema=schema).stdout)
    assert one["name"] == "mail" and one["queued_count"] == 3
    shown = qcore("queue", "show", "mail", dsn=pg_dsn, schema=schema)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines()[1:])
    assert fields["queued_count"] == "3" and fields["retry_limit"] == "2"


def test_queue_create_and_update(pg_dsn: str, schema: str) -> None:
    assert qcore("queue", "create", "mail-dlq", dsn=pg_dsn, schema=schema).returncode == 0
    done = qcore(
        "queue", "create", "mail", "--policy", "singleton", "--retry-limit", "5",
        "--retry-delay", "10", "--retry-backoff", "--retry-delay-max", "300",
        "--expire-in", "60", "--retention", "3600", "--delete-after", "7200",
        "--dead-letter", "mail-dlq", "--warning-queue-size", "50",
        "--heartbeat", "30", "--no-notify",
        dsn=pg_dsn, schema=schema,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "created queue mail"
    queue = read_queue(pg_dsn, schema, "mail")
    assert queue is not None
    assert (queue.policy, queue.retry_limit, queue.retry_delay, queue.retry_backoff) == (
        "singleton", 5, 10, True,
    )  # fmt: skip
    assert (queue.retry_delay_max, queue.expire_in_seconds, queue.retention_seconds) == (
        300, 60, 3600,
    )  # fmt: skip
    assert (queue.delete_after_seconds, queue.dead_letter, queue.warning_queue_size) == (
        7200, "mail-dlq", 50,
    )  # fmt: skip
    assert (queue.heartbeat_seconds, queue.notify) == (30, False)
    done = qcore(
        "queue", "update", "mail", "--retry-limit", "1", "--no-retry-backoff",
        "--no-dead-letter", "--notify",
        dsn=pg_dsn, schema=schema,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "updated queue mail"
    queue = read_queue(pg_dsn, schema, "mail")
    assert queue is not None
    assert (queue.retry_limit, queue.retry_backoff, queue.dead_letter, queue.notify) == (
        1, False, None, True,
    )  # fmt: skip
    assert queue.expire_in_seconds == 60  # what was not given stays


def test_queue_create_when_it_exists_changes_nothing_and_says_so(pg_dsn: str, schema: str) -> None:
    assert qcore("queue", "create", "mail", dsn=pg_dsn, schema=schema).returncode == 0
    again = qcore("queue", "create", "mail", "--retry-limit", "9", dsn=pg_dsn, schema=schema)
    assert again.returncode == 1
    assert "exists already" in again.stderr and "qcore queue update" in again.stderr
    assert "Traceback" not in again.stderr
    queue = read_queue(pg_dsn, schema, "mail")
    assert queue is not None and queue.retry_limit == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create", "mail", "--retry-limit", "-1"), "retry_limit"),
        (("create", "mail", "--expire-in", "0"), "expire_in_seconds"),
        (("create", "mail", "--policy", "fastest"), "policy must be one of"),
        (("create", "bad name!"), "queue name"),
        (("create", "mail", "--dead-letter", "mail"), "its own dead letter queue"),
        (("create", "mail", "--retry-delay-max", "5"), "retry_backoff"),
        (("update", "mail", "--heartbeat", "3"), "heartbeat_seconds"),
    ],
)
def test_bad_values_are_refused_with_one_line(
    pg_dsn: str, schema: str, args: tuple[str, ...], message: str
) -> None:
    done = qcore("queue", *args, dsn=pg_dsn, schema=schema)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert lines[0].startswith(f"qcore queue {args[0]}: ")
    assert read_queue(pg_dsn, schema, "mail") is None


def test_update_and_delete_of_what_is_not_there(pg_dsn: str, schema: str) -> None:
    missing = qcore("queue", "update", "nosuch", "--retry-limit", "1", dsn=pg_dsn, schema=schema)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    nothing = qcore("queue", "update", "nosuch", dsn=pg_dsn, schema=schema)
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
    assert qcore("queue", "show", "nosuch", dsn=pg_dsn, schema=schema).returncode == 1


def test_queue_delete_needs_yes(pg_dsn: str, schema: str) -> None:
    assert qcore("queue", "create", "mail", dsn=pg_dsn, schema=schema).returncode == 0
    refused = qcore("queue", "delete", "mail", dsn=pg_dsn, schema=schema)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert read_queue(pg_dsn, schema, "mail") is not None
    done = qcore("queue", "delete", "mail", "--yes", dsn=pg_dsn, schema=schema)
    assert done.returncode == 0 and done.stdout.strip() == "deleted queue mail"
    assert read_queue(pg_dsn, schema, "mail") is None


def test_job_of_a_dead_letter_queue_says_why_its_source_died(pg_dsn: str, schema: str) -> None:
    async def fill() -> tuple[str, str]:
        async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
            await boss.create_queue("orders-dlq")
            await boss.create_queue(
                "orders", retry_limit=1, retry_delay=0, dead_letter="orders-dlq"
            )
            dead, source = await fail_into_dead_letter(boss, "orders", "orders-dlq")
            return str(dead.id), str(source)

    dead, source = asyncio.run(fill())
    done = qcore("job", "orders-dlq", dead, dsn=pg_dsn, schema=schema)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "dead letter of" in out and "orders" in out and source in out
    assert f"RuntimeError: {MARKUP}" in out  # the last error and its traceback's last line
    assert "in explode" in out
    assert "2 of 2" in out
    as_json = json.loads(
        qcore("job", "orders-dlq", dead, "--json", dsn=pg_dsn, schema=schema).stdout
    )
    died = as_json["dead_letter_of"]
    assert died["queue"] == "orders" and died["id"] == source
    assert died["message"] == MARKUP and "in explode" in died["stack"]
    assert died["attempts"] == 2 and died["retry_limit"] == 1

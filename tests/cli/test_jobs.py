"""The queue and job commands in a subprocess against the local PostgreSQL: what they
print for people and as JSON, what they change, their exit status, and their errors
(on stderr, never a traceback)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from qcore import Boss
from tests.cli import run_qcore
from tests.conftest import admin_execute

pytestmark = pytest.mark.postgres


@pytest.fixture
def fleet(pg_dsn: str) -> Iterator[tuple[str, list[str]]]:
    """A schema with queue ``mail``: three created jobs, one failed, one cancelled; the
    schema and the five ids (created ×3, failed, cancelled)."""
    schema = f"cli_jobs_{uuid.uuid4().hex[:8]}"

    async def fill() -> list[str]:
        async with Boss(pg_dsn, schema=schema, supervise=False, schedule=False) as boss:
            await boss.create_queue("mail", retry_limit=0)
            await boss.create_queue("other", policy="short")
            ids = [str(await boss.send("mail", {"n": n})) for n in range(5)]
            [a, b, *_] = await boss.fetch("mail", batch_size=2)
            await boss.fail("mail", a.id, {"why": "test"})
            await boss.cancel("mail", b.id)
            return [i for i in ids if i not in (str(a.id), str(b.id))] + [str(a.id), str(b.id)]

    ids = asyncio.run(fill())
    try:
        yield schema, ids
    finally:
        admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def qcore(*args: str, dsn: str, schema: str) -> subprocess.CompletedProcess[str]:
    return run_qcore(*args, "--schema", schema, env={"QCORE_DATABASE_URL": dsn})


def test_queues_lists_each_queue(pg_dsn: str, fleet: tuple[str, list[str]]) -> None:
    schema, _ = fleet
    done = qcore("queues", dsn=pg_dsn, schema=schema)
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split() == [
        "name",
        "policy",
        "queued",
        "ready",
        "active",
        "failed",
        "total",
        "oldest",
    ]
    assert [line.split()[:2] for line in lines] == [["mail", "standard"], ["other", "short"]]
    as_json = json.loads(qcore("queues", "--json", dsn=pg_dsn, schema=schema).stdout)
    assert [q["name"] for q in as_json] == ["mail", "other"]


def test_jobs_by_state_and_one_job(pg_dsn: str, fleet: tuple[str, list[str]]) -> None:
    schema, ids = fleet
    done = qcore("jobs", "mail", "--state", "created", dsn=pg_dsn, schema=schema)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()[1:]]
    assert sorted(listed) == sorted(ids[:3])
    two = json.loads(
        qcore(
            "jobs",
            "mail",
            "--state",
            "failed",
            "--state",
            "cancelled",
            "--json",
            dsn=pg_dsn,
            schema=schema,
        ).stdout
    )
    assert sorted(j["state"] for j in two) == ["cancelled", "failed"]
    assert (
        len(
            json.loads(
                qcore("jobs", "mail", "--limit", "2", "--json", dsn=pg_dsn, schema=schema).stdout
            )
        )
        == 2
    )
    one = json.loads(qcore("job", "mail", ids[3], "--json", dsn=pg_dsn, schema=schema).stdout)
    assert one["state"] == "failed" and one["output"] == {"why": "test"}
    table = qcore("job", "mail", ids[3], dsn=pg_dsn, schema=schema).stdout
    assert "state" in table and "failed" in table


def test_job_commands_change_jobs(pg_dsn: str, fleet: tuple[str, list[str]]) -> None:
    schema, ids = fleet
    done = qcore("retry", "mail", ids[3], dsn=pg_dsn, schema=schema)
    assert done.returncode == 0 and done.stdout.strip() == "retry: 1 of 1 jobs"
    result = json.loads(qcore("resume", "mail", ids[4], "--json", dsn=pg_dsn, schema=schema).stdout)
    assert result["affected"] == 1
    assert qcore("cancel", "mail", *ids[:2], dsn=pg_dsn, schema=schema).stdout.strip() == (
        "cancel: 2 of 2 jobs"
    )
    assert qcore("delete", "mail", ids[2], dsn=pg_dsn, schema=schema).returncode == 0
    states = json.loads(qcore("jobs", "mail", "--json", dsn=pg_dsn, schema=schema).stdout)
    assert sorted(j["state"] for j in states) == ["cancelled", "cancelled", "created", "retry"]


def test_purge_needs_yes_and_deletes(pg_dsn: str, fleet: tuple[str, list[str]]) -> None:
    schema, _ = fleet
    refused = qcore("purge", "mail", "--state", "queued", dsn=pg_dsn, schema=schema)
    assert refused.returncode == 2 and "add --yes" in refused.stdout
    done = qcore("purge", "mail", "--state", "queued", "--yes", dsn=pg_dsn, schema=schema)
    assert done.returncode == 0 and done.stdout.strip() == "deleted 3 queued jobs of mail"
    left = json.loads(qcore("jobs", "mail", "--json", dsn=pg_dsn, schema=schema).stdout)
    assert sorted(j["state"] for j in left) == ["cancelled", "failed"]


def test_mistakes_are_errors_not_tracebacks(pg_dsn: str, fleet: tuple[str, list[str]]) -> None:
    schema, _ = fleet
    for args, message in (
        (("jobs", "nosuch"), "nosuch"),
        (("job", "mail", "not-a-uuid"), "UUID"),
        (("job", "mail", str(uuid.uuid4())), "holds no job"),
        (("retry", "mail", "not-a-uuid"), "UUID"),
    ):
        done = qcore(*args, dsn=pg_dsn, schema=schema)
        assert done.returncode == 1, (args, done.stdout)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    bad_state = qcore("jobs", "mail", "--state", "zombie", dsn=pg_dsn, schema=schema)
    assert bad_state.returncode == 2 and "invalid choice" in bad_state.stderr

"""Workers through failures of the database and of the process.

* outage: every qcore connection is terminated (``pg_terminate_backend``) several
  times while eight loops drain 5,000 jobs; the workers emit ``error`` and resume by
  themselves, and every job is completed, its handler run exactly once;
* crash: a worker process is killed (SIGKILL) in the middle of a job; the monitor
  pass fails the job once it has expired, another process does it, and nothing is
  lost or done twice.

Both need the real engine with sessions of their own (a Boss with its own pool on the
provisioned database, a second process): they skip on emulated backends, whose engine
here is PostgreSQL itself (already covered by ``postgres``), and on single-session
engines (PGlite).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qcore import Boss
from qcore.backend import Backend
from qcore.conformance.helpers import until
from qcore.conformance.provisioners import Provisioner
from qcore.errors import ConnectionLostError, DatabaseError
from qcore.job import Job, JobState

pytestmark = pytest.mark.feature("recovery")

ROOT = Path(__file__).resolve().parents[1]


def need_own_sessions(backend: Backend, provisioned: Provisioner) -> None:
    if backend.capabilities.single_session:
        pytest.skip(f"{backend.name} lacks sessions of its own (single_session engine)")
    if provisioned.emulated:
        pytest.skip(
            f"{backend.name} runs emulated here: killing its sessions or running a second"
            " process would exercise PostgreSQL (the postgres backend) without the guard"
        )


@pytest.mark.usefixtures("installed")
async def test_workers_ride_out_terminated_connections(
    backend: Backend, provisioned: Provisioner, schema: str
) -> None:
    need_own_sessions(backend, provisioned)
    tag = f"qcore-outage-{uuid.uuid4().hex[:8]}"
    boss = Boss(
        provisioned.url, backend=backend, schema=schema, supervise=False, application_name=tag
    )
    errors: list[BaseException] = []
    boss.on("error", errors.append)
    await boss.start()
    admin = await psycopg.AsyncConnection.connect(provisioned.url, autocommit=True)
    total = 5000
    runs: Counter[uuid.UUID] = Counter()
    try:
        await boss.create_queue("outage", expire_in_seconds=3, retry_limit=5, retry_delay=0)
        ids = await boss.insert("outage", [{"data": {"i": i}} for i in range(total)])
        assert ids is not None and len(ids) == total

        async def handler(batch: list[Job]) -> None:
            for job in batch:
                runs[job.id] += 1
            await asyncio.sleep(0.001)

        await boss.work(
            "outage", handler, batch_size=5, local_concurrency=8, polling_interval_seconds=0.5
        )

        def past(mark: int) -> bool:
            return len(runs) > mark

        killed = 0
        for _ in range(3):
            await until(functools.partial(past, killed + 300), 10.0, what="draining")
            cur = await admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (tag,),
            )
            row = await cur.fetchone()
            assert row is not None and row[0] > 0
            killed = len(runs)
        await until(lambda: len(runs) == total, 20.0, what="every job handled")

        async def remaining() -> int:
            rows = await boss.db.execute(
                f'SELECT count(*)::int AS n FROM "{schema}".job'
                " WHERE name = 'outage' AND state <> 'completed'"
            )
            return int(rows[0]["n"])

        try:
            await until(lambda: _is_zero(remaining()), 5.0, what="all completed")
        except AssertionError:
            # a claim whose reply was lost with its connection stays active until it
            # expires; the monitor then puts it back and a worker does it
            await asyncio.sleep(3.2)
            await boss.supervise("outage")
            await until(lambda: _is_zero(remaining()), 10.0, what="all completed")
        assert len(runs) == total and set(runs.values()) == {1}  # each handler ran once
        assert any(isinstance(e, (ConnectionLostError, DatabaseError)) for e in errors)
    finally:
        await admin.close()
        await boss.stop(timeout=2)


async def _is_zero(count: Any) -> bool:
    return bool(await count == 0)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from qcore import Boss

    async def main():
        boss = Boss(sys.argv[1], schema=sys.argv[2], supervise=False)
        await boss.start()

        async def handler(jobs):
            print("started", jobs[0].id, flush=True)
            await asyncio.sleep(3600)

        await boss.work("crash", handler, polling_interval_seconds=0.5)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


@pytest.mark.usefixtures("installed")
async def test_a_killed_worker_process_loses_nothing(
    backend: Backend, provisioned: Provisioner, schema: str
) -> None:
    need_own_sessions(backend, provisioned)
    boss = Boss(provisioned.url, backend=backend, schema=schema, supervise=False)
    await boss.start()
    child = None
    try:
        await boss.create_queue("crash", expire_in_seconds=1, retry_limit=1, retry_delay=0)
        job_id = await boss.send("crash", {"n": 1})
        assert job_id is not None
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            provisioned.url,
            schema,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line.decode().split() == ["started", str(job_id)]
        child.send_signal(signal.SIGKILL)
        await child.wait()
        child = None

        taken = await boss.get_job_by_id("crash", job_id)
        assert taken is not None and taken.state is JobState.ACTIVE and taken.retry_count == 0
        runs: list[Job] = []

        async def handler(batch: list[Job]) -> str:
            runs.extend(batch)
            return "done here"

        await boss.work("crash", handler, polling_interval_seconds=0.5)
        await asyncio.sleep(1.1)  # past expire_in_seconds
        await boss.supervise("crash")
        retried = await boss.get_job_by_id("crash", job_id)
        assert retried is not None and retried.state in (
            JobState.RETRY,
            JobState.ACTIVE,
            JobState.COMPLETED,
        )
        boss._wake("crash")

        async def completed() -> Job | None:
            job = await boss.get_job_by_id("crash", job_id)
            return job if job is not None and job.state is JobState.COMPLETED else None

        done: Job = await until(completed, 5.0, what="done by the other process")
        assert done.retry_count == 1 and done.output == {"value": "done here"}
        assert [j.id for j in runs] == [job_id]
        await boss.supervise("crash")  # nothing left to expire: it stays done
        again = await boss.get_job_by_id("crash", job_id)
        assert again is not None and again.state is JobState.COMPLETED
        assert [j.id for j in runs] == [job_id]
    finally:
        if child is not None:
            child.kill()
            await child.wait()
        await boss.stop(timeout=1)

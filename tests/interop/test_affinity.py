"""Affinity beside the real pg-boss 12.38 on one schema: pg-boss knows nothing of
qcore's patterns (they live in qcore's own table), so a pg-boss worker on the queue
claims a patterned job like any other, whoever it was meant for; qcore servers keep
honouring the pattern. Documented in the pg-boss guide. Local PostgreSQL only."""

from __future__ import annotations

import dataclasses

from qcore.affinity import Affinity
from qcore.context import Context
from qcore.verbs import jobs, queues
from tests.interop.pgboss import in_thread, interop_marks

pytestmark = interop_marks()


async def test_pgboss_claims_patterned_jobs_as_plain_ones(pg_dsn: str, shared: Context) -> None:
    keyed = dataclasses.replace(shared, affinity=Affinity(key="a:ram-8gb:cpu-4cor"))
    other = dataclasses.replace(shared, affinity=Affinity(key="b:ram-2gb:cpu-1cor"))
    await queues.create_queue(keyed, "shared")
    meant_for_a = await jobs.send(
        keyed, "shared", {"n": 1}, preferred_instance_key_pattern="cpu-4cor"
    )
    for_nobody = await jobs.send(keyed, "shared", {"n": 2}, preferred_instance_key_pattern="^z")
    assert await jobs.fetch(other, "shared", batch_size=10) == []  # qcore's b honours them
    [theirs] = await in_thread(
        pg_dsn, shared, {"op": "fetch", "args": ["shared", {"batchSize": 10}]}
    )
    assert sorted(j["id"] for j in theirs) == sorted([str(meant_for_a), str(for_nobody)])
    # pg-boss's rows carry nothing of the pattern; the job table is pg-boss's alone
    [got] = await in_thread(
        pg_dsn, shared, {"op": "getJobById", "args": ["shared", str(meant_for_a)]}
    )
    assert got["state"] == "active" and "preferredInstanceKeyPattern" not in got

"""A command on jobs by id reads the jobs it names, not every job of the queue in the
state it looks for: on a table whose statistics say few jobs are active or failed (never
analyzed, autovacuum off for it) while 20,000 are, completing, touching, restoring or
retrying ten jobs reaches them by primary key, as a custom plan and as the generic plan
a prepared statement settles on. (Written ``state = 'active'``, the condition led the
planner into the partial index i14 and through every active job of the queue.)"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from qcore import Boss
from qcore.sql import jobs as job_sql
from qcore.sql._statement import Statement
from tests.plans import Undo, custom_and_generic_plans, rows_read

pytestmark = [pytest.mark.feature("lifecycle"), pytest.mark.postgres]

SCHEMA = "qcore_settle_plan"
#: jobs of the queue in the state each command looks for
CROWD = 20_000
#: the jobs each command names
TARGETS = 10

Build = Callable[[str, str], Statement]

#: each command: the state of the jobs it looks for, its statement, and what its jobs
#: show afterwards
COMMANDS: dict[str, tuple[str, Build, str]] = {
    "complete": ("active", lambda q, t: job_sql.complete_jobs(q, table=t), "state = 'completed'"),
    "complete-fenced": (
        "active",
        lambda q, t: job_sql.complete_jobs(q, fenced=True, table=t),
        "state = 'completed'",
    ),
    "complete-each": (
        "active",
        lambda q, t: job_sql.complete_each(q, table=t),
        "state = 'completed' AND output = '{\"ok\": true}'",
    ),
    "settle-and-claim": (
        "active",
        lambda q, t: job_sql.fetch_jobs(q, skip_locked=True, table=t, settle=True, limit=100),
        "state = 'completed'",
    ),
    "touch": (
        "active",
        lambda q, t: job_sql.touch_jobs(q, fenced=True, table=t),
        "heartbeat_on IS NOT NULL",
    ),
    "restore": (
        "active",
        lambda q, t: job_sql.restore_jobs(q, fenced=True, table=t),
        "state = 'created'",
    ),
    "cancel": ("active", lambda q, t: job_sql.cancel_jobs(q, table=t), "state = 'cancelled'"),
    "retry": ("failed", lambda q, t: job_sql.retry_jobs(q, table=t), "state = 'retry'"),
}


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False)
    async with instance:
        yield instance
        await instance.db.execute_script(f"DROP SCHEMA {SCHEMA} CASCADE")


@pytest.mark.parametrize("partition", [False, True], ids=["shared", "partition"])
@pytest.mark.parametrize("command", list(COMMANDS))
async def test_a_command_by_id_reads_its_jobs_not_all_in_their_state(
    boss: Boss, command: str, partition: bool
) -> None:
    state, build, acted_on = COMMANDS[command]
    await boss.create_queue("q", partition=partition)
    (queue,) = await boss.db.execute(f"SELECT table_name FROM {SCHEMA}.queue WHERE name = 'q'")
    table = str(queue["table_name"])
    await boss.db.execute_script(f"ALTER TABLE {SCHEMA}.{table} SET (autovacuum_enabled = false)")
    # the crowd in one statement, as a burst of claims (or failures) leaves it
    await boss.db.execute(
        f"INSERT INTO {SCHEMA}.job (name, data, policy, state, started_on, retry_count)"
        f" SELECT 'q', to_jsonb(i), 'standard', $1::{SCHEMA}.job_state, now(), 0"
        " FROM generate_series(1, $2::int) AS i",
        [state, CROWD],
    )
    (stats,) = await boss.db.execute(
        "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
        " WHERE schemaname = $1 AND relname = $2",
        [SCHEMA, table],
    )
    assert stats == {"last_analyze": None, "last_autoanalyze": None}
    rows = await boss.db.execute(
        f"SELECT id FROM {SCHEMA}.job WHERE name = 'q' ORDER BY id LIMIT {TARGETS}"
    )
    ids = [r["id"] for r in rows]
    statement = build(boss.context().q, table)
    known: dict[str, Any] = {
        "queue": "q",
        "table": table,
        "policy": "standard",
        "matching": [],
        "ids": ids,
        "plain_ids": [],
        "fence_ids": ids,
        "fence_counts": [0] * len(ids),
        "output": None,
        "outputs": json.dumps([{"id": str(i), "output": {"ok": True}} for i in ids]),
        "channel": "unused",
    }
    params = statement.bind(**{name: known[name] for name in statement.params})
    tables = {table, "job"}
    plans: list[dict[str, Any]] = []
    with contextlib.suppress(Undo):
        async with boss.db.transaction() as tx:
            plans += await custom_and_generic_plans(tx, statement.sql, params, analyze=True)
            raise Undo  # the changes EXPLAIN ANALYZE made
    assert len(plans) == 2
    for plan in plans:
        # each named job read once per plan node that reaches it (the update, and the
        # settle-and-claim's look at the jobs it completes), never the crowd
        assert rows_read(plan, tables) <= 4 * TARGETS, json.dumps(plan)[:2000]
    # and the command acts on exactly the jobs named
    await boss.db.execute(statement.sql, params)
    changed = await boss.db.execute(
        f"SELECT id FROM {SCHEMA}.job WHERE name = 'q' AND {acted_on} ORDER BY id"
    )
    assert [r["id"] for r in changed] == ids

"""docs/guide/permissions.md: the page's own grants are enough, and their absence is clear.

The statements are read from the page's ```sql blocks (so the page cannot drift), with
its role, schema and database names replaced by names unique to this run; roles are
cluster-wide, so they are dropped in ``finally``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from qcore import Boss
from qcore.errors import DatabaseError
from qcore.events import WarningEvent
from qcore.job import Job
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("permissions")]

PAGE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "permissions.md"
_SQL = re.compile(r"^```sql\n(.*?)^```", re.S | re.M)


def statements(names: dict[str, str]) -> tuple[list[str], list[str]]:
    """The page's statements for the owner and for the application, names replaced."""
    blocks = _SQL.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 2, "the page has one sql block per role"
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    owner, app = (
        [pattern.sub(lambda m: names[m[1]], line) for line in block.splitlines() if line.strip()]
        for block in blocks
    )
    return owner, app


def schema_for_owner(names: dict[str, str]) -> str:
    """The page's other way: the schema created for the owner (one inline statement)."""
    [sql] = re.findall(r"`(CREATE SCHEMA \w+ AUTHORIZATION \w+);`", PAGE.read_text("utf-8"))
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m[1]], sql)


def as_role(dsn: str, role: str) -> str:
    p = conninfo_to_dict(dsn)
    return f"postgresql://{role}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}"


async def test_the_pages_grants_run_the_core_and_their_absence_is_a_clear_error(
    pg_dsn: str,
) -> None:
    tag = uuid.uuid4().hex[:10]
    owner, app, bare, schema = f"qo_{tag}", f"qa_{tag}", f"qn_{tag}", f"perm_{tag}"
    database = str(conninfo_to_dict(pg_dsn)["dbname"])
    owner_sql, app_sql = statements(
        {"qcore_owner": owner, "qcore_app": app, "pgboss": schema, "app": database}
    )
    try:
        for sql in owner_sql:
            admin_execute(sql, pg_dsn)
        async with Boss(as_role(pg_dsn, owner), schema=schema, supervise=False, schedule=False):
            pass  # installs the schema as its owner
        for sql in app_sql:
            admin_execute(sql, pg_dsn)

        boss = Boss(as_role(pg_dsn, app), schema=schema, migrate=False, use_listen_notify=True)
        errors: list[Exception] = []
        warnings: list[WarningEvent] = []
        boss.on("error", errors.append)
        boss.on("warning", warnings.append)
        await boss.start()
        try:
            await boss.create_queue("perm_dead")
            await boss.create_queue("perm", retry_limit=1, dead_letter="perm_dead")
            job_id = await boss.send("perm", {"n": 1})
            [job] = await boss.fetch("perm")
            assert job.id == job_id
            await boss.complete("perm", job)
            await boss.send("perm", {"n": 2})
            [job] = await boss.fetch("perm")
            await boss.fail("perm", job, {"why": "once"})  # retried: one more attempt
            [retried] = await boss.fetch("perm", ignore_start_after=True)
            assert retried.id == job.id
            await boss.complete("perm", retried)

            done: list[uuid.UUID] = []

            async def handler(jobs: list[Job]) -> None:
                done.extend(j.id for j in jobs)

            ids = await boss.insert("perm", [{"data": {"n": n}} for n in range(3)])
            await boss.work("perm", handler, polling_interval_seconds=0.5)
            for _ in range(40):
                if len(done) >= 3:
                    break
                await asyncio.sleep(0.25)
            assert set(ids or []) <= set(done)
            await boss.schedule("perm", "*/5 * * * *", {"cron": True})
            assert await boss.get_schedules("perm")
            await boss.unschedule("perm")
            await boss.subscribe("perm.event", "perm")
            assert set(await boss.publish("perm.event", {"n": 4})) == {"perm"}
            await boss.unsubscribe("perm.event", "perm")
            flow = await boss.flow(
                [
                    {"ref": "a", "name": "perm"},
                    {"ref": "b", "name": "perm", "depends_on": ["a"]},
                ]
            )
            assert set(flow) == {"a", "b"}
            await boss.supervise()
            await boss.supervise("perm")
            with pytest.raises(DatabaseError) as partitioned:  # a table: the owner's to create
                await boss.create_queue("perm_part", partition=True)
            assert partitioned.value.sqlstate == "42501"
            await boss.create_queue("perm_tmp")
            await boss.delete_queue("perm_tmp")
        finally:
            await boss.stop(graceful=False)
        assert not errors, errors  # no step of the pass or the workers was refused
        assert "listen_notify_unavailable" not in {w.type for w in warnings}

        admin_execute(f'CREATE ROLE "{bare}" LOGIN', pg_dsn)
        stranger = Boss(as_role(pg_dsn, bare), schema=schema, migrate=False, supervise=False)
        with pytest.raises(DatabaseError) as denied:
            await stranger.start()
            try:
                await stranger.send("perm", {"n": 9})
            finally:
                await stranger.stop(graceful=False)
        assert denied.value.sqlstate == "42501", denied.value
        assert "permission denied" in str(denied.value)
        assert not denied.value.retryable
    finally:
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)
        for role in (app, bare, owner):
            if admin_execute(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'", pg_dsn):
                admin_execute(f'DROP OWNED BY "{role}"', pg_dsn)
                admin_execute(f'DROP ROLE "{role}"', pg_dsn)


async def test_an_owner_given_the_schema_installs_with_create_schema_false(pg_dsn: str) -> None:
    tag = uuid.uuid4().hex[:10]
    owner, schema = f"qo_{tag}", f"perm_{tag}"
    try:
        admin_execute(f'CREATE ROLE "{owner}" LOGIN', pg_dsn)
        admin_execute(schema_for_owner({"qcore_owner": owner, "pgboss": schema}), pg_dsn)
        url = as_role(pg_dsn, owner)
        with pytest.raises(DatabaseError) as denied:  # IF NOT EXISTS still needs the grant
            await Boss(url, schema=schema, supervise=False, schedule=False).start()
        assert denied.value.sqlstate == "42501"
        async with Boss(
            url, schema=schema, create_schema=False, supervise=False, schedule=False
        ) as boss:
            await boss.create_queue("part", partition=True)  # the owner may create tables
            assert await boss.send("part", {"n": 1})
    finally:
        admin_execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', pg_dsn)
        if admin_execute(f"SELECT 1 FROM pg_roles WHERE rolname = '{owner}'", pg_dsn):
            admin_execute(f'DROP OWNED BY "{owner}"', pg_dsn)
            admin_execute(f'DROP ROLE "{owner}"', pg_dsn)

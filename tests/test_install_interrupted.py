"""An install that fails half-way leaves nothing qcore refuses: on an adapter with real
transactions it leaves nothing at all (one transaction), and through an ``execute_sql``
object, whose statements commit one by one, the next ``start()`` completes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from qcore import Boss
from qcore.conformance.suite.test_schema import Recording, catalog
from qcore.db import Database, connect
from qcore.errors import DatabaseError
from tests.adapters import SyncExecuteSql

pytestmark = [pytest.mark.feature("schema"), pytest.mark.postgres]

REFUSED = "CREATE INDEX"


class RefusesOneStatement:
    """Fails the first statement containing ``REFUSED``, once."""

    def __init__(self) -> None:
        self.refused = False

    def check(self, sql: str) -> None:
        if not self.refused and REFUSED in sql:
            self.refused = True
            raise DatabaseError(f"refused by the test: {sql[:60]}", sqlstate="42501")


class FailingExecuteSql(SyncExecuteSql):
    """A user's blocking ``execute_sql`` object that refuses one statement."""

    def __init__(self, conn: Any, refuse: RefusesOneStatement) -> None:
        super().__init__(conn)
        self.refuse = refuse

    def execute_sql(self, text: str, values: list[Any]) -> list[dict[str, Any]]:
        self.refuse.check(text)
        return super().execute_sql(text, values)


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[Database]:
    adapter = await connect(pg_dsn, max=2)
    try:
        yield adapter
    finally:
        await adapter.close()


async def _clean_catalog(db: Database) -> dict[str, Any]:
    async with Boss(db=db, schema="qcore_install_clean", supervise=False):
        pass
    try:
        return await catalog(db, "qcore_install_clean")
    finally:
        await db.execute_script("DROP SCHEMA qcore_install_clean CASCADE")


async def test_a_failed_install_in_one_transaction_leaves_nothing(db: Database) -> None:
    schema = "qcore_install_atomic"
    refuse = RefusesOneStatement()
    boss = Boss(db=Recording(db, check=refuse.check), schema=schema, supervise=False)
    with pytest.raises(DatabaseError, match="refused by the test"):
        await boss.start()
    assert refuse.refused
    rows = await db.execute("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])
    assert rows == []  # the schema itself was rolled back with the rest
    async with Boss(db=db, schema=schema, supervise=False) as again:
        assert await again.schema_version() == 46
    try:
        assert await catalog(db, schema) == await _clean_catalog(db)
    finally:
        await db.execute_script(f"DROP SCHEMA {schema} CASCADE")


async def test_a_failed_install_through_execute_sql_is_completed_by_the_next_start(
    db: Database, pg_dsn: str
) -> None:
    schema = "qcore_install_resumed"
    conn = psycopg.connect(pg_dsn, autocommit=True)
    try:
        refuse = RefusesOneStatement()
        boss = Boss(db=FailingExecuteSql(conn, refuse), schema=schema, supervise=False)
        with pytest.raises(DatabaseError, match="refused by the test"):
            await boss.start()
        assert refuse.refused
        left = await db.execute(
            "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1", [schema]
        )
        assert left[0]["n"] > 0  # statements before the refused one stayed
        async with Boss(db=FailingExecuteSql(conn, refuse), schema=schema, supervise=False) as b:
            assert await b.schema_version() == 46
            await b.create_queue("q")
            assert await b.send("q", {"ok": True}) is not None
            await b.delete_queue("q")  # back to what a clean install has
        assert await catalog(db, schema) == await _clean_catalog(db)
    finally:
        conn.close()
        await db.execute_script(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

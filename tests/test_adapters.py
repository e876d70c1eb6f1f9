"""The adapter contract, run against every driver on the local PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore.errors import ConnectionLostError, DatabaseError, UniqueViolation
from tests.adapters import (
    CALLER_TX,
    FACTORIES,
    LISTEN,
    OWN_TX,
    RECOVERS,
    ROUND_TRIP_CASES,
    Subject,
    check_round_trip,
)
from tests.conftest import admin_execute, terminate_others

pytestmark = [pytest.mark.postgres, pytest.mark.feature("adapters")]


@pytest.fixture(params=sorted(FACTORIES))
async def subject(request: pytest.FixtureRequest, pg_dsn: str) -> AsyncIterator[Subject]:
    async with FACTORIES[request.param](pg_dsn) as subject:
        yield subject


@pytest.fixture
def table(pg_dsn: str) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    admin_execute(f"CREATE TABLE {name} (id int PRIMARY KEY, note text)", pg_dsn)
    return name


def count(pg_dsn: str, table: str) -> int:
    return int(admin_execute(f"SELECT count(*) FROM {table}", pg_dsn)[0][0])


async def settle(subject: Subject) -> None:
    """End the caller's transaction, as the caller's own code would."""
    if subject.commit is not None:
        await subject.commit()


@ROUND_TRIP_CASES
async def test_value_round_trip(subject: Subject, sql_type: str, value: Any, expected: Any) -> None:
    await check_round_trip(subject.db, sql_type, value, expected)


async def test_in_transaction_only_where_someone_else_ends_it(subject: Subject) -> None:
    assert subject.db.in_transaction is (CALLER_TX in subject.caps)


async def test_rows_are_dicts_and_empty_results(subject: Subject) -> None:
    assert await subject.db.execute("SELECT 1 AS a, 'x' AS b") == [{"a": 1, "b": "x"}]
    assert await subject.db.execute("SELECT 1 AS a WHERE false") == []


async def test_placeholders_outside_literals_only(subject: Subject) -> None:
    sql = (
        "SELECT $1::text AS a, $1::text || $2::text AS twice,"
        " '$1 %s %% ? $2' AS lit, E'\\'$1%' AS esc, \"?column?\" AS q,"
        " $tag$ $1 % ? $tag$ AS dq -- $3 % ?\n"
        ' /* $4 % ? /* nested $5 */ */ FROM (SELECT 1 AS "?column?") s'
    )
    rows = await subject.db.execute(sql, ["x", "y"])
    assert rows == [
        {"a": "x", "twice": "xy", "lit": "$1 %s %% ? $2", "esc": "'$1%", "q": 1, "dq": " $1 % ? "}
    ]


async def test_script_with_do_block_and_dollar_quotes(subject: Subject, pg_dsn: str) -> None:
    name = f"s_{uuid.uuid4().hex[:8]}"
    await subject.db.execute_script(
        f"""
        CREATE TABLE {name} (id int, note text);
        DO $$
        BEGIN
          INSERT INTO {name} VALUES (1, '50% of $1');
          IF (SELECT count(*) FROM {name}) = 1 THEN
            INSERT INTO {name} VALUES (2, $q$it's "quoted"$q$);
          END IF;
        END
        $$;
        CREATE FUNCTION {name}_f() RETURNS int LANGUAGE sql AS $body$ SELECT 42 $body$;
        """
    )
    await settle(subject)
    rows = await subject.db.execute(f"SELECT note, {name}_f() AS f FROM {name} ORDER BY id")
    assert rows == [{"note": "50% of $1", "f": 42}, {"note": 'it\'s "quoted"', "f": 42}]


async def test_commit(subject: Subject, table: str, pg_dsn: str) -> None:
    if not subject.caps & {OWN_TX, CALLER_TX}:
        pytest.skip("custom execute_sql objects have no transaction qcore can open")
    async with subject.db.transaction() as tx:
        await tx.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, "a"])
        await subject.db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [2, "b"])  # joins
        assert subject.db.in_transaction
        if OWN_TX in subject.caps:
            assert count(pg_dsn, table) == 0  # not visible before commit
    await settle(subject)
    assert count(pg_dsn, table) == 2


async def test_rollback_on_error(subject: Subject, table: str, pg_dsn: str) -> None:
    if not subject.caps & {OWN_TX, CALLER_TX}:
        pytest.skip("custom execute_sql objects have no transaction qcore can open")
    with pytest.raises(RuntimeError, match="boom"):
        async with subject.db.transaction() as tx:
            await tx.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, "a"])
            raise RuntimeError("boom")
    await settle(subject)
    assert count(pg_dsn, table) == 0
    await subject.db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [3, "usable afterwards"])
    await settle(subject)
    assert count(pg_dsn, table) == 1


async def test_nested_transaction_joins_parent(subject: Subject, table: str, pg_dsn: str) -> None:
    if not subject.caps & {OWN_TX, CALLER_TX}:
        pytest.skip("custom execute_sql objects have no transaction qcore can open")
    with pytest.raises(RuntimeError):
        async with subject.db.transaction() as outer:
            await outer.execute(f"INSERT INTO {table} VALUES (1, 'outer')")
            async with subject.db.transaction() as inner, outer.transaction() as innermost:
                assert inner is outer and innermost is outer
                await inner.execute(f"INSERT INTO {table} VALUES (2, 'inner')")
            raise RuntimeError("after the inner block: all of it rolls back")
    await settle(subject)
    assert count(pg_dsn, table) == 0


async def test_statements_together_all_or_none(subject: Subject, table: str, pg_dsn: str) -> None:
    """``execute_together``: several statements in one transaction, their rows in order;
    the first to fail undoes those before it and runs none after (psycopg sends them in
    one pipelined exchange, the others in turn)."""
    if not subject.caps & {OWN_TX, CALLER_TX}:
        pytest.skip("custom execute_sql objects have no transaction qcore can open")
    insert = f"INSERT INTO {table} VALUES ($1, $2) RETURNING id"
    rows = await subject.db.execute_together(
        [(insert, [1, "a"]), (f"UPDATE {table} SET note = $1", ["b"]), (insert, [2, "c"])]
    )
    assert rows == [[{"id": 1}], [], [{"id": 2}]]
    await settle(subject)
    assert count(pg_dsn, table) == 2
    with pytest.raises(UniqueViolation):  # the second fails: the first is undone
        await subject.db.execute_together(
            [(insert, [3, "d"]), (insert, [1, "again"]), (insert, [4, "never run"])]
        )
    if subject.rollback is not None:
        await subject.rollback()
    assert count(pg_dsn, table) == 2
    assert admin_execute(f"SELECT note FROM {table} ORDER BY id", pg_dsn) == [("b",), ("c",)]
    async with subject.db.transaction():  # inside a transaction: they join it
        [[row]] = await subject.db.execute_together([(insert, [5, "e"])])
        assert row == {"id": 5} and subject.db.in_transaction
    await settle(subject)
    assert count(pg_dsn, table) == 3


async def test_statement_joins_callers_transaction(
    subject: Subject, table: str, pg_dsn: str
) -> None:
    if CALLER_TX not in subject.caps:
        pytest.skip("this source has no caller-owned transaction to join")
    assert subject.rollback is not None
    assert subject.db.in_transaction  # so qcore never retries inside it
    await subject.db.execute(f"INSERT INTO {table} VALUES (1, 'rolled back by the caller')")
    await subject.rollback()
    assert count(pg_dsn, table) == 0
    await subject.db.execute(f"INSERT INTO {table} VALUES (2, 'committed by the caller')")
    assert count(pg_dsn, table) == 0
    await settle(subject)
    assert count(pg_dsn, table) == 1


async def test_unique_violation_is_typed(subject: Subject, table: str) -> None:
    await subject.db.execute(f"INSERT INTO {table} VALUES (1, 'a')")
    with pytest.raises(UniqueViolation) as info:
        await subject.db.execute(f"INSERT INTO {table} VALUES ($1, 'b')", [1])
    assert info.value.sqlstate == "23505"
    assert not info.value.retryable
    if subject.rollback is not None:
        await subject.rollback()


async def test_syntax_error_is_database_error(subject: Subject) -> None:
    with pytest.raises(DatabaseError) as info:
        await subject.db.execute("SELEC 1\nFROM nowhere")
    assert info.value.sqlstate == "42601"
    assert info.value.statement == "SELEC 1"
    assert type(info.value) is DatabaseError
    if subject.rollback is not None:
        await subject.rollback()


async def test_killed_connection_is_connection_lost(subject: Subject, pg_dsn: str) -> None:
    marker = f"qcore-kill-{uuid.uuid4().hex[:8]}"
    sleeper = asyncio.create_task(subject.db.execute(f"SELECT pg_sleep(5), '{marker}'"))
    for _ in range(100):
        killed = admin_execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            f" WHERE query LIKE '%{marker}%' AND pid <> pg_backend_pid()",
            pg_dsn,
        )[0][0]
        if killed:
            break
        await asyncio.sleep(0.05)
    with pytest.raises(ConnectionLostError) as info:
        await sleeper
    assert info.value.retryable
    if RECOVERS in subject.caps:  # a pool qcore reaches replaces the dead connection
        assert await subject.db.execute("SELECT 1 AS ok") == [{"ok": 1}]
        assert await subject.db.execute("SELECT 2 AS ok") == [{"ok": 2}]


async def test_listen_notify(subject: Subject, pg_dsn: str) -> None:
    if LISTEN not in subject.caps:
        pytest.skip("this adapter cannot hold a dedicated LISTEN connection")
    got: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    reconnected = asyncio.Event()

    async def on_message(channel: str, payload: str) -> None:
        await got.put((channel, payload))

    listener = await subject.db.listen("qcore_test Channel", on_message, reconnected.set)
    try:
        await subject.db.execute("SELECT pg_notify($1, $2)", ["qcore_test Channel", "hello"])
        assert await asyncio.wait_for(got.get(), 5) == ("qcore_test Channel", "hello")
        # the listener survives its connection being killed, and says so
        assert terminate_others(pg_dsn) >= 1
        await asyncio.wait_for(reconnected.wait(), 15)
        admin_execute("SELECT pg_notify('qcore_test Channel', 'from elsewhere')", pg_dsn)
        assert await asyncio.wait_for(got.get(), 5) == ("qcore_test Channel", "from elsewhere")
    finally:
        await listener.close()

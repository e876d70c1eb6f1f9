"""A first look at each backend's engine through the matrix fixtures: one statement,
a jsonb round trip, a transaction, LISTEN/NOTIFY and the locking primitives.

Run on every backend with ``pytest --backend all`` (or ``python -m matrix run``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from qcore.backend import Backend
from qcore.conformance.markers import feature, requires
from qcore.conformance.provisioners import Provisioner
from qcore.db import Database, Json
from qcore.identifiers import quote


@feature("basics")
async def test_select_one(db: Database) -> None:
    assert await db.execute("SELECT 1 AS one") == [{"one": 1}]


@feature("basics")
async def test_jsonb_round_trip(db: Database) -> None:
    value = {"to": "a@example.com", "tries": [1, 2.5, None], "nested": {"ok": True}}
    rows = await db.execute("SELECT $1::jsonb AS v, $2::jsonb AS l", [value, Json(["x", 1])])
    assert rows == [{"v": value, "l": ["x", 1]}]


@feature("basics")
async def test_engine_reports_a_version(provisioned: Provisioner, backend: Backend) -> None:
    assert provisioned.backend is backend
    assert provisioned.engine_version.strip()


async def _make_table(db: Database, schema: str) -> str:
    table = f"{quote(schema)}.{quote('note')}"
    await db.execute_script(f"CREATE TABLE {table} (id int PRIMARY KEY, body text NOT NULL)")
    return table


async def _count(db: Database, table: str) -> int:
    rows = await db.execute(f"SELECT count(*) AS n FROM {table}")
    return int(rows[0]["n"])


@feature("transactions")
async def test_transaction_commits(db: Database, schema: str) -> None:
    table = await _make_table(db, schema)
    async with db.transaction() as tx:
        await tx.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, "first"])
        await db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [2, "joins the transaction"])
        assert db.in_transaction
    assert await _count(db, table) == 2


@feature("transactions")
async def test_transaction_rolls_back_on_error(db: Database, schema: str) -> None:
    table = await _make_table(db, schema)
    with pytest.raises(RuntimeError, match="boom"):
        async with db.transaction() as tx:
            await tx.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, "undone"])
            raise RuntimeError("boom")
    assert await _count(db, table) == 0
    await db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [2, "usable afterwards"])
    assert await _count(db, table) == 1


@feature("notifications")
@requires("listen_notify")
async def test_listen_notify(db: Database) -> None:
    channel = f"qcore_smoke_{uuid.uuid4().hex[:8]}"
    got: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def on_message(ch: str, payload: str) -> None:
        await got.put((ch, payload))

    listener = await db.listen(channel, on_message)
    try:
        await db.execute("SELECT pg_notify($1, $2)", [channel, "hello"])
        assert await asyncio.wait_for(got.get(), 10) == (channel, "hello")
    finally:
        await listener.close()


@feature("locking")
@requires("advisory_locks")
async def test_advisory_lock_in_transaction(db: Database) -> None:
    async with db.transaction() as tx:
        rows = await tx.execute("SELECT pg_try_advisory_xact_lock($1::bigint) AS got", [4242])
        assert rows == [{"got": True}]


@feature("locking")
@requires("skip_locked")
async def test_skip_locked_skips_rows_another_transaction_holds(
    db: Database, backend: Backend, schema: str
) -> None:
    """Two claimers at once: while one transaction holds its claimed rows, the other's
    claim skips them (it neither waits nor takes them); every row is claimed once."""
    if backend.capabilities.single_session:
        pytest.skip(f"{backend.name} is one session (single_session): no second transaction")
    table = await _make_table(db, schema)
    await db.execute(f"INSERT INTO {table} SELECT g, 'job' FROM generate_series(1, 4) g")
    claim = (
        f"UPDATE {table} SET body = 'claimed' WHERE id IN (SELECT id FROM {table}"
        " WHERE body = 'job' ORDER BY id LIMIT 2 FOR UPDATE SKIP LOCKED) RETURNING id"
    )
    async with db.transaction() as holding:
        first: list[dict[str, Any]] = await holding.execute(claim)  # locked, uncommitted
        second: list[dict[str, Any]] = await asyncio.wait_for(db.execute(claim), 30)
    assert sorted(r["id"] for r in first) == [1, 2]
    assert sorted(r["id"] for r in second) == [3, 4]

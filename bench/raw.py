"""The raw baselines: what a careful hand-written client does with psycopg 3 alone.

Each runs in a child process of its own (see :mod:`bench.child`) against a
plain table that the runner made ``LIKE`` qcore's physical job table in the
same fresh schema (``INCLUDING ALL``: the same columns, types, defaults and
every index, so the same claim index shape — only qcore's foreign keys to
the queue table are not copied). Rows carry the same content: the drain
tables are filled with a copy of qcore's own rows; the enqueue baselines
write the same data and let the column defaults supply what qcore takes
from the queue row (the runner checks the rows come out identical).

Protocols, mirroring what qcore sends:

* bulk enqueue: one ``COPY ... FROM STDIN`` of every row, one connection;
* single enqueue: ``INSERT ... RETURNING id``, one row per statement, on
  ``callers`` connections;
* drain (``raw``): a claim statement that marks up to ``batch`` jobs active
  and returns them (``FOR UPDATE SKIP LOCKED`` candidates, or with the
  atomic-update strategy an unlocked read and an UPDATE that rechecks the
  state), then a complete statement by id; each its own transaction, as
  qcore's ``fetch`` and ``complete`` are, on ``connections`` connections;
* drain (``raw_tx``, informational): the lock-holding pattern — in one
  transaction ``SELECT ... FOR UPDATE SKIP LOCKED``, then mark them
  completed. One write per job instead of two, so not the same guarantees
  (a job is never seen active); reported next to ``raw``, not used for the
  ratio.

This module imports psycopg only, never qcore.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.common import (
    APPLICATION,
    FETCH_COLUMNS,
    DrainCounter,
    Meter,
    payload,
    quote_ident,
    spans,
)

__all__ = ["bulk_enqueue", "drain", "single_enqueue"]


def _table(spec: dict[str, Any]) -> str:
    return f"{quote_ident(spec['schema'])}.{quote_ident(spec['raw_table'])}"


async def _connect(spec: dict[str, Any]) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        spec["dsn"], autocommit=True, application_name=APPLICATION
    )


async def bulk_enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    """COPY every job's row into the plain table, in one COPY on one connection."""
    table, queue, jobs = _table(spec), spec["queue"], int(spec["jobs"])
    rows = [(queue, payload(i)) for i in range(jobs)]
    conn = await _connect(spec)
    meter = Meter(spec["dsn"])
    try:
        await meter.start()
        async with (
            conn.cursor() as cur,
            cur.copy(f"COPY {table} (name, data, policy) FROM STDIN") as copy,
        ):
            for name, data in rows:
                await copy.write_row((name, Jsonb(data), "standard"))
        cpu = await meter.stop()
    finally:
        await conn.close()
    return {"jobs": jobs, **cpu}


async def single_enqueue(spec: dict[str, Any]) -> dict[str, Any]:
    """``callers`` connections, each inserting its share one row per statement."""
    table, queue, jobs = _table(spec), spec["queue"], int(spec["jobs"])
    callers = int(spec["concurrency"])
    sql = f"INSERT INTO {table} (name, data, policy) VALUES (%s, %s, 'standard') RETURNING id"
    conns = [await _connect(spec) for _ in range(callers)]
    ids: list[Any] = []

    async def caller(conn: psycopg.AsyncConnection[Any], first: int, count: int) -> None:
        for i in range(first, first + count):
            cur = await conn.execute(sql, (queue, Jsonb(payload(i))))
            row = await cur.fetchone()
            assert row is not None
            ids.append(row[0])

    starts = spans(jobs, callers)
    meter = Meter(spec["dsn"])
    try:
        await meter.start()
        await asyncio.gather(*(caller(c, f, n) for c, (f, n) in zip(conns, starts, strict=True)))
        cpu = await meter.stop()
    finally:
        for conn in conns:
            await conn.close()
    return {"jobs": len(ids), **cpu}


def _claim_sql(table: str, batch: int, *, skip_locked: bool) -> str:
    # the batch size in the text, as qcore writes it (a LIMIT parameter would cost a
    # fresh plan per call: see qcore.sql._statement.row_limit)
    # unlocked: the candidates read once (MATERIALIZED) and the recheck a join condition,
    # as qcore writes them (inlined, the planner can read every waiting row per claim)
    columns = ", ".join(f"j.{c}" for c in FETCH_COLUMNS)
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else ""
    recheck = "" if skip_locked else " AND j.state = c.state"
    candidate = "id" if skip_locked else "id, state"
    materialized = "" if skip_locked else " MATERIALIZED"
    return (
        f"WITH c AS{materialized} (SELECT {candidate} FROM {table}"
        " WHERE name = %(queue)s AND state < 'active' AND NOT blocked AND start_after <= now()"
        f" ORDER BY priority DESC, created_on LIMIT {int(batch)}{lock})"
        f" UPDATE {table} j SET state = 'active', started_on = now(), heartbeat_on = now(),"
        " retry_count = CASE WHEN j.started_on IS NULL THEN j.retry_count"
        " ELSE j.retry_count + 1 END"
        f" FROM c WHERE j.name = %(queue)s AND j.id = c.id{recheck}"
        f" RETURNING {columns}"
    )


def _complete_sql(table: str) -> str:
    return (
        f"UPDATE {table} SET state = 'completed', completed_on = now(), output = NULL"
        " WHERE name = %(queue)s AND id = ANY(%(ids)s) AND state = 'active'"
    )


def _complete_and_claim_sql(table: str, batch: int, *, skip_locked: bool) -> str:
    """The settle-and-claim protocol: the connection's last batch (``ids``) completed and
    the next claimed in one statement (its CTE runs whether or not the claim finds rows)."""
    done = _complete_sql(table).replace(f"UPDATE {table} SET", f"UPDATE {table} d SET", 1)
    claim = _claim_sql(table, batch, skip_locked=skip_locked)
    return f"WITH done AS ({done} RETURNING d.id), {claim.removeprefix('WITH ')}"


def _select_locked_sql(table: str, batch: int) -> str:
    return (
        f"SELECT {', '.join(FETCH_COLUMNS)} FROM {table}"
        " WHERE name = %(queue)s AND state < 'active' AND NOT blocked AND start_after <= now()"
        f" ORDER BY priority DESC, created_on LIMIT {int(batch)} FOR UPDATE SKIP LOCKED"
    )


def _complete_locked_sql(table: str) -> str:
    return (
        f"UPDATE {table} SET state = 'completed', started_on = now(), completed_on = now()"
        " WHERE name = %(queue)s AND id = ANY(%(ids)s)"
    )


async def drain(spec: dict[str, Any]) -> dict[str, Any]:
    """``connections`` loops claiming ``batch`` jobs and completing them until all
    ``jobs`` are done (a loop that finds nothing while others still hold jobs waits a
    millisecond and looks again, as the qcore side does)."""
    table, queue = _table(spec), spec["queue"]
    jobs, batch = int(spec["jobs"]), int(spec["batch"])
    connections = int(spec["concurrency"])
    one_tx, merged = spec.get("variant") == "tx", spec.get("variant") == "merged"
    claim = _claim_sql(table, batch, skip_locked=spec["skip_locked"])
    complete_and_claim = _complete_and_claim_sql(table, batch, skip_locked=spec["skip_locked"])
    complete = _complete_sql(table)
    select_locked, complete_locked = _select_locked_sql(table, batch), _complete_locked_sql(table)
    counter = DrainCounter(jobs)
    empty_polls = retries = 0

    # The atomic-update claim can deadlock with a concurrent claim or complete under
    # READ COMMITTED (and fail with 40001 under SERIALIZABLE): each statement is run
    # again until it lands, as qcore runs its statements again (qcore.retry).
    retryable = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)

    async def execute(conn: psycopg.AsyncConnection[Any], sql: str, params: Any) -> list[Any]:
        nonlocal retries
        while True:
            try:
                cur = await conn.execute(sql, params)
                return await cur.fetchall() if cur.description else []
            except retryable:
                retries += 1

    async def locked(conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> int:
        nonlocal retries
        while True:
            try:
                async with conn.transaction():
                    cur = await conn.execute(select_locked, params)
                    rows = await cur.fetchall()
                    if rows:
                        ids = [r[0] for r in rows]
                        await conn.execute(complete_locked, {"queue": queue, "ids": ids})
                return len(rows)
            except retryable:
                retries += 1

    async def loop(conn: psycopg.AsyncConnection[Any]) -> None:
        nonlocal empty_polls
        params: dict[str, Any] = {"queue": queue}
        held: list[Any] = []  # merged: claimed by the last statement, completed by the next
        while not counter.finished or held:
            if merged:
                rows = await execute(conn, complete_and_claim, {**params, "ids": held})
                if held:
                    counter.add(len(held))
                held = [r[0] for r in rows]
                n = len(rows)
                if n or counter.finished:
                    continue
            elif one_tx:
                n = await locked(conn, params)
            else:
                rows = await execute(conn, claim, params)
                if rows:
                    ids = [r[0] for r in rows]
                    await execute(conn, complete, {"queue": queue, "ids": ids})
                n = len(rows)
            if n:
                counter.add(n)
            elif not counter.finished:
                empty_polls += 1
                await asyncio.sleep(0.001)

    conns = [await _connect(spec) for _ in range(connections)]
    meter = Meter(spec["dsn"])
    try:
        await meter.start()
        await asyncio.gather(*(loop(c) for c in conns))
        cpu = await meter.stop()
    finally:
        for conn in conns:
            await conn.close()
    return {
        "jobs": counter.count,
        "empty_polls": empty_polls,
        "retries": retries,
        **cpu,
    }

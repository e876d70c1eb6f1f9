"""Idle cost: ``workers`` workers on empty queues for ``seconds``: queries sent, CPU.

pg_stat_statements is not loaded on every server, and server-wide counters
(pg_stat_database) mix in whatever else runs there, so the count comes from
the process itself: the Boss runs on qcore's own psycopg pool wrapped in
:class:`CountingDatabase`, which counts every statement that goes through
the adapter protocol, and every transaction (its BEGIN and COMMIT are two
more round trips). ``queries`` = statements + 2 × transactions. A LISTEN
connection's own keep-alive would not be counted; this scenario polls
(LISTEN/NOTIFY off), which is the default.

CPU% is the child process's user + system CPU time over the window, as a
percentage of one core (psutil).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psutil

from bench.env import Env
from qcore import Boss
from qcore.db import (
    DEFAULT_LISTEN,
    Bound,
    Database,
    Listener,
    ListenOptions,
    OnMessage,
    OnReconnect,
    Rows,
    connect,
)

__all__ = ["CountingDatabase", "idle", "prepare", "queue_names", "statement_kind"]

POLLING_INTERVAL_SECONDS = 2.0  # Boss.work's default


def queue_names(workers: int) -> list[str]:
    return [f"idle_{k}" for k in range(workers)]


async def prepare(env: Env, jobs: int, sides: list[str]) -> dict[str, Any]:
    return {}  # the runner creates the queues


_KINDS = (
    ("fetch", re.compile(r"candidates AS")),
    ("complete", re.compile(r"SET state = 'completed'")),
    ("insert", re.compile(r"INSERT INTO \S+\.(?!queue )\S+ (AS j )?\(")),  # a job table
    ("fail", re.compile(r"state = 'failed'|state = 'retry'")),
    ("touch", re.compile(r"SET heartbeat_on")),
    ("get_queue", re.compile(r"FROM \S+\.queue")),
)


def statement_kind(sql: str) -> str:
    """A short name for a qcore statement (for counts by kind), else its first words."""
    for kind, pattern in _KINDS:
        if pattern.search(sql):
            return kind
    return " ".join(sql.split()[:4])[:40]


class CountingDatabase(Database):
    """Another adapter, unchanged, with every statement and transaction counted."""

    def __init__(self, inner: Database) -> None:
        super().__init__()
        self.inner = inner
        self.driver = inner.driver
        self.can_listen = inner.can_listen
        self.statements = 0
        self.transactions = 0
        #: statements by kind (see :func:`statement_kind`)
        self.kinds: Counter[str] = Counter()
        #: rows returned, by kind
        self.rows: Counter[str] = Counter()

    def reset(self) -> None:
        self.statements = self.transactions = 0
        self.kinds.clear()
        self.rows.clear()

    def count(self, sql: str, rows: Rows | None) -> None:
        self.statements += 1
        kind = statement_kind(sql)
        self.kinds[kind] += 1
        self.rows[kind] += len(rows or ())

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        rows = await self.inner.execute(sql, params)
        self.count(sql, rows)
        return rows

    async def _execute_script(self, sql: str) -> None:
        self.count(sql, None)
        await self.inner.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        self.transactions += 1
        async with self.inner.transaction() as tx:
            yield _CountingBound(tx, self)

    async def listen(
        self,
        channel: str,
        on_message: OnMessage,
        on_reconnect: OnReconnect | None = None,
        *,
        options: ListenOptions = DEFAULT_LISTEN,
    ) -> Listener:
        return await self.inner.listen(channel, on_message, on_reconnect, options=options)

    async def close(self) -> None:
        await self.inner.close()


class _CountingBound(Bound):
    def __init__(self, tx: Database, counter: CountingDatabase) -> None:
        super().__init__()
        self.tx = tx
        self.counter = counter
        self.driver = tx.driver

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        rows = await self.tx.execute(sql, params)
        self.counter.count(sql, rows)
        return rows

    async def _execute_script(self, sql: str) -> None:
        self.counter.count(sql, None)
        await self.tx.execute_script(sql)


async def idle(spec: dict[str, Any]) -> dict[str, Any]:
    workers, seconds = int(spec["workers"]), float(spec["seconds"])
    interval = float(spec.get("polling_interval", POLLING_INTERVAL_SECONDS))
    db = CountingDatabase(await connect(spec["dsn"], application_name="qcore-bench"))
    boss = Boss(db=db, schema=spec["schema"], backend=spec["backend"], supervise=False)
    process = psutil.Process()

    async def handler(jobs: Any) -> None:
        raise AssertionError("an idle queue handed out a job")

    try:
        await boss.start()
        for name in queue_names(workers):
            await boss.work(name, handler, polling_interval_seconds=interval)
        await asyncio.sleep(interval + 0.5)  # past the first poll of every loop
        db.reset()
        cpu0, t0 = process.cpu_times(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, t1 = process.cpu_times(), time.monotonic()
        statements, transactions = db.statements, db.transactions
    finally:
        try:
            await boss.stop(timeout=10)
        finally:
            await db.close()
    wall = t1 - t0
    queries = statements + 2 * transactions
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    intervals = wall / interval
    return {
        "workers": workers,
        "seconds": wall,
        "polling_interval_seconds": interval,
        "statements": statements,
        "transactions": transactions,
        "queries": queries,
        "queries_per_second": queries / wall,
        "queries_per_worker_per_interval": queries / workers / intervals,
        "cpu_percent": 100 * cpu / wall,
    }

"""``python -m bench.dashboard``: what one open dashboard costs the database.

A schema with N queues (each with finished jobs and a backlog, its counts cached, a
recorded minute of history) and the dashboard app in process; each page is loaded
as an open browser tab reloads it, and the statements it sent are counted (BEGIN and
COMMIT of a transaction counted as two more). An open page refreshes its live parts
every ``REFRESH_SECONDS`` by loading the page again, so its statements per minute are
the page's count times 60 / ``REFRESH_SECONDS`` (0 for a page with no live part, and
``/metrics``, which Prometheus scrapes at its own interval).

python -m bench.dashboard [--dsn DSN] [--queues 10,100]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx

from bench.idle import CountingDatabase
from qcore import Boss
from qcore.conformance.helpers import set_clock
from qcore.db import connect
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
)
from qcore.web import create_app
from qcore.web.app import REFRESH_SECONDS

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
SCHEMA = "bench_dashboard"
PAGES = ("/", "/queues", "/queue?name=q0", "/instances", "/history?range=7d", "/metrics")


async def one(dsn: str, queues: int) -> list[dict[str, Any]]:
    inner = await connect(dsn, max=4)
    await inner.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    db = CountingDatabase(inner)
    boss = Boss(db=db, schema=SCHEMA, supervise=False, schedule=False, persist_queue_stats=True)
    await boss.start()
    try:
        q = boss.context().q
        names = [f"q{k}" for k in range(queues)]
        for name in names:
            await boss.create_queue(name)
        await db.execute(
            f"INSERT INTO {q}.job (name, state, created_on, started_on, completed_on)"
            " SELECT n, 'completed', now() - interval '3 seconds', now() - interval '1 second',"
            " now() FROM unnest($1::text[]) AS n, generate_series(1, 100)",
            [names],
        )
        await boss.insert("q0", [{"data": {"n": n}} for n in range(500)])
        await boss.supervise()
        store = PostgresMetricsStore(db, schema=SCHEMA)
        await set_clock(boss.context(), 120)
        await MetricsRecorder(store, PgBossQueues(boss.context())).tick()
        await set_clock(boss.context(), 0)
        app = create_app(
            boss, history=MetricsHistoryProvider(store), admin=MetricsHistoryAdmin(store)
        )
        rows = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            for page in PAGES:
                await http.get(page)  # warm: statements prepared, templates compiled
                db.reset()
                started = time.perf_counter()
                reply = await http.get(page)
                seconds = time.perf_counter() - started
                assert reply.status_code == 200, (page, reply.text[:300])
                trips = db.statements + 2 * db.transactions
                live = "data-live" in reply.text  # only such a page refreshes itself
                rows.append(
                    {
                        "queues": queues,
                        "page": page,
                        "ms": round(seconds * 1000, 1),
                        "round_trips": trips,
                        "per_minute_open": trips * 60 // REFRESH_SECONDS if live else 0,
                    }
                )
        return rows
    finally:
        await boss.stop(graceful=False)
        await inner.execute_script(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await inner.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--queues", default="10,100")
    args = parser.parse_args()
    print(f"{'queues':>7} {'page':<20} {'ms':>8} {'round trips':>12} {'per min open':>13}")
    for count in (int(n) for n in args.queues.split(",")):
        for r in asyncio.run(one(args.dsn, count)):
            print(
                f"{r['queues']:>7} {r['page']:<20} {r['ms']:>8} {r['round_trips']:>12}"
                f" {r['per_minute_open']:>13}"
            )


if __name__ == "__main__":
    main()

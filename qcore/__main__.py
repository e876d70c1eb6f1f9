"""The ``qcore`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from qcore import backends, db
from qcore.backend import Server


async def _demo(dsn: str | None, rows: int) -> None:
    server: Server | None = None
    if dsn is None:
        launcher = backends.get("pglite").launcher
        assert launcher is not None
        print("starting the embedded PGlite (Node.js) ...", flush=True)
        server = launcher().start()
        dsn = server.url
        from qcore.db.pglite import PGliteDatabase

        database: db.Database = await PGliteDatabase.connect(dsn)
    else:
        database = await db.connect(dsn)
    try:
        version = (await database.execute("SELECT version() AS v"))[0]["v"]
        print(f"engine: {version}")
        await database.execute_script(
            "DROP TABLE IF EXISTS qcore_demo;"
            " CREATE TABLE qcore_demo (id int PRIMARY KEY, data jsonb NOT NULL)"
        )
        started = time.perf_counter()
        async with database.transaction() as tx:
            await tx.execute(
                "INSERT INTO qcore_demo SELECT i, jsonb_build_object('n', i, 'tag', $1::text)"
                " FROM generate_series(1, $2::int) AS i",
                ["demo", rows],
            )
        elapsed = time.perf_counter() - started
        total = (await database.execute("SELECT count(*) AS n FROM qcore_demo"))[0]["n"]
        sample = (await database.execute("SELECT data FROM qcore_demo WHERE id = $1", [rows]))[0]
        print(f"wrote {total} rows in one transaction in {elapsed * 1000:.0f} ms; last: {sample}")
        await database.execute("DROP TABLE qcore_demo")
        print("the adapters, the backend registry and PGlite work; queues and workers come next.")
    finally:
        await database.close()
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qcore", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo on an embedded PGlite (or --dsn)")
    demo.add_argument("--dsn", help="run against this PostgreSQL instead of PGlite")
    demo.add_argument("--rows", type=int, default=10_000, help="rows to write (default 10000)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        asyncio.run(_demo(args.dsn, args.rows))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())

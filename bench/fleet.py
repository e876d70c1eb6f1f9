"""``python -m bench.fleet``: a fleet of servers on one database, as an operator sees it.

One fresh schema (``bench_fleet_<hex>``, dropped at the end) holds:

* ``--queues`` queues (default 200), each with a minute of finished jobs recorded by
  the metrics-history recorder (:class:`MetricsRecorder` on a
  :class:`PostgresMetricsStore`, as ``qcore metrics record`` builds it); the steady
  tick that closes the next minute is timed.
* ``--servers`` keyed servers (default 200), keys ``10.0.{i}.{j}:gpu`` (every fourth)
  or ``10.0.{i}.{j}:cpu``. Server 0 is a real ``Boss`` (the probe, below); the others
  are simulated cheaply: each is qcore's own registry service
  (:class:`InstanceRegistry`, the one a ``Boss`` runs) with the settings and config
  such a ``Boss`` records and ``--workers`` worker entries, all on one shared pool,
  so each writes exactly what a real server writes (registration, heartbeat, key
  beat), without a pool and a process of its own. Their loops are off: the bench
  beats them itself.
* ``--dead`` dead registry rows (default 1,000): half earlier lives of the fleet's
  own servers (stopped at a deploy), half retired servers (some keyed, some
  anonymous; stopped, or gone quiet after a crash), copied from a live row so
  they are as wide as real ones.
* ``--senders`` anonymous servers (real ``Boss`` objects without a key, default 3)
  sending plain jobs, registered (``register_instance=True``) as pg-boss's are.
* every 20th server paused (``pause_instance``: servers 2, 22, ...), and
  ``--removed`` servers (default 5, the last ones) stopped, then removed once the
  schema's clock has moved 31 minutes on (``remove_instance`` refuses a server seen
  within 30 minutes).

Measured, on the fleet in that state (every live server beaten just before):

* the dashboard's overview (``/``) and instances (``/instances``) pages, served
  in process by :func:`qcore.web.create_app` through httpx's ASGI transport: the
  median of ``--loads`` warm loads, and the database round trips of one load, counted
  in the process by wrapping the Database adapter (:class:`bench.idle.CountingDatabase`:
  every statement, and BEGIN and COMMIT of each transaction); also the live instances
  the overview counts and the live servers the instances page lists.
* ``Boss.list_instances(limit=50)`` (the first page, live first),
  ``Boss.instance_counts()`` and ``Boss.get_instances(limit=1000)`` (the read both
  pages make), median of ``--loads`` calls, with their round trips.
* the registry's write load: ``--beats`` rounds of a heartbeat of every simulated
  server; per beat, the statements sent (counted as above) and the rows written to
  the ``instance`` and ``qcore_instance_key`` tables (the tables' ``n_tup_ins`` /
  ``n_tup_upd`` / ``n_tup_hot_upd`` / ``n_tup_del`` in ``pg_stat_user_tables``
  before and after, read once every backend has flushed them: that waits 11 s on
  each side); and the median beat.
* the claim with and without affinity: the probe (a real keyed ``Boss``,
  ``10.0.0.1:gpu``) fetches one job at a time, ``--claims`` times from a queue of
  plain jobs and as often from a queue whose jobs carry the pattern of its class
  (``:gpu$``), with as many jobs for other servers behind them; alternating, the
  median in µs of each.

Nothing here asserts a speed; the bench checks only that the fleet reads as built
(counts, pages). Prints a table, or the JSON with ``--json``.

    python -m bench.fleet [--dsn DSN] [--servers 200] [--dead 1000] [--queues 200]
                          [--beats 5] [--claims 200] [--loads 5] [--senders 3]
                          [--removed 5] [--workers 4] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx

from bench.idle import CountingDatabase
from qcore import Boss, __version__
from qcore.conformance.helpers import set_clock
from qcore.db import Database, connect
from qcore.events import Events
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    PostgresMetricsStore,
)
from qcore.services.instances import InstanceRegistry, RegistrySettings, recorded_config
from qcore.sql.instances import INSTANCE_KEY_TABLE
from qcore.web import create_app
from qcore.worker.status import WorkerStatus

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: every server's pool, as its row reports it
POOL = {"max": 10, "total": 3, "idle": 3, "waiting": 0}
#: the probe's class pattern, and two patterns it does not match
MINE = ":gpu$"
OTHERS = (":cpu$", r"^10\.0\.1\.")
#: seconds the schema's clock moves on for the removals (past the 30 minutes)
REMOVAL_CLOCK = 31 * 60
#: seconds until every backend has flushed its table counters (the idle flush, and a margin)
STATS_FLUSH_SECONDS = 11.0
#: the registry's tables, as pg_stat_user_tables names them
TABLES = ("instance", INSTANCE_KEY_TABLE)

T = TypeVar("T")


def server_key(n: int) -> str:
    """The key of server ``n``: its address in 10.0.0.0/16 and its class."""
    return f"10.0.{n // 250}.{n % 250 + 1}:{'gpu' if n % 4 == 0 else 'cpu'}"


@dataclass
class Server:
    """A simulated server: its key and its registry service."""

    n: int
    key: str
    paused: bool = False
    stopped: bool = False
    registry: InstanceRegistry = field(init=False)

    def learn(self, paused: bool) -> None:
        """What its heartbeat read of its pause (as ``Boss`` is told)."""
        self.paused = paused


def _workers(n: int, count: int, queues: int) -> list[WorkerStatus]:
    """``count`` worker loops of server ``n``, as its registry reports them."""
    now = dt.datetime.now(dt.timezone.utc)
    return [
        WorkerStatus(
            id=str(uuid.UUID(int=n * 1000 + w)),
            name=f"q{(n * count + w) % queues}",
            state="active",
            local_concurrency=4,
            batch_size=1,
            polling_interval_seconds=2.0,
            active=w % 2,
            completed=1000 + n,
            failed=n % 3,
            created_on=now,
            last_fetched_on=now,
            last_job_started_on=now,
            last_job_ended_on=now,
            last_error=None,
            last_error_on=None,
        )
        for w in range(count)
    ]


def _simulated(
    n: int, dsn: str, schema: str, boss: Boss, events: Events, workers: list[WorkerStatus]
) -> Server:
    """Server ``n`` as its registry service, with what a ``Boss`` of that key records."""
    key = server_key(n)
    # the Boss such a server runs (never started: it only gives the settings)
    like = Boss(dsn, schema=schema, instance_key=key, instance_name=f"worker-{n}", max=POOL["max"])
    settings = RegistrySettings(
        id=like.instance_id,
        name=like.instance_name,
        instance_key=like.instance_key,
        heartbeat_seconds=like.instance_heartbeat_seconds,
        version=__version__,
        supervise=like.supervise_enabled,
        schedule=like.timekeeping.schedule,
        migrate=like.migrate,
        persist_queue_stats=like.maintenance.persist_queue_stats,
        persist_warnings=like.maintenance.persist_warnings,
        config=recorded_config(
            like.settings.recorded(adapter="qcore", backend=Boss.AUTO, pool_max=POOL["max"])
        ),
    )
    server = Server(n, key)
    server.registry = InstanceRegistry(
        boss.context,
        events,
        settings,
        workers=lambda: workers,
        pool=lambda: dict(POOL),
        on_paused=server.learn,
    )
    server.registry.enabled = False  # no loop of its own: the bench beats it
    return server


async def _timed(call: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    started = time.perf_counter()
    value = await call()
    return value, time.perf_counter() - started


async def _median_ms(
    db: CountingDatabase, call: Callable[[], Awaitable[T]], loads: int
) -> tuple[T, float, int]:
    """The last result, the median ms of ``loads`` warm calls, the round trips of one."""
    await call()  # warm: statements prepared
    times = []
    value: Any = None
    for _ in range(loads):
        db.reset()
        value, seconds = await _timed(call)
        times.append(seconds * 1000)
    return value, statistics.median(times), _trips(db)


def _trips(db: CountingDatabase) -> int:
    """Round trips since the last reset: statements, and BEGIN and COMMIT of each transaction."""
    return db.statements + 2 * db.transactions


async def _table_stats(db: Database, schema: str) -> dict[str, dict[str, int]]:
    rows = await db.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del"
        " FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY($2::text[])",
        [schema, list(TABLES)],
    )
    return {r["relname"]: {k: int(v) for k, v in r.items() if k != "relname"} for r in rows}


async def _flushed_stats(db: Database, schema: str) -> dict[str, dict[str, int]]:
    """The tables' counters once every backend has flushed its own.

    A backend flushes its counters at most once a second, and what is left when it goes
    idle within that second ten seconds later (PostgreSQL 15's ``PGSTAT_IDLE_INTERVAL``);
    so read after that, until two reads half a second apart agree.
    """
    await asyncio.sleep(STATS_FLUSH_SECONDS)
    last = await _table_stats(db, schema)
    for _ in range(20):
        await asyncio.sleep(0.5)
        now = await _table_stats(db, schema)
        if now == last:
            return now
        last = now
    return last


async def _finished_minute(db: Database, q: str, names: list[str], per_queue: int) -> None:
    """``per_queue`` jobs finished in the minute before the schema's clock, per queue."""
    await db.execute(
        f"INSERT INTO {q}.job (name, state, created_on, started_on, completed_on)"
        f" SELECT n, 'completed', {q}.job_now() - (3 + i % 40) * interval '1 second',"
        f" {q}.job_now() - (1 + i % 30) * interval '1 second', {q}.job_now() - interval '1 second'"
        " FROM unnest($1::text[]) AS n, generate_series(1, $2::int) AS i",
        [names, per_queue],
    )


async def _dead_rows(db: Database, q: str, template: uuid.UUID, fleet: int, dead: int) -> None:
    """``dead`` dead rows copied from a live one.

    Even ones: earlier lives of the fleet's servers (same name and key, stopped);
    odd ones: retired servers (every third anonymous; every other one quiet, not
    stopped, as after a crash). Their retired keys are known to the key table.
    """
    names: list[str] = []
    keys: list[str | None] = []
    stopped: list[bool] = []
    for d in range(dead):
        if d % 2 == 0:
            n = (d // 2) % fleet
            names.append(f"worker-{n}")
            keys.append(server_key(n))
            stopped.append(True)
        else:
            names.append(f"retired-{d}")
            keys.append(None if d % 3 == 0 else f"10.1.{d // 250}.{d % 250}:cpu")
            stopped.append(d % 4 == 1)
    await db.execute(
        f"INSERT INTO {q}.instance (id, name, host, pid, version, node_version,"
        " application_name, heartbeat_seconds, supervise, schedule, migrate,"
        " persist_queue_stats, persist_warnings, pool_max, pool_total, pool_idle, pool_waiting,"
        " workers, metrics, config, started_on, heartbeat_on, stopped_on)"
        " SELECT gen_random_uuid(), d.name, t.host, t.pid + d.n, t.version, t.node_version,"
        " t.application_name, t.heartbeat_seconds, t.supervise, t.schedule, t.migrate,"
        " t.persist_queue_stats, t.persist_warnings, t.pool_max, t.pool_total, t.pool_idle,"
        " t.pool_waiting, t.workers, t.metrics,"
        " CASE WHEN d.key IS NULL THEN t.config - 'instanceKey'"
        " ELSE jsonb_set(t.config, '{instanceKey}', to_jsonb(d.key)) END,"
        f" {q}.job_now() - interval '1 day' - d.n * interval '5 minutes',"
        f" {q}.job_now() - interval '1 day' - d.n * interval '5 minutes' + interval '4 minutes',"
        f" CASE WHEN d.stopped THEN {q}.job_now() - interval '1 day' - d.n * interval '5 minutes'"
        " + interval '4 minutes' END"
        f" FROM {q}.instance t, unnest($2::text[], $3::text[], $4::boolean[])"
        " WITH ORDINALITY AS d(name, key, stopped, n) WHERE t.id = $1::uuid",
        [template, names, keys, stopped],
    )
    await db.execute(
        f'INSERT INTO {q}."{INSTANCE_KEY_TABLE}" (instance_key, seen_on, instance_id)'
        f" SELECT DISTINCT ON (config ->> 'instanceKey') config ->> 'instanceKey',"
        " heartbeat_on, id"
        f" FROM {q}.instance WHERE config ->> 'instanceKey' LIKE '10.1.%'"
        " ORDER BY config ->> 'instanceKey', heartbeat_on DESC ON CONFLICT DO NOTHING",
    )


async def run(
    dsn: str,
    *,
    servers: int = 200,
    dead: int = 1000,
    queues: int = 200,
    beats: int = 5,
    claims: int = 200,
    loads: int = 5,
    senders: int = 3,
    removed: int = 5,
    workers: int = 4,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Build the fleet, measure it, drop it; the report as a dict."""
    if queues < 3 or servers < 2 or removed >= servers - 1:
        raise ValueError("need 3 queues or more, 2 servers or more, and fewer removals")
    schema = f"bench_fleet_{secrets.token_hex(4)}"
    inner = await connect(dsn, max=4)
    db = CountingDatabase(inner)
    boss = Boss(
        db=db,
        schema=schema,
        supervise=False,
        schedule=False,
        register_instance=False,
        persist_queue_stats=True,
    )
    events = Events()
    errors: list[BaseException] = []
    events.on("error", errors.append)
    fleet: list[Server] = []
    others: list[Boss] = []
    report: dict[str, Any] = {"schema": schema}
    try:
        await boss.start()
        ctx = boss.context()
        q = ctx.q
        names = [f"q{k}" for k in range(queues)]
        progress(f"{queues} queues and their history")
        for name in names:
            await boss.create_queue(name)
        store = PostgresMetricsStore(db, schema=schema)
        recorder = MetricsRecorder(store, PgBossQueues(ctx))
        await _finished_minute(db, q, names, 20)
        await set_clock(ctx, 120)
        await recorder.tick()  # the first tick: the store's tables, the first minute
        await _finished_minute(db, q, names, 20)
        await set_clock(ctx, 240)
        db.reset()
        _, tick_seconds = await _timed(recorder.tick)
        report["metrics_tick"] = {
            "queues": queues,
            "ms": round(tick_seconds * 1000, 1),
            "round_trips": _trips(db),
        }
        await boss.supervise()  # the queues' cached counts, as the overview reads them

        progress(f"{servers} servers, {senders} anonymous senders")
        common: dict[str, Any] = {"schema": schema, "supervise": False, "schedule": False, "max": 2}
        # the real servers beat on their own only every hour: the bench's beats are the
        # only writes to the registry while it measures
        quiet = {**common, "instance_heartbeat_seconds": 3600}
        probe = Boss(dsn, instance_key=server_key(0), instance_name="worker-0", **quiet)
        others.append(probe)
        await probe.start()
        for s in range(senders):
            # registered as pg-boss registers every instance (qcore would leave a
            # process that only sends out of the registry)
            sender = Boss(dsn, instance_name=f"sender-{s}", register_instance=True, **quiet)
            others.append(sender)
            await sender.start()
            for k in range(10):
                await sender.send(names[2 + (s * 10 + k) % (queues - 2)], {"sender": s, "k": k})
        entries = [_workers(n, workers, queues) for n in range(servers)]
        fleet = [_simulated(n, dsn, schema, boss, events, entries[n]) for n in range(1, servers)]
        registrations = []
        db.reset()
        for server in fleet:
            _, seconds = await _timed(server.registry.start)
            registrations.append(seconds * 1000)
        report["registration_ms"] = round(statistics.median(registrations), 2)
        report["registration_round_trips"] = round(_trips(db) / len(fleet), 2)

        progress(f"{dead} dead rows, pauses and removals")
        await _dead_rows(db, q, fleet[0].registry.settings.id, servers, dead)
        gone = fleet[len(fleet) - removed :]
        paused = [s for s in fleet[: len(fleet) - removed] if s.n % 20 == 2]
        pause_times = []
        db.reset()
        for server in paused:
            _, seconds = await _timed(partial(boss.pause_instance, server.key))
            pause_times.append(seconds * 1000)
        pause_trips = _trips(db) / len(paused) if paused else None
        for server in gone:
            await server.registry.stop()
            server.stopped = True
        await set_clock(ctx, 240 + REMOVAL_CLOCK)
        remove_times, rows_removed = [], []
        db.reset()
        for server in gone:
            count, seconds = await _timed(partial(boss.remove_instance, server.key))
            remove_times.append(seconds * 1000)
            rows_removed.append(count)
        remove_trips = _trips(db) / len(gone) if gone else None
        live = [s for s in fleet if not s.stopped]
        for server in live:  # every live server heard from since the clock moved
            await server.registry.run_pass()
        learned = sum(1 for s in paused if s.paused)
        report["operations"] = {
            "paused": len(paused),
            "paused_learned_at_next_beat": learned,
            "pause_ms": round(statistics.median(pause_times), 2) if pause_times else None,
            "pause_round_trips": pause_trips,
            "removed": len(gone),
            "remove_ms": round(statistics.median(remove_times), 2) if remove_times else None,
            "remove_round_trips": remove_trips,
            "rows_removed": sum(rows_removed),
        }

        progress("the registry's reads and the dashboard")
        counts, counts_ms, counts_trips = await _median_ms(db, boss.instance_counts, loads)
        page, list_ms, list_trips = await _median_ms(
            db, lambda: boss.list_instances(limit=50), loads
        )
        every, every_ms, every_trips = await _median_ms(
            db, lambda: boss.get_instances(limit=1000), loads
        )
        keyed_live = len(live) + 1  # and the probe
        report["fleet"] = {
            "servers": servers,
            "simulated": len(fleet),
            "keyed_live": keyed_live,
            "anonymous_senders": senders,
            "dead_rows": dead,
            "registry_rows": counts.total,
            "counts": {
                "total": counts.total,
                "live": counts.live,
                "keyed": counts.keyed,
                "keyed_live": counts.keyed_live,
                "anonymous_live": counts.anonymous_live,
                "paused": counts.paused,
            },
        }
        report["reads"] = {
            "list_instances_first_50": {
                "ms": round(list_ms, 2),
                "round_trips": list_trips,
                "rows": len(page),
                "live_rows": sum(1 for i in page if i.live),
                "live_first": [i.live for i in page]
                == sorted((i.live for i in page), reverse=True),
            },
            "instance_counts": {"ms": round(counts_ms, 2), "round_trips": counts_trips},
            "get_instances_1000": {
                "ms": round(every_ms, 2),
                "round_trips": every_trips,
                "rows": len(every),
                "live_rows": sum(1 for i in every if i.live),
            },
        }
        app = create_app(
            boss, history=MetricsHistoryProvider(store), admin=MetricsHistoryAdmin(store)
        )
        pages: dict[str, Any] = {}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            for path in ("/", "/instances"):
                reply, ms, trips = await _median_ms(db, partial(http.get, path), loads)
                assert reply.status_code == 200, (path, reply.text[:300])
                size = len(reply.content)
                pages[path] = {"ms": round(ms, 1), "round_trips": trips, "bytes": size}
                if path == "/":  # the overview's tile "live / all keyed servers live"
                    tile = re.search(
                        r'"n">([\d,]+) / ([\d,]+)</span><span class="l">keyed servers live',
                        reply.text,
                    )
                    pages[path]["live_shown"] = int(tile[1].replace(",", "")) if tile else None
                    pages[path]["live"] = keyed_live
                if path == "/instances":
                    shown = set(re.findall(r'data-key="([^"]+)" class="live"', reply.text))
                    pages[path]["live_keyed_shown"] = len(shown)
                    pages[path]["live_keyed"] = keyed_live
        report["pages"] = pages

        progress(f"{beats} heartbeat rounds of {len(live)} servers")
        before = await _flushed_stats(inner, schema)
        db.reset()
        times = []
        for _ in range(beats):
            for server in live:
                _, seconds = await _timed(server.registry.run_pass)
                times.append(seconds * 1000)
        statements, transactions = db.statements, db.transactions
        after = await _flushed_stats(inner, schema)
        count = len(times)
        written = {}
        for table in TABLES:
            delta = {k: after[table][k] - before[table][k] for k in after[table]}
            written[table] = {
                "inserted": round(delta["n_tup_ins"] / count, 3),
                "updated": round(delta["n_tup_upd"] / count, 3),
                "hot_updated": round(delta["n_tup_hot_upd"] / count, 3),
                "deleted": round(delta["n_tup_del"] / count, 3),
            }
        [width] = await inner.execute(
            f"SELECT avg(pg_column_size(i.*))::int AS row_bytes FROM {q}.instance i"
            " WHERE id = ANY($1::uuid[])",
            [[s.registry.settings.id for s in live]],
        )
        heartbeat = 30  # every simulated server's instance_heartbeat_seconds
        report["heartbeat"] = {
            "beats": count,
            "ms": round(statistics.median(times), 2),
            "statements_per_beat": round(statements / count, 3),
            "round_trips_per_beat": round((statements + 2 * transactions) / count, 3),
            "rows_per_beat": written,
            "instance_row_bytes": int(width["row_bytes"]),
            "fleet_statements_per_second": round(
                (len(live) + 1) * statements / count / heartbeat, 2
            ),
        }

        progress(f"{claims} claims with and without affinity")
        await probe.insert("q0", [{"data": {"n": n}} for n in range(claims)])
        mine = [{"data": {"n": n}, "preferred_instance_key_pattern": MINE} for n in range(claims)]
        await probe.insert("q1", mine)
        for pattern in OTHERS:
            theirs = [
                {"data": {"n": n}, "preferred_instance_key_pattern": pattern} for n in range(claims)
            ]
            await probe.insert("q1", theirs)
        plain: list[float] = []
        affinity: list[float] = []
        for _ in range(claims):
            for name, into in (("q0", plain), ("q1", affinity)):
                jobs, seconds = await _timed(partial(probe.fetch, name, batch_size=1))
                assert len(jobs) == 1, (name, jobs)
                into.append(seconds * 1_000_000)
        report["claim_us"] = {
            "claims": claims,
            "plain": round(statistics.median(plain)),
            "affinity": round(statistics.median(affinity)),
            "behind_each_other_server_jobs": claims * len(OTHERS),
        }
        if errors:
            raise RuntimeError(f"the registry reported errors: {errors[:3]!r}")
        return report
    finally:
        for server in fleet:
            if not server.stopped:
                await server.registry.stop()
        for other in others:
            await other.stop(graceful=False)
        await boss.stop(graceful=False)
        await inner.execute_script(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await inner.close()


def table(report: dict[str, Any]) -> str:
    """The report as a table, like the other bench reports."""
    f, pages, reads, beat = report["fleet"], report["pages"], report["reads"], report["heartbeat"]
    ops, claim, tick = report["operations"], report["claim_us"], report["metrics_tick"]
    rows_written = ", ".join(
        f"{t}: {w['inserted'] + w['updated']:g} ({w['hot_updated']:g} HOT)"
        for t, w in beat["rows_per_beat"].items()
    )
    shown = pages["/instances"]
    lines = [
        f"fleet: {f['keyed_live']} live keyed servers ({ops['paused']} paused),"
        f" {f['anonymous_senders']} anonymous senders, {f['dead_rows']:,} dead rows,"
        f" {ops['removed']} removed; {f['registry_rows']:,} registry rows",
        "",
        "| figure | ms | round trips | note |",
        "|---|---:|---:|---|",
        f"| overview page `/` | {pages['/']['ms']} | {pages['/']['round_trips']} |"
        f" {pages['/']['bytes']:,} bytes; live keyed servers it counts:"
        f" {pages['/']['live_shown']} of {pages['/']['live']} |",
        f"| instances page `/instances` | {shown['ms']} | {shown['round_trips']} |"
        f" {shown['bytes']:,} bytes; live keyed servers shown:"
        f" {shown['live_keyed_shown']} of {shown['live_keyed']} |",
        f"| `list_instances(limit=50)` | {reads['list_instances_first_50']['ms']} |"
        f" {reads['list_instances_first_50']['round_trips']} |"
        f" {reads['list_instances_first_50']['live_rows']} of"
        f" {reads['list_instances_first_50']['rows']} rows live |",
        f"| `instance_counts()` | {reads['instance_counts']['ms']} |"
        f" {reads['instance_counts']['round_trips']} | |",
        f"| `get_instances(limit=1000)` (both pages' read) | {reads['get_instances_1000']['ms']} |"
        f" {reads['get_instances_1000']['round_trips']} |"
        f" {reads['get_instances_1000']['live_rows']} of {reads['get_instances_1000']['rows']}"
        " rows live |",
        f"| a keyed server's heartbeat (median of {beat['beats']:,}) | {beat['ms']} |"
        f" {beat['round_trips_per_beat']:g} | {beat['statements_per_beat']:g} statements;"
        f" rows written: {rows_written}; row {beat['instance_row_bytes']:,} bytes |",
        f"| registration | {report['registration_ms']} |"
        f" {report['registration_round_trips']:g} | |",
        f"| `pause_instance` | {ops['pause_ms']} | {ops['pause_round_trips']} |"
        " learned at the next beat:"
        f" {ops['paused_learned_at_next_beat']} of {ops['paused']} |",
        f"| `remove_instance` | {ops['remove_ms']} | {ops['remove_round_trips']} |"
        f" {ops['rows_removed']} rows removed |",
        f"| metrics tick, {tick['queues']} queues | {tick['ms']} | {tick['round_trips']} | |",
        "",
        f"whole fleet at a 30 s heartbeat: {beat['fleet_statements_per_second']:g} statements/s",
        f"claim, keyed server, batch 1, median of {claim['claims']}: plain {claim['plain']} µs,"
        f" with affinity {claim['affinity']} µs",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--dead", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--beats", type=int, default=5, help="heartbeat rounds measured")
    parser.add_argument("--claims", type=int, default=200, help="fetches timed per queue")
    parser.add_argument("--loads", type=int, default=5, help="timed loads per page or read")
    parser.add_argument("--senders", type=int, default=3, help="anonymous servers")
    parser.add_argument("--removed", type=int, default=5, help="servers stopped and removed")
    parser.add_argument("--workers", type=int, default=4, help="worker entries per server")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.queues < 3 or args.servers < 2 or not 0 <= args.removed < args.servers - 1:
        parser.error("--queues 3 or more, --servers 2 or more, --removed below --servers - 1")
    report = asyncio.run(
        run(
            args.dsn,
            servers=args.servers,
            dead=args.dead,
            queues=args.queues,
            beats=args.beats,
            claims=args.claims,
            loads=args.loads,
            senders=args.senders,
            removed=args.removed,
            workers=args.workers,
            progress=lambda text: print(text, file=sys.stderr, flush=True),
        )
    )
    print(json.dumps(report, indent=2) if args.json else table(report))


if __name__ == "__main__":
    main()

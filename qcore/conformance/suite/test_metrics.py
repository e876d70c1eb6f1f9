"""Metrics history on every backend: finished jobs counted per minute into the minute,
hour and day tiers and the rollup, idempotently (a second recorder, a restart, the same
minutes counted again add nothing), each tier pruned past its retention on the schema's
controllable clock, and a store of a newer layout refused before anything is written.
The tests of the store contract run against both stores (``metrics_store``: PostgreSQL
in the test's schema, and Redis at ``QCORE_TEST_REDIS_URL``, default the local server).
Jobs are written finished at chosen minutes, so nothing here waits on a worker."""

from __future__ import annotations

import datetime as dt
import math
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from qcore.conformance.helpers import set_clock, until
from qcore.context import Context
from qcore.errors import ConfigError, SchemaVersionError, ValidationError
from qcore.identifiers import quote
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    MetricsRecorder,
    MetricsStore,
    PgBossQueues,
    PostgresMetricsStore,
    RedisMetricsStore,
    Retention,
    namespace_of,
    record_metrics,
)
from qcore.metrics.histogram import slot_of
from qcore.metrics.store import GLOBAL, TIERS
from qcore.verbs.drift import detect_schema_drift

pytestmark = pytest.mark.feature("metrics")


async def _queue(ctx: Context, name: str) -> None:
    await ctx.db.execute(f"SELECT {ctx.q}.create_queue($1, $2)", [name, {"policy": "standard"}])


#: schema -> the minute (epoch seconds) its test's jobs are dated from, read once, so a
#: minute turning over during a test never splits jobs meant for one minute
_BASE: dict[str, int] = {}


async def _finished(
    ctx: Context,
    queue: str,
    state: str,
    minutes_ago: float,
    n: int = 1,
    *,
    wait_ms: float = 60_000,
    run_ms: float = 0,
    retries: int = 0,
) -> None:
    """``n`` jobs of ``queue`` that finished in ``state`` at second 30 of the minute
    ``minutes_ago`` before the test's first, after waiting ``wait_ms`` and running
    ``run_ms`` (in one statement)."""
    if ctx.schema not in _BASE:
        [row] = await ctx.db.execute(
            f"SELECT floor(extract(epoch FROM {ctx.q}.job_now()) / 60)::bigint * 60 AS s"
        )
        _BASE[ctx.schema] = int(row["s"])
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job"
        " (name, state, created_on, started_on, completed_on, retry_count)"
        f" SELECT $1, $2::{ctx.q}.job_state,"
        " t - ($4 + $5) * interval '1 millisecond', t - $5 * interval '1 millisecond', t, $6"
        " FROM (SELECT to_timestamp($8 + 30) - $3 * interval '1 minute' AS t) AS at,"
        " generate_series(1, $7) AS n",
        [queue, state, minutes_ago, wait_ms, run_ms, retries, n, _BASE[ctx.schema]],
    )


def _store(ctx: Context, **options: Any) -> PostgresMetricsStore:
    return PostgresMetricsStore(ctx.db, schema=ctx.schema, backend=ctx.backend, **options)


REDIS_URL = os.environ.get("QCORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def redis_client() -> Any:
    """A client of the test Redis server; skips the test when none answers there."""
    try:
        import redis.asyncio as aioredis
    except ImportError:
        pytest.skip("redis-py is not installed (pip install 'qcore-queue[redis]')")
    # a generous timeout: a busy week's first write is a long script on a busy machine
    client = aioredis.from_url(REDIS_URL, socket_timeout=120)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        pytest.skip(f"no Redis server answers at {REDIS_URL}: {exc}")
    return client


async def drop_prefix(client: Any, prefix: str) -> None:
    async for key in client.scan_iter(match=prefix + ":*", count=1000):
        await client.delete(key)


@pytest_asyncio.fixture(params=["postgres-store", "redis-store"])
async def metrics_store(request: pytest.FixtureRequest, ctx: Context) -> AsyncIterator[Any]:
    """The store under test: tables in the test's schema, or a Redis prefix of its own."""
    if request.param == "postgres-store":
        yield _store(ctx)
        return
    client = await redis_client()
    prefix = f"qcore-test:{uuid.uuid4().hex[:12]}"
    store = RedisMetricsStore(client, prefix=prefix, schema=ctx.schema)
    try:
        yield store
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()


def _totals(points: list[Any]) -> tuple[int, int]:
    return sum(p.completed for p in points), sum(p.failed for p in points)


async def _tiers(store: MetricsStore, ctx: Context, queue: str) -> dict[str, tuple[int, int]]:
    """Completed and failed stored per tier for ``queue`` (tiers holding some)."""
    now = await store.now_minute()
    key = namespace_of(ctx.schema) + queue
    found = {}
    for tier, width in TIERS.items():
        series = await store.read_series([key], tier, (now - 100 * 1440) // width, now // width)
        rows = series.get(key, {})
        counts = (sum(b.completed for b in rows.values()), sum(b.failed for b in rows.values()))
        if counts != (0, 0):
            found[tier] = counts
    return found


async def _hand_over(store: MetricsStore, ctx: Context, recorder: MetricsRecorder) -> None:
    """``recorder`` gives up its leases (as when it stops): another may sample at once."""
    queues = await PgBossQueues(ctx).names()
    keys = [namespace_of(ctx.schema) + q for q in queues]
    await store.release_leases(keys, holder=recorder.holder)


async def test_counts_land_in_every_tier_and_the_rollup_once(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    for name in ("mail", "sms"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=3)
    await _finished(ctx, "mail", "failed", 10)
    await _finished(ctx, "mail", "completed", 30, n=2)
    await _finished(ctx, "sms", "completed", 20)
    store = metrics_store
    first = MetricsRecorder(store, PgBossQueues(ctx))

    assert await first.tick() == 3  # three queue-minutes held finished jobs

    provider = MetricsHistoryProvider(store)
    mail = await provider.throughput("mail", window="60m")
    assert len(mail) == 60 and mail[-1].filling and not mail[0].filling
    assert _totals(mail) == (5, 1)
    assert _totals(await provider.throughput(window="60m")) == (6, 1)  # the rollup
    expected = {"m": (5, 1), "h": (5, 1), "d": (5, 1)}
    assert await _tiers(store, ctx, "mail") == expected

    # a second recorder: the queues' leases are the first one's; once they expired, its
    # snapshot of the same minutes adds nothing; nor does the first one's again
    second = MetricsRecorder(store, PgBossQueues(ctx))
    assert await second.tick() == 0
    await _hand_over(store, ctx, first)
    assert await second.tick() == 0
    await _hand_over(store, ctx, second)
    assert await first.tick() == 0
    assert await _tiers(store, ctx, "mail") == expected
    assert await _tiers(store, ctx, "__global__") == {"m": (6, 1), "h": (6, 1), "d": (6, 1)}


async def test_a_restart_resumes_from_the_newest_minute_stored(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 30)
    await _finished(ctx, "mail", "completed", 10)
    store = metrics_store
    await MetricsRecorder(store, PgBossQueues(ctx), holder="worker-1").tick()
    # the older minute's job is deleted (retention), a late one lands in the newest minute
    await ctx.db.execute(
        f"DELETE FROM {ctx.q}.job WHERE completed_on < {ctx.q}.job_now() - interval '20 minutes'"
    )
    await _finished(ctx, "mail", "failed", 10)

    # restarted under its name, it takes its leases back at once
    assert await MetricsRecorder(store, PgBossQueues(ctx), holder="worker-1").tick() == 1
    assert await _tiers(store, ctx, "mail") == {"m": (2, 1), "h": (2, 1), "d": (2, 1)}


async def test_each_tier_is_pruned_past_its_retention(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 20 * 60)  # 20 hours ago
    store = metrics_store
    keep = Retention(minutes=1, hours=2, days=3)
    await MetricsRecorder(store, PgBossQueues(ctx), retention=keep).tick()
    assert await _tiers(store, ctx, "mail") == {"m": (1, 0), "h": (1, 0), "d": (1, 0)}
    try:
        await set_clock(ctx, 2 * 86400)  # the job is now 68 hours old
        await MetricsRecorder(store, PgBossQueues(ctx), retention=keep).tick()
    finally:
        await set_clock(ctx, 0)
    assert await _tiers(store, ctx, "mail") == {"d": (1, 0)}
    if isinstance(store, PostgresMetricsStore):  # Redis leases expire on their own
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.qcore_metrics_lease"
            " VALUES ('gone', 'r', now() - interval '2 days')"
        )
        await store.prune(keep, minute=await store.now_minute())
        rows = await ctx.db.execute(f"SELECT queue FROM {ctx.q}.qcore_metrics_lease")
        assert "gone" not in {r["queue"] for r in rows}  # a deleted queue's lease goes


async def test_the_allowlist_and_a_queue_created_later(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _queue(ctx, "secret")
    await _finished(ctx, "mail", "completed", 5)
    await _finished(ctx, "secret", "completed", 5)
    store = metrics_store
    recorder = MetricsRecorder(store, PgBossQueues(ctx, allow={"mail", "later"}))
    await recorder.tick()
    await _queue(ctx, "later")
    await _finished(ctx, "later", "completed", 3)
    await recorder.tick()
    provider = MetricsHistoryProvider(store)
    assert _totals(await provider.throughput("later")) == (1, 0)
    assert _totals(await provider.throughput("secret")) == (0, 0)
    assert _totals(await provider.throughput()) == (2, 0)


async def test_a_newer_layout_is_refused_to_writers_and_still_read(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 5)
    await MetricsRecorder(metrics_store, PgBossQueues(ctx)).tick()
    if isinstance(metrics_store, RedisMetricsStore):
        await metrics_store.client.hset(f"{metrics_store.prefix}:__meta__", "layout", 99)
        store: MetricsStore = RedisMetricsStore(
            metrics_store.client, prefix=metrics_store.prefix, schema=ctx.schema
        )
    else:
        await ctx.db.execute(
            f"UPDATE {ctx.q}.qcore_metrics_meta SET value = '99' WHERE key = 'schema_version'"
        )
        store = _store(ctx)
    refusal = r"layout version 99.*writes version \d"
    with pytest.raises(SchemaVersionError, match=refusal):
        await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    with pytest.raises(SchemaVersionError, match=refusal):
        await MetricsHistoryAdmin(store).purge()
    assert _totals(await MetricsHistoryProvider(store).throughput("mail")) == (1, 0)


async def test_a_layout_1_store_is_upgraded_in_place(ctx: Context) -> None:
    """The first layout (a namespace column, bare queue names) keeps its counts under
    the queues' keys."""
    await ctx.db.execute_script(
        f"CREATE TABLE {ctx.q}.qcore_metrics_meta (key text PRIMARY KEY, value text NOT NULL);"
        f" INSERT INTO {ctx.q}.qcore_metrics_meta VALUES ('schema_version', '1');"
        f" CREATE TABLE {ctx.q}.qcore_metrics_series (namespace text NOT NULL,"
        " queue text NOT NULL, tier text NOT NULL, bucket bigint NOT NULL,"
        " completed bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0,"
        " PRIMARY KEY (namespace, queue, tier, bucket));"
        f" INSERT INTO {ctx.q}.qcore_metrics_series"
        " SELECT 'qcore', 'mail', 'd', floor(extract(epoch FROM now()) / 86400), 7, 2"
    )
    with pytest.raises(ConfigError, match="migrate_metrics"):
        await PostgresMetricsStore(ctx.db, schema=f"{ctx.schema}_none", migrate=False).context()
    with pytest.raises(ConfigError, match="layout version 1"):
        await _store(ctx, migrate=False).context()
    provider = MetricsHistoryProvider(_store(ctx))
    assert _totals(await provider.throughput("mail", window="30d")) == (7, 2)
    [row] = await ctx.db.execute(f"SELECT value FROM {ctx.q}.qcore_metrics_meta")
    assert row["value"] == "3"


async def test_a_layout_2_store_is_upgraded_in_place(ctx: Context) -> None:
    """The second layout (the queue key as text in every row) keeps every measure."""
    key = namespace_of(ctx.schema) + "mail"
    await ctx.db.execute_script(
        f"CREATE TABLE {ctx.q}.qcore_metrics_meta (key text PRIMARY KEY, value text NOT NULL);"
        f" INSERT INTO {ctx.q}.qcore_metrics_meta VALUES ('schema_version', '2');"
        f" CREATE TABLE {ctx.q}.qcore_metrics_series (queue text NOT NULL, tier text NOT NULL,"
        " bucket integer NOT NULL, completed bigint NOT NULL DEFAULT 0,"
        " failed bigint NOT NULL DEFAULT 0, latency integer[], age real,"
        " PRIMARY KEY (queue, tier, bucket));"
        f" CREATE TABLE {ctx.q}.qcore_metrics_lease (queue text PRIMARY KEY,"
        " holder text NOT NULL, until timestamptz NOT NULL);"
        f" INSERT INTO {ctx.q}.qcore_metrics_series SELECT '{key}', 'd',"
        " floor(extract(epoch FROM now()) / 86400), 7, 2,"
        " array_fill(0, ARRAY[18]) || array_fill(3, ARRAY[18]), 42.5"
    )
    with pytest.raises(ConfigError, match="layout version 2"):
        await _store(ctx, migrate=False).context()
    provider = MetricsHistoryProvider(_store(ctx))
    totals = await provider.totals("mail", window="30d")
    assert (totals.completed, totals.failed, totals.run.samples) == (7, 2, 54)
    [point] = [p for p in await provider.latency("mail", window="30d") if p.age is not None]
    assert point.age == 42.5
    [row] = await ctx.db.execute(f"SELECT value FROM {ctx.q}.qcore_metrics_meta")
    assert row["value"] == "3"


async def test_bad_options_are_refused(ctx: Context) -> None:
    with pytest.raises(ValidationError, match="table_prefix"):
        _store(ctx, table_prefix="Bad-Prefix")
    with pytest.raises(ValidationError, match=r"Retention\.minutes"):
        Retention(minutes=0)
    with pytest.raises(ValidationError, match="interval_seconds"):
        MetricsRecorder(_store(ctx), PgBossQueues(ctx), interval_seconds=0)
    with pytest.raises(ValidationError, match="window"):
        await MetricsHistoryProvider(_store(ctx)).throughput(window="1y")


def _exact(values: list[float], p: float) -> float:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


async def test_latency_percentiles_fall_in_the_slot_of_the_exact_ones(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    waits = [3.0] * 10 + [40.0] * 50 + [700.0] * 30 + [20_000.0] * 9 + [4_000_000.0]
    runs = [1_500.0] * 60 + [8_000.0] * 40
    for wait, run in zip(waits, runs, strict=True):
        await _finished(ctx, "mail", "completed", 10, wait_ms=wait, run_ms=run)
    # retried jobs: their run time counts, their wait time (a later attempt's) does not
    await _finished(ctx, "mail", "failed", 10, n=5, wait_ms=900_000, run_ms=8_000, retries=2)
    store = metrics_store
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()

    [point] = [p for p in await MetricsHistoryProvider(store).latency("mail") if p.wait.samples]
    assert point.wait.samples == 100 and point.run.samples == 105
    for p, estimate in ((50, point.wait.p50), (95, point.wait.p95), (99, point.wait.p99)):
        exact = _exact(waits, p)
        assert estimate is not None
        assert slot_of(estimate) == slot_of(exact), (p, estimate, exact)
    assert slot_of(point.run.p95 or 0) == slot_of(_exact(runs + [8_000.0] * 5, 95))
    totals = await MetricsHistoryProvider(store).totals("mail", window="7d")
    assert (totals.completed, totals.failed, totals.wait.samples) == (100, 5, 100)
    assert totals.failure_rate == pytest.approx(5 / 105)
    # the rollup holds the same histograms
    rollup = await MetricsHistoryProvider(store).totals(window="7d")
    assert rollup.run.samples == 105


async def test_a_busy_minute_is_sampled_and_scaled_back_the_same_each_time(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10, n=600, wait_ms=30, run_ms=200)
    await _finished(ctx, "mail", "completed", 10, n=600, wait_ms=3_000, run_ms=200)
    store = metrics_store
    recorder = MetricsRecorder(store, PgBossQueues(ctx), max_samples_per_tick=60, holder="r")
    await recorder.tick()
    provider = MetricsHistoryProvider(store)
    first = await provider.totals("mail", window="7d")
    assert first.completed == 1200
    assert first.run.samples == pytest.approx(1200, abs=12)  # scaled back to the count
    # the sample is the same rows each time: snapshotting the minutes again adds nothing
    await MetricsRecorder(store, PgBossQueues(ctx), max_samples_per_tick=60, holder="r").tick()
    assert await provider.totals("mail", window="7d") == first


async def test_the_queue_age_gauge_reports_a_stalled_queue(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _queue(ctx, "idle")
    for minutes, priority in ((30, 0), (50, -5), (5, 10)):
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.job (name, priority, created_on, start_after)"
            f" SELECT 'mail', $1, t, t FROM"
            f" (SELECT {ctx.q}.job_now() - $2 * interval '1 minute' AS t) AS at",
            [priority, minutes],
        )
    # deferred into the future: not waiting yet, however old
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (name, created_on, start_after) SELECT 'mail',"
        f" {ctx.q}.job_now() - interval '5 hours', {ctx.q}.job_now() + interval '1 hour'"
    )
    store = metrics_store
    assert await MetricsRecorder(store, PgBossQueues(ctx)).tick() == 0  # nothing finished
    provider = MetricsHistoryProvider(store)
    newest = (await provider.latency("mail"))[-1]
    assert newest.filling and newest.age == pytest.approx(50 * 60, abs=120)
    assert (await provider.latency())[-1].age == pytest.approx(50 * 60, abs=120)  # rollup
    assert all(p.age is None for p in await provider.latency("idle"))


async def test_one_recorder_samples_a_queue_until_its_lease_expires(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 20)
    store = metrics_store
    first = MetricsRecorder(store, PgBossQueues(ctx))
    second = MetricsRecorder(store, PgBossQueues(ctx))
    assert await first.tick() == 1
    await _finished(ctx, "mail", "completed", 10)
    assert await second.tick() == 0  # the lease is the first one's
    assert await _tiers(store, ctx, "mail") == {"m": (1, 0), "h": (1, 0), "d": (1, 0)}
    await first.stop()  # the first recorder stops and hands over: the second samples
    assert await second.tick() == 1
    assert await first.tick() == 0
    assert await _tiers(store, ctx, "mail") == {"m": (2, 0), "h": (2, 0), "d": (2, 0)}


async def _drop_completed_indexes(ctx: Context) -> None:
    rows = await ctx.db.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = $1"
        " AND indexdef LIKE '%(name, completed_on)%'",
        [ctx.schema],
    )
    for r in rows:
        await ctx.db.execute(f"DROP INDEX {ctx.q}.{quote(r['indexname'])}")


async def test_without_the_index_counts_stay_off_and_the_warning_says_how_to_build_it(
    ctx: Context,
) -> None:
    if not ctx.backend.capabilities.drift_catalog:
        pytest.skip("the backend keeps no index catalog (drift_catalog) to check")
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10)
    await _drop_completed_indexes(ctx)
    warnings: list[tuple[str, list[str]]] = []
    store = _store(ctx)
    recorder = MetricsRecorder(
        store, PgBossQueues(ctx), on_warning=lambda m, s: warnings.append((m, s))
    )
    assert await recorder.tick() == 0
    await _hand_over(store, ctx, recorder)
    assert await recorder.tick() == 0
    [(message, statements)] = warnings  # once
    assert "'mail'" in message and "CREATE INDEX CONCURRENTLY" in message
    assert await PgBossQueues(ctx).build_indexes(["mail"]) == statements  # they build it
    await _hand_over(store, ctx, recorder)
    assert await MetricsRecorder(store, PgBossQueues(ctx)).tick() == 1
    report = await detect_schema_drift(ctx)
    assert not report.missing and not report.extra_indexes  # pg-boss's own index, back


async def test_a_purged_queue_leaves_the_rollup_and_stats_add_up(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    for name in ("mail", "sms"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=4, run_ms=50)
    await _finished(ctx, "sms", "failed", 10, n=2, run_ms=50)
    await _finished(ctx, "sms", "completed", 3 * 1440, n=1)  # three days ago
    store = metrics_store
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    admin = MetricsHistoryAdmin(store)
    usage = await admin.stats()
    assert {u.queue for u in usage.queues} == {"mail", "sms", "__global__"}
    assert usage.bytes == sum(u.bytes for u in usage.queues)
    assert usage.rows == sum(u.rows for u in usage.queues)
    assert usage.tiers["minute"].rows == usage.minutes
    if isinstance(store, RedisMetricsStore):  # every hash's own MEMORY USAGE, summed
        assert not usage.estimated
        total = 0
        async for name in store.client.scan_iter(match=store.prefix + ":pgboss:*"):
            total += await store.client.memory_usage(name, samples=0)
        assert usage.bytes == total
    elif not usage.estimated:
        [size] = await ctx.db.execute(
            f"SELECT pg_total_relation_size('{ctx.q}.qcore_metrics_series')"
            f" + pg_total_relation_size('{ctx.q}.qcore_metrics_key') AS b"
        )
        assert abs(usage.bytes - int(size["b"])) <= len(usage.queues) * 3

    provider = MetricsHistoryProvider(store)
    await admin.purge("mail")
    await admin.purge("mail")  # idempotent
    rollup = await provider.totals(window="7d")
    assert (rollup.completed, rollup.failed, rollup.run.samples) == (1, 2, 3)
    assert _totals(await provider.throughput("mail", window="7d")) == (0, 0)

    # before a day: the three-day-old minute goes, today's stays
    today = dt.datetime.now(dt.timezone.utc).date()
    await admin.purge(before=today - dt.timedelta(days=1))
    assert _totals(await provider.throughput("sms", window="7d")) == (0, 2)
    await admin.purge()
    assert (await admin.stats()).rows == 0
    with pytest.raises(ValidationError, match="before"):
        await admin.purge(before=dt.datetime(2026, 1, 1))


async def test_a_namespaced_view_and_the_breakdown(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    for name in ("mail", "sms"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=3)
    await _finished(ctx, "sms", "completed", 10, n=5)
    store = metrics_store
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    raw = MetricsHistoryProvider(store, namespace="")
    assert _totals(await raw.throughput("mail")) == (0, 0)  # keys carry the prefix
    view = raw.namespaced(namespace_of(ctx.schema))
    assert _totals(await view.throughput("mail")) == (3, 0)
    assert [t.queue for t in await view.breakdown(window="7d")] == ["sms", "mail"]


class _CountedReads:
    """``store``, unchanged, with its clock reads and series reads counted."""

    def __init__(self, store: MetricsStore) -> None:
        self.store = store
        self.default_namespace = store.default_namespace
        self.clock = self.reads = self.listings = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def now_minute(self) -> int:
        self.clock += 1
        return await self.store.now_minute()

    async def read_series(self, keys: list[str], tier: str, first: int, last: int) -> Any:
        self.reads += 1
        return await self.store.read_series(keys, tier, first, last)

    async def keys(self, namespace: str) -> Any:
        self.listings += 1
        return await self.store.keys(namespace)


async def _three_queues_recorded(ctx: Context, store: MetricsStore) -> _CountedReads:
    """Queues mail (3 completed, 1 failed), sms (2 completed, waited 5 s) and idle,
    recorded into ``store``; the store with its reads counted from now on."""
    for name in ("mail", "sms", "idle"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=3)
    await _finished(ctx, "mail", "failed", 10, run_ms=2_000)
    await _finished(ctx, "sms", "completed", 12, n=2, wait_ms=5_000)
    await MetricsRecorder(store, PgBossQueues(ctx)).tick()
    return _CountedReads(store)


async def test_the_totals_of_many_queues_are_one_read_and_each_its_own(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    counted = await _three_queues_recorded(ctx, metrics_store)
    provider = MetricsHistoryProvider(counted)
    every = await provider.totals_of(["sms", "idle", "mail", "never"], window="7d")
    assert (counted.clock, counted.reads) == (1, 1)
    assert [(t.queue, t.completed, t.failed) for t in every] == [
        ("sms", 2, 0),
        ("idle", 0, 0),
        ("mail", 3, 1),
        ("never", 0, 0),
    ]
    # the same totals, percentiles and histograms as each queue read alone
    for one in every:
        alone = await provider.totals(one.queue, window="7d")
        assert one == alone
        assert one.wait_histogram == alone.wait_histogram
        assert one.run_histogram == alone.run_histogram
    assert every[0].wait.p50 != every[2].wait.p50  # each its own: sms waited 5 s, mail 60 s
    counted.reads = 0
    busiest = await provider.breakdown(window="7d")
    assert counted.reads == 1
    assert [(t.queue, t.completed + t.failed) for t in busiest if t.queue != "idle"] == [
        ("mail", 4),
        ("sms", 2),
    ]
    assert await provider.totals_of([], window="7d") == []
    for wrong in ("mail", ["mail", None]):
        with pytest.raises(ValidationError, match="list of queue names"):
            await provider.totals_of(wrong)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="window must be one of"):
        await provider.totals_of([], window="1y")


async def test_a_window_of_a_queue_or_of_every_queue_is_one_read(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    counted = await _three_queues_recorded(ctx, metrics_store)
    provider = MetricsHistoryProvider(counted)
    for window in ("60m", "7d"):
        for queue, breakdown in (("mail", False), (None, True), ("never", False)):
            counted.clock = counted.reads = counted.listings = 0
            view = await provider.window_history(queue, window=window, breakdown=breakdown)
            assert (counted.clock, counted.reads, counted.listings) == (1, 1, int(breakdown))
            # what the separate reads give, point for point
            assert view.throughput == await provider.throughput(queue, window=window)
            assert view.latency == await provider.latency(queue, window=window)
            alone = await provider.totals(queue, window=window)
            assert view.totals == alone
            assert view.totals.wait_histogram == alone.wait_histogram
            assert view.totals.run_histogram == alone.run_histogram
            assert view.breakdown == (await provider.breakdown(window=window) if breakdown else [])
    mail = await provider.window_history("mail", window="60m")
    assert (mail.totals.completed, mail.totals.failed) == (3, 1)
    every = await provider.window_history(window="60m", breakdown=True)
    assert (every.totals.queue, every.totals.completed, every.totals.failed) == (GLOBAL, 5, 1)
    assert [(t.queue, t.completed + t.failed) for t in every.breakdown if t.queue != "idle"] == [
        ("mail", 4),
        ("sms", 2),
    ]
    counted.clock = counted.reads = counted.listings = 0
    for wrong in ("1y", "5m"):
        with pytest.raises(ValidationError, match="window must be one of"):
            await provider.window_history(window=wrong, breakdown=True)
    assert (counted.clock, counted.reads, counted.listings) == (0, 0, 0)  # refused unread


async def test_a_boss_records_its_queues_while_it_runs(
    boss: Any, metrics_store: MetricsStore
) -> None:
    ctx = boss.context()
    await boss.create_queue("mail")
    await _finished(ctx, "mail", "completed", 10, n=2)
    if isinstance(metrics_store, RedisMetricsStore):
        await record_metrics(boss, store=metrics_store, interval_seconds=3600)
    else:  # the default: tables in the boss's own schema
        await record_metrics(boss, interval_seconds=3600)
    provider = MetricsHistoryProvider(metrics_store)

    async def recorded() -> bool:
        return _totals(await provider.throughput("mail")) == (2, 0)

    await until(recorded, timeout=30)
    with pytest.raises(ValidationError, match="interval_seconds"):
        await record_metrics(boss, interval_seconds=0)


class _BrokenLatency(PgBossQueues):
    async def latency(self, queue: str, counts: Any, max_samples: int) -> Any:
        raise RuntimeError("the latency scan broke")


async def test_a_failing_latency_read_keeps_the_counts_and_is_retried(
    ctx: Context, metrics_store: MetricsStore
) -> None:
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10, n=3, run_ms=40)
    store = metrics_store
    heard: list[tuple[str, str]] = []
    broken = MetricsRecorder(
        store,
        _BrokenLatency(ctx),
        holder="r",
        on_latency_error=lambda exc, queue: heard.append((str(exc), queue)),
    )
    assert await broken.tick() == 1
    assert heard == [("the latency scan broke", "mail")]
    provider = MetricsHistoryProvider(store)
    totals = await provider.totals("mail")
    assert (totals.completed, totals.run.samples) == (3, 0)  # the counts are in
    # the watermark stayed: the next tick samples those minutes, counts add nothing
    assert await broken.tick() == 0 and len(heard) == 2
    assert await MetricsRecorder(store, PgBossQueues(ctx), holder="r").tick() == 0
    totals = await provider.totals("mail")
    assert (totals.completed, totals.run.samples) == (3, 3)

"""The metrics history's paths the shared store tests leave out: the late-commit margin
on the schema's controllable clock, a failing tick heard through ``on_snapshot_error``
while the recorder runs on and records again once repaired, ``latency=False`` in both
stores, several stores creating one PostgreSQL store's tables at once, and two boards
sharing one store (two Redis prefixes, two job schemas in one PostgreSQL store) without
seeing, rolling up or purging each other's history. They run once, on PostgreSQL (and
the Redis server of the conformance suite's store tests)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from qcore import backends
from qcore.conformance.helpers import set_clock, until
from qcore.conformance.suite.test_metrics import _finished, _queue, drop_prefix, redis_client
from qcore.context import Context
from qcore.db import connect
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
)
from qcore.metrics.sources import Clock
from qcore.metrics.store import GLOBAL, TIERS
from qcore.schema import install_or_migrate

pytestmark = pytest.mark.postgres

#: how long a condition gets to come true (two busy cores)
DEADLINE = 60.0


@pytest.fixture
def ctx(shared: Context) -> Context:
    """What these tests check is the recorder's and the stores', not a backend's."""
    return shared


def _pg_store(ctx: Context, **options: Any) -> PostgresMetricsStore:
    return PostgresMetricsStore(ctx.db, schema=ctx.schema, backend=ctx.backend, **options)


async def _buckets(store: MetricsStore, key: str) -> dict[str, dict[int, Any]]:
    """Every bucket of ``key`` per tier, over the last 100 days and the next one."""
    now = await store.now_minute()
    found = {}
    for tier, width in TIERS.items():
        first, last = (now - 100 * 1440) // width, (now + 1440) // width
        series = await store.read_series([key], tier, first, last)
        found[tier] = series.get(key, {})
    return found


async def _counts(store: MetricsStore, key: str) -> dict[str, tuple[int, int]]:
    """(completed, failed) stored per tier for ``key`` (tiers holding some)."""
    found = {}
    for tier, buckets in (await _buckets(store, key)).items():
        stored = buckets.values()
        counts = (sum(b.completed for b in stored), sum(b.failed for b in stored))
        if counts != (0, 0):
            found[tier] = counts
    return found


def _every_tier(completed: int, failed: int) -> dict[str, tuple[int, int]]:
    return {tier: (completed, failed) for tier in TIERS}


# -- the late-commit margin ---------------------------------------------------------------


class _PinnedClock(PgBossQueues):
    """The job schema's clock (``job_now()``) set to ``at`` (epoch seconds) just before
    each tick reads it, so a tick runs at a chosen second of a minute however long the
    test took to get there."""

    at = 0.0

    async def clock(self, margin_seconds: float) -> Clock:
        [row] = await self.ctx.db.execute(
            "SELECT extract(epoch FROM clock_timestamp())::float8 AS now"
        )
        await set_clock(self.ctx, self.at - float(row["now"]))
        return await super().clock(margin_seconds)


async def _completed_at(ctx: Context, queue: str, epoch: float) -> None:
    """A job of ``queue`` completed at ``epoch`` (after a 2 s wait and a 1 s run)."""
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.job (name, state, created_on, started_on, completed_on)"
        " SELECT $1, 'completed', t - interval '3 seconds', t - interval '1 second', t"
        " FROM (SELECT to_timestamp($2::float8) AS t) AS at",
        [queue, epoch],
    )


async def test_a_late_commit_inside_the_margin_is_still_counted(ctx: Context) -> None:
    """The margin is a delay, not a re-read: a tick counts the minutes closed
    ``margin_seconds`` ago (``clock.closed`` is the minute of ``job_now() - margin``) and
    the next starts where it stopped. So a job stamped ``completed_on`` at second 59 of
    minute M whose transaction commits after a tick at second 1 of M+1 is counted by the
    next tick with the default 5 s margin (M was not closed yet), and is lost with
    margin 0 (M was counted without it). Catches a margin ignored, added the wrong way,
    or a default that no longer covers a late commit."""
    for queue in ("default", "none"):
        await _queue(ctx, queue)
    [row] = await ctx.db.execute("SELECT floor(extract(epoch FROM now()) / 60)::bigint AS m")
    boundary = (int(row["m"]) - 10) * 60  # the end of minute M, ten minutes ago
    minute = boundary // 60 - 1
    store = _pg_store(ctx)
    recorders = {}
    margins: dict[str, dict[str, Any]] = {"default": {}, "none": {"margin_seconds": 0}}
    for queue, options in margins.items():
        source = _PinnedClock(ctx, allow={queue})
        recorders[queue] = (MetricsRecorder(store, source, holder=queue, **options), source)
        await _completed_at(ctx, queue, boundary - 30)  # committed on time
    assert recorders["default"][0].margin_seconds == 5.0

    async def stored(queue: str) -> int:
        key = namespace_of(ctx.schema) + queue
        series = await store.read_series([key], "m", minute, minute)
        return sum(b.completed for b in series.get(key, {}).values())

    for recorder, source in recorders.values():
        source.at = boundary + 1  # one second into minute M+1
        await recorder.tick()
    assert (await stored("default"), await stored("none")) == (0, 1)
    for queue in recorders:  # stamped inside M, committed only now
        await _completed_at(ctx, queue, boundary - 1)
    for recorder, source in recorders.values():
        source.at = boundary + 120  # two minutes on: M closed whatever the margin
        await recorder.tick()
    assert await stored("default") == 2
    assert await stored("none") == 1  # what the margin is for


# -- on_snapshot_error ----------------------------------------------------------------------


async def _rename(ctx: Context, table: str, to: str) -> None:
    await ctx.db.execute(f"ALTER TABLE {ctx.q}.{table} RENAME TO {to}")


async def test_a_failing_tick_is_heard_and_the_recorder_records_again_once_repaired(
    ctx: Context,
) -> None:
    """A running recorder whose store breaks calls ``on_snapshot_error(exc, queue)``
    tick after tick (``queue`` empty when the whole tick failed: no lease table; the
    queue's name when its snapshot failed: no series table), keeps ticking, and once the
    table is back records what it could not, the failed minutes included. Catches an
    error that stops the recorder's loop, a callback given the wrong arguments, or a
    watermark moved past minutes whose write failed (their jobs never counted)."""
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10)
    store = _pg_store(ctx)
    await store.ready()
    key = namespace_of(ctx.schema) + "mail"
    heard: list[tuple[str, BaseException]] = []
    recorder = MetricsRecorder(
        store,
        PgBossQueues(ctx),
        interval_seconds=1,
        holder="r",
        on_snapshot_error=lambda exc, queue: heard.append((queue, exc)),
    )

    def failures(queue: str, table: str) -> int:
        return sum(1 for q, exc in heard if q == queue and table in str(exc))

    await _rename(ctx, "qcore_metrics_lease", "lease_away")
    await recorder.start()
    try:
        await until(
            lambda: failures("", "qcore_metrics_lease") >= 2,
            DEADLINE,
            0.2,
            "two whole ticks failed and heard",
        )
        assert await _counts(store, key) == {}
        await _rename(ctx, "lease_away", "qcore_metrics_lease")

        async def recorded(expected: dict[str, tuple[int, int]]) -> bool:
            return await _counts(store, key) == expected

        await until(lambda: recorded(_every_tier(1, 0)), DEADLINE, 0.2, "recorded once repaired")

        # the queue's own snapshot fails; its minute is counted once the table is back
        await _rename(ctx, "qcore_metrics_series", "series_away")
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.job (name, state, created_on, started_on, completed_on)"
            f" SELECT 'mail', 'failed', t, t, t FROM"
            f" (SELECT {ctx.q}.job_now() + interval '1 minute' AS t) AS at"
        )
        await set_clock(ctx, 180)  # its minute closes
        await until(
            lambda: failures("mail", "qcore_metrics_series") >= 2,
            DEADLINE,
            0.2,
            "two snapshots of mail failed and heard",
        )
        await _rename(ctx, "series_away", "qcore_metrics_series")
        await until(lambda: recorded(_every_tier(1, 1)), DEADLINE, 0.2, "the failed minute")
    finally:
        await recorder.stop()
        await set_clock(ctx, 0)
    assert all(isinstance(exc, Exception) for _, exc in heard)


# -- latency=False --------------------------------------------------------------------------


@pytest_asyncio.fixture(params=["postgres-store", "redis-store"])
async def two_stores(
    request: pytest.FixtureRequest, ctx: Context
) -> AsyncIterator[tuple[MetricsStore, MetricsStore]]:
    """Two stores of one kind apart from each other: tables of two prefixes in the
    test's schema, or two Redis prefixes."""
    if request.param == "postgres-store":
        yield _pg_store(ctx), _pg_store(ctx, table_prefix="qcore_latency_")
        return
    client = await redis_client()
    prefix = f"qcore-test:{uuid.uuid4().hex[:12]}"
    try:
        yield (
            RedisMetricsStore(client, prefix=f"{prefix}-a", schema=ctx.schema),
            RedisMetricsStore(client, prefix=f"{prefix}-b", schema=ctx.schema),
        )
    finally:
        for each in ("a", "b"):
            await drop_prefix(client, f"{prefix}-{each}")
        await client.aclose()


async def test_without_latency_only_counts_are_written(
    ctx: Context, two_stores: tuple[MetricsStore, MetricsStore]
) -> None:
    """``latency=False`` writes the counts to every tier of the queue and the rollup and
    neither a histogram nor a queue age: no latency or age column in the PostgreSQL
    rows, bucket values of the two counts only in Redis. The same jobs recorded with
    latency into the second store give both, so the test data would show them. Catches
    a latency read or an age probe that ignores the option."""
    without, control = two_stores
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10, n=3, run_ms=50)
    await ctx.db.execute(  # one job waiting half an hour: an age to record
        f"INSERT INTO {ctx.q}.job (name, created_on, start_after) SELECT 'mail', t, t"
        f" FROM (SELECT {ctx.q}.job_now() - interval '30 minutes' AS t) AS at"
    )
    namespace = namespace_of(ctx.schema)
    assert await MetricsRecorder(without, PgBossQueues(ctx), latency=False).tick() == 1
    assert await MetricsRecorder(control, PgBossQueues(ctx)).tick() == 1
    for key in (namespace + "mail", namespace + GLOBAL):
        assert await _counts(without, key) == _every_tier(3, 0)
        assert await _counts(control, key) == _every_tier(3, 0)
        buckets = [b for tier in (await _buckets(without, key)).values() for b in tier.values()]
        assert buckets and all(b.latency is None and b.age is None for b in buckets)
        controls = [b for tier in (await _buckets(control, key)).values() for b in tier.values()]
        assert any(b.latency for b in controls) and any(b.age for b in controls)
    if isinstance(without, PostgresMetricsStore):
        rows = await ctx.db.execute(
            "SELECT count(*) AS n, count(*) FILTER (WHERE latency IS NOT NULL"
            f" OR age IS NOT NULL) AS measured FROM {ctx.q}.qcore_metrics_series"
        )
        assert (rows[0]["n"], rows[0]["measured"]) == (6, 0)  # 3 tiers of mail and the rollup
    else:
        assert isinstance(without, RedisMetricsStore)
        values = []
        async for name in without.client.scan_iter(match=f"{without.prefix}:pgboss:*"):
            values += [v.decode() for v in (await without.client.hgetall(name)).values()]
        assert sorted(values) == ["3"] * 6  # completed only: no failed, age nor histogram


# -- concurrent migration -------------------------------------------------------------------


async def _layout(ctx: Context, schema: str) -> tuple[list[tuple[str, str]], list[Any]]:
    """The tables and indexes of ``schema`` (by name and definition, the schema's name
    taken out) and its meta rows."""
    rows = await ctx.db.execute(
        "SELECT c.relkind::text AS kind, c.relname AS name FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1"
        " AND c.relkind IN ('r', 'i', 'S') ORDER BY 2",
        [schema],
    )
    meta = await ctx.db.execute(
        f'SELECT key, value FROM "{schema}".qcore_metrics_meta ORDER BY key'
    )
    return [(r["kind"], r["name"]) for r in rows], [dict(r) for r in meta]


async def test_stores_created_at_once_make_one_set_of_tables(ctx: Context, pg_dsn: str) -> None:
    """Five stores with ``migrate=True``, each on its own pool, ready at once on a schema
    that does not exist yet: every one succeeds and the schema holds what one store
    alone creates (the same tables and indexes, one layout row); five more at once on
    the made store change nothing and write. Catches creation outside the store's lock
    (two ``CREATE ... IF NOT EXISTS`` racing fail on a duplicate catalog row), or a
    second creator not seeing the first's work."""
    schema = f"metricsmig_{uuid.uuid4().hex[:8]}"
    alone = f"{schema}_alone"
    dbs = [await connect(pg_dsn, max=2) for _ in range(5)]
    postgres = backends.get("postgres")
    try:
        await PostgresMetricsStore(ctx.db, schema=alone).ready()
        expected = await _layout(ctx, alone)
        assert expected[0] and expected[1]
        for _ in range(2):  # a fresh schema, then the made one
            stores = [PostgresMetricsStore(db, schema=schema, backend=postgres) for db in dbs]
            await asyncio.gather(*(store.ready() for store in stores))
            assert await _layout(ctx, schema) == expected
            got = await asyncio.gather(
                *(s.take_leases([f"q{i}"], holder="h", seconds=60) for i, s in enumerate(stores))
            )
            assert got == [{f"q{i}"} for i in range(5)]  # and every one writes
    finally:
        for name in (schema, alone):
            await ctx.db.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        for db in dbs:
            await db.close()


# -- two boards on one store ----------------------------------------------------------------


async def _rows(admin: MetricsHistoryAdmin) -> int:
    return (await admin.stats()).rows


@pytest.mark.parametrize("nested", [False, True], ids=["sibling-prefixes", "nested-prefixes"])
async def test_two_redis_prefixes_keep_apart(
    ctx: Context, redis: tuple[Any, str], nested: bool
) -> None:
    """Two boards on one Redis server, under ``<p>-a`` and ``<p>-b``, or under ``<p>``
    and ``<p>:eu`` (one prefix inside the other), recording the same job schema (one
    ``mail``, the other ``sms``): neither reads the other's queues nor counts them in its
    ``__global__``, and a prune and a purge through one leave the other's buckets.
    Catches keys or scans not bounded by the prefix (a ``SCAN <p>:*`` also matches
    ``<p>:eu:...``)."""
    client, prefix = redis
    first, second = (prefix, f"{prefix}:eu") if nested else (f"{prefix}-a", f"{prefix}-b")
    await _queue(ctx, "mail")
    await _queue(ctx, "sms")
    await _finished(ctx, "mail", "completed", 10, n=3)
    await _finished(ctx, "sms", "failed", 10, n=2)
    mine = RedisMetricsStore(client, prefix=first, schema=ctx.schema)
    theirs = RedisMetricsStore(client, prefix=second, schema=ctx.schema)
    try:
        await MetricsRecorder(mine, PgBossQueues(ctx, allow={"mail"}), holder="h").tick()
        await MetricsRecorder(theirs, PgBossQueues(ctx, allow={"sms"}), holder="h").tick()
        await _assert_apart(mine, theirs, ("mail", (3, 0)), ("sms", (0, 2)))

        # a tick's prune with a short retention, on a clock days ahead: its own go only
        now = await mine.now_minute()
        await mine.prune(Retention(minutes=1, hours=1, days=1), minute=now + 5 * 1440)
        assert await _rows(MetricsHistoryAdmin(mine)) == 0
        assert await _rows(MetricsHistoryAdmin(theirs)) == 6
        await MetricsHistoryAdmin(mine, namespace="").purge()
        await MetricsHistoryAdmin(mine).purge()
        assert await _rows(MetricsHistoryAdmin(theirs)) == 6
        assert await _counts(theirs, namespace_of(ctx.schema) + GLOBAL) == _every_tier(0, 2)
        assert await mine.keys("") == []
        assert await theirs.keys("") == [namespace_of(ctx.schema) + "sms"]
    finally:
        for each in (first, second):
            await drop_prefix(client, each)


async def _assert_apart(
    mine: MetricsStore,
    theirs: MetricsStore,
    *recorded: tuple[str, tuple[int, int]],
) -> None:
    """Each store's provider sees its own queue (and only it in its rollup), not the other's."""
    (my_queue, my_counts), (their_queue, their_counts) = recorded
    for store, own, own_counts, other in (
        (mine, my_queue, my_counts, their_queue),
        (theirs, their_queue, their_counts, my_queue),
    ):
        provider = MetricsHistoryProvider(store)
        totals = await provider.totals(own, window="7d")
        assert (totals.completed, totals.failed) == own_counts
        if other != own:
            totals = await provider.totals(other, window="7d")
            assert (totals.completed, totals.failed) == (0, 0)
        rollup = await provider.totals(window="7d")
        assert (rollup.completed, rollup.failed) == own_counts
        assert {u.queue for u in (await MetricsHistoryAdmin(store).stats()).queues} == {
            own,
            GLOBAL,
        }


async def test_two_job_schemas_share_one_postgres_store(ctx: Context, pg_dsn: str) -> None:
    """Two job schemas recorded into one store in a schema of its own, each with a queue
    ``mail``: each schema's provider (``queue_schema``) sees its own ``mail`` and its own
    ``__global__`` only; purging one schema's queue, then all of it, leaves the other's
    rows and rollup. Catches a key or a purge not bounded by ``pgboss:<schema>:``, or a
    queue's purge subtracted from the other schema's rollup."""
    other = Context(db=ctx.db, backend=ctx.backend, schema_spec=f"{ctx.schema}_two")
    store_schema = f"{ctx.schema}_store"
    try:
        await install_or_migrate(other)
        for each, state, n in ((ctx, "completed", 3), (other, "failed", 2)):
            await _queue(each, "mail")
            await _finished(each, "mail", state, 10, n=n)
        stores = [
            PostgresMetricsStore(ctx.db, schema=store_schema, queue_schema=each.schema)
            for each in (ctx, other)
        ]
        for store, each in zip(stores, (ctx, other), strict=True):
            await MetricsRecorder(store, PgBossQueues(each), holder="h").tick()
        mine, theirs = stores
        await _assert_apart(mine, theirs, ("mail", (3, 0)), ("mail", (0, 2)))

        await MetricsHistoryAdmin(mine).purge("mail")
        mail = await MetricsHistoryProvider(mine).totals(window="7d")
        assert (mail.completed, mail.failed) == (0, 0)  # its rollup: the mail subtracted
        await MetricsHistoryAdmin(mine).purge()
        assert await _rows(MetricsHistoryAdmin(mine)) == 0
        assert await _rows(MetricsHistoryAdmin(theirs)) == 6
        for queue in ("mail", GLOBAL):
            key = namespace_of(other.schema) + queue
            assert await _counts(theirs, key) == _every_tier(0, 2)
    finally:
        for name in (other.schema, store_schema):
            await ctx.db.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

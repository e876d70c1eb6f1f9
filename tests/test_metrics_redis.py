"""What only the Redis store does: per-tier TTLs on the recorder's clock, the layout
marker, hash tags, bad input, and the whole record/read/stats/purge cycle on a real
three-node Redis Cluster started here from ``redis-server`` (the shared store tests
run in the conformance suite against a standalone server)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qcore.conformance.suite.test_metrics import _finished, _queue, drop_prefix
from qcore.context import Context
from qcore.errors import SchemaVersionError, ValidationError
from qcore.metrics import (
    MetricsHistoryAdmin,
    MetricsHistoryProvider,
    MetricsRecorder,
    PgBossQueues,
    RedisMetricsStore,
    Retention,
    namespace_of,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def ctx(shared: Context) -> Context:
    """What these tests check is the Redis store's, not a backend's: they run once, on
    PostgreSQL, instead of once per backend of the matrix."""
    return shared


async def test_minute_and_hour_hashes_expire_with_their_tier_and_the_day_hash_is_trimmed(
    ctx: Context, redis: Any
) -> None:
    client, prefix = redis
    await _queue(ctx, "mail")
    await _finished(ctx, "mail", "completed", 10)
    store = RedisMetricsStore(client, prefix=prefix, schema=ctx.schema)
    keep = Retention(minutes=2, hours=5, days=30)
    await MetricsRecorder(store, PgBossQueues(ctx), retention=keep).tick()
    key = f"{prefix}:{namespace_of(ctx.schema)}mail"
    [minute_hash] = [k.decode() async for k in client.scan_iter(match=key + ":m:*")]
    [hour_hash] = [k.decode() async for k in client.scan_iter(match=key + ":h:*")]
    hour, day = int(minute_hash.rsplit(":", 1)[1]), int(hour_hash.rsplit(":", 1)[1])
    now = time.time()
    # each dies its tier's retention after the period it covers (±2 minutes of clocks)
    expected_minute = (hour + 1) * 3600 + 2 * 86400 - now
    expected_hour = (day + 1) * 86400 + 5 * 86400 - now
    assert abs(await client.ttl(minute_hash) - expected_minute) < 120
    assert abs(await client.ttl(hour_hash) - expected_hour) < 120
    assert await client.ttl(key + ":d") == -1  # no TTL: trimmed by the recorder instead

    # a day field older than the day tier's window goes at the next prune
    await client.hset(key + ":d", str(day - 40), "5")
    await store.prune(keep, minute=int(now // 60))
    assert await client.hkeys(key + ":d") == [str(day).encode()]


async def test_the_layout_marker_is_written_on_the_first_write_and_a_newer_one_refused(
    ctx: Context, redis: Any
) -> None:
    client, prefix = redis
    store = RedisMetricsStore(client, prefix=prefix, schema=ctx.schema)
    await store.ready(writing=False)
    assert await client.hget(f"{prefix}:__meta__", "layout") is None  # readers never write
    await store.take_leases(["q"], holder="h", seconds=10)
    assert await client.hget(f"{prefix}:__meta__", "layout") == b"1"
    await client.hset(f"{prefix}:__meta__", "layout", 2)
    newer = RedisMetricsStore(client, prefix=prefix, schema=ctx.schema)
    with pytest.raises(SchemaVersionError, match="layout version 2; this qcore writes version 1"):
        await newer.take_leases(["q"], holder="h", seconds=10)
    await newer.ready(writing=False)  # a reader still reads


async def test_bad_arguments_are_refused(ctx: Context, redis: Any) -> None:
    client, _ = redis
    with pytest.raises(ValidationError, match="prefix"):
        RedisMetricsStore(client, prefix="has space")
    provider = MetricsHistoryProvider(RedisMetricsStore(client, schema=ctx.schema))
    with pytest.raises(ValidationError, match="pass jobs="):  # depth lives in the job schema
        await provider.depth("mail")
    assert await provider.depth("mail", jobs=ctx) == []
    with pytest.raises(ValidationError, match=r"redis:// URL or a redis\.asyncio client"):
        RedisMetricsStore(42)


# --------------------------------------------------------------------------- a cluster

_PORTS = (17101, 17102, 17103)


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    """A three-primary Redis Cluster on local ports, started for this module."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("redis-server and redis-cli are not installed: no cluster to start")
    if not all(_free(p) for p in _PORTS):
        pytest.skip(f"the cluster's ports {_PORTS} are taken")
    workdir = tempfile.mkdtemp(prefix="qcore-cluster-")
    nodes = [
        subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{port}.conf",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
            ],
            stdout=subprocess.DEVNULL,
        )
        for port in _PORTS
    ]
    try:
        deadline = time.monotonic() + 30
        while any(_free(p) for p in _PORTS):
            if time.monotonic() > deadline:
                pytest.fail("the cluster's nodes did not start listening within 30 s")
            time.sleep(0.2)
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in _PORTS),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        while (
            b"cluster_state:ok"
            not in subprocess.run(
                [cli, "-p", str(_PORTS[0]), "cluster", "info"], capture_output=True, check=True
            ).stdout
        ):
            if time.monotonic() > deadline + 30:
                pytest.fail("the cluster did not reach cluster_state:ok within 60 s")
            time.sleep(0.2)
        yield f"redis://127.0.0.1:{_PORTS[0]}/0"
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


async def test_a_cluster_records_reads_measures_and_purges_in_one_hash_tag(
    ctx: Context, cluster_url: str
) -> None:
    for name in ("mail", "sms"):
        await _queue(ctx, name)
    await _finished(ctx, "mail", "completed", 10, n=3, run_ms=20)
    await _finished(ctx, "sms", "failed", 10, n=2, run_ms=20)
    store = RedisMetricsStore(cluster_url, cluster=True, schema=ctx.schema)
    try:
        assert store.prefix == "{qcore:metrics}"
        assert await MetricsRecorder(store, PgBossQueues(ctx)).tick() == 2
        provider = MetricsHistoryProvider(store)
        rollup = await provider.totals(window="7d")
        assert (rollup.completed, rollup.failed, rollup.run.samples) == (3, 2, 5)
        keys = [k async for k in store.client.scan_iter(match="*")]
        slots = {store.client.keyslot(k) for k in keys}
        assert len(keys) > 6 and len(slots) == 1  # every key in the namespace's slot

        admin = MetricsHistoryAdmin(store)
        usage = await admin.stats()
        assert {u.queue for u in usage.queues} == {"mail", "sms", "__global__"}
        assert usage.bytes > 0 and not usage.estimated
        await admin.purge("sms")
        rollup = await provider.totals(window="7d")
        assert (rollup.completed, rollup.failed) == (3, 0)
        await admin.purge()
        assert (await admin.stats()).rows == 0
    finally:
        await drop_prefix(store.client, store.prefix)
        await store.close()
    # a prefix holding its own tag is used as given
    tagged = RedisMetricsStore(cluster_url, cluster=True, prefix="{eu}:metrics")
    try:
        assert tagged.prefix == "{eu}:metrics"
    finally:
        await tagged.close()

"""The history in Redis: :class:`RedisMetricsStore`.

It is for teams that keep metrics writes off the queues' own database (extra
``qcore-queue[redis]``, redis-py's asyncio client).

Every key lives under the store's ``prefix`` (default ``qcore:metrics``; on a cluster
connection wrapped in a hash tag, ``{qcore:metrics}``, unless it holds one already, so
that a snapshot's keys share one slot):

- ``<prefix>:__meta__`` (hash): field ``layout``, the layout version (``1``), written
  on the first write; a newer one is refused to writers, read by readers;
- ``<prefix>:__keys__`` (hash): queue key -> the newest minute with finished jobs
  (where a restarted recorder resumes; empty while only ages were recorded);
- ``<prefix>:__lease__:<queue key>``: a queue's sampling lease (the holder), expiring
  on the server's clock;
- ``<prefix>:<queue key>:m:<hour>`` (hash): the minutes of one hour, field = minute of
  the hour; ``<prefix>:<queue key>:h:<day>``: the hours of one day, field = hour of the
  day; ``<prefix>:<queue key>:d``: the days, field = day number.

Minute and hour hashes carry a TTL reaching their tier's retention past the period they
cover, refreshed (to the same end) while that period is written, so they die on their
own; the day hashes are written every day and are trimmed by :meth:`prune` instead,
which drops every bucket past retention on the recorder's clock, as the PostgreSQL store
does. A snapshot is one script (:mod:`qcore.metrics.redis_scripts`):
diff, all six targets and their TTLs in one atomic step, idempotent like the
PostgreSQL store's transaction. ``usage()`` measures ``MEMORY USAGE`` of every key in
pipelined batches; ``purge()`` and ``prune()`` find keys by ``SCAN`` (every primary of a
cluster), never blocking the server.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

from qcore.errors import ConfigError, SchemaVersionError, ValidationError
from qcore.metrics import redis_scripts as lua
from qcore.metrics.sources import namespace_of
from qcore.metrics.store import (
    MINUTES_PER_DAY,
    TIERS,
    Bucket,
    KeyUsage,
    Retention,
    Snapshot,
)

__all__ = ["REDIS_METRICS_LAYOUT_VERSION", "RedisMetricsStore"]

#: the layout this qcore writes (``<prefix>:__meta__`` field ``layout``)
REDIS_METRICS_LAYOUT_VERSION = 1

#: keys measured or trimmed per pipelined round trip
_BATCH = 500

_GLOB = re.compile(r"([*?\[\]\\])")

#: tier -> minutes per hash (a hash holds one hour of minutes, one day of hours)
_SPAN = {"m": 60, "h": MINUTES_PER_DAY}


def _import_redis() -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "the Redis metrics store needs redis-py: pip install 'qcore-queue[redis]'"
        ) from exc
    return aioredis


def _hash_tagged(prefix: str) -> str:
    """``prefix`` as a cluster hash tag, unless it holds a ``{...}`` tag already."""
    return prefix if re.search(r"\{[^{}]+\}", prefix) else "{" + prefix + "}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _encode(numbers: list[int], age: float | None = None) -> str:
    """A bucket value (see :mod:`qcore.metrics.redis_scripts`)."""
    parts = [str(n) if n else "" for n in numbers]
    parts.insert(2, "" if age is None else repr(round(age, 3)))
    return ",".join(parts).rstrip(",")


def _decode(value: Any) -> Bucket:
    parts = _text(value).split(",")
    parts += [""] * (lua.VALUE_FIELDS - len(parts))
    numbers = [int(p) if p else 0 for p in parts[:2] + parts[3:]]
    latency = numbers[2:]
    return Bucket(
        completed=numbers[0],
        failed=numbers[1],
        latency=latency if any(latency) else None,
        age=float(parts[2]) if parts[2] else None,
    )


class RedisMetricsStore:
    """The history in Redis at ``client_or_url``.

    A URL: the store opens and closes its own client, a cluster client with
    ``cluster=True``; a ``redis.asyncio`` client or cluster client: the caller's to
    close. ``schema`` names the job schema whose queues readers show by default
    (``pgboss:<schema>:``).
    """

    def __init__(
        self,
        client_or_url: Any,
        *,
        prefix: str = "qcore:metrics",
        schema: str = "pgboss",
        cluster: bool = False,
    ) -> None:
        if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
            raise ValidationError(
                f"prefix must be a non-empty string without spaces, got {prefix!r}"
            )
        aioredis = _import_redis()
        from redis.asyncio.cluster import RedisCluster

        if isinstance(client_or_url, str):
            self._client = (
                RedisCluster.from_url(client_or_url)
                if cluster
                else aioredis.from_url(client_or_url)
            )
            self._owned = True
        elif isinstance(client_or_url, (aioredis.Redis, RedisCluster)):
            self._client = client_or_url
            self._owned = False
        else:
            raise ValidationError(
                "client_or_url must be a redis:// URL or a redis.asyncio client,"
                f" got {type(client_or_url).__name__}"
            )
        self.cluster = isinstance(self._client, RedisCluster)
        self.prefix = _hash_tagged(prefix) if self.cluster else prefix
        self.default_namespace = namespace_of(schema)
        self._scripts = {
            name: self._client.register_script(getattr(lua, name))
            for name in ("SNAPSHOT", "AGES", "LEASES", "RELEASE", "PURGE_FIELDS", "PURGE_HASHES")
        }
        self._checked = False
        self._version = REDIS_METRICS_LAYOUT_VERSION

    @property
    def client(self) -> Any:
        """The Redis client the store talks through."""
        return self._client

    # -- keys

    @property
    def _meta(self) -> str:
        return f"{self.prefix}:__meta__"

    @property
    def _index(self) -> str:
        return f"{self.prefix}:__keys__"

    def _lease(self, key: str) -> str:
        return f"{self.prefix}:__lease__:{key}"

    def _hash(self, key: str, tier: str, minute: int) -> tuple[str, str]:
        """The hash and field holding ``key``'s bucket of ``tier`` covering ``minute``."""
        if tier == "d":
            return f"{self.prefix}:{key}:d", str(minute // MINUTES_PER_DAY)
        span = _SPAN[tier]
        inside = (minute % span) // TIERS[tier]
        return f"{self.prefix}:{key}:{tier}:{minute // span}", str(inside)

    def _parse(self, name: str) -> tuple[str, str, int | None] | None:
        """A data hash's (queue key, tier, group number), or None for bookkeeping keys.

        The group number is None for the day hash; None is returned for the store's own
        bookkeeping keys.
        """
        rest = name[len(self.prefix) + 1 :]
        if rest.startswith(("__meta__", "__keys__", "__lease__:")):
            return None
        if rest.endswith(":d"):
            return rest[:-2], "d", None
        parts = rest.rsplit(":", 2)
        if len(parts) != 3 or parts[1] not in _SPAN or not parts[2].isdigit():
            return None
        return parts[0], parts[1], int(parts[2])

    def _ttl(self, name: str, retention: Retention, minute: int) -> int:
        """Seconds a data hash is kept from ``minute`` on (0: no TTL; below 0: past)."""
        parsed = self._parse(name)
        if parsed is None:
            return 0
        _, tier, group = parsed
        if group is None:
            return 0
        end = (group + 1) * _SPAN[tier] + retention.keeps(tier) * MINUTES_PER_DAY
        return (end - minute) * 60 if end > minute else -1

    @staticmethod
    def _bucket(tier: str, group: int | None, field: str) -> int:
        if group is None:
            return int(field)
        return group * (_SPAN[tier] // TIERS[tier]) + int(field)

    async def _scan(self, namespace: str) -> AsyncIterator[tuple[str, tuple[str, str, int | None]]]:
        """Every data hash under ``namespace``, found by SCAN.

        Not those of another store whose prefix lies inside this one's (``<prefix>:eu``,
        known by its own ``__meta__`` key): its hashes match the same pattern.
        """
        pattern = _GLOB.sub(r"\\\1", f"{self.prefix}:{namespace}") + "*"
        names = [_text(raw) async for raw in self._client.scan_iter(match=pattern, count=1000)]
        meta = ":__meta__"
        nested = tuple(n[: -len(meta) + 1] for n in names if n.endswith(meta) and n != self._meta)
        for name in names:
            parsed = None if nested and name.startswith(nested) else self._parse(name)
            if parsed is not None:
                yield name, parsed

    # -- the store contract (qcore.metrics.store.MetricsStore)

    async def ready(self, *, writing: bool = True) -> None:
        if not self._checked:
            stored = await self._client.hget(self._meta, "layout")
            self._version = int(_text(stored)) if stored is not None else 0
            self._checked = True
        if not writing:
            return
        if self._version > REDIS_METRICS_LAYOUT_VERSION:
            raise SchemaVersionError(
                f"the metrics store under Redis prefix {self.prefix!r} was written with layout"
                f" version {self._version}; this qcore writes version"
                f" {REDIS_METRICS_LAYOUT_VERSION}: upgrade qcore"
            )
        if self._version == 0:  # a store with no marker yet: this writer marks it
            await self._client.hsetnx(self._meta, "layout", REDIS_METRICS_LAYOUT_VERSION)
            self._checked = False
            await self.ready()  # what won, if another writer marked it first

    async def now_minute(self) -> int:
        seconds, _ = await self._client.time()
        return int(seconds) // 60

    async def take_leases(self, keys: list[str], *, holder: str, seconds: float) -> set[str]:
        if not keys:
            return set()
        await self.ready()
        held = await self._scripts["LEASES"](
            keys=[self._lease(k) for k in keys], args=[holder, max(int(seconds * 1000), 1)]
        )
        return {k for k, h in zip(keys, held, strict=True) if int(h)}

    async def release_leases(self, keys: list[str], *, holder: str) -> None:
        if keys:
            await self._scripts["RELEASE"](keys=[self._lease(k) for k in keys], args=[holder])

    async def newest_minute(self, key: str) -> int | None:
        stored = await self._client.hget(self._index, key)
        return int(_text(stored)) if stored not in (None, b"", "") else None

    async def add_snapshot(self, snapshot: Snapshot) -> int:
        await self.ready()
        keys = _Keys(self._index)
        args: list[Any] = [snapshot.key, 0]
        for minute in sorted(set(snapshot.counts) | set(snapshot.latency)):
            completed, failed = snapshot.counts.get(minute, (0, 0))
            wait, run = snapshot.latency.get(minute, ([], []))
            packed = [*wait, *run] or [0] * (lua.VALUE_FIELDS - 3)
            args += [minute, _encode([completed, failed, *packed])]
            for who in (snapshot.key, snapshot.rollup):
                for tier in TIERS:
                    name, field = self._hash(who, tier, minute)
                    args += [keys.index(name), field]
            args[1] += 1
        if not args[1]:
            return 0
        args += [self._ttl(name, snapshot.retention, snapshot.minute) for name in keys.data]
        return int(await self._scripts["SNAPSHOT"](keys=keys.all, args=args))

    async def add_ages(self, ages: dict[str, float], *, minute: int, retention: Retention) -> None:
        if not ages:
            return
        await self.ready()
        keys = _Keys(self._index)
        entries: list[Any] = []
        for key, age in ages.items():
            for tier in TIERS:
                name, field = self._hash(key, tier, minute)
                entries += [keys.index(name), field, repr(round(age, 3))]
        ttls = [self._ttl(name, retention, minute) for name in keys.data]
        await self._scripts["AGES"](keys=keys.all, args=[len(entries) // 3, *entries, *ttls, *ages])

    async def prune(self, retention: Retention, *, minute: int) -> None:
        """Drop the buckets past each tier's retention, as the PostgreSQL store does.

        Retention is on the recorder's clock: hashes wholly past it are deleted, the hash
        straddling it (and every day hash) trimmed field by field. The TTLs drop the rest
        on the server's clock when no recorder prunes.
        """
        stale: list[str] = []
        straddling: list[tuple[str, str, int | None]] = []
        async for name, (_, tier, group) in self._scan(""):
            oldest = retention.oldest(tier, minute)
            if group is None:
                straddling.append((name, tier, group))
                continue
            per_hash = _SPAN[tier] // TIERS[tier]
            first = group * per_hash
            if first + per_hash - 1 < oldest:
                stale.append(name)
            elif first < oldest:
                straddling.append((name, tier, group))
        for batch in _batches(stale):
            await self._client.delete(*batch)
        for hashes in _batches(straddling):
            async with self._client.pipeline(transaction=False) as pipe:
                for name, _, _ in hashes:
                    pipe.hkeys(name)
                fields = await pipe.execute()
            async with self._client.pipeline(transaction=False) as pipe:
                for (name, tier, group), found in zip(hashes, fields, strict=True):
                    oldest = retention.oldest(tier, minute)
                    old = [f for f in map(_text, found) if self._bucket(tier, group, f) < oldest]
                    if old:
                        pipe.hdel(name, *old)
                await pipe.execute()

    async def read_series(
        self, keys: list[str], tier: str, first: int, last: int
    ) -> dict[str, dict[int, Bucket]]:
        first_minute, last_minute = first * TIERS[tier], last * TIERS[tier]
        if tier == "d":
            groups: list[int | None] = [None]
        else:
            span = _SPAN[tier]
            groups = list(range(first_minute // span, last_minute // span + 1))
        wanted = [(key, group) for key in dict.fromkeys(keys) for group in groups]
        async with self._client.pipeline(transaction=False) as pipe:
            for key, group in wanted:
                name = (
                    f"{self.prefix}:{key}:d"
                    if group is None
                    else f"{self.prefix}:{key}:{tier}:{group}"
                )
                pipe.hgetall(name)
            found = await pipe.execute()
        series: dict[str, dict[int, Bucket]] = {}
        for (key, group), fields in zip(wanted, found, strict=True):
            for field, value in fields.items():
                bucket = self._bucket(tier, group, _text(field))
                if first <= bucket <= last:
                    series.setdefault(key, {})[bucket] = _decode(value)
        return {key: dict(sorted(buckets.items())) for key, buckets in series.items()}

    async def keys(self, namespace: str) -> list[str]:
        stored = await self._client.hkeys(self._index)
        return sorted(k for k in map(_text, stored) if k.startswith(namespace))

    async def usage(self, namespace: str) -> tuple[list[KeyUsage], bool]:
        """Exact: ``MEMORY USAGE`` of every hash, with its fields, in pipelined batches."""
        names = [(name, parsed) async for name, parsed in self._scan(namespace)]
        totals: dict[tuple[str, str], list[int]] = {}
        for batch in _batches(names):
            async with self._client.pipeline(transaction=False) as pipe:
                for name, _ in batch:
                    pipe.memory_usage(name, samples=0)
                    pipe.hkeys(name)
                replies = await pipe.execute()
            for i, (_, (key, tier, group)) in enumerate(batch):
                size, fields = replies[2 * i], replies[2 * i + 1]
                if not fields:
                    continue
                buckets = [self._bucket(tier, group, _text(f)) for f in fields]
                had = totals.setdefault((key, tier), [0, 0, min(buckets), max(buckets)])
                had[0] += len(buckets)
                had[1] += int(size or 0)
                had[2], had[3] = min(had[2], *buckets), max(had[3], *buckets)
        return [
            KeyUsage(key=k, tier=t, rows=v[0], bytes=v[1], oldest=v[2], newest=v[3])
            for (k, t), v in sorted(totals.items())
        ], False

    async def purge(self, namespace: str, key: str | None, before: int | None) -> int:
        """Delete buckets (hash fields); how many the server removed."""
        if key is None:
            return await self._purge_namespace(namespace, before)
        rollup = namespace + "__global__"
        hashes = [name async for name, parsed in self._scan(key + ":") if parsed[0] == key]
        removed = 0
        for name in hashes:
            _, tier, group = self._parse(name) or ("", "", None)
            fields = [_text(f) for f in await self._client.hkeys(name)]
            ended = [f for f in fields if _ended(self._bucket(tier, group, f), tier, before)]
            if ended:
                target = name.replace(f"{self.prefix}:{key}:", f"{self.prefix}:{rollup}:", 1)
                removed += int(await self._scripts["PURGE_FIELDS"](keys=[name, target], args=ended))
        if before is None:
            await self._client.hdel(self._index, key)
        return removed

    async def _purge_namespace(self, namespace: str, before: int | None) -> int:
        hashes = [(name, parsed) async for name, parsed in self._scan(namespace)]
        removed = 0
        if before is None:
            for batch in _batches([name for name, _ in hashes]):
                removed += int(await self._scripts["PURGE_HASHES"](keys=batch))
            listed = await self.keys(namespace)
            for batch in _batches(listed):
                await self._client.hdel(self._index, *batch)
            return removed
        for name, (_, tier, group) in hashes:
            fields = [_text(f) for f in await self._client.hkeys(name)]
            ended = [f for f in fields if _ended(self._bucket(tier, group, f), tier, before)]
            if ended:
                removed += int(await self._client.hdel(name, *ended))
        return removed

    async def close(self) -> None:
        """Close the client if the store opened it."""
        if self._owned:
            await self._client.aclose()


def _ended(bucket: int, tier: str, before: int | None) -> bool:
    """Whether a bucket of ``tier`` ended by the minute ``before`` (None: every one)."""
    return before is None or (bucket + 1) * TIERS[tier] <= before


def _batches(items: list[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


class _Keys:
    """A script's KEYS: the key index first, then each data hash once, by 1-based index."""

    def __init__(self, index: str) -> None:
        self.all = [index]
        self._at: dict[str, int] = {}

    def index(self, name: str) -> int:
        if name not in self._at:
            self.all.append(name)
            self._at[name] = len(self.all)
        return self._at[name]

    @property
    def data(self) -> list[str]:
        return self.all[1:]

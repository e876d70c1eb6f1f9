"""The history in PostgreSQL, beside the queues.

:class:`PostgresMetricsStore` keeps tables of its own in the database the queues use,
and :func:`migrate_metrics` is the deploy step that creates them.

The tables (:mod:`qcore.sql.metrics`) are created on first use with ``migrate=True``
(and a store of an older layout upgraded), in one transaction under the backend's lock
(pg-boss's advisory lock where the engine has it, qcore's lease elsewhere), the schema
only if it is missing. A store whose meta table records a newer layout than this qcore
writes is refused to writers before anything is written, naming both versions; readers
still read it.

A snapshot reads the queue's stored minute rows ``FOR UPDATE`` under the queue's lock,
diffs the incoming minutes against them in Python and adds the difference to every tier
of the queue and of the rollup in one write, all in one transaction.
"""

from __future__ import annotations

from typing import Any

from qcore import backends, locks, retry
from qcore.backend import Backend
from qcore.context import Context
from qcore.db import Database, connect
from qcore.errors import ConfigError, SchemaVersionError, ValidationError
from qcore.identifiers import schema_name
from qcore.metrics import histogram
from qcore.metrics.sources import namespace_of
from qcore.metrics.store import GLOBAL, TIERS, Bucket, KeyUsage, Retention, Snapshot
from qcore.sql import metrics as sql
from qcore.sql.probes import table_in_schema

__all__ = ["PostgresMetricsStore", "migrate_metrics"]

_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


class PostgresMetricsStore:
    """The history's tables in ``schema`` (default ``pgboss``).

    They are named with ``table_prefix`` (two boards with their own prefixes keep apart
    in one schema), on ``db_or_dsn`` (a URL: the store opens and closes its pool; an
    adapter: the caller's to close).

    ``queue_schema`` is the job schema whose history readers (the provider, the admin)
    show by default: its queues are keyed ``pgboss:<queue_schema>:`` in the store,
    whichever schema holds the tables. It defaults to ``schema``, the store beside the
    queues; a store in a schema of its own names the job schema it serves.
    """

    def __init__(
        self,
        db_or_dsn: Database | str,
        *,
        schema: str = "pgboss",
        backend: Backend | str = "postgres",
        table_prefix: str = "qcore_metrics_",
        migrate: bool = True,
        queue_schema: str | None = None,
    ) -> None:
        if not table_prefix or not set(table_prefix) <= _PREFIX_CHARS:
            raise ValidationError(
                "table_prefix must be lower-case letters, digits and underscores,"
                f" got {table_prefix!r}"
            )
        self.schema = schema_name(schema)
        self.prefix = table_prefix
        #: the job schema whose queues readers show by default
        self.queue_schema = self.schema if queue_schema is None else schema_name(queue_schema)
        self.default_namespace = namespace_of(self.queue_schema)
        self.migrate = migrate
        self._backend = backends.get(backend)
        self._given = db_or_dsn if not isinstance(db_or_dsn, str) else None
        self._dsn = db_or_dsn if isinstance(db_or_dsn, str) else None
        self._ctx: Context | None = None
        self._version = sql.METRICS_LAYOUT_VERSION
        self._ids: dict[str, int] = {}  # queue key -> its id in the key table

    async def context(self, *, writing: bool = True) -> Context:
        """The store's context, its tables checked on the first call.

        They are created or upgraded with ``migrate``. A store of a newer layout is
        refused to every writer, every call; a reader (``writing=False``) still reads
        it.
        """
        if self._ctx is None:
            db = self._given if self._given is not None else await connect(str(self._dsn), max=4)
            ctx = Context(db=db, backend=self._backend, schema_spec=self.schema)
            try:
                self._version = await _ready(
                    ctx, self.prefix, self.default_namespace, migrate=self.migrate
                )
            except BaseException:
                if self._given is None:
                    await db.close()
                raise
            self._ctx = ctx
        if writing:
            _refuse_newer(self._ctx, self._version)
        return self._ctx

    async def close(self) -> None:
        """Close the pool if the store opened it."""
        ctx, self._ctx = self._ctx, None
        if ctx is not None and self._given is None:
            await ctx.db.close()

    # -- the store contract (qcore.metrics.store.MetricsStore)

    async def ready(self, *, writing: bool = True) -> None:
        await self.context(writing=writing)

    async def _write(self, statement: Any, **values: Any) -> list[Any]:
        return list(await retry.run(await self.context(), statement, **values))

    async def _read(self, statement: Any, **values: Any) -> list[Any]:
        return list(await retry.run(await self.context(writing=False), statement, **values))

    async def now_minute(self) -> int:
        [row] = await self._read(sql.database_minute())
        return int(row["minute"])

    async def take_leases(self, keys: list[str], *, holder: str, seconds: float) -> set[str]:
        if not keys:
            return set()
        statement = sql.take_leases(self.schema, self.prefix)
        rows = await self._write(statement, holder=holder, seconds=seconds, queues=keys)
        return {str(r["queue"]) for r in rows}

    async def release_leases(self, keys: list[str], *, holder: str) -> None:
        statement = sql.release_leases(self.schema, self.prefix)
        await self._write(statement, holder=holder, queues=keys)

    async def _key_ids(self, keys: list[str], *, create: bool) -> dict[str, int]:
        """The ids of ``keys``, cached: an id never changes.

        With ``create``, those without one are given one; else only the keys that have
        one are returned.
        """
        missing = [k for k in dict.fromkeys(keys) if k not in self._ids]
        if missing:
            if create:
                await self._write(sql.add_keys(self.schema, self.prefix), keys=missing)
            statement = sql.key_ids(self.schema, self.prefix)
            for r in await self._read(statement, keys=missing):
                self._ids[str(r["key"])] = int(r["id"])
        return {k: self._ids[k] for k in keys if k in self._ids}

    async def _key_id(self, key: str) -> int | None:
        return (await self._key_ids([key], create=False)).get(key)

    async def newest_minute(self, key: str) -> int | None:
        key_id = await self._key_id(key)
        if key_id is None:
            return None
        [row] = await self._read(sql.newest_minute(self.schema, self.prefix), key=key_id)
        return None if row["minute"] is None else int(row["minute"])

    async def add_snapshot(self, snapshot: Snapshot) -> int:
        ctx = await self.context()
        ids = await self._key_ids([snapshot.key, snapshot.rollup], create=True)
        return await locks.run_locked(
            ctx,
            f"metrics:{self.prefix}:{snapshot.key}",
            lambda db: self._add_difference(db, snapshot, ids[snapshot.key], ids[snapshot.rollup]),
        )

    async def _add_difference(
        self, db: Database, snapshot: Snapshot, key_id: int, rollup_id: int
    ) -> int:
        """Add what the snapshot holds over the stored minute rows; the minutes that changed.

        Those are the minutes whose counts changed. Inside the snapshot's transaction, the
        difference is added to every tier of the queue and of the rollup in one write.
        """
        minutes = sorted(set(snapshot.counts) | set(snapshot.latency))
        read = sql.stored_minutes(self.schema, self.prefix)
        rows = await db.execute(read.sql, read.bind(key=key_id, buckets=minutes))
        stored = {int(r["bucket"]): dict(r) for r in rows}
        width = 2 * histogram.SLOTS
        sums: dict[_Row, tuple[list[int], list[int] | None]] = {}
        changed = 0
        for minute in minutes:
            had = stored.get(minute, {})
            completed, failed = snapshot.counts.get(minute, (0, 0))
            add = [
                max(completed - had.get("completed", 0), 0),
                max(failed - had.get("failed", 0), 0),
            ]
            histograms = None
            if minute in snapshot.latency:
                wait, run = snapshot.latency[minute]
                histograms = histogram.subtract([*wait, *run], had.get("latency") or [0] * width)
                histograms = histograms if any(histograms) else None
            if add == [0, 0] and histograms is None:
                continue
            changed += add != [0, 0]
            for row in _spread([key_id, rollup_id], minute):
                total, packed = sums.get(row, ([0, 0], None))
                total = [total[0] + add[0], total[1] + add[1]]
                if histograms is not None:
                    packed = histogram.merge([packed or [0] * width, histograms])
                sums[row] = (total, packed)
        if sums:
            write = sql.add_measures(self.schema, self.prefix)
            values = list(sums.values())
            columns = _columns(
                sums,
                completed=[v[0][0] for v in values],
                failed=[v[0][1] for v in values],
                latency=[None if v[1] is None else _array(v[1]) for v in values],
            )
            await db.execute(write.sql, write.bind(**columns))
        return changed

    async def add_ages(self, ages: dict[str, float], *, minute: int, retention: Retention) -> None:
        ids = await self._key_ids(list(ages), create=True)
        rows = {row: age for key, age in ages.items() for row in _spread([ids[key]], minute)}
        if rows:
            statement = sql.add_ages(self.schema, self.prefix)
            await self._write(statement, **_columns(rows, age=list(rows.values())))

    async def prune(self, retention: Retention, *, minute: int) -> None:
        statement = sql.prune_tier(self.schema, self.prefix)
        for tier in TIERS:
            await self._write(statement, tier=tier, before=retention.oldest(tier, minute))
        await self._write(sql.prune_leases(self.schema, self.prefix))

    async def read_series(
        self, keys: list[str], tier: str, first: int, last: int
    ) -> dict[str, dict[int, Bucket]]:
        ids = await self._key_ids(keys, create=False)
        if not ids:
            return {}
        statement = sql.read_series(self.schema, self.prefix)
        rows = await self._read(
            statement, keys=list(ids.values()), tier=tier, first=first, last=last
        )
        named = {key_id: key for key, key_id in ids.items()}
        series: dict[str, dict[int, Bucket]] = {}
        for r in rows:
            series.setdefault(named[int(r["key_id"])], {})[int(r["bucket"])] = Bucket(
                completed=int(r["completed"]),
                failed=int(r["failed"]),
                latency=None if r["latency"] is None else [int(n) for n in r["latency"]],
                age=None if r["age"] is None else float(r["age"]),
            )
        return series

    async def keys(self, namespace: str) -> list[str]:
        return sorted({str(r["queue"]) for r in await self._usage_rows(namespace)})

    async def _usage_rows(self, namespace: str) -> list[dict[str, Any]]:
        statement = sql.series_usage(self.schema, self.prefix)
        return [dict(r) for r in await self._read(statement, namespace=namespace)]

    async def usage(self, namespace: str) -> tuple[list[KeyUsage], bool]:
        """The footprint of each key: row bytes scaled to the table's size on disk.

        Row bytes (``pg_column_size``) are scaled so the parts add up to the table's size
        on disk (``pg_total_relation_size``: indexes and TOAST included), shared by every
        namespace in it; the row bytes alone (estimated) where the backend cannot say.
        """
        rows = await self._usage_rows(namespace)
        row_bytes = sum(int(r["row_bytes"]) for r in rows)
        scale, estimated = 1.0, True
        ctx = await self.context(writing=False)
        if ctx.backend.capabilities.drift_catalog and row_bytes:
            [size] = await self._read(sql.table_bytes(self.schema, self.prefix))
            every = row_bytes if namespace == "" else await self._all_row_bytes()
            scale, estimated = int(size["bytes"]) / every, False
        return [
            KeyUsage(
                key=str(r["queue"]),
                tier=str(r["tier"]),
                rows=int(r["rows"]),
                bytes=round(int(r["row_bytes"]) * scale),
                oldest=int(r["oldest"]),
                newest=int(r["newest"]),
            )
            for r in rows
        ], estimated

    async def _all_row_bytes(self) -> int:
        return sum(int(r["row_bytes"]) for r in await self._usage_rows("")) or 1

    async def purge(self, namespace: str, key: str | None, before: int | None) -> int:
        values = {"namespace": namespace, "before": before}
        if key is None:
            statement = sql.purge_keys(self.schema, self.prefix)
            [row] = await self._write(statement, key=None, **values)
            return int(row["deleted"])
        rollup = namespace + GLOBAL
        ids = await self._key_ids([key, rollup], create=False)
        if key not in ids:
            return 0  # never recorded

        async def purge_one(db: Database) -> int:
            if rollup in ids:
                subtract = sql.subtract_from_rollup(self.schema, self.prefix)
                bound = subtract.bind(rollup=ids[rollup], key=ids[key], before=before)
                await db.execute(subtract.sql, bound)
            delete = sql.purge_keys(self.schema, self.prefix)
            [row] = await db.execute(delete.sql, delete.bind(key=ids[key], **values))
            return int(row["deleted"])

        context = await self.context()
        return await locks.run_locked(context, f"metrics:{self.prefix}:{key}", purge_one)


#: (key id, tier, bucket)
_Row = tuple[int, str, int]


def _spread(keys: list[int], minute: int) -> list[_Row]:
    """The rows one minute of ``keys`` adds to: each tier of each key."""
    return [(key, tier, minute // m) for key in keys for tier, m in TIERS.items()]


def _columns(rows: dict[_Row, Any], **values: list[Any]) -> dict[str, list[Any]]:
    """The row keys as the parallel arrays the additive writes take, with ``values``."""
    keys = list(rows)
    return {
        "keys": [k[0] for k in keys],
        "tiers": [k[1] for k in keys],
        "buckets": [k[2] for k in keys],
        **values,
    }


def _array(values: list[int]) -> str:
    """An ``integer[]`` literal."""
    return "{" + ",".join(map(str, values)) + "}"


async def _layout_version(ctx: Context, prefix: str) -> int | None:
    rows = await retry.run(ctx, table_in_schema, schema=ctx.schema, name=prefix + "meta")
    if not rows[0]["present"]:
        return None
    rows = await retry.run(ctx, sql.read_layout_version(ctx.schema, prefix))
    return int(rows[0]["value"]) if rows else None


def _refuse_newer(ctx: Context, version: int) -> None:
    if version > sql.METRICS_LAYOUT_VERSION:
        raise SchemaVersionError(
            f"the metrics store in schema {ctx.schema!r} was written with layout version"
            f" {version}; this qcore writes version {sql.METRICS_LAYOUT_VERSION}: upgrade qcore"
        )


async def _ready(ctx: Context, prefix: str, namespace: str, *, migrate: bool) -> int:
    """Check the store's layout, creating or upgrading it where ``migrate`` allows.

    Returns the version found (a newer one is left for the caller to refuse or read).
    Rows of layout 1, which kept bare queue names, are moved under ``namespace``.
    """
    version = await _layout_version(ctx, prefix)
    if version is not None and version >= sql.METRICS_LAYOUT_VERSION:
        return version
    if not migrate:
        raise ConfigError(
            f"the metrics store in schema {ctx.schema!r} (tables {prefix}*) is"
            f" {'not set up' if version is None else f'at layout version {version}'}"
            " and migrate=False forbids changing it; run the deploy step"
            f" `await qcore.metrics.migrate_metrics(url, schema={ctx.schema!r})` with a role"
            " allowed to create tables"
        )

    async def create(db: Database) -> int:
        locked = ctx.with_db(db)
        found = await _layout_version(locked, prefix)
        if found is not None and found >= sql.METRICS_LAYOUT_VERSION:
            return found  # another process migrated it meanwhile
        await db.execute(f"CREATE SCHEMA IF NOT EXISTS {ctx.q}")
        steps = sql.create_tables(ctx.schema, prefix)
        if found == 1:
            steps = sql.upgrade_from_1(ctx.schema, prefix, namespace)
        elif found == 2:
            steps = sql.upgrade_from_2(ctx.schema, prefix)
        for statement in steps:
            await db.execute(statement)
        write = sql.write_layout_version(ctx.schema, prefix)
        await db.execute(write.sql, write.bind(version=str(sql.METRICS_LAYOUT_VERSION)))
        return sql.METRICS_LAYOUT_VERSION

    return await locks.run_locked(ctx, f"metrics:{prefix}", create)


async def migrate_metrics(
    db_or_dsn: Database | str,
    *,
    schema: str = "pgboss",
    backend: Backend | str = "postgres",
    table_prefix: str = "qcore_metrics_",
    queue_schema: str | None = None,
) -> None:
    """The deploy step: create (or check) the store's tables, then close what it opened.

    ``queue_schema`` as the store's (the job schema whose rows an old layout upgrades).
    """
    store = PostgresMetricsStore(
        db_or_dsn,
        schema=schema,
        backend=backend,
        table_prefix=table_prefix,
        migrate=True,
        queue_schema=queue_schema,
    )
    try:
        await store.context()
    finally:
        await store.close()

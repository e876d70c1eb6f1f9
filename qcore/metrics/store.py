"""Where the history is kept: :class:`PostgresMetricsStore`, tables of its own in the
database the queues use, and :func:`migrate_metrics`, the deploy step that creates them.

The tables (:mod:`qcore.sql.metrics`) are created on first use with ``migrate=True``
(and a store of an older layout upgraded), in one transaction under the backend's lock
(pg-boss's advisory lock where the engine has it, qcore's lease elsewhere), the schema
only if it is missing. A store whose meta table records a newer layout than this qcore
writes is refused to writers before anything is written, naming both versions; readers
still read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcore import backends, locks, retry
from qcore.backend import Backend
from qcore.context import Context
from qcore.db import Database, connect
from qcore.errors import ConfigError, SchemaVersionError, ValidationError
from qcore.identifiers import schema_name
from qcore.metrics.sources import namespace_of
from qcore.sql import metrics as sql
from qcore.sql.probes import table_in_schema

__all__ = ["PostgresMetricsStore", "Retention", "migrate_metrics"]

_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True)
class Retention:
    """How long each tier is kept, in days: minute rows 7, hour and day rows 90."""

    minutes: int = 7
    hours: int = 90
    days: int = 90

    def __post_init__(self) -> None:
        for name in ("minutes", "hours", "days"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 3650:
                raise ValidationError(
                    f"Retention.{name} must be a whole number of days from 1 to 3650, got {value!r}"
                )

    @classmethod
    def of_days(cls, days: int) -> Retention:
        """``retention_days=N``: hours and days kept N days, minutes at their default
        (so a long window never asks for months of minute rows)."""
        return cls(hours=days, days=days)

    def keeps(self, tier: str) -> int:
        """Days kept of a tier (``m``, ``h`` or ``d``)."""
        return {"m": self.minutes, "h": self.hours, "d": self.days}[tier]


class PostgresMetricsStore:
    """The history's tables in ``schema`` (default ``pgboss``), named with
    ``table_prefix`` (two boards with their own prefixes keep apart in one schema); on
    ``db_or_dsn`` (a URL: the store opens and closes its pool; an adapter: the caller's
    to close)."""

    def __init__(
        self,
        db_or_dsn: Database | str,
        *,
        schema: str = "pgboss",
        backend: Backend | str = "postgres",
        table_prefix: str = "qcore_metrics_",
        migrate: bool = True,
    ) -> None:
        if not table_prefix or not set(table_prefix) <= _PREFIX_CHARS:
            raise ValidationError(
                "table_prefix must be lower-case letters, digits and underscores,"
                f" got {table_prefix!r}"
            )
        self.schema = schema_name(schema)
        self.prefix = table_prefix
        self.migrate = migrate
        self._backend = backends.get(backend)
        self._given = db_or_dsn if not isinstance(db_or_dsn, str) else None
        self._dsn = db_or_dsn if isinstance(db_or_dsn, str) else None
        self._ctx: Context | None = None
        self._version = sql.METRICS_LAYOUT_VERSION

    async def context(self, *, writing: bool = True) -> Context:
        """The store's context, its tables checked (and created or upgraded with
        ``migrate``) on the first call. A store of a newer layout is refused to every
        writer, every call; a reader (``writing=False``) still reads it."""
        if self._ctx is None:
            db = self._given if self._given is not None else await connect(str(self._dsn), max=4)
            ctx = Context(db=db, backend=self._backend, schema_spec=self.schema)
            try:
                self._version = await _ready(ctx, self.prefix, migrate=self.migrate)
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


async def _ready(ctx: Context, prefix: str, *, migrate: bool) -> int:
    """Check the store's layout, creating or upgrading it where ``migrate`` allows; the
    version found (a newer one is left for the caller to refuse or read)."""
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
            steps = sql.upgrade_from_1(ctx.schema, prefix, namespace_of(ctx.schema))
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
) -> None:
    """The deploy step: create (or check) the store's tables, then close what it opened."""
    store = PostgresMetricsStore(
        db_or_dsn, schema=schema, backend=backend, table_prefix=table_prefix, migrate=True
    )
    try:
        await store.context()
    finally:
        await store.close()

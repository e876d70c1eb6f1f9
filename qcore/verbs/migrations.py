"""Schema migrations: how an installed schema moves from one version to the next.

A :class:`Migration` takes the schema from ``version - 1`` to ``version``:
its steps run in order, then the version row moves on. Where the engine has
transactional DDL, a migration (steps and version row) is one transaction, so
it happens entirely or not at all. Where it has not, each statement commits on
its own and the version row moves last; a migration interrupted half-way runs
again from its first step, so its statements must be idempotent there
(``IF NOT EXISTS``, ``CREATE OR REPLACE``, ``ON CONFLICT``).

A step is SQL text, in which ``{schema}`` stands for the quoted schema
name (replaced verbatim; no other braces are touched); :class:`Statements`, SQL
that depends on the backend and the schema; or an async callable taking a
:class:`qcore.context.Context` whose adapter is the migration's transaction (or
the plain adapter where DDL is not transactional). On the partitioned shape, a
step that changes every job table calls ``{schema}.job_table_run(...)``,
exactly as pg-boss's own migrations do. A migration's ``rollback`` steps take
the schema back from ``version`` to ``version - 1``; without them it cannot be
rolled back.

:data:`MIGRATIONS` are pg-boss's upgrades from schema 25 (pg-boss 11.0) to 46
(:mod:`qcore.sql.upgrades`); a fresh install is built at 46 directly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from qcore.backend import Backend
from qcore.context import Context
from qcore.errors import SchemaVersionError
from qcore.identifiers import quote
from qcore.sql import schema as sql
from qcore.sql import upgrades

__all__ = ["MIGRATIONS", "Migration", "Statements", "Step", "apply", "plan", "revert", "script"]

log = logging.getLogger("qcore.schema")


@dataclass(frozen=True)
class Statements:
    """A step whose SQL depends on the backend.

    ``build(backend, schema)`` returns the statements, in order, for the stored
    (unquoted) schema name.
    """

    build: Callable[[Backend, str], Sequence[str]]


#: SQL text with ``{schema}`` for the quoted schema, :class:`Statements`, or an async
#: callable on a Context
Step = str | Statements | Callable[[Context], Awaitable[None]]


@dataclass(frozen=True)
class Migration:
    """The steps that move an installed schema from ``version - 1`` to ``version``."""

    version: int
    steps: tuple[Step, ...]
    description: str = ""
    rollback: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.version, int) or self.version < 2:
            raise ValueError(f"a migration's version must be an integer >= 2, got {self.version!r}")
        if not self.steps:
            raise ValueError(f"migration to version {self.version} has no steps")
        for step in self.steps + self.rollback:
            if not (isinstance(step, str | Statements) or callable(step)):
                raise TypeError(
                    f"a step of migration {self.version} must be SQL text or an async callable,"
                    f" got {type(step).__name__}"
                )


def _pgboss_upgrade(version: int) -> Migration:
    def up(backend: Backend, schema: str) -> Sequence[str]:
        return upgrades.upgrade(backend, schema, version)

    def down(backend: Backend, schema: str) -> Sequence[str]:
        return upgrades.downgrade(backend, schema, version)

    back = (Statements(down),) if version == sql.SCHEMA_VERSION else ()
    return Migration(version, (Statements(up),), f"pg-boss schema {version}", back)


#: every migration qcore knows, by version: pg-boss's, from schema 25 to 46
MIGRATIONS: tuple[Migration, ...] = tuple(
    _pgboss_upgrade(v) for v in range(upgrades.OLDEST_UPGRADABLE + 1, sql.SCHEMA_VERSION + 1)
)


def plan(installed: int, target: int, migrations: Sequence[Migration]) -> list[Migration]:
    """The migrations that take ``installed`` to ``target``, in order.

    Raises ``SchemaVersionError`` if one of the versions in between has no migration
    or has two.
    """
    by_version: dict[int, Migration] = {}
    for given in migrations:
        if given.version in by_version:
            raise SchemaVersionError(f"two migrations to schema version {given.version}")
        by_version[given.version] = given
    steps = []
    for version in range(installed + 1, target + 1):
        migration = by_version.get(version)
        if migration is None and version <= upgrades.OLDEST_UPGRADABLE:
            raise SchemaVersionError(
                f"cannot migrate the schema from version {installed}: the oldest version qcore"
                f" (like pg-boss 12.38) upgrades is {upgrades.OLDEST_UPGRADABLE} (pg-boss 11.0);"
                " start pg-boss 11 on it once to bring it there, then migrate with qcore"
            )
        if migration is None:
            raise SchemaVersionError(
                f"cannot migrate the schema from version {installed} to {target}:"
                f" no migration to version {version}"
            )
        steps.append(migration)
    return steps


def script(steps: Sequence[Step], backend: Backend, schema: str) -> list[str]:
    """The SQL of ``steps`` for ``schema``, as ``qcore plans`` prints it.

    A callable step, which only runs against a database, has none and is refused.
    """
    quoted = quote(schema)
    texts: list[str] = []
    for step in steps:
        if isinstance(step, str):
            texts.append(step.replace("{schema}", quoted))
        elif isinstance(step, Statements):
            texts += step.build(backend, schema)
        else:
            raise SchemaVersionError("a migration step written in Python has no SQL to print")
    return texts


async def _run(ctx: Context, steps: Sequence[Step]) -> None:
    for step in steps:
        if callable(step) and not isinstance(step, Statements):
            await step(ctx)
            continue
        for text in script([step], ctx.backend, ctx.schema):
            await ctx.db.execute(text)


async def _move_version(ctx: Context, from_version: int, to_version: int) -> None:
    statement = sql.update_version(ctx.schema)
    rows = await ctx.db.execute(
        statement.sql, statement.bind(from_version=from_version, to_version=to_version)
    )
    if not rows:
        raise SchemaVersionError(
            f"schema {ctx.schema!r} was not at version {from_version} when its move to"
            f" {to_version} finished; another process changed it"
        )


async def apply(ctx: Context, migration: Migration) -> None:
    """Run one migration's steps and move the version row up one.

    The steps run on ``ctx.db``; the version row moves from ``migration.version - 1`` to
    ``migration.version``.

    ``ctx.db`` is the migration's transaction where DDL is transactional; the caller
    holds the install lock and has checked the installed version.
    """
    await _run(ctx, migration.steps)
    await _move_version(ctx, migration.version - 1, migration.version)
    log.info(
        "migrated schema %r to version %d%s",
        ctx.schema,
        migration.version,
        f" ({migration.description})" if migration.description else "",
        extra={"qcore_event": "migrate", "qcore_version": migration.version},
    )


async def revert(ctx: Context, migration: Migration) -> None:
    """Run one migration's rollback steps and move the version row back one.

    The steps run on ``ctx.db``; the version row moves from ``migration.version`` to
    ``migration.version - 1`` (the caller holds the install lock, as for :func:`apply`);
    ``SchemaVersionError`` when it has none.
    """
    if not migration.rollback:
        raise SchemaVersionError(f"qcore cannot roll back schema version {migration.version}")
    await _run(ctx, migration.rollback)
    await _move_version(ctx, migration.version, migration.version - 1)
    log.info(
        "rolled schema %r back to version %d",
        ctx.schema,
        migration.version - 1,
        extra={"qcore_event": "rollback", "qcore_version": migration.version - 1},
    )

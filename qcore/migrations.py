"""Schema migrations: how an installed schema moves from one version to the next.

A :class:`Migration` takes the schema from ``version - 1`` to ``version``:
its steps run in order, then the version row moves on. Where the engine has
transactional DDL, a migration (steps and version row) is one transaction, so
it happens entirely or not at all. Where it has not, each statement commits on
its own and the version row moves last; a migration interrupted half-way runs
again from its first step, so its statements must be idempotent there
(``IF NOT EXISTS``, ``CREATE OR REPLACE``, ``ON CONFLICT``).

A step is either SQL text, in which ``{schema}`` stands for the quoted schema
name (replaced verbatim; no other braces are touched), or an async callable
taking a :class:`qcore.context.Context` whose adapter is the migration's
transaction (or the plain adapter where DDL is not transactional). On the
partitioned shape, a step that changes every job table calls
``{schema}.job_table_run(...)``, exactly as pg-boss's own migrations do.

qcore installs schema version 46 directly, so :data:`MIGRATIONS` is empty
today; pg-boss's next schema versions will land here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from qcore.context import Context
from qcore.errors import SchemaVersionError
from qcore.sql import schema as sql

__all__ = ["MIGRATIONS", "Migration", "Step", "apply", "plan"]

log = logging.getLogger("qcore.schema")

#: SQL text with ``{schema}`` for the quoted schema, or an async callable on a Context
Step = str | Callable[[Context], Awaitable[None]]


@dataclass(frozen=True)
class Migration:
    """The steps that move an installed schema from ``version - 1`` to ``version``."""

    version: int
    steps: tuple[Step, ...]
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.version, int) or self.version < 2:
            raise ValueError(f"a migration's version must be an integer >= 2, got {self.version!r}")
        if not self.steps:
            raise ValueError(f"migration to version {self.version} has no steps")
        for step in self.steps:
            if not (isinstance(step, str) or callable(step)):
                raise TypeError(
                    f"a step of migration {self.version} must be SQL text or an async callable,"
                    f" got {type(step).__name__}"
                )


#: every migration qcore knows, by version (none yet: qcore starts at version 46)
MIGRATIONS: tuple[Migration, ...] = ()


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
        if migration is None:
            raise SchemaVersionError(
                f"cannot migrate the schema from version {installed} to {target}:"
                f" no migration to version {version}"
            )
        steps.append(migration)
    return steps


def _sql_step(ctx: Context, step: str) -> str:
    return step.replace("{schema}", ctx.q)


async def apply(ctx: Context, migration: Migration) -> None:
    """Run one migration's steps on ``ctx.db`` and move the version row from
    ``migration.version - 1`` to ``migration.version``.

    ``ctx.db`` is the migration's transaction where DDL is transactional; the caller
    holds the install lock and has checked the installed version.
    """
    for step in migration.steps:
        if isinstance(step, str):
            await ctx.db.execute(_sql_step(ctx, step))
        else:
            await step(ctx)
    statement = sql.update_version(ctx.schema)
    rows = await ctx.db.execute(
        statement.sql,
        statement.bind(from_version=migration.version - 1, to_version=migration.version),
    )
    if not rows:
        raise SchemaVersionError(
            f"schema {ctx.schema!r} was not at version {migration.version - 1} when its"
            f" migration to {migration.version} finished; another process changed it"
        )
    log.info(
        "migrated schema %r to version %d%s",
        ctx.schema,
        migration.version,
        f" ({migration.description})" if migration.description else "",
        extra={"qcore_event": "migrate", "qcore_version": migration.version},
    )

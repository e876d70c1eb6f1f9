"""Installing and migrating the schema: what ``Boss.start()`` does before anything else.

:func:`install_or_migrate` follows pg-boss's start-up decision (reference,
section 2.13): no version table → install (after making sure no schema
differing only by letter case already holds an install); an older version →
migrate; the same version → nothing. Unlike pg-boss it also refuses a schema
*newer* than it knows. All of it runs under the install lock, so any number of
qcore instances may start at once: one installs, the others wait for the lock
and find the schema installed. On engines with advisory locks the lock is
pg-boss's own, so pg-boss instances take part too; elsewhere pg-boss locks
nothing, and qcore's idempotent statements (retried on catalog collisions)
tolerate a pg-boss instance installing at the same moment.

Where the engine has transactional DDL and the adapter real transactions, the
install is one transaction (all or nothing); elsewhere (an engine without
transactional DDL, or an ``execute_sql`` object whose transactions are its own)
each statement commits on its own, every statement is idempotent, and the
version row is written last, so an interrupted install is completed by the next
start.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Sequence

from qcore import backends, locks, retry
from qcore.backend import Backend, LockStrategy
from qcore.context import Context
from qcore.errors import ConfigError, DatabaseError, NotInstalledError, SchemaVersionError
from qcore.identifiers import quote, schema_name
from qcore.sql import schema as sql
from qcore.sql.affinity import JOB_PATTERN_TABLE
from qcore.sql.probes import table_in_schema
from qcore.sql.schema import SCHEMA_VERSION
from qcore.verbs.migrations import MIGRATIONS, Migration, apply, plan, revert, script

__all__ = [
    "SCHEMA_VERSION",
    "affinity_tables_present",
    "get_construction_plans",
    "get_migration_plans",
    "get_rollback_plans",
    "get_uninstall_plans",
    "install_or_migrate",
    "is_installed",
    "rollback",
    "schema_version",
    "table_present",
]

log = logging.getLogger("qcore.schema")

_BARE_LOWER = re.compile(r"[a-z_][a-z0-9_]*")
# what concurrent CREATE ... IF NOT EXISTS of one object may raise in PostgreSQL
_CREATE_RACES = frozenset({"23505", "42P06", "42P07", "42710", "40001", "40P01"})
_CREATE_ATTEMPTS = 8


async def is_installed(ctx: Context) -> bool:
    """Whether the schema holds a version table (pg-boss's definition of "installed")."""
    rows = await retry.run(ctx, sql.version_table_exists, schema=ctx.schema)
    return bool(rows[0]["present"])


async def schema_version(ctx: Context) -> int | None:
    """The installed schema version; None when there is no version table or no row."""
    if not await is_installed(ctx):
        return None
    return await _read_version(ctx)


async def _read_version(ctx: Context) -> int | None:
    rows = await retry.run(ctx, sql.select_version(ctx.schema))
    value = rows[0]["version"] if rows else None
    return None if value is None else int(value)


async def _state(ctx: Context) -> tuple[bool, int | None]:
    """(version table present, version) as seen on ``ctx.db``."""
    rows = await retry.run(ctx, sql.version_table_exists, schema=ctx.schema)
    if not rows[0]["present"]:
        return False, None
    return True, await _read_version(ctx)


def _newer_error(ctx: Context, version: int, target: int) -> SchemaVersionError:
    return SchemaVersionError(
        f"schema {ctx.schema!r} is at version {version}, but this qcore knows schema versions"
        f" only up to {target}; upgrade qcore (a newer pg-boss or qcore has migrated this"
        " schema)"
    )


async def install_or_migrate(
    ctx: Context,
    *,
    migrate: bool = True,
    create_schema: bool = True,
    allow_schema_case_variant: bool = False,
    migrations: Sequence[Migration] = MIGRATIONS,
    target: int = SCHEMA_VERSION,
) -> None:
    """Make the schema ready at version ``target``, as ``start()`` needs it.

    * not installed: install version :data:`SCHEMA_VERSION` (then migrate to ``target``);
      with ``migrate=False`` raise ``NotInstalledError`` instead;
    * older than ``target``: apply ``migrations`` in order; with ``migrate=False`` raise
      ``SchemaVersionError`` saying a migration is needed;
    * newer than ``target``: raise ``SchemaVersionError``;
    * ``create_schema=False``: never issue ``CREATE SCHEMA``; a missing schema is a
      ``ConfigError``;
    * an install is refused with ``ConfigError`` when a schema whose name differs only by
      letter case already holds an install, unless ``allow_schema_case_variant``.
    """
    if target < SCHEMA_VERSION:
        raise ConfigError(f"target must be at least {SCHEMA_VERSION}, got {target}")
    installed, version = await _state(ctx)
    if version is not None:
        if version > target:
            raise _newer_error(ctx, version, target)
        if migrate:  # qcore's own tables on an install pg-boss (or an older qcore) made
            for step in sql.qcore_tables(ctx.schema):
                await _apply(ctx, step)
        if version == target:
            return
        if not migrate:
            raise SchemaVersionError(
                f"schema {ctx.schema!r} is at version {version} and must be migrated to"
                f" version {target} before use; start once with migrate=True (with a role"
                " allowed to change the schema) to migrate it",
                awaiting_migration=True,
            )
        plan(version, target, migrations)  # a gap is an error before anything runs
    else:
        if not migrate:
            raise NotInstalledError(
                f"schema {ctx.schema!r} holds no pg-boss/qcore install and migrate=False"
                " forbids installing it; start once with migrate=True",
                awaiting_migration=True,
            )
        if not installed or not _atomic(ctx):
            await _check_before_install(ctx, create_schema, allow_schema_case_variant)
        if target > SCHEMA_VERSION:
            plan(SCHEMA_VERSION, target, migrations)

    if ctx.backend.lock is not LockStrategy.ADVISORY:
        await _ensure_qcore_tables(ctx, create_schema)
    transactional = _atomic(ctx)
    while True:
        async with locks.locked(ctx, locks.INSTALL, transaction=transactional) as db:
            done = await _one_unit(ctx.with_db(db), create_schema, migrations, target)
        if done:
            return


def _atomic(ctx: Context) -> bool:
    """Whether an install can be one transaction.

    It can when the engine rolls DDL back and the adapter's transactions are real.
    """
    return ctx.backend.capabilities.transactional_ddl and ctx.db.atomic_transactions


async def _check_before_install(
    ctx: Context, create_schema: bool, allow_schema_case_variant: bool
) -> None:
    """The checks pg-boss makes before an install (outside the lock; read-only)."""
    if not create_schema:
        rows = await retry.run(ctx, sql.schema_exists, schema=ctx.schema)
        if not rows[0]["present"]:
            raise ConfigError(
                f"schema {ctx.schema!r} does not exist and create_schema=False forbids creating"
                f" it; create it first (CREATE SCHEMA {quote(ctx.schema)}) or allow"
                " create_schema"
            )
    if allow_schema_case_variant:
        return
    try:
        rows = await retry.run(ctx, sql.case_variants, schema=ctx.schema)
    except DatabaseError as exc:  # a catalog this role cannot read proves nothing
        log.debug("the schema case-variant check could not run: %s", exc)
        return
    variants = [str(r["name"]) for r in rows]
    if variants:
        spellings = " or ".join(
            f"schema={name!r}" if _BARE_LOWER.fullmatch(name) else f"schema='\"{name}\"'"
            for name in variants
        )
        found = ", ".join(quote(name) for name in variants)
        raise ConfigError(
            f"refusing to install into schema {quote(ctx.schema)} (from schema="
            f"{ctx.schema_spec!r}): no install there, but schema {found}, whose name differs"
            " only by letter case, holds one. PostgreSQL folds unquoted names to lower case"
            " and keeps quoted ones as written, so these are different schemas. To use the"
            f" existing install, set {spellings}; to install a second schema beside it,"
            " set allow_schema_case_variant=True"
        )


async def _ensure_qcore_tables(ctx: Context, create_schema: bool) -> None:
    """Make the schema and qcore's own tables, on an install of any age.

    The lock table comes before the first lease (see
    :func:`~qcore.sql.schema.qcore_tables`); the statements are idempotent.
    """
    if create_schema:
        await _apply(ctx, sql.create_schema_if_missing(ctx.schema))
    for step in sql.qcore_tables(ctx.schema):
        await _apply(ctx, step)


async def _apply(ctx: Context, step: sql.DDL) -> None:
    """One install statement, skipped when its probe finds the object.

    Outside a transaction, a collision in the catalog with another creator of the same
    object (a pg-boss instance takes no lease; concurrent ``IF NOT EXISTS`` may still
    collide in PostgreSQL) is answered by probing and trying again.
    """
    attempts = 1 if ctx.db.in_transaction else _CREATE_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            if step.skip_if is not None:
                probe, values = step.skip_if
                found = await retry.run(ctx, probe, **values)
                if found and found[0]["present"]:
                    return
            await retry.execute(ctx, step.sql)
            return
        except DatabaseError as exc:
            if exc.sqlstate not in _CREATE_RACES or attempt == attempts:
                raise


async def _one_unit(
    ctx: Context, create_schema: bool, migrations: Sequence[Migration], target: int
) -> bool:
    """Install or migrate, under the install lock; True when the schema is at ``target``.

    Migrating runs every pending migration where the lock's transaction can hold them
    all (a chain is then all or nothing, and nobody sees a version in between), else the
    next one.
    """
    installed, version = await _state(ctx)
    if version is None:
        if installed and _atomic(ctx):
            raise SchemaVersionError(
                f"schema {ctx.schema!r} has a version table without a version row; it is not"
                " an install qcore can use or repair (drop the schema to start afresh)"
            )
        await _install(ctx, create_schema)
        return target == SCHEMA_VERSION
    if version > target:
        raise _newer_error(ctx, version, target)
    if version == target:
        return True
    pending = plan(version, target, migrations)
    if not _atomic(ctx):
        pending = pending[:1]
    for migration in pending:
        await apply(ctx, migration)
    return pending[-1].version == target


async def _install(ctx: Context, create_schema: bool) -> None:
    rows = await retry.run(ctx, sql.server_today)
    today = dt.date.fromisoformat(str(rows[0]["today"]))
    steps = sql.install(ctx.backend, ctx.schema, today=today, create_schema=create_schema)
    for step in steps:
        await _apply(ctx, step)
    log.info(
        "installed schema %r at version %d",
        ctx.schema,
        SCHEMA_VERSION,
        extra={"qcore_event": "install", "qcore_version": SCHEMA_VERSION},
    )


async def table_present(ctx: Context, name: str) -> bool:
    """Whether the schema has the table ``name`` (one of qcore's own may be missing).

    An install pg-boss made that qcore never migrated lacks them, and so does one whose
    owner has not started this version yet.
    """
    [row] = await retry.run(ctx, table_in_schema, schema=ctx.schema, name=name)
    return bool(row["present"])


async def affinity_tables_present(ctx: Context) -> bool:
    """Whether the schema has qcore's job pattern table.

    It has not on an install pg-boss made that qcore never migrated: claims then ignore
    affinity.
    """
    return await table_present(ctx, JOB_PATTERN_TABLE)


def get_construction_plans(
    backend: Backend | str = "postgres", schema: str = "pgboss", *, today: dt.date | None = None
) -> str:
    """The SQL of a fresh install of ``schema`` on ``backend``, as one script.

    It is what ``qcore plans create`` prints; no connection needed. ``today`` is the UTC
    day of the first ``queue_stats`` partition (now by default).
    """
    chosen = backends.get(backend)
    day = today or dt.datetime.now(dt.timezone.utc).date()
    steps = sql.install(chosen, schema_name(schema), today=day)
    return ";\n".join(step.sql for step in steps) + ";"


def _joined(parts: list[str]) -> str:
    return ";\n".join(parts) + (";" if parts else "")


def get_migration_plans(
    schema: str = "pgboss",
    version: int = SCHEMA_VERSION - 1,
    target: int = SCHEMA_VERSION,
    backend: Backend | str = "postgres",
) -> str:
    """The SQL that takes ``schema`` from ``version`` to ``target`` on ``backend``.

    It is what ``qcore plans migrate`` prints; ``SchemaVersionError`` when qcore has no
    migration on that path. The background index builds it queues are rows of the ``bam``
    table.
    """
    chosen, name = backends.get(backend), schema_name(schema)
    parts = []
    for migration in plan(version, target, MIGRATIONS):
        parts += script(migration.steps, chosen, name)
        parts.append(f"UPDATE {quote(name)}.version SET version = {migration.version}")
    return _joined(parts)


def get_uninstall_plans(schema: str = "pgboss", backend: Backend | str = "postgres") -> str:
    """The SQL that removes every object qcore installs in ``schema`` (pg-boss's tables,
    functions and type, and qcore's own tables), for a schema shared with other objects.

    The schema and whatever else it holds stay (a schema of qcore's own is simpler to drop
    whole); an object that depends on one of qcore's stops the script. It is what
    ``qcore plans uninstall`` prints; no connection needed.
    """
    return sql.uninstall(backends.get(backend), schema_name(schema))


def _rollback_of(version: int) -> Migration:
    found = [m for m in MIGRATIONS if m.version == version and m.rollback]
    if not found:
        raise SchemaVersionError(
            f"qcore rolls a schema back one step from version {SCHEMA_VERSION} only; this"
            f" one is at {version} (roll back further with pg-boss 12.38)"
        )
    return found[0]


def get_rollback_plans(
    schema: str = "pgboss", version: int = SCHEMA_VERSION, backend: Backend | str = "postgres"
) -> str:
    """The SQL that takes ``schema`` back one step from ``version``.

    It is what ``qcore plans rollback`` prints; ``SchemaVersionError`` when qcore cannot
    roll that version back.
    """
    chosen, name = backends.get(backend), schema_name(schema)
    migration = _rollback_of(version)
    parts = script(migration.rollback, chosen, name)
    parts.append(f"UPDATE {quote(name)}.version SET version = {version - 1}")
    return _joined(parts)


async def rollback(ctx: Context) -> int:
    """Take the installed schema back one step; the version it is at afterwards.

    From 46 to 45, as pg-boss 12.38's rollback does, in one transaction under the
    install lock where the engine allows it. ``NotInstalledError`` without an install,
    ``SchemaVersionError`` from a version qcore cannot roll back.
    """
    transactional = _atomic(ctx)
    async with locks.locked(ctx, locks.INSTALL, transaction=transactional) as db:
        locked = ctx.with_db(db)
        version = await _read_version(locked) if await is_installed(locked) else None
        if version is None:
            raise NotInstalledError(f"schema {ctx.schema!r} holds no install to roll back")
        await revert(locked, _rollback_of(version))
    return version - 1

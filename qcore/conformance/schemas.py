"""Installed schemas handed to one test at a time, reset to the state of a new install.

Installing qcore's schema is about seventy DDL statements (a few hundred ms) and
dropping it as many again: most of a short test's time. A test that asks for an
installed schema (``ctx``, ``sctx``, ``boss``) gets one from this pool instead: a
schema installed once, given back after the test, and made pristine before the next
one takes it:

1. the catalog is compared with the one its install left (tables and partitions,
   columns, defaults, indexes and their validity, constraints, functions, triggers,
   types, owners, grants, comments, storage options): a test that changed anything
   (a partitioned queue's table, a dropped index, a migration) gets a new install in
   a schema of its own instead, and the changed schema is dropped;
2. every table written since is truncated (with its indexes: new, empty files) and the
   rows of a new install put back;
3. the tables' statistics counters and planner statistics are cleared, so a test sees
   a table never analyzed nor vacuumed, as after an install.

Only where the engine is PostgreSQL itself (a local server, emulation, PGlite): the
reset uses its catalog and statistics functions, and a superuser. On any other engine
each test installs and drops a schema of its own, as before.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from qcore.identifiers import quote

__all__ = ["FRESH_NAME", "REUSING_PROVISIONERS", "SchemaPool", "fresh_name"]

#: the provisioners whose engine is PostgreSQL itself, run as a superuser
REUSING_PROVISIONERS = frozenset({"local", "emulation", "pglite"})

#: everything of a schema a test could change besides its rows, one line per object
_CATALOG = """
SELECT md5(string_agg(line, E'\\n' ORDER BY line)) AS print FROM (
  SELECT 'schema ' || n.nspowner::regrole::text || ' ' || coalesce(n.nspacl::text, '')
    || ' ' || coalesce(obj_description(n.oid, 'pg_namespace'), '')
  FROM pg_namespace n WHERE n.oid = to_regnamespace($1)
  UNION ALL
  SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text || ' '
    || c.relowner::regrole::text || ' ' || coalesce(c.relacl::text, '') || ' '
    || coalesce(array_to_string(c.reloptions, ','), '') || ' ' || c.relispartition || ' '
    || coalesce(pg_get_expr(c.relpartbound, c.oid), '') || ' '
    || coalesce(obj_description(c.oid, 'pg_class'), '')
  FROM pg_class c WHERE c.relnamespace = to_regnamespace($1)
  UNION ALL
  SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
    || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE c.relnamespace = to_regnamespace($1) AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'idx ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid || ' ' || i.indisready
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  WHERE c.relnamespace = to_regnamespace($1)
  UNION ALL
  SELECT 'con ' || conname || ' ' || pg_get_constraintdef(oid) || ' ' || convalidated
  FROM pg_constraint WHERE connamespace = to_regnamespace($1)
  UNION ALL
  SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc) || ' '
    || p.proowner::regrole::text || ' ' || coalesce(p.proacl::text, '')
    || ' ' || coalesce(array_to_string(p.proconfig, ','), '')
  FROM pg_proc p WHERE p.pronamespace = to_regnamespace($1)
  UNION ALL
  SELECT 'trg ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  WHERE c.relnamespace = to_regnamespace($1) AND NOT t.tgisinternal
  UNION ALL
  SELECT 'type ' || t.typname || ' ' || t.typtype::text || ' ' || coalesce(
    (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
     FROM pg_enum e WHERE e.enumtypid = t.oid), '')
  FROM pg_type t WHERE t.typnamespace = to_regnamespace($1) AND t.typtype IN ('e', 'd')
) catalog(line)
"""

_TABLES = (
    "SELECT c.relname AS name, c.relkind AS kind FROM pg_class c"
    " WHERE c.relnamespace = to_regnamespace($1) AND c.relkind IN ('r', 'p') ORDER BY c.relname"
)

#: the tables of schema $1 named in $2 whose files hold anything: a table never written
#: since its install (or its last truncation) has no page, and its btree indexes only
#: their metapage
_WRITTEN = (
    "SELECT c.relname AS name FROM pg_class c"
    " WHERE c.relnamespace = to_regnamespace($1) AND c.relname = ANY($2::text[])"
    " AND c.relkind = 'r' AND (pg_relation_size(c.oid) > 0 OR EXISTS (SELECT 1 FROM pg_index i"
    " WHERE i.indrelid = c.oid AND pg_relation_size(i.indexrelid) > 8192))"
)


#: what :func:`fresh_name` gives, as a pattern
FRESH_NAME = re.compile(r"qcore_test_[0-9a-f]{12}")


def fresh_name() -> str:
    """A schema name no other test uses."""
    return f"qcore_test_{uuid.uuid4().hex[:12]}"


@dataclass
class _Install:
    """What a schema looked like right after its install: its catalog and its rows."""

    print: str
    rows: dict[str, str]  # table -> its rows as a JSON array (tables with rows only)
    tables: list[str]


@dataclass
class SchemaPool:
    """The installed schemas of one backend's database that no test holds."""

    free: list[str] = field(default_factory=list)
    installs: dict[str, _Install] = field(default_factory=dict)
    #: how the pool served: reused (reset) and installed (new or after a change)
    reused: int = 0
    installed: int = 0

    async def take(self, db: Any) -> str | None:
        """A free schema, reset to its install (``db``: an unguarded adapter of the
        backend's database); None when there is none to reuse (the caller installs a new
        schema and :meth:`remember` s it). A schema that a test changed is dropped."""
        while self.free:
            name = self.free.pop()
            install = self.installs[name]
            [row] = await db.execute(_CATALOG, [quote(name)])
            if row["print"] == install.print:
                await _reset(db, name, install)
                self.reused += 1
                return name
            del self.installs[name]
            await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE")
        return None

    async def remember(self, db: Any, name: str) -> None:
        """Record schema ``name`` as just installed, so it can be reused after its test."""
        [row] = await db.execute(_CATALOG, [quote(name)])
        tables = [str(r["name"]) for r in await db.execute(_TABLES, [quote(name)])]
        rows: dict[str, str] = {}
        for table in tables:
            source = f"{quote(name)}.{quote(table)}"
            [dump] = await db.execute(
                f"SELECT coalesce(json_agg(t), '[]')::text AS rows FROM {source} t"
            )
            if dump["rows"] != "[]":
                rows[table] = str(dump["rows"])
        self.installs[name] = _Install(str(row["print"]), rows, tables)
        self.installed += 1

    def give_back(self, name: str) -> None:
        """Schema ``name`` is free again once its test ended."""
        if name in self.installs:
            self.free.append(name)


async def _reset(db: Any, name: str, install: _Install) -> None:
    """Every table of schema ``name`` truncated, the install's rows put back, and the
    tables' statistics (counters, last vacuum and analyze, planner statistics) cleared."""
    schema = quote(name)
    written = await db.execute(_WRITTEN, [name, install.tables])
    statements = []
    if written:
        tables = ", ".join(f"{schema}.{quote(str(r['name']))}" for r in written)
        statements.append(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    for table, rows in install.rows.items():
        target = f"{schema}.{quote(table)}"
        literal = "'" + rows.replace("'", "''") + "'"
        statements.append(
            f"INSERT INTO {target} SELECT * FROM json_populate_recordset(NULL::{target},"
            f" {literal}::json)"
        )
    relations = (
        f"SELECT oid FROM pg_class WHERE relnamespace = {_literal(schema)}::regnamespace"
        " AND relkind IN ('r', 'p', 'i', 'I')"
    )
    statements.append(f"SELECT pg_stat_reset_single_table_counters(oid) FROM ({relations}) r")
    statements.append(f"DELETE FROM pg_statistic WHERE starelid IN ({relations})")
    await db.execute_script("; ".join(statements))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"

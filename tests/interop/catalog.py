"""A comparable snapshot of what a schema holds, read from PostgreSQL's catalogs.

Used to prove that qcore installs exactly what pg-boss installs: every table
(kind, persistence, options, partition key and bound), column (position, name,
type, nullability, default, identity, generation), constraint (name, type,
definition, deferrability), index (name, table, definition), enum label, other
type, function signature (arguments, result, language, volatility,
strictness, security, parallel safety, settings), sequence, view and trigger.
Every text is normalised: the schema's name becomes ``S``.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from qcore.sql.schema import QCORE_TABLES

__all__ = ["QCORE_ONLY_TABLES", "diff", "snapshot"]

#: qcore's own tables, which pg-boss does not have (and does not need to)
QCORE_ONLY_TABLES = frozenset(QCORE_TABLES)

_QUERIES: dict[str, str] = {
    "tables": """
        SELECT c.relname AS table, c.relkind::text AS kind, c.relpersistence::text AS persistence,
               coalesce(array_to_string(c.reloptions, ','), '') AS options,
               coalesce(pg_get_partkeydef(c.oid), '') AS partition_key,
               coalesce(pg_get_expr(c.relpartbound, c.oid), '') AS partition_bound,
               coalesce((SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                         WHERE i.inhrelid = c.oid), '') AS parent
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        ORDER BY 1""",
    "columns": """
        SELECT c.relname AS table, a.attnum AS position, a.attname AS column,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
               coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS default,
               a.attidentity::text AS identity, a.attgenerated::text AS generated
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 2""",
    "constraints": """
        SELECT c.relname AS table, k.conname AS name, k.contype::text AS type,
               pg_get_constraintdef(k.oid) AS definition,
               k.condeferrable AS deferrable, k.condeferred AS deferred,
               k.convalidated AS validated, k.connoinherit AS no_inherit
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "indexes": """
        SELECT t.relname AS table, i.relname AS name, pg_get_indexdef(x.indexrelid) AS definition,
               x.indisunique AS unique, x.indisprimary AS primary, x.indisvalid AS valid,
               coalesce((SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                         WHERE h.inhrelid = i.oid), '') AS parent
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_namespace n ON n.oid = i.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "enum_labels": """
        SELECT t.typname AS type, e.enumsortorder AS position, e.enumlabel AS label
        FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
        JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "types": """
        SELECT t.typname AS name, t.typtype::text AS kind
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(schema)s AND t.typrelid = 0 AND t.typelem = 0
        ORDER BY 1""",
    "functions": """
        SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS identity,
               pg_get_function_arguments(p.oid) AS arguments,
               pg_get_function_result(p.oid) AS result, l.lanname AS language,
               p.prokind::text AS kind, p.provolatile::text AS volatility,
               p.proisstrict AS strict, p.prosecdef AS security_definer,
               p.proleakproof AS leakproof, p.proparallel::text AS parallel,
               coalesce(array_to_string(p.proconfig, ','), '') AS settings,
               p.procost AS cost, p.prorows AS rows, p.proretset AS returns_set
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname AS table, t.tgname AS name
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
        ORDER BY 1, 2""",
}

# the key fields of each section's rows, for readable differences
_KEYS = {
    "tables": ("table",),
    "columns": ("table", "column"),
    "constraints": ("table", "name"),
    "indexes": ("name",),
    "enum_labels": ("type", "position"),
    "types": ("name",),
    "functions": ("name", "identity"),
    "triggers": ("table", "name"),
}


def _normalise(value: Any, schema: str) -> Any:
    if not isinstance(value, str):
        return value
    text = value.replace(f'"{schema}".', "S.")
    return re.sub(rf"(?<![\w\"]){re.escape(schema)}\.", "S.", text)


def _excluded(row: dict[str, Any], exclude: frozenset[str]) -> bool:
    # rows of the excluded tables: their table, columns, constraints, indexes, triggers
    return row.get("table") in exclude


def snapshot(
    dsn: str, schema: str, *, exclude: frozenset[str] = QCORE_ONLY_TABLES
) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Per section, rows keyed by their identifying fields, normalised (``S`` for the
    schema), without the rows of ``exclude``'d tables."""
    result: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        for section, query in _QUERIES.items():
            rows = (
                conn.cursor(row_factory=psycopg.rows.dict_row)
                .execute(query, {"schema": schema})
                .fetchall()
            )
            keyed: dict[tuple[Any, ...], dict[str, Any]] = {}
            for row in rows:
                if _excluded(row, exclude):
                    continue
                clean = {k: _normalise(v, schema) for k, v in row.items()}
                keyed[tuple(clean[k] for k in _KEYS[section])] = clean
            result[section] = keyed
    return result


def diff(
    ours: dict[str, dict[tuple[Any, ...], dict[str, Any]]],
    theirs: dict[str, dict[tuple[Any, ...], dict[str, Any]]],
) -> list[str]:
    """Every difference between two snapshots, one line each (empty when identical)."""
    lines: list[str] = []
    for section in _QUERIES:
        a, b = ours.get(section, {}), theirs.get(section, {})
        for key in sorted(set(a) | set(b), key=repr):
            if key not in b:
                lines.append(f"{section} {key}: only in qcore: {a[key]}")
            elif key not in a:
                lines.append(f"{section} {key}: only in pg-boss: {b[key]}")
            elif a[key] != b[key]:
                changed = {
                    k: (a[key][k], b[key].get(k)) for k in a[key] if a[key][k] != b[key].get(k)
                }
                lines.append(f"{section} {key}: qcore vs pg-boss: {changed}")
    return lines

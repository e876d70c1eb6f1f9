"""The comparisons of drift detection, each yielding the report's entries.

What the install declares (:func:`qcore.sql.drift.expected`) is compared against what
the catalog reports, as data.

Comparison is normalised, so only a real difference is reported: index keys keep their
order but not their casing, casts, parentheses or whitespace; a predicate folds
``= ANY (ARRAY[...])`` back to ``IN (...)``; a column default drops its casts; a type
is compared in ``format_type``'s spelling; constraints compare as sets.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from qcore.identifiers import quote
from qcore.sql.catalog import Column
from qcore.sql.drift import Expected, ExpectedIndex
from qcore.verbs.drift.report import (
    ColumnDrift,
    ColumnMismatch,
    ConstraintDrift,
    ExtraIndex,
    FunctionDrift,
    IndexDrift,
)

__all__ = [
    "FIXED_TABLES",
    "PGBOSS_FUNCTION_BODIES",
    "IndexReport",
    "column_drift",
    "constraint_drift",
    "function_drift",
    "index_drift",
]

#: the tables whose defaults, types, nullability and constraints are checked
FIXED_TABLES = (
    "version",
    "queue",
    "schedule",
    "subscription",
    "bam",
    "warning",
    "queue_stats",
    "job_dependency",
    "instance",
)

#: SHA-256 of pg-boss 12.38's function bodies as :func:`_body_hash` reads them: a schema
#: pg-boss installed carries these, and they behave as qcore's own
PGBOSS_FUNCTION_BODIES: dict[str, frozenset[str]] = {
    "create_queue": frozenset({"d9a0056991e3c5cf856f9fec78f5ab887b141a36ba14a2b52ec2d456ccfc8320"}),
    "delete_queue": frozenset({"2881a021380330e5a39160ee1492673b153884f8c1d1ac50f6087e8dad9688ac"}),
    "job_now": frozenset({"2ae0321c9c373b22a4ab68c6c1399a9787e01941e438861e23ebbaee251cbbee"}),
    "job_table_format": frozenset(
        {"4dbad0fe31fd77f44e07fc4f3a46f3f23a71ead9d3d9ce09e8306a317c536d96"}
    ),
    "job_table_run": frozenset(
        {"571ad37430e4821e53075088ecaa463a1080112da2788068e33287b28ab365c3"}
    ),
    "job_table_run_async": frozenset(
        {"e46a19ab7a6a0be4e435961c3428f7a0c6ef27cd5b2e99c8d149e4b032e46f5d"}
    ),
}


# --------------------------------------------------------------- normalisation

_CAST = re.compile(r'::(?:"?[a-z_][a-z0-9_$]*"?\.)?"?[a-z_][a-z0-9_$]*"?(?:\[\])?', re.I)
_ANY_ARRAY = re.compile(r"=\s*any\s*\(\s*array\s*\[([^\]]*)\]\s*\)")
_ALL_ARRAY = re.compile(r"<>\s*all\s*\(\s*array\s*\[([^\]]*)\]\s*\)")


def _strip_casts(text: str) -> str:
    return _CAST.sub("", text)


def _normal(text: str) -> str:
    """Lower case, no quotes, no casts, no whitespace, no parentheses."""
    folded = _strip_casts(text.lower().replace('"', ""))
    folded = _ANY_ARRAY.sub(r" in (\1)", folded)
    folded = _ALL_ARRAY.sub(r" not in (\1)", folded)
    return re.sub(r"[\s()]", "", folded)


def _without_schema(text: str, schema: str) -> str:
    """``text`` with the schema's qualifier dropped (quoted or not)."""
    for prefix in (f"{quote(schema)}.", f"{schema}."):
        text = text.replace(prefix, "")
    return text


def _wrapped(text: str) -> bool:
    """Whether one pair of parentheses encloses all of ``text``."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def _readable(text: str) -> str:
    """An expression as one reads it: no casts, one space."""
    return re.sub(r"\s+", " ", _strip_casts(text)).strip()


def _readable_predicate(text: str) -> str:
    text = _readable(text)
    while _wrapped(text):
        text = text[1:-1].strip()
    return text


def _body_hash(body: str, schema: str) -> str:
    """A function body's digest: the schema's name as ``S``, whitespace collapsed."""
    neutral = body.replace(f"{quote(schema)}.", "S.").replace(f"{schema}.", "S.")
    return hashlib.sha256(re.sub(r"\s+", " ", neutral).strip().encode()).hexdigest()


def _function_body(definition: str) -> str:
    """The dollar-quoted body of a function's ``CREATE OR REPLACE`` statement."""
    return definition.split("$qcore$")[1]


# ----------------------------------------------------------------------- indexes

#: missing, still building, invalid, extra (a warning), mismatched
IndexReport = tuple[
    tuple[IndexDrift, ...],
    tuple[IndexDrift, ...],
    tuple[IndexDrift, ...],
    tuple[ExtraIndex, ...],
    tuple[IndexDrift, ...],
]


#: the access methods an install's plain ``CREATE INDEX`` makes: btree, which YugabyteDB
#: builds as its own lsm
_DEFAULT_METHODS = frozenset({"btree", "lsm"})


def _differs(
    want: ExpectedIndex, keys: str, include: str, predicate: str, unique: bool, method: str
) -> tuple[str, ...]:
    differs = []
    if method and method not in _DEFAULT_METHODS:
        differs.append("method")
    if _normal(want.keys) != _normal(keys):
        differs.append("keys")
    if sorted(_normal(want.include).split(",")) != sorted(_normal(include).split(",")):
        differs.append("include")
    if _normal(want.predicate) != _normal(predicate):
        differs.append("predicate")
    if want.unique != unique:
        differs.append("unique")
    return tuple(differs)


def _readable_index(definition: str) -> str:
    """pg_get_indexdef's text as one reads it: no ``USING btree``, no casts, one space."""
    return _readable(re.sub(r"\s+USING btree\s+", " ", definition, flags=re.I))


def index_drift(
    expected: Expected, live: Sequence[dict[str, Any]], building: set[str], definitions: bool
) -> IndexReport:
    """The drift of the expected indexes against the catalog's.

    The catalog's are ``live``, with their parts where the backend renders
    ``definitions``; ``building``: those an async migration is making.
    """
    by_name = {r["name"]: r for r in live}
    missing: list[IndexDrift] = []
    still_building: list[IndexDrift] = []
    invalid: list[IndexDrift] = []
    mismatched: list[IndexDrift] = []
    schema = expected.schema
    for name, want in expected.indexes.items():
        rebuild = f"DROP INDEX {expected.qualified(name)};\n{want.definition}"
        entry = IndexDrift(
            name=name,
            table=want.table,
            keys=_readable(want.keys),
            predicate=_readable_predicate(want.predicate),
            definition=want.definition,
            repair=want.definition,
            building=name in building,
        )
        found = by_name.get(name)
        if found is None:
            (still_building if name in building else missing).append(entry)
        elif not found["valid"]:
            invalid.append(replace(entry, repair=rebuild))
        elif definitions and found.get("definition"):
            keys = _without_schema(", ".join(found["keys"]), schema)
            include = ", ".join(found["include"])
            predicate = _without_schema(str(found["predicate"] or ""), schema)
            method = str(found.get("method") or "")
            differs = _differs(want, keys, include, predicate, bool(found["unique"]), method)
            if differs:
                mismatched.append(
                    replace(
                        entry,
                        repair=rebuild,
                        building=False,
                        actual_definition=_readable_index(str(found["definition"])),
                        actual_keys=_readable(keys),
                        actual_predicate=_readable_predicate(predicate),
                        differs=differs,
                    )
                )
    managed = set(expected.tables)
    extra = tuple(
        ExtraIndex(r["name"], r["table"])
        for r in sorted(live, key=lambda r: (r["table"], r["name"]))
        if r["table"] in managed
        and r["name"] not in expected.indexes
        and not r["constraint_backed"]
    )
    return tuple(missing), tuple(still_building), tuple(invalid), extra, tuple(mismatched)


# --------------------------------------------------------------------- functions


def function_drift(
    expected: Expected, live: Sequence[dict[str, Any]], definitions: bool
) -> tuple[tuple[FunctionDrift, ...], tuple[FunctionDrift, ...]]:
    """Missing functions, and those whose body was changed.

    A changed body (checked where the backend renders ``definitions``) is neither
    qcore's nor pg-boss 12.38's.
    """
    bodies: dict[str, list[str]] = {}
    for row in live:
        bodies.setdefault(row["name"], []).append(str(row["body"] or ""))
    missing: list[FunctionDrift] = []
    mismatched: list[FunctionDrift] = []
    schema = expected.schema
    for name, definition in expected.functions.items():
        found = bodies.get(name)
        if not found:
            missing.append(FunctionDrift(name, definition))
            continue
        if not definitions:
            continue
        own = _body_hash(_function_body(definition), schema)
        accepted = {own, *PGBOSS_FUNCTION_BODIES.get(name, ())}
        changed = [b for b in found if _body_hash(b, schema) not in accepted]
        if changed:
            actual = re.sub(r"\s+", " ", changed[0]).strip()
            mismatched.append(FunctionDrift(name, definition, actual_body=actual))
    return tuple(missing), tuple(mismatched)


# ----------------------------------------------------------------------- columns

_CANONICAL_TYPES = {"timestamptz": "timestamp with time zone"}


def _normal_type(kind: str, schema: str) -> str:
    return _without_schema(kind, schema).replace('"', "").strip()


def _column_clause(column: Column, schema: str) -> str:
    name, kind, not_null, default = column
    clause = f"{quote(name)} {kind.replace('{S}', quote(schema))}"
    if default is not None:
        clause += f" DEFAULT {default}"
    return clause + (" NOT NULL" if not_null else "")


def _definition_drift(
    columns: Sequence[Column], live: dict[str, dict[str, Any]], ref: str, schema: str
) -> tuple[list[ColumnMismatch], list[ColumnMismatch], list[ColumnMismatch], list[str]]:
    """Defaults, types and nullability of a fixed table's columns, and their repairs."""
    defaults: list[ColumnMismatch] = []
    kinds: list[ColumnMismatch] = []
    nullability: list[ColumnMismatch] = []
    repairs: list[str] = []
    for name, kind, not_null, default in columns:
        found = live.get(name)
        if found is None:
            continue
        alter = f"ALTER TABLE {ref} ALTER COLUMN {quote(name)}"
        if _normal(default or "") != _normal(found["default"] or ""):
            defaults.append(ColumnMismatch(name, default, found["default"]))
            repairs.append(
                f"{alter} SET DEFAULT {default}" if default is not None else f"{alter} DROP DEFAULT"
            )
        want = _CANONICAL_TYPES.get(kind, kind)
        want = _normal_type(want.replace("{S}.", ""), schema)
        have = _normal_type(str(found["type"]), schema)
        if want != have:
            kinds.append(ColumnMismatch(name, want, have))
            rendered = kind.replace("{S}", quote(schema))
            repairs.append(f"{alter} TYPE {rendered} USING {quote(name)}::{rendered}")
        if not_null != bool(found["not_null"]):
            nullability.append(ColumnMismatch(name, not_null, bool(found["not_null"])))
            repairs.append(f"{alter} {'SET' if not_null else 'DROP'} NOT NULL")
    return defaults, kinds, nullability, repairs


def column_drift(
    expected: Expected, live: Sequence[dict[str, Any]], definitions: bool
) -> tuple[ColumnDrift, ...]:
    """Each present table's missing and unexpected columns.

    On the fixed tables, where the backend renders ``definitions``, their defaults, types
    and nullability too.
    """
    by_table: dict[str, dict[str, dict[str, Any]]] = {}
    for row in live:
        by_table.setdefault(row["table"], {})[row["column"]] = row
    drift = []
    for table in expected.tables.values():
        columns = by_table.get(table.name)
        if not columns:
            continue  # an absent table is reported as such
        ref = expected.qualified(table.name)
        names = [c[0] for c in table.columns]
        missing = tuple(n for n in names if n not in columns)
        unexpected = tuple(sorted(n for n in columns if n not in names))
        repairs = [
            f"ALTER TABLE {ref} ADD COLUMN {_column_clause(c, expected.schema)}"
            for c in table.columns
            if c[0] in missing
        ]
        repairs += [f"ALTER TABLE {ref} DROP COLUMN {quote(n)}" for n in unexpected]
        defaults: list[ColumnMismatch] = []
        kinds: list[ColumnMismatch] = []
        nullability: list[ColumnMismatch] = []
        if definitions and table.name in FIXED_TABLES:
            defaults, kinds, nullability, altered = _definition_drift(
                table.columns, columns, ref, expected.schema
            )
            repairs += altered
        if missing or unexpected or defaults or kinds or nullability:
            drift.append(
                ColumnDrift(
                    table=table.name,
                    missing_columns=missing,
                    unexpected_columns=unexpected,
                    default_mismatches=tuple(defaults),
                    type_mismatches=tuple(kinds),
                    nullability_mismatches=tuple(nullability),
                    repairs=tuple(repairs),
                )
            )
    return tuple(drift)


# ------------------------------------------------------------------- constraints


def constraint_drift(
    expected: Expected, live: Sequence[dict[str, Any]]
) -> tuple[ConstraintDrift, ...]:
    """The drift of the fixed tables' declared constraints against the catalog's.

    They are compared as sets of normalised clauses.
    """
    by_table: dict[str, list[dict[str, Any]]] = {}
    for row in live:
        by_table.setdefault(row["table"], []).append(row)

    def normal(clause: str) -> str:
        return _normal(_without_schema(clause, expected.schema))

    drift = []
    for name in FIXED_TABLES:
        table = expected.tables.get(name)
        rows = by_table.get(name)
        if table is None or not rows:
            continue
        ref = expected.qualified(name)
        live_set = {normal(str(r["definition"])) for r in rows}
        want = {normal(clause) for _, clause in table.constraints}
        missing = [(c, clause) for c, clause in table.constraints if normal(clause) not in live_set]
        unexpected = [r for r in rows if normal(str(r["definition"])) not in want]
        if missing or unexpected:
            repairs = [
                f"ALTER TABLE {ref} DROP CONSTRAINT {quote(str(r['name']))}" for r in unexpected
            ]
            repairs += [
                f"ALTER TABLE {ref} ADD CONSTRAINT {quote(c)} {clause}" for c, clause in missing
            ]
            drift.append(
                ConstraintDrift(
                    table=name,
                    missing_constraints=tuple(clause for _, clause in missing),
                    unexpected_constraints=tuple(str(r["definition"]) for r in unexpected),
                    repairs=tuple(repairs),
                )
            )
    return tuple(drift)

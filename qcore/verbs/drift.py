"""Schema drift detection: what a schema should hold (its v46 install, read from the same
builders that make it) against what the catalog says it holds, as a typed report whose
every entry carries the statement that repairs it.

Catalog-only: no lock, no table scan (the queue table is read for the partitions it
names). Comparison is normalised, so only a real difference is reported: index keys
keep their order but not their casing, casts, parentheses or whitespace; a predicate
folds ``= ANY (ARRAY[...])`` back to ``IN (...)``; a column default drops its casts; a
type is compared in ``format_type``'s spelling; constraints compare as sets; the enum's
order counts. Defaults, types, nullability and constraints are checked on the fixed
tables only (a job table's deferrable keys and interval default would be noise), and
only where the backend renders definitions (``drift_catalog``); presence everywhere.

qcore's own tables are not pg-boss's objects and are never reported. Functions match
when their body is qcore's or pg-boss 12.38's, so an install made by either is clean.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from qcore import retry
from qcore.context import Context
from qcore.identifiers import quote
from qcore.job import JobState
from qcore.sql import drift as sql
from qcore.sql import schema as schema_sql
from qcore.sql.catalog import _literal
from qcore.sql.functions import _partition_commands

__all__ = [
    "ColumnDrift",
    "ColumnMismatch",
    "ConstraintDrift",
    "DriftReport",
    "EnumDrift",
    "ExtraIndex",
    "FunctionDrift",
    "IndexDrift",
    "TableDrift",
    "detect_schema_drift",
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


# ------------------------------------------------------------------------ the report


@dataclass(frozen=True)
class TableDrift:
    """A managed table that is absent, and the statements that create it."""

    table: str
    definition: str


@dataclass(frozen=True)
class IndexDrift:
    """An expected index that is missing, still being built, invalid or different.
    ``definition`` is the statement that makes it as it should be; a mismatched one adds
    what the catalog has and ``differs`` (``keys``, ``include``, ``predicate``,
    ``unique``). ``repair`` is what to run: the definition, after dropping the index
    where one is there."""

    name: str
    table: str
    keys: str
    predicate: str
    definition: str
    repair: str
    building: bool = False
    actual_definition: str | None = None
    actual_keys: str | None = None
    actual_predicate: str | None = None
    differs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtraIndex:
    """A standalone index on a managed table that the install does not make (a warning:
    a stale index, or one you added)."""

    name: str
    table: str


@dataclass(frozen=True)
class FunctionDrift:
    """A managed function that is absent or whose body was changed; ``definition``
    recreates it."""

    name: str
    definition: str
    actual_body: str | None = None


@dataclass(frozen=True)
class ColumnMismatch:
    column: str
    expected: Any
    actual: Any


@dataclass(frozen=True)
class ColumnDrift:
    """A managed table's column differences and the statements that undo them (an
    unexpected column's ``DROP COLUMN`` among them: look before you run it, it may be
    yours)."""

    table: str
    missing_columns: tuple[str, ...] = ()
    unexpected_columns: tuple[str, ...] = ()
    default_mismatches: tuple[ColumnMismatch, ...] = ()
    type_mismatches: tuple[ColumnMismatch, ...] = ()
    nullability_mismatches: tuple[ColumnMismatch, ...] = ()
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConstraintDrift:
    """A fixed table's constraint set differences, and the statements that undo them."""

    table: str
    missing_constraints: tuple[str, ...] = ()
    unexpected_constraints: tuple[str, ...] = ()
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnumDrift:
    """``job_state`` labels changed (set or order). No statement repairs it safely on a
    live schema: restore it from a backup."""

    name: str
    expected_values: tuple[str, ...]
    actual_values: tuple[str, ...]


@dataclass(frozen=True)
class DriftReport:
    """What :func:`detect_schema_drift` found. ``ok`` when nothing differs;
    ``extra_indexes`` are a warning only, and ``building`` indexes (an async migration
    still making them) are not drift yet. ``skipped`` names the checks this backend's
    catalog cannot serve."""

    ok: bool
    missing_tables: tuple[TableDrift, ...] = ()
    missing: tuple[IndexDrift, ...] = ()
    building: tuple[IndexDrift, ...] = ()
    invalid: tuple[IndexDrift, ...] = ()
    extra_indexes: tuple[ExtraIndex, ...] = ()
    mismatched: tuple[IndexDrift, ...] = ()
    missing_functions: tuple[FunctionDrift, ...] = ()
    mismatched_functions: tuple[FunctionDrift, ...] = ()
    column_drift: tuple[ColumnDrift, ...] = ()
    constraint_drift: tuple[ConstraintDrift, ...] = ()
    enum_drift: EnumDrift | None = None
    skipped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (JSON-ready)."""
        return asdict(self)

    def repairs(self) -> list[str]:
        """Every repair statement, in the order the report lists them."""
        out = [t.definition for t in self.missing_tables]
        out += [i.repair for i in (*self.missing, *self.invalid, *self.mismatched)]
        out += [f.definition for f in (*self.missing_functions, *self.mismatched_functions)]
        for table in self.column_drift:
            out += table.repairs
        for constraints in self.constraint_drift:
            out += constraints.repairs
        return out


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


def _first_group(text: str, start: int) -> tuple[int, int] | None:
    """The span inside the first balanced parentheses at or after ``start``."""
    open_at = text.find("(", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return open_at + 1, i
    return None


@dataclass(frozen=True)
class _IndexShape:
    unique: bool
    keys: str
    include: str
    predicate: str

    @classmethod
    def of(cls, definition: str) -> _IndexShape:
        keys_span = _first_group(definition, definition.upper().find(" ON "))
        if keys_span is None:
            return cls(False, "", "", "")
        keys = definition[keys_span[0] : keys_span[1]]
        rest = definition[keys_span[1] + 1 :]
        include = ""
        found = re.match(r"\s*INCLUDE\s*", rest, re.IGNORECASE)
        if found:
            span = _first_group(rest, found.end())
            if span is not None:
                include = rest[span[0] : span[1]]
                rest = rest[span[1] + 1 :]
        where = re.search(r"\bWHERE\b", rest, re.IGNORECASE)
        predicate = rest[where.end() :].strip() if where else ""
        unique = bool(re.match(r"\s*CREATE\s+UNIQUE\b", definition, re.IGNORECASE))
        return cls(unique, keys.strip(), include.strip(), predicate)

    def readable_keys(self) -> str:
        return re.sub(r"\s+", " ", _strip_casts(self.keys)).strip()

    def readable_predicate(self) -> str:
        text = re.sub(r"\s+", " ", _strip_casts(self.predicate)).strip()
        while text.startswith("(") and _first_group(text, 0) == (1, len(text) - 1):
            text = text[1:-1].strip()
        return text

    def differs_from(self, other: _IndexShape) -> tuple[str, ...]:
        differs = []
        if _normal(self.keys) != _normal(other.keys):
            differs.append("keys")
        if sorted(_normal(self.include).split(",")) != sorted(_normal(other.include).split(",")):
            differs.append("include")
        if _normal(self.predicate) != _normal(other.predicate):
            differs.append("predicate")
        if self.unique != other.unique:
            differs.append("unique")
        return tuple(differs)


def _normal_default(expr: str | None) -> str:
    return _normal(expr or "")


def _normal_type(kind: str, schema: str) -> str:
    return _without_schema(kind, schema).replace('"', "").strip()


_CANONICAL_TYPES = {"timestamptz": "timestamp with time zone"}


def _body_hash(body: str, schema: str) -> str:
    """A function body's digest: the schema's name as ``S``, whitespace collapsed."""
    neutral = body.replace(f"{quote(schema)}.", "S.").replace(f"{schema}.", "S.")
    return hashlib.sha256(re.sub(r"\s+", " ", neutral).strip().encode()).hexdigest()


# ---------------------------------------------------------------- what is expected


@dataclass
class _Column:
    name: str
    kind: str
    not_null: bool
    default: str | None


@dataclass
class _Table:
    name: str
    definition: str
    columns: list[_Column] = field(default_factory=list)
    #: (name, clause) of the table's constraints, for the fixed tables
    constraints: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Expected:
    schema: str
    tables: dict[str, _Table] = field(default_factory=dict)
    #: index name -> (table, definition)
    indexes: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: function name -> (definition, body)
    functions: dict[str, tuple[str, str]] = field(default_factory=dict)

    def qualified(self, name: str) -> str:
        return f"{quote(self.schema)}.{quote(name)}"


_CREATE_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS \S+?\.(\"?[\w]+\"?) \(\n(.*)\n\)", re.S)
_LIKE_JOB = re.compile(r"CREATE TABLE IF NOT EXISTS \S+?\.(\w+) \(LIKE ")
_CREATE_INDEX = re.compile(r"CREATE (UNIQUE )?INDEX IF NOT EXISTS (\w+) ON \S+?\.(\"?\w+\"?) ")
_CREATE_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION \S+?\.(\w+)\(")
_RUN_ON_COMMON = re.compile(r"SELECT \S+\.job_table_run\('(.*)', 'job_common'\) AS done$", re.S)


def _parse_column(line: str) -> _Column:
    name, _, rest = line.partition(" ")
    not_null = rest.endswith(" NOT NULL")
    if not_null:
        rest = rest[: -len(" NOT NULL")]
    kind, _, default = rest.partition(" DEFAULT ")
    return _Column(name.strip('"'), kind, not_null, default or None)


def _split_body(body: str) -> list[str]:
    return [part.strip() for part in body.split(",\n  ")]


def _index_definition(statement: str) -> str:
    return statement.replace(" IF NOT EXISTS", "", 1)


def _retarget(command: str, schema: str, table: str) -> str:
    """A command written for ``job`` / ``job_iN`` pointed at another job table (as the
    schema's ``job_table_format`` does)."""
    command = command.replace(f"{quote(schema)}.job ", f"{quote(schema)}.{quote(table)} ")
    return re.sub(r"\bjob_i(\d+)\b", rf"{table}_i\1", command)


def _expected(ctx: Context, partitions: list[dict[str, Any]]) -> _Expected:
    """The objects a v46 install of this backend holds in ``ctx.schema``, with the job
    tables of ``partitions`` (queue rows with a table of their own)."""
    schema = ctx.schema
    backend = ctx.backend
    own = set(schema_sql.QCORE_TABLES)
    expected = _Expected(schema)
    steps = schema_sql.install(backend, schema, today=dt.date(2000, 1, 1), create_schema=False)
    for step in steps:
        text = step.sql
        if (m := _CREATE_TABLE.match(text)) is not None:
            name = m.group(1).strip('"')
            if name in own or " PARTITION OF " in text:
                continue
            table = expected.tables.setdefault(name, _Table(name, text))
            for part in _split_body(m.group(2)):
                if part.startswith("CONSTRAINT "):
                    cname, _, clause = part[len("CONSTRAINT ") :].partition(" ")
                    table.constraints.append((cname, clause))
                else:
                    table.columns.append(_parse_column(part))
        elif (m := _LIKE_JOB.match(text)) is not None:
            job = expected.tables["job"]
            expected.tables[m.group(1)] = _Table(m.group(1), text, list(job.columns))
        elif (m := _CREATE_INDEX.match(text)) is not None:
            table_name = m.group(3).strip('"')
            if table_name not in own:
                expected.indexes[m.group(2)] = (table_name, _index_definition(text))
        elif (m := _CREATE_FUNCTION.match(text)) is not None:
            body = text.split("$qcore$")[1]
            expected.functions[m.group(1)] = (text, body)
        elif (m := _RUN_ON_COMMON.match(text)) is not None:
            command = m.group(1).replace("''", "'")
            if (i := _CREATE_INDEX.match(command)) is not None:
                definition = _index_definition(_retarget(command, schema, "job_common"))
                expected.indexes[f"job_common_i{i.group(2)[len('job_i') :]}"] = (
                    "job_common",
                    definition,
                )
    if partitions:
        common, by_policy = _partition_commands(backend, schema)
        job = expected.tables["job"]
        for queue in partitions:
            own_table = str(queue["table_name"])
            commands = [
                f"CREATE TABLE {expected.qualified(own_table)} (LIKE {quote(schema)}.job"
                " INCLUDING DEFAULTS)",
                f"ALTER TABLE {expected.qualified(own_table)} ADD CONSTRAINT cjc"
                f" CHECK (name = {_literal(str(queue['name']))})",
                *(_retarget(c, schema, own_table) for _, c in common if "INDEX" not in c),
                f"ALTER TABLE {quote(schema)}.job ATTACH PARTITION {expected.qualified(own_table)}"
                f" FOR VALUES IN ({_literal(str(queue['name']))})",
            ]
            expected.tables[own_table] = _Table(own_table, ";\n".join(commands), list(job.columns))
            for _, command in (*common, *by_policy.get(str(queue["policy"]), [])):
                found = _CREATE_INDEX.match(command)
                if found is not None:
                    number = found.group(2)[len("job_i") :]
                    expected.indexes[f"{own_table}_i{number}"] = (
                        own_table,
                        _index_definition(_retarget(command, schema, own_table)),
                    )
    return expected


# ------------------------------------------------------------------- the check


async def detect_schema_drift(ctx: Context) -> DriftReport:
    """Compare the schema with what its install makes; see the module's docstring."""
    definitions = ctx.backend.capabilities.drift_catalog
    schema = ctx.schema
    tables_live = {r["table"] for r in await retry.run(ctx, sql.schema_tables(), schema=schema)}
    partitions = (
        await retry.run(ctx, sql.partitioned_queues(ctx.q))
        if "queue" in tables_live and ctx.backend.schema.partitioned
        else []
    )
    expected = _expected(ctx, partitions)
    missing_tables = tuple(
        TableDrift(t.name, t.definition)
        for t in expected.tables.values()
        if t.name not in tables_live
    )
    building = await _building(ctx) if "bam" in tables_live else set()
    index_report = _index_drift(
        expected,
        await retry.run(ctx, sql.schema_indexes(definitions), schema=schema),
        building,
        definitions,
    )
    functions = await retry.run(ctx, sql.schema_functions(), schema=schema)
    missing_functions, mismatched_functions = _function_drift(expected, functions, definitions)
    column_drift = _column_drift(
        expected, await retry.run(ctx, sql.schema_columns(definitions), schema=schema), definitions
    )
    constraint_drift: tuple[ConstraintDrift, ...] = ()
    if definitions:
        constraint_drift = _constraint_drift(
            expected, await retry.run(ctx, sql.schema_constraints(), schema=schema)
        )
    labels = tuple(r["label"] for r in await retry.run(ctx, sql.state_labels(), schema=schema))
    states = tuple(s.value for s in JobState)
    enum_drift = EnumDrift("job_state", states, labels) if labels and labels != states else None
    missing, still_building, invalid, extra, mismatched = index_report
    skipped = (
        ()
        if definitions
        else ("index definitions", "function bodies", "column types and defaults", "constraints")
    )
    ok = not (
        missing_tables
        or missing
        or invalid
        or mismatched
        or missing_functions
        or mismatched_functions
        or column_drift
        or constraint_drift
        or enum_drift
    )
    return DriftReport(
        ok=ok,
        missing_tables=missing_tables,
        missing=missing,
        building=still_building,
        invalid=invalid,
        extra_indexes=extra,
        mismatched=mismatched,
        missing_functions=missing_functions,
        mismatched_functions=mismatched_functions,
        column_drift=column_drift,
        constraint_drift=constraint_drift,
        enum_drift=enum_drift,
        skipped=skipped,
    )


_INDEX_NAME = re.compile(r"INDEX\s+(?:CONCURRENTLY\s+)?(?:IF NOT EXISTS\s+)?\"?(\w+)\"?", re.I)


async def _building(ctx: Context) -> set[str]:
    """Names of the indexes an unfinished async migration is making."""
    rows = await retry.run(ctx, sql.unfinished_bam_commands(ctx.q))
    return {m.group(1) for r in rows if (m := _INDEX_NAME.search(str(r["command"])))}


def _index_drift(
    expected: _Expected, live: list[dict[str, Any]], building: set[str], definitions: bool
) -> tuple[
    tuple[IndexDrift, ...],
    tuple[IndexDrift, ...],
    tuple[IndexDrift, ...],
    tuple[ExtraIndex, ...],
    tuple[IndexDrift, ...],
]:
    by_name = {r["name"]: r for r in live}
    missing: list[IndexDrift] = []
    still_building: list[IndexDrift] = []
    invalid: list[IndexDrift] = []
    mismatched: list[IndexDrift] = []
    for name, (table, definition) in expected.indexes.items():
        shape = _IndexShape.of(definition)
        rebuild = f"DROP INDEX {expected.qualified(name)};\n{definition}"
        entry = IndexDrift(
            name=name,
            table=table,
            keys=shape.readable_keys(),
            predicate=shape.readable_predicate(),
            definition=definition,
            repair=definition,
            building=name in building,
        )
        found = by_name.get(name)
        if found is None:
            (still_building if name in building else missing).append(entry)
        elif not found["valid"]:
            invalid.append(replace(entry, repair=rebuild))
        elif definitions and found.get("definition"):
            actual_definition = _readable_index(str(found["definition"]))
            actual = _IndexShape.of(_without_schema(str(found["definition"]), expected.schema))
            differs = shape.differs_from(actual)
            if differs:
                mismatched.append(
                    replace(
                        entry,
                        repair=rebuild,
                        building=False,
                        actual_definition=actual_definition,
                        actual_keys=actual.readable_keys(),
                        actual_predicate=actual.readable_predicate(),
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


def _readable_index(definition: str) -> str:
    """pg_get_indexdef's text as one reads it: no ``USING btree``, no casts, one space."""
    text = re.sub(r"\s+USING btree\s+", " ", definition, flags=re.I)
    return re.sub(r"\s+", " ", _strip_casts(text)).strip()


def _function_drift(
    expected: _Expected, live: list[dict[str, Any]], definitions: bool
) -> tuple[tuple[FunctionDrift, ...], tuple[FunctionDrift, ...]]:
    bodies: dict[str, list[str]] = {}
    for row in live:
        bodies.setdefault(row["name"], []).append(str(row["body"] or ""))
    missing: list[FunctionDrift] = []
    mismatched: list[FunctionDrift] = []
    for name, (definition, body) in expected.functions.items():
        found = bodies.get(name)
        if not found:
            missing.append(FunctionDrift(name, definition))
            continue
        if not definitions:
            continue
        schema = expected.schema
        accepted = {_body_hash(body, schema), *PGBOSS_FUNCTION_BODIES.get(name, ())}
        changed = [b for b in found if _body_hash(b, schema) not in accepted]
        if changed:
            actual = re.sub(r"\s+", " ", changed[0]).strip()
            mismatched.append(FunctionDrift(name, definition, actual_body=actual))
    return tuple(missing), tuple(mismatched)


def _column_drift(
    expected: _Expected, live: list[dict[str, Any]], definitions: bool
) -> tuple[ColumnDrift, ...]:
    by_table: dict[str, dict[str, dict[str, Any]]] = {}
    for row in live:
        by_table.setdefault(row["table"], {})[row["column"]] = row
    drift = []
    for table in expected.tables.values():
        columns = by_table.get(table.name)
        if not columns:
            continue  # an absent table is reported as such
        ref = expected.qualified(table.name)
        names = [c.name for c in table.columns]
        missing = tuple(n for n in names if n not in columns)
        unexpected = tuple(sorted(n for n in columns if n not in names))
        repairs = [
            f"ALTER TABLE {ref} ADD COLUMN {_column_clause(c, expected.schema)}"
            for c in table.columns
            if c.name in missing
        ]
        repairs += [f"ALTER TABLE {ref} DROP COLUMN {quote(n)}" for n in unexpected]
        defaults: list[ColumnMismatch] = []
        kinds: list[ColumnMismatch] = []
        nullability: list[ColumnMismatch] = []
        if definitions and table.name in FIXED_TABLES:
            for column in table.columns:
                live_column = columns.get(column.name)
                if live_column is None:
                    continue
                alter = f"ALTER TABLE {ref} ALTER COLUMN {quote(column.name)}"
                if _normal_default(column.default) != _normal_default(live_column["default"]):
                    defaults.append(
                        ColumnMismatch(column.name, column.default, live_column["default"])
                    )
                    repairs.append(
                        f"{alter} SET DEFAULT {column.default}"
                        if column.default is not None
                        else f"{alter} DROP DEFAULT"
                    )
                want = _CANONICAL_TYPES.get(column.kind, column.kind)
                want = _normal_type(want.replace("{S}.", ""), expected.schema)
                have = _normal_type(str(live_column["type"]), expected.schema)
                if want != have:
                    kinds.append(ColumnMismatch(column.name, want, have))
                    kind = column.kind.replace("{S}", quote(expected.schema))
                    repairs.append(f"{alter} TYPE {kind} USING {quote(column.name)}::{kind}")
                if column.not_null != bool(live_column["not_null"]):
                    nullability.append(
                        ColumnMismatch(column.name, column.not_null, bool(live_column["not_null"]))
                    )
                    repairs.append(f"{alter} {'SET' if column.not_null else 'DROP'} NOT NULL")
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


def _column_clause(column: _Column, schema: str) -> str:
    clause = f"{quote(column.name)} {column.kind.replace('{S}', quote(schema))}"
    if column.default is not None:
        clause += f" DEFAULT {column.default}"
    return clause + (" NOT NULL" if column.not_null else "")


def _constraint_drift(
    expected: _Expected, live: list[dict[str, Any]]
) -> tuple[ConstraintDrift, ...]:
    by_table: dict[str, list[dict[str, Any]]] = {}
    for row in live:
        by_table.setdefault(row["table"], []).append(row)
    drift = []
    for name in FIXED_TABLES:
        table = expected.tables.get(name)
        rows = by_table.get(name)
        if table is None or not rows:
            continue
        ref = expected.qualified(name)

        def normal(clause: str) -> str:
            return _normal(_without_schema(clause, expected.schema))

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

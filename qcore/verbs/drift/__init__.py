"""Schema drift detection: what a schema should hold against what the catalog says it holds.

What it should hold is its v46 install, read from the same catalog declarations the
install renders (:func:`qcore.sql.drift.expected`). The two are compared as data, into a
typed report whose every entry carries the statement that repairs it.

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

import re

from qcore import retry
from qcore.context import Context
from qcore.job import JobState
from qcore.sql import drift as sql
from qcore.verbs.drift.compare import (
    FIXED_TABLES,
    PGBOSS_FUNCTION_BODIES,
    column_drift,
    constraint_drift,
    function_drift,
    index_drift,
)
from qcore.verbs.drift.report import (
    ColumnDrift,
    ColumnMismatch,
    ConstraintDrift,
    DriftReport,
    EnumDrift,
    ExtraIndex,
    FunctionDrift,
    IndexDrift,
    TableDrift,
)

__all__ = [
    "FIXED_TABLES",
    "PGBOSS_FUNCTION_BODIES",
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
    expected = sql.expected(ctx.backend, schema, partitions)
    missing_tables = tuple(
        TableDrift(t.name, t.definition)
        for t in expected.tables.values()
        if t.name not in tables_live
    )
    building = await _building(ctx) if "bam" in tables_live else set()
    index_report = index_drift(
        expected,
        await retry.run(ctx, sql.schema_indexes(definitions), schema=schema),
        building,
        definitions,
    )
    functions = await retry.run(ctx, sql.schema_functions(), schema=schema)
    missing_functions, mismatched_functions = function_drift(expected, functions, definitions)
    columns = column_drift(
        expected, await retry.run(ctx, sql.schema_columns(definitions), schema=schema), definitions
    )
    constraints: tuple[ConstraintDrift, ...] = ()
    if definitions:
        constraints = constraint_drift(
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
        or columns
        or constraints
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
        column_drift=columns,
        constraint_drift=constraints,
        enum_drift=enum_drift,
        skipped=skipped,
    )


_INDEX_NAME = re.compile(r"INDEX\s+(?:CONCURRENTLY\s+)?(?:IF NOT EXISTS\s+)?\"?(\w+)\"?", re.I)


async def _building(ctx: Context) -> set[str]:
    """Names of the indexes an unfinished async migration is making."""
    rows = await retry.run(ctx, sql.unfinished_bam_commands(ctx.q))
    return {m.group(1) for r in rows if (m := _INDEX_NAME.search(str(r["command"])))}

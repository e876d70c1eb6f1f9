"""The drift report: what :func:`~qcore.verbs.drift.detect_schema_drift` found.

It is made of typed entries that each carry the statement that repairs it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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
]


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
    where one is there.
    """

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
    """A standalone index on a managed table that the install does not make.

    It is a warning only: a stale index, or one you added.
    """

    name: str
    table: str


@dataclass(frozen=True)
class FunctionDrift:
    """A managed function that is absent or whose body was changed.

    ``definition`` recreates it.
    """

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
    """A managed table's column differences and the statements that undo them.

    An unexpected column's ``DROP COLUMN`` is among them: look before you run it, it may
    be yours.
    """

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
    """``job_state`` labels changed (set or order).

    No statement repairs it safely on a live schema: restore it from a backup.
    """

    name: str
    expected_values: tuple[str, ...]
    actual_values: tuple[str, ...]


@dataclass(frozen=True)
class DriftReport:
    """What :func:`detect_schema_drift` found.

    ``ok`` when nothing differs; ``extra_indexes`` are a warning only, and ``building``
    indexes (an async migration still making them) are not drift yet. ``skipped`` names
    the checks this backend's catalog cannot serve.
    """

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

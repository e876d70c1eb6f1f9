"""Schema drift detection, under its documented old path.

The module is :mod:`qcore.verbs.drift` now, and this one re-exports it.
"""

from qcore.verbs.drift import (
    ColumnDrift,
    ColumnMismatch,
    ConstraintDrift,
    DriftReport,
    EnumDrift,
    ExtraIndex,
    FunctionDrift,
    IndexDrift,
    TableDrift,
    detect_schema_drift,
)

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

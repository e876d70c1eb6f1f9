"""``qcore doctor``: the schema drift report (see ``Boss.detect_schema_drift``).

Readable, with the statement that repairs each entry beneath it, or as JSON with
``--json``.

It reads the catalog and changes nothing. Exit status 0 when nothing drifted (extra
indexes are a warning only), 1 on drift or when the database cannot be read, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from qcore.cli.connection import Target, add_database_arguments, open_context, run_command
from qcore.cli.table import print_json
from qcore.verbs.drift import DriftReport, IndexDrift, detect_schema_drift

__all__ = ["add_parser", "format_report", "run"]


def add_parser(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the schema against what qcore installs (drift), and print the repairs",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_database_arguments(doctor)
    doctor.add_argument("--json", action="store_true", help="the report as JSON")
    doctor.set_defaults(run=run)


def _indented(text: str) -> list[str]:
    return ["      " + line for line in text.splitlines()]


def _index_lines(title: str, entries: tuple[IndexDrift, ...]) -> list[str]:
    lines = []
    for entry in entries:
        lines.append(f"  {title}: index {entry.name} on {entry.table}")
        if entry.differs:
            lines.append(f"    differs in: {', '.join(entry.differs)}")
        if entry.actual_definition:
            lines += ["    found:", *_indented(entry.actual_definition)]
        lines += ["    repair:", *_indented(entry.repair)]
    return lines


def format_report(report: DriftReport, target: Target) -> str:
    """The report as ``qcore doctor`` prints it."""
    lines = [f"schema {target.schema!r} ({target.backend})"]
    for table in report.missing_tables:
        lines += [f"  missing table: {table.table}", "    repair:", *_indented(table.definition)]
    lines += _index_lines("missing", report.missing)
    lines += _index_lines("invalid", report.invalid)
    lines += _index_lines("mismatched", report.mismatched)
    for entry in report.building:
        lines.append(f"  building: index {entry.name} on {entry.table} (an async migration)")
    for function in report.missing_functions:
        lines += [f"  missing function: {function.name}", "    repair:"]
        lines += _indented(function.definition)
    for function in report.mismatched_functions:
        lines += [f"  changed function: {function.name}", "    repair:"]
        lines += _indented(function.definition)
    for columns in report.column_drift:
        lines.append(f"  columns of {columns.table}:")
        for name in columns.missing_columns:
            lines.append(f"    missing: {name}")
        for name in columns.unexpected_columns:
            lines.append(f"    unexpected: {name} (yours? look before dropping it)")
        for kind, found in (
            ("default", columns.default_mismatches),
            ("type", columns.type_mismatches),
            ("not null", columns.nullability_mismatches),
        ):
            for m in found:
                lines.append(f"    {kind} of {m.column}: expected {m.expected}, found {m.actual}")
        lines += ["    repair:", *(f"      {r}" for r in columns.repairs)]
    for constraints in report.constraint_drift:
        lines.append(f"  constraints of {constraints.table}:")
        lines += [f"    missing: {c}" for c in constraints.missing_constraints]
        lines += [f"    unexpected: {c}" for c in constraints.unexpected_constraints]
        lines += ["    repair:", *(f"      {r}" for r in constraints.repairs)]
    if report.enum_drift is not None:
        drift = report.enum_drift
        lines += [
            f"  enum {drift.name}: expected {', '.join(drift.expected_values)};"
            f" found {', '.join(drift.actual_values)}",
            "    no safe repair on a live schema: restore the type from a backup",
        ]
    for extra in report.extra_indexes:
        lines.append(f"  warning: extra index {extra.name} on {extra.table} (harmless)")
    for skipped in report.skipped:
        lines.append(f"  not checked on this backend: {skipped}")
    lines.append("ok: no drift" if report.ok else "drift found")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    async def check(target: Target) -> int:
        async with open_context(target) as ctx:
            report = await detect_schema_drift(ctx)
        if args.json:
            print_json(report.to_dict())
        else:
            print(format_report(report, target))
        return 0 if report.ok else 1

    return run_command(args, check)

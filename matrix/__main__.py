"""``python -m matrix``: run the compatibility matrix, or regenerate its table.

python -m matrix run [--backends a,b|all] [--dsn DSN] [--tests PATH] [--pytest-args ...]
python -m matrix table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matrix.runner import RunOptions, default_paths, resolve_backends, run_matrix
from matrix.table import write_table
from qcore.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    tests, results, table = default_paths()
    parser = argparse.ArgumentParser(
        prog="python -m matrix", description="The qcore compatibility matrix."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run the suite once per backend, write matrix/results/*.json and the table",
        description="Run the test suite once per backend (a pytest process each, with the"
        " best provisioner available here), write each backend's results and regenerate the"
        " compatibility table. Exits 1 if any backend has a failure; a backend that is not"
        " available here is reported, not failed.",
    )
    run.add_argument(
        "--backends",
        action="append",
        metavar="NAMES",
        help="comma-separated backend names, or 'all' (default: all installed)",
    )
    run.add_argument(
        "--dsn",
        help="an engine you run, for a single backend (QCORE_TEST_DSN_<BACKEND> works too)",
    )
    run.add_argument(
        "--tests",
        type=Path,
        default=tests,
        required=tests is None,
        help="the test suite to run" + (f" (default: {tests})" if tests else ""),
    )
    run.add_argument("--results-dir", type=Path, default=results, help=f"default: {results}")
    run.add_argument("--output", type=Path, default=table, help=f"the table; default: {table}")
    run.add_argument("--no-table", action="store_true", help="do not regenerate the table")
    run.add_argument(
        "--pytest-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="everything after this goes to each pytest run (e.g. --pytest-args -x -k smoke)",
    )
    table_cmd = commands.add_parser(
        "table", help="regenerate the table from the existing results files"
    )
    table_cmd.add_argument("--results-dir", type=Path, default=results, help=f"default: {results}")
    table_cmd.add_argument("--output", type=Path, default=table, help=f"default: {table}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "table":
        path = write_table(args.results_dir, args.output)
        print(f"wrote {path}")
        return 0
    try:
        names = resolve_backends(args.backends or ["all"])
    except ConfigError as exc:
        parser.error(str(exc))
    if args.dsn and len(names) != 1:
        parser.error(f"--dsn is for one engine: give a single backend (got {', '.join(names)})")
    if not args.tests.exists():
        parser.error(f"no test suite at {args.tests}")
    options = RunOptions(
        backends=names,
        tests=args.tests,
        results_dir=args.results_dir,
        table=None if args.no_table else args.output,
        dsn=args.dsn,
        pytest_args=list(args.pytest_args),
        cwd=_cwd_for(args.tests),
    )
    try:
        return run_matrix(options)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _cwd_for(tests: Path) -> Path:
    """Run pytest from the project that holds the suite (its pyproject configures it)."""
    here = tests.resolve()
    for parent in [here, *here.parents]:
        if (parent / "pyproject.toml").is_file() or (parent / "pytest.ini").is_file():
            return parent
    return Path.cwd()


if __name__ == "__main__":
    sys.exit(main())

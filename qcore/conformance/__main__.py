"""``python -m qcore.conformance``: run the conformance suite per backend and write the
compatibility table, or regenerate the table from results already written.

python -m qcore.conformance run [--backends a,b|all] [--dsn DSN] [--tests PATH ...]
                                [--results-dir DIR] [--output FILE] [--backend-tests-only]
                                [--pytest-args ...]
python -m qcore.conformance record BACKEND REPORT [--exit-status N] [--dsn DSN]
                                   [--results-dir DIR] [--output FILE]
python -m qcore.conformance table [--results-dir DIR] [--output FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qcore.conformance.runner import (
    BackendOutcome,
    RunOptions,
    default_paths,
    one_line,
    record_report,
    resolve_backends,
    run_matrix,
)
from qcore.conformance.table import write_table
from qcore.errors import ConfigError


def parser(
    prog: str, defaults: tuple[list[Path], Path, Path] | None = None
) -> argparse.ArgumentParser:
    """The command line, with (tests, results directory, table) defaults."""
    tests, results, table = defaults or default_paths()
    shown = " ".join(str(t) for t in tests)
    command = argparse.ArgumentParser(
        prog=prog, description="qcore's conformance suite, once per backend."
    )
    commands = command.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run the suite once per backend, write each backend's results and the table",
        description="Run the suite once per backend (a pytest process each, with the best"
        " provisioner available here), write each backend's results and regenerate the"
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
        action="append",
        help=f"a test path to run (repeatable; default: {shown})",
    )
    run.add_argument("--results-dir", type=Path, default=results, help=f"default: {results}")
    run.add_argument("--output", type=Path, default=table, help=f"the table; default: {table}")
    run.add_argument(
        "--backend-tests-only",
        action="store_true",
        help="leave the backend-independent tests out of the postgres run too"
        " (when a plain pytest run has just run them)",
    )
    run.add_argument("--no-table", action="store_true", help="do not regenerate the table")
    run.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run N backends at once, each its own pytest process and database (default: 1)",
    )
    run.add_argument(
        "--pytest-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="everything after this goes to each pytest run (e.g. --pytest-args -x -k smoke)",
    )
    run.set_defaults(default_tests=tests)
    record = commands.add_parser(
        "record",
        help="write a backend's results from the report of a plain pytest run",
        description="Write BACKEND's results from REPORT, the file a pytest run given"
        " --matrix-report wrote (when a plain run has just run that backend's tests, the"
        " matrix need not run them again), and regenerate the table. Exits 1 if the"
        " report shows a failure.",
    )
    record.add_argument("backend")
    record.add_argument("report", type=Path)
    record.add_argument("--exit-status", type=int, default=0, help="the run's exit status")
    record.add_argument("--dsn", help="the engine the run used, if not the default")
    record.add_argument("--results-dir", type=Path, default=results, help=f"default: {results}")
    record.add_argument("--output", type=Path, default=table, help=f"default: {table}")
    table_cmd = commands.add_parser(
        "table", help="regenerate the table from the existing results files"
    )
    table_cmd.add_argument("--results-dir", type=Path, default=results, help=f"default: {results}")
    table_cmd.add_argument("--output", type=Path, default=table, help=f"default: {table}")
    return command


def main(
    argv: list[str] | None = None,
    *,
    prog: str = "python -m qcore.conformance",
    defaults: tuple[list[Path], Path, Path] | None = None,
) -> int:
    command = parser(prog, defaults)
    args = command.parse_args(argv)
    if args.command == "table":
        path = write_table(args.results_dir, args.output)
        print(f"wrote {path}")
        return 0
    if args.command == "record":
        summary = record_report(
            args.backend,
            args.report,
            args.exit_status,
            results_dir=args.results_dir,
            dsn=args.dsn,
        )
        outcome = BackendOutcome(args.backend, summary, args.exit_status, 0.0)
        print(f"{args.backend}: {one_line(outcome)}")
        print(f"wrote {write_table(args.results_dir, args.output)}")
        return 1 if outcome.failed else 0
    try:
        names = resolve_backends(args.backends or ["all"])
    except ConfigError as exc:
        command.error(str(exc))
    if args.jobs < 1:
        command.error(f"--jobs must be 1 or more (got {args.jobs})")
    if args.dsn and len(names) != 1:
        command.error(f"--dsn is for one engine: give a single backend (got {', '.join(names)})")
    tests: list[Path] = args.tests or args.default_tests
    for path in tests:
        if not path.exists():
            command.error(f"no test suite at {path}")
    options = RunOptions(
        backends=names,
        tests=tests,
        results_dir=args.results_dir,
        table=None if args.no_table else args.output,
        dsn=args.dsn,
        pytest_args=list(args.pytest_args),
        backend_tests_only=args.backend_tests_only,
        jobs=args.jobs,
        cwd=_cwd_for(tests[0]),
    )
    try:
        return run_matrix(options)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _cwd_for(tests: Path) -> Path:
    """Run pytest from the project that holds the tests (its configuration applies);
    the current directory for a suite that lives in an installed package."""
    here = tests.resolve()
    for parent in [here, *here.parents]:
        if (parent / "pyproject.toml").is_file() or (parent / "pytest.ini").is_file():
            return parent
        if parent.name == "site-packages":
            break
    return Path.cwd()


if __name__ == "__main__":
    sys.exit(main())

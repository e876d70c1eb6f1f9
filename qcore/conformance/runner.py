"""Run the suite once per backend and write the results and the table.

Each backend gets its own pytest process (``--backend NAME --matrix-report
...``) with the best provisioner available here; its output is streamed,
prefixed with the backend's name, so a long run shows where it is; with
``jobs`` above 1 that many backends run at once, their output interleaved a whole line
at a time. The backend-independent tests (those using none of the backend fixtures) run
only in the ``postgres`` run, as in the everyday ``pytest``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from qcore import backends as registry
from qcore.conformance import SUITE
from qcore.conformance.provisioners import best_provisioner
from qcore.conformance.report import REPORT_VARIABLE
from qcore.conformance.results import summarise, write_results
from qcore.conformance.table import write_table
from qcore.errors import ConfigError

__all__ = [
    "BackendOutcome",
    "RunOptions",
    "default_paths",
    "resolve_backends",
    "run_matrix",
]

INDEPENDENT_RUN = "postgres"


def default_paths() -> tuple[list[Path], Path, Path]:
    """(tests, results directory, table) defaults for a run outside qcore's checkout:
    the conformance suite, ``./conformance-results/`` and ``./compatibility.md``."""
    cwd = Path.cwd()
    return [SUITE], cwd / "conformance-results", cwd / "compatibility.md"


def resolve_backends(requested: Sequence[str]) -> list[str]:
    """Names from ``a,b`` lists and ``all``; ``ConfigError`` naming the installed ones for
    an unknown name."""
    installed = registry.names()
    names: list[str] = []
    for value in requested or ["all"]:
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            for name in installed if part == "all" else [part]:
                if name not in installed:
                    raise ConfigError(
                        f"unknown backend {name!r}; installed backends: {', '.join(installed)}"
                        f" (or 'all'); a backend registers in the {registry.ENTRY_POINT_GROUP!r}"
                        " entry-point group"
                    )
                if name not in names:
                    names.append(name)
    return names


@dataclass
class RunOptions:
    backends: list[str]
    tests: list[Path]
    results_dir: Path
    table: Path | None
    dsn: str | None = None
    pytest_args: list[str] = field(default_factory=list)
    cwd: Path | None = None
    #: the independent tests are left out of the ``postgres`` run too (they ran elsewhere)
    backend_tests_only: bool = False
    #: how many backends run at once (each its own pytest process and database)
    jobs: int = 1
    #: the files under ``tests`` holding a test run per backend (found once by
    #: :func:`find_backend_test_files`): a run that leaves the backend-independent tests
    #: out imports only these instead of every test module, in each of its workers
    backend_test_files: list[Path] = field(default_factory=list)
    out: TextIO = sys.stdout
    #: serialises writes to ``out`` between concurrent backends
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class BackendOutcome:
    backend: str
    summary: dict[str, Any]
    exit_status: int
    seconds: float

    @property
    def failed(self) -> bool:
        """Whether the run failed: a test failed or errored, the run broke, or tests were
        left unrun (a run that stopped half-way proves nothing of them)."""
        totals = self.summary.get("totals", {})
        return bool(
            self.summary.get("error")
            or totals.get("failed")
            or totals.get("errors")
            or totals.get("not_run")
        )

    @property
    def available(self) -> bool:
        return self.summary.get("available") is not False


def _stream(proc: subprocess.Popen[bytes], prefix: str, options: RunOptions) -> None:
    """Copy the child's output with ``prefix`` at the start of each line: as it comes
    when one backend runs (pytest -q prints a dot per test), a whole line at a time
    when several do."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    whole_lines = options.jobs > 1
    pending = ""
    at_line_start = True
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        pending += chunk.decode(errors="replace")
        cut = pending.rfind("\n") + 1 if whole_lines else len(pending)
        text, pending = pending[:cut], pending[cut:]
        pieces = []
        for char in text:
            if at_line_start and char != "\n":
                pieces.append(prefix)
                at_line_start = False
            pieces.append(char)
            if char == "\n":
                at_line_start = True
        _write(options, "".join(pieces))
    if pending:
        _write(options, prefix + pending + "\n")
    elif not at_line_start:
        _write(options, "\n")


def _write(options: RunOptions, text: str) -> None:
    if text:
        with options.lock:
            options.out.write(text)
            options.out.flush()


def _backend_tests_only(options: RunOptions, name: str) -> bool:
    """Whether backend ``name``'s run leaves the backend-independent tests out."""
    return name != INDEPENDENT_RUN or options.backend_tests_only


def _test_paths(options: RunOptions, name: str) -> list[Path]:
    if _backend_tests_only(options, name) and options.backend_test_files:
        return options.backend_test_files
    return options.tests


def _pytest(tests: list[Path], name: str, *flags: str) -> list[str]:
    """The pytest command of the kit's plugin on ``tests`` for backend ``name``, quiet
    and leaving no cache, with ``flags``."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "qcore.conformance.plugin",
        *map(str, tests),
        "--backend",
        name,
        "-q",
        "-p",
        "no:cacheprovider",
        *flags,
    ]


def _pytest_command(options: RunOptions, name: str, report: Path) -> list[str]:
    command = _pytest(_test_paths(options, name), name, "--matrix-report", str(report))
    if _backend_tests_only(options, name):
        command.append("--backend-tests-only")
    if options.dsn:
        command += ["--dsn", options.dsn]
    return command + list(options.pytest_args)


def _fallback(name: str, dsn: str | None) -> dict[str, Any]:
    """What a backend's results say of it when its run wrote no report of its own."""
    backend = registry.get(name)
    provisioner = best_provisioner(backend, dsn)
    return {
        "description": backend.description,
        "provisioner": provisioner.kind,
        "provisioner_detail": provisioner.describe(),
        "emulated": provisioner.emulated,
        "features": backend.features(),
    }


def record_report(
    name: str, report_path: Path, status: int, *, results_dir: Path, dsn: str | None = None
) -> dict[str, Any]:
    """Write backend ``name``'s results from the report a pytest run with
    ``--matrix-report`` left (the matrix's own run, or a plain one that ran the same
    tests, so that the matrix need not run them again); the summary."""
    report: dict[str, Any] | None = None
    error: str | None = None
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        error = f"pytest exited with status {status} and wrote no report"
    except ValueError as exc:
        error = f"unreadable report: {exc}"
    summary = summarise(
        report, name, exit_status=status, error=error, fallback=_fallback(name, dsn)
    )
    write_results(summary, results_dir)
    return summary


def run_backend(options: RunOptions, name: str, index: int, count: int) -> BackendOutcome:
    provisioner = best_provisioner(registry.get(name), options.dsn)
    _write(options, f"\n==> [{index}/{count}] {name}: {provisioner.describe()}\n")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qcore-matrix-") as tmp:
        report_path = Path(tmp) / f"{name}.report.json"
        command = _pytest_command(options, name, report_path)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            command,
            cwd=options.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            _stream(proc, f"[{name}] ", options)
            status = proc.wait()
        except BaseException:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()
            raise
        summary = record_report(
            name, report_path, status, results_dir=options.results_dir, dsn=options.dsn
        )
    seconds = time.monotonic() - started
    outcome = BackendOutcome(name, summary, status, seconds)
    _write(options, f"<== {name}: {one_line(outcome)} ({seconds:.1f}s)\n")
    return outcome


def one_line(outcome: BackendOutcome) -> str:
    summary = outcome.summary
    if summary.get("error"):
        return f"RUN FAILED: {summary['error']}"
    if not outcome.available:
        return f"NOT AVAILABLE HERE: {summary.get('reason')}"
    totals = summary["totals"]
    text = (
        f"{totals['passed']} passed, {totals['failed']} failed, {totals['errors']} errors,"
        f" {totals['skipped']} skipped ({totals['unsupported']} capability off)"
        f"{_not_run(totals)} on {summary.get('provisioner')}"
    )
    return ("FAILED: " if outcome.failed else "ok: ") + text


def _not_run(totals: dict[str, Any]) -> str:
    return f", {totals['not_run']} not run" if totals.get("not_run") else ""


def find_backend_test_files(options: RunOptions, backend: str) -> list[Path]:
    """The files under ``options.tests`` holding a test run per backend, found by one
    collection (the same files for every backend: the backend is a parameter of such a
    test, never a reason to collect it); empty when that collection fails, so each
    backend's run collects everything and reports the failure itself."""
    with tempfile.TemporaryDirectory(prefix="qcore-matrix-") as tmp:
        listing = Path(tmp) / "files.txt"
        command = _pytest(
            options.tests,
            backend,
            "--backend-tests-only",
            "--collect-only",
            "--list-test-files",
            str(listing),
            *options.pytest_args,
        )
        env = {k: v for k, v in os.environ.items() if k != REPORT_VARIABLE}
        done = subprocess.run(
            command, cwd=options.cwd, stdin=subprocess.DEVNULL, capture_output=True, env=env
        )
        if done.returncode != 0 or not listing.exists():
            return []
        return [Path(line) for line in listing.read_text(encoding="utf-8").splitlines()]


def run_matrix(options: RunOptions) -> int:
    """Run every backend (``jobs`` at a time), write its results and the table; 1 if any
    backend failed."""
    out = options.out
    count = len(options.backends)
    narrowed = [name for name in options.backends if _backend_tests_only(options, name)]
    if narrowed and not options.backend_test_files:
        options.backend_test_files = find_backend_test_files(options, narrowed[0])
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        running = [
            pool.submit(run_backend, options, name, index, count)
            for index, name in enumerate(options.backends, 1)
        ]
        outcomes = [future.result() for future in running]
    if options.table is not None:
        path = write_table(options.results_dir, options.table)
        out.write(f"\nwrote {path}\n")
    out.write("\nmatrix summary:\n")
    width = max(len(o.backend) for o in outcomes) if outcomes else 0
    for outcome in outcomes:
        out.write(f"  {outcome.backend:<{width}}  {one_line(outcome)}\n")
    missing = [o.backend for o in outcomes if not o.available]
    if missing:
        out.write(f"  not available here (not a failure, but not tested): {', '.join(missing)}\n")
    out.flush()
    return 1 if any(o.failed for o in outcomes) else 0

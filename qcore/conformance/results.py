"""The results of one backend's matrix run: summarised from the plugin's report,
stored as ``<results directory>/<backend>.json``, read back by the table generator.

A results file::

    {
      "format": "qcore-matrix-results/2",
      "backend": "cockroachdb",
      "description": "CockroachDB 24.1 or newer",
      "provisioner": "emulation",          # container | local | pglite | emulation | external
      "provisioner_detail": "emulated on local PostgreSQL (...)",
      "emulated": true,
      "engine_version": "PostgreSQL 15.20 ...",   # the server's version(); under an
                                           # emulation, of the PostgreSQL beneath it
      "engine_markers": {"citus": "14.0-1"},  # what else the server said (or null)
      "available": true,                   # false: the engine cannot run here ("reason")
      "reason": null,
      "error": null,                       # the run itself broke (pytest crashed, no report)
      "date": "2026-05-20",
      "finished_at": "2026-05-20T10:00:00+00:00",
      "pytest_exit_status": 0,
      "totals": {"passed": 5, "failed": 0, "errors": 0, "skipped": 3, "unsupported": 3,
                 "not_available": 0, "not_run": 0},
      "groups": {"locking": {...same counters...}, ...},   # tests run per backend
      "independent": {"adapters": {...}, ...},  # tests using no backend fixture, by group
                                                # (only in the run that included them)
      "failures": [{"nodeid": "...", "feature": "...", "outcome": "failed", "message": "..."}],
      "unsupported": {"listen_notify": 1, ...}   # capability -> tests skipped for it
    }

``skipped`` counts every skip; ``unsupported`` (the backend lacks a capability
the test requires) and ``not_available`` (the engine cannot run here) are the
skips of those two kinds. ``not_run`` counts the tests that were collected but
never ran (the session stopped before them: ``-x``, an interrupt, a crash).

Format 1 files, written before ``not_run`` and ``engine_markers`` existed, are
still read (their counters get ``not_run: 0``). A format 1 report counted a test
that never ran as passed; that could only happen in a run that did not exit 0,
so the table flags such files.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from qcore._version import __version__

__all__ = [
    "COUNTERS",
    "READABLE_FORMATS",
    "RESULTS_FORMAT",
    "empty_counts",
    "load_results",
    "not_run_summary",
    "summarise",
    "write_results",
]

RESULTS_FORMAT = "qcore-matrix-results/2"
#: the formats :func:`load_results` reads (1: before ``not_run`` was counted)
READABLE_FORMATS = ("qcore-matrix-results/1", RESULTS_FORMAT)
COUNTERS = ("passed", "failed", "errors", "skipped", "unsupported", "not_available", "not_run")


def empty_counts() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


def _count(counts: dict[str, int], test: Mapping[str, Any]) -> None:
    outcome = test.get("outcome")
    if outcome == "passed":
        counts["passed"] += 1
    elif outcome == "failed":
        counts["failed"] += 1
    elif outcome == "error":
        counts["errors"] += 1
    elif outcome == "skipped":
        counts["skipped"] += 1
        if test.get("skip_kind") == "unsupported":
            counts["unsupported"] += 1
        elif test.get("skip_kind") == "not_available":
            counts["not_available"] += 1
    else:  # "not_run", or an outcome this reader does not know: no evidence it passed
        counts["not_run"] += 1


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def summarise(
    report: Mapping[str, Any] | None,
    backend: str,
    *,
    exit_status: int | None = None,
    error: str | None = None,
    fallback: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One backend's results from the plugin's ``--matrix-report`` (``None`` if the run
    wrote none). Tests of other backends are left out; tests that do not run per
    backend (``backend: null``) are counted apart, under ``independent``.

    The report's own exit status wins over a zero ``exit_status``: ``record`` is told 0
    by default, and an interrupted run must not be recorded as a finished one."""
    info: Mapping[str, Any] = {}
    tests: list[Mapping[str, Any]] = []
    if report is not None:
        info = report.get("backends", {}).get(backend, {})
        tests = [t for t in report.get("tests", []) if t.get("backend") in (backend, None)]
        reported = report.get("pytest_exit_status")
        if exit_status in (None, 0) and reported is not None:
            exit_status = int(reported)
    info = {**(fallback or {}), **{k: v for k, v in info.items() if v is not None}}
    if report is None and error is None:
        error = "the pytest run wrote no report"
    totals = empty_counts()
    groups: dict[str, dict[str, int]] = {}
    independent: dict[str, dict[str, int]] = {}
    failures: list[dict[str, Any]] = []
    unsupported: dict[str, int] = {}
    for test in tests:
        group = str(test.get("feature") or "other")
        _count(totals, test)
        by_group = groups if test.get("backend") is not None else independent
        _count(by_group.setdefault(group, empty_counts()), test)
        if test.get("outcome") in ("failed", "error"):
            failures.append(
                {
                    "nodeid": test.get("nodeid"),
                    "feature": group,
                    "outcome": test.get("outcome"),
                    "message": test.get("reason"),
                }
            )
        if test.get("skip_kind") == "unsupported":
            for capability in test.get("requires") or []:
                if info.get("features", {}).get(capability) is False:
                    unsupported[capability] = unsupported.get(capability, 0) + 1
    if error is None and exit_status not in (None, 0, 1, 5):
        error = f"pytest exited with status {exit_status}"
    finished = _now()
    available = info.get("available")
    return {
        "format": RESULTS_FORMAT,
        "backend": backend,
        "qcore_version": __version__,
        "description": info.get("description", ""),
        "provisioner": info.get("provisioner"),
        "provisioner_detail": info.get("provisioner_detail"),
        "emulated": bool(info.get("emulated", info.get("provisioner") == "emulation")),
        "engine": info.get("engine"),
        "engine_version": info.get("engine_version"),
        "engine_markers": info.get("engine_markers"),
        "available": True if available is None else bool(available),
        "reason": info.get("reason"),
        "error": error,
        "date": finished.date().isoformat(),
        "finished_at": finished.isoformat(),
        "pytest_exit_status": exit_status,
        "totals": totals,
        "groups": dict(sorted(groups.items())),
        "independent": dict(sorted(independent.items())),
        "failures": failures,
        "unsupported": dict(sorted(unsupported.items())),
    }


def not_run_summary(backend: str, reason: str, **info: Any) -> dict[str, Any]:
    """Results for a backend that could not run here at all."""
    summary = summarise({"backends": {}, "tests": []}, backend, exit_status=0, fallback=info)
    summary["available"] = False
    summary["reason"] = reason
    return summary


def write_results(summary: Mapping[str, Any], directory: Path) -> Path:
    """Write ``<directory>/<backend>.json`` (atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{summary['backend']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_results(
    directory: Path, *, warn: Iterable[Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Every results file in ``directory``, by backend name (files that are not
    results, or unreadable, are skipped; their names go to ``warn`` if it is a list)."""
    found: dict[str, dict[str, Any]] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            if isinstance(warn, list):
                warn.append(f"{path}: {exc}")
            continue
        if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
            if isinstance(warn, list):
                warn.append(f"{path}: not a qcore matrix results file")
            continue
        found[str(data.get("backend") or path.stem)] = _with_every_counter(data)
    return found


def _with_every_counter(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each counter present in its totals and groups (a format 1 file has
    no ``not_run``), so readers need not know which format they read."""
    for counts in [
        data.get("totals"),
        *(data.get("groups") or {}).values(),
        *(data.get("independent") or {}).values(),
    ]:
        if isinstance(counts, dict):
            for counter in COUNTERS:
                counts.setdefault(counter, 0)
    return data

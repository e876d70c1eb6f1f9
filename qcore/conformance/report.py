"""The conformance run's state and its report: the selected backends and their
provisioners, each collected test's record, and the ``--matrix-report`` JSON.

:class:`MatrixState` is kept in the pytest config's stash (:data:`STATE_KEY`,
:func:`state_of`) by :mod:`qcore.conformance.plugin`; :class:`Recorder` folds each
test's reports into its :class:`TestRecord`; :func:`merged` folds pytest-xdist workers'
reports into the controller's. The format of the file is :data:`REPORT_FORMAT`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from qcore import backends as registry
from qcore.backend import Backend
from qcore.conformance.provisioners import (
    LocalProvisioner,
    NotAvailable,
    Provisioner,
    ProvisionError,
    best_provisioner,
    dsn_from_env,
)
from qcore.conformance.schemas import REUSING_PROVISIONERS, SchemaPool
from qcore.errors import ConfigError

__all__ = [
    "DEFAULT_BACKEND",
    "NOT_RUN",
    "REPORT_FORMAT",
    "REPORT_VARIABLE",
    "SKIP_NOT_AVAILABLE",
    "SKIP_OTHER",
    "SKIP_UNSUPPORTED",
    "STATE_KEY",
    "MatrixState",
    "Recorder",
    "TestRecord",
    "merged",
    "state_of",
]

#: where a run writes its report when ``--matrix-report`` is not given (CI sets it around
#: the README's ``python -m pytest``, so the matrix records that run's backend from it)
REPORT_VARIABLE = "QCORE_MATRIX_REPORT"

#: the ``format`` field of a --matrix-report file
#: (2: a test with no passing call is ``not_run``; 1 counted it as passed)
REPORT_FORMAT = "qcore-matrix-report/2"
DEFAULT_BACKEND = "postgres"

SKIP_UNSUPPORTED = "unsupported"  # the backend lacks a capability the test requires
SKIP_NOT_AVAILABLE = "not_available"  # the backend's engine cannot run here
SKIP_OTHER = "other"

#: the outcome of a collected test until a report says otherwise: a session stopped
#: before it (``-x``, an interrupt, a crash) never ran it, and the matrix must not
#: count it as passed
NOT_RUN = "not_run"


@dataclasses.dataclass
class TestRecord:
    """One collected test's line in the report. It starts as ``not_run``: only a passing
    call (the test body) makes it ``passed``; a setup error makes it ``error``."""

    nodeid: str
    backend: str | None
    feature: str
    requires: list[str]
    outcome: str = NOT_RUN  # not_run | passed | failed | error | skipped
    skip_kind: str | None = None
    reason: str | None = None
    duration: float = 0.0


class MatrixState:
    """The selected backends, their provisioners (started on demand) and the results."""

    def __init__(
        self,
        backends: list[Backend],
        dsn: str | None,
        *,
        default: bool,
        fresh_schemas: bool = False,
    ) -> None:
        self.backends = {b.name: b for b in backends}
        self.dsn = dsn
        self.default = default  # no --backend given: postgres on the local PostgreSQL
        self.provisioners: dict[str, Provisioner] = {}
        self.versions: dict[str, str] = {}  # backend -> the server's version()
        self.markers: dict[str, dict[str, str]] = {}  # backend -> e.g. {"citus": "14.0-1"}
        self.unavailable: dict[str, str] = {}  # backend -> reason
        self.broken: dict[str, str] = {}  # backend -> why provisioning failed
        self.records: dict[str, TestRecord] = {}
        self.exit_status: int | None = None
        #: the reports of pytest-xdist workers, on the controller
        self.worker_reports: list[dict[str, Any]] = []
        self.fresh_schemas = fresh_schemas
        self.schema_pools: dict[str, SchemaPool] = {}

    @classmethod
    def from_config(cls, config: pytest.Config) -> MatrixState:
        requested: list[str] = []
        for value in config.getoption("qcore_backends") or []:
            requested.extend(part.strip() for part in str(value).split(",") if part.strip())
        dsn = config.getoption("qcore_dsn")
        fresh = bool(config.getoption("qcore_fresh_schemas"))
        installed = registry.names()
        if not requested:
            if dsn:
                raise pytest.UsageError("--dsn needs a --backend NAME saying which engine it is")
            return cls(
                [_get_backend(DEFAULT_BACKEND, installed)], None, default=True, fresh_schemas=fresh
            )
        names: list[str] = []
        for name in requested:
            for resolved in installed if name == "all" else [name]:
                if resolved not in names:
                    names.append(resolved)
        if dsn and len(names) != 1:
            raise pytest.UsageError(
                f"--dsn is for one engine: give a single --backend with it (got {', '.join(names)})"
            )
        backends = [_get_backend(n, installed) for n in names]
        return cls(backends, dsn, default=False, fresh_schemas=fresh)

    def backend(self, name: str) -> Backend:
        return self.backends[name]

    def provisioner_for(self, name: str) -> Provisioner:
        """The backend's provisioner, created (not started) on first use."""
        if name not in self.provisioners:
            backend = self.backends[name]
            if self.default and name == DEFAULT_BACKEND and not dsn_from_env(name):
                self.provisioners[name] = LocalProvisioner(backend)
            else:
                self.provisioners[name] = best_provisioner(backend, self.dsn)
        return self.provisioners[name]

    def start(self, name: str) -> Provisioner:
        """The backend's running provisioner; ``NotAvailable`` (remembered) if it cannot run."""
        if name in self.unavailable:
            raise NotAvailable(name, self.unavailable[name])
        if name in self.broken:
            raise ProvisionError(self.broken[name])
        provisioner = self.provisioner_for(name)
        if not provisioner.running:
            try:
                provisioner.start()
                self.versions[name] = provisioner.engine_version
                if provisioner.identity is not None:
                    self.markers[name] = dict(provisioner.identity.markers)
            except NotAvailable as exc:
                self.unavailable[name] = exc.reason
                raise NotAvailable(name, exc.reason) from exc
            except Exception as exc:
                self.broken[name] = f"{name}: provisioning failed: {exc}"
                provisioner.stop()
                raise
        return provisioner

    def schema_pool(self, provisioner: Provisioner) -> SchemaPool | None:
        """The pool of installed schemas of the provisioner's backend; None where each
        test installs its own (``--fresh-schemas``, or an engine other than PostgreSQL)."""
        if self.fresh_schemas or provisioner.kind not in REUSING_PROVISIONERS:
            return None
        return self.schema_pools.setdefault(provisioner.backend.name, SchemaPool())

    def stop_all(self) -> None:
        for provisioner in self.provisioners.values():
            local = getattr(provisioner, "local", provisioner)
            if isinstance(local, LocalProvisioner):
                local.detach_drop = True  # the session ends: nobody waits for its database
            try:
                provisioner.stop()
            except Exception as exc:  # pragma: no cover - best effort at exit
                print(f"qcore matrix: stopping {provisioner!r} failed: {exc}")

    # -- results ---------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        backends: dict[str, Any] = {}
        for name, backend in self.backends.items():
            provisioner = self.provisioner_for(name)
            tried = name in self.versions or name in self.unavailable or name in self.broken
            backends[name] = {
                "description": backend.description,
                "kind": backend.kind.value,
                "provisioner": provisioner.kind,
                "provisioner_detail": provisioner.describe(),
                "emulated": provisioner.emulated,
                "engine": provisioner.identity.describe() if provisioner.identity else None,
                "engine_version": self.versions.get(name),
                "engine_markers": self.markers.get(name),
                "started": name in self.versions,
                "available": (name not in self.unavailable) if tried else None,
                "reason": self.unavailable.get(name) or self.broken.get(name),
                "features": backend.features(),
            }
        return {
            "format": REPORT_FORMAT,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "pytest_exit_status": self.exit_status,
            "backends": backends,
            "tests": [dataclasses.asdict(r) for r in self.records.values()],
        }


def _get_backend(name: str, installed: list[str]) -> Backend:
    if name not in installed:
        raise pytest.UsageError(
            f"unknown backend {name!r} for --backend; installed backends:"
            f" {', '.join(installed) or 'none'} (or 'all'). A backend registers in the"
            f" {registry.ENTRY_POINT_GROUP!r} entry-point group."
        )
    try:
        return registry.get(name)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc


#: where the plugin keeps the session's :class:`MatrixState` (``config.stash``)
STATE_KEY = pytest.StashKey[MatrixState]()


def state_of(config: pytest.Config) -> MatrixState:
    """The session's :class:`MatrixState`, stashed by the plugin's ``pytest_configure``."""
    return config.stash[STATE_KEY]


def _reason(report: pytest.TestReport) -> str | None:
    longrepr = report.longrepr
    if report.skipped:
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            text = str(longrepr[2])
            return text.removeprefix("Skipped: ")
        wasxfail = getattr(report, "wasxfail", None)
        return f"xfail: {wasxfail}" if wasxfail is not None else None
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return str(message).splitlines()[0][:500]
    text = report.longreprtext.strip()
    return text.splitlines()[-1][:500] if text else None


class Recorder:
    """Registered per pytest session: folds each test's reports into its record."""

    def __init__(self, state: MatrixState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _record(self.state, report)


def _record(state: MatrixState, report: pytest.TestReport) -> None:
    record = state.records.get(report.nodeid)
    if record is None:
        return
    record.duration += float(report.duration or 0.0)
    if report.when == "setup":
        if report.failed:
            record.outcome, record.reason = "error", _reason(report)
        elif report.skipped:
            record.outcome, record.reason = "skipped", _reason(report)
    elif report.when == "call":
        if report.failed:
            record.outcome, record.reason = "failed", _reason(report)
        elif report.skipped:
            record.outcome, record.reason = "skipped", _reason(report)
        else:
            record.outcome = "passed"
    elif report.when == "teardown" and report.failed and record.outcome in ("passed", "skipped"):
        record.outcome, record.reason = "error", _reason(report)
    if record.outcome == "skipped" and record.skip_kind is None:
        reason = record.reason or ""
        if record.backend in state.unavailable and reason.startswith(
            f"{record.backend} not available here:"
        ):
            record.skip_kind = SKIP_NOT_AVAILABLE
        else:
            record.skip_kind = SKIP_OTHER
    if record.outcome != "skipped":
        record.skip_kind = None


def merged(report: dict[str, Any], workers: list[dict[str, Any]]) -> dict[str, Any]:
    """The controller's ``report`` with its workers' folded in (pytest-xdist: each
    worker collects every test and runs some; the controller collects none). A test
    takes the outcome of the worker that ran it; a backend the entry of a worker that
    started it."""
    if not workers:
        return report
    tests: dict[str, dict[str, Any]] = {}
    for worker in workers:
        for test in worker["tests"]:
            kept = tests.get(test["nodeid"])
            if kept is None or kept["outcome"] == NOT_RUN:
                tests[test["nodeid"]] = test
    backends = dict(report["backends"])
    for name in backends:
        entries = [w["backends"][name] for w in workers if name in w["backends"]]
        started = [e for e in entries if e["started"]]
        if started or entries:
            backends[name] = (started or entries)[0]
    return {**report, "backends": backends, "tests": list(tests.values())}

"""The pytest plugin of the conformance kit: options, fixtures and markers that run
tests once per backend. Loaded only when asked for: ``pytest -p qcore.conformance``
(which also collects the suite) or ``-p qcore.conformance.plugin`` (fixtures only,
as qcore's own test configuration does).

Options::

    pytest --backend cockroachdb            # one backend (repeatable), or --backend all
    pytest --backend foo --dsn postgresql://...   # an engine you run (one --backend only)
    pytest --matrix-report out.json         # each test's backend, group and outcome as JSON

Without ``--backend`` the suite runs on ``postgres`` only, on the local
PostgreSQL, so the everyday test command stays quick.

Fixtures (each test that uses one is parametrised by backend, ids like
``[postgres]``; tests that use none run once, unparametrised):

``backend``       the :class:`qcore.backend.Backend` under test
``provisioned``   the running :class:`qcore.conformance.provisioners.Provisioner` for it
                  (session-wide per backend, started on first use, stopped at
                  the end; a backend that cannot run here makes its tests skip
                  with "<backend> not available here: <why>")
``db``            a qcore ``Database`` adapter on the provisioned database
                  (``PGliteDatabase`` for single-session engines, else
                  ``qcore.db.connect``), inside ``qcore.conformance.guard.GuardedDatabase``
                  when the backend is emulated
``schema``        a schema of the test's own: with ``ctx``/``boss``, an install
                  reset to its new state (``qcore.conformance.schemas``; ``--fresh-schemas``
                  installs one per test), else created for the test and dropped after
``ctx``           a ``qcore.context.Context`` on ``db`` and ``schema``, with the schema
                  installed
``sctx``          ``ctx`` twice: with the backend's strategies, and with the atomic-update
                  fetch and split mutations on the same engine
``boss``          a started ``qcore.Boss`` on ``db`` and ``schema``

Markers: ``@pytest.mark.requires("listen_notify")`` skips the test where the
backend lacks the capability; ``@pytest.mark.feature("name")`` puts it in a
feature group (a row of the compatibility table; default ``other``).

The suite's coroutine tests are marked for pytest-asyncio whatever the project's
mode, so the kit runs from any project.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qcore import backends as registry
from qcore.backend import Backend, FetchStrategy, MutationStrategy
from qcore.conformance import SUITE
from qcore.conformance.markers import DEFAULT_FEATURE
from qcore.conformance.provisioners import (
    LocalProvisioner,
    NotAvailable,
    Provisioner,
    ProvisionError,
    best_provisioner,
    dsn_from_env,
)
from qcore.conformance.schemas import REUSING_PROVISIONERS, SchemaPool, fresh_name
from qcore.errors import ConfigError
from qcore.identifiers import quote

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the db fixtures need it; the rest works without
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "BACKEND_FIXTURES",
    "BACKEND_PARAM",
    "NOT_RUN",
    "REPORT_FORMAT",
    "MatrixState",
    "open_database",
]

#: the hidden fixture every backend fixture depends on; tests are parametrised over it
BACKEND_PARAM = "qcore_backend_name"
#: the fixtures that make a test run once per backend (BACKEND_PARAM pulls them in)
BACKEND_FIXTURES = frozenset({"backend", "provisioned", "db", "schema", "boss"})
#: the ``format`` field of a --matrix-report file
#: (2: a test with no passing call is ``not_run``; 1 counted it as passed)
REPORT_FORMAT = "qcore-matrix-report/2"
DEFAULT_BACKEND = "postgres"

SKIP_UNSUPPORTED = "unsupported"  # the backend lacks a capability the test requires
SKIP_NOT_AVAILABLE = "not_available"  # the backend's engine cannot run here
SKIP_OTHER = "other"

_STATE = pytest.StashKey["MatrixState"]()


# --------------------------------------------------------------------------- options


#: where a run writes its report when ``--matrix-report`` is not given (CI sets it around
#: the README's ``python -m pytest``, so the matrix records that run's backend from it)
REPORT_VARIABLE = "QCORE_MATRIX_REPORT"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qcore-matrix", "qcore compatibility matrix")
    group.addoption(
        "--backend",
        action="append",
        dest="qcore_backends",
        metavar="NAME",
        default=None,
        help="run the backend tests on this qcore backend (repeatable; 'all' for every"
        " installed one). Default: postgres on the local PostgreSQL.",
    )
    group.addoption(
        "--dsn",
        dest="qcore_dsn",
        metavar="DSN",
        default=None,
        help="the engine to test, run by you (only with a single --backend); without it,"
        " QCORE_TEST_DSN_<BACKEND> or the best provisioner available is used.",
    )
    group.addoption(
        "--matrix-report",
        dest="qcore_matrix_report",
        metavar="PATH",
        default=None,
        help="write each test's backend, feature group and outcome as JSON to PATH"
        f" (default: ${REPORT_VARIABLE}, read by this process only).",
    )
    group.addoption(
        "--fresh-schemas",
        action="store_true",
        dest="qcore_fresh_schemas",
        default=False,
        help="install and drop a schema per test instead of resetting pooled installs"
        " (slower; to rule the pool out when a test fails).",
    )
    group.addoption(
        "--backend-tests-only",
        action="store_true",
        dest="qcore_backend_tests_only",
        default=False,
        help="deselect the tests that do not run per backend (the matrix runner uses it for"
        " every backend but postgres).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(capability, ...): the backend capabilities (Backend.features() names) the"
        " test needs; skipped where the backend lacks one",
    )
    config.addinivalue_line(
        "markers", "feature(name): the feature group of the test in the compatibility table"
    )
    # taken out of the environment, so that the pytest runs a test starts never write it
    from_environment = os.environ.pop(REPORT_VARIABLE, None)
    if from_environment and not config.getoption("qcore_matrix_report"):
        config.option.qcore_matrix_report = from_environment
    state = MatrixState.from_config(config)
    config.stash[_STATE] = state
    config.pluginmanager.register(_Recorder(state), f"qcore_matrix_recorder_{id(config)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.stop_all()


def _state(config: pytest.Config) -> MatrixState:
    return config.stash[_STATE]


# --------------------------------------------------------------------------- session state


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


# --------------------------------------------------------------------------- collection


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Mark the suite's coroutine tests for pytest-asyncio, so they run in its strict
    mode as in auto mode (on the project's default loop scope, which its fixtures share)."""
    path = getattr(getattr(collector, "module", None), "__file__", None)
    if (
        inspect.iscoroutinefunction(obj)
        and path is not None
        and Path(str(path)).resolve().parent == SUITE
        and not any(m.name == "asyncio" for m in getattr(obj, "pytestmark", []))
    ):
        pytest.mark.asyncio(obj)


def _capability_names(state: MatrixState) -> set[str]:
    backend = next(iter(state.backends.values()))
    return set(backend.features())


def _requires_of(node: Any) -> list[str]:
    names: list[str] = []
    for mark in node.iter_markers("requires"):
        for arg in mark.args:
            if not isinstance(arg, str):
                raise pytest.UsageError(
                    f"{node.nodeid}: @pytest.mark.requires takes capability names, got {arg!r}"
                )
            names.append(arg)
    return names


def _feature_of(node: Any) -> str:
    mark = node.get_closest_marker("feature")
    if mark is None:
        return DEFAULT_FEATURE
    if len(mark.args) != 1 or not isinstance(mark.args[0], str) or not mark.args[0].strip():
        raise pytest.UsageError(
            f"{node.nodeid}: @pytest.mark.feature takes one group name, got {mark.args!r}"
        )
    return str(mark.args[0]).strip()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = _state(metafunc.config)
    needed = _requires_of(metafunc.definition)
    known = _capability_names(state)
    unknown = sorted(set(needed) - known)
    if unknown:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: unknown capability {', '.join(map(repr, unknown))}"
            f" in @pytest.mark.requires; known: {', '.join(sorted(known))}"
        )
    if BACKEND_PARAM not in metafunc.fixturenames:
        if needed:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: @pytest.mark.requires applies to tests that"
                f" run per backend; use one of the fixtures {', '.join(sorted(BACKEND_FIXTURES))}"
            )
        return
    names = list(state.backends)
    metafunc.parametrize(BACKEND_PARAM, names, ids=names, indirect=True, scope="session")


def _backend_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    value = callspec.params.get(BACKEND_PARAM)
    return str(value) if value is not None else None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: record what runs
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    state = _state(config)
    if config.getoption("qcore_backend_tests_only"):
        kept = [item for item in items if _backend_of(item) is not None]
        dropped = [item for item in items if _backend_of(item) is None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    for item in items:
        state.records[item.nodeid] = TestRecord(
            nodeid=item.nodeid,
            backend=_backend_of(item),
            feature=_feature_of(item),
            requires=_requires_of(item),
        )


# --------------------------------------------------------------------------- running


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, before any fixture starts an engine, a test needing a capability the
    backend lacks."""
    name = _backend_of(item)
    if name is None:
        return
    state = _state(item.config)
    backend = state.backend(name)
    missing = [cap for cap in _requires_of(item) if not backend.has(cap)]
    if missing:
        record = state.records.get(item.nodeid)
        if record is not None:
            record.skip_kind = SKIP_UNSUPPORTED
        pytest.skip(
            f"{name} does not support {', '.join(missing)} (capability off in the {name} backend)"
        )


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


class _Recorder:
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


#: the fixtures that install the test's schema, which may then come from the pool
INSTALLING_FIXTURES = frozenset({"ctx", "sctx", "boss"})

#: where a pytest-xdist worker hands its report to the controller
_WORKER_REPORT = "qcore_matrix_report"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _state(session.config)
    state.exit_status = int(exitstatus)
    try:
        path = session.config.getoption("qcore_matrix_report")
        worker_output = getattr(session.config, "workeroutput", None)
        if worker_output is not None:  # a pytest-xdist worker: the controller writes it
            worker_output[_WORKER_REPORT] = json.dumps(state.report())
        elif path:
            report = merged(state.report(), state.worker_reports)
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(target.suffix + ".tmp")
            tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
            os.replace(tmp, target)
    finally:
        state.stop_all()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A pytest-xdist worker finished: keep its report for the controller's."""
    output = getattr(node, "workeroutput", {}).get(_WORKER_REPORT)
    if output:
        _state(node.config).worker_reports.append(json.loads(output))


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


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return None
    parts = []
    for name in state.backends:
        parts.append(f"{name} ({state.provisioner_for(name).kind})")
    return "qcore backends: " + ", ".join(parts)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def qcore_backend_name(request: pytest.FixtureRequest) -> str:
    """The name of the backend this test runs on (the parametrised value)."""
    param = getattr(request, "param", None)
    if param is None:  # reached through getfixturevalue, outside the parametrisation
        return next(iter(_state(request.config).backends))
    return str(param)


@pytest.fixture(scope="session")
def backend(qcore_backend_name: str, request: pytest.FixtureRequest) -> Backend:
    """The qcore Backend under test."""
    return _state(request.config).backend(qcore_backend_name)


@pytest.fixture(scope="session")
def provisioned(qcore_backend_name: str, request: pytest.FixtureRequest) -> Provisioner:
    """The running provisioner of the backend (started on first use, stopped at the end
    of the session); skips with "<backend> not available here: <why>" if it cannot run."""
    state = _state(request.config)
    try:
        return state.start(qcore_backend_name)
    except NotAvailable as exc:
        pytest.skip(str(exc))


async def open_database(provisioner: Provisioner, connections: int = 4) -> Any:
    """A qcore ``Database`` adapter on the provisioner's database: ``PGliteDatabase``
    for a single-session engine, else ``qcore.db.connect`` with up to ``connections``;
    wrapped in the capability guard when the backend is emulated. The caller closes it."""
    backend = provisioner.backend
    if backend.capabilities.single_session:
        from qcore.db.pglite import PGliteDatabase

        inner: Any = await PGliteDatabase.connect(provisioner.url)
    else:
        from qcore.db import connect

        inner = await connect(provisioner.url, max=connections)
    if provisioner.emulated:
        from qcore.conformance.guard import GuardedDatabase

        return GuardedDatabase(inner, backend)
    return inner


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def db(provisioned: Provisioner) -> AsyncIterator[Any]:
        """A qcore Database adapter connected to the backend's database (guarded when
        emulated); closed after the test."""
        adapter = await open_database(provisioned)
        try:
            yield adapter
        finally:
            await adapter.close()

    @pytest_asyncio.fixture
    async def pool(provisioned: Provisioner, db: Any) -> AsyncIterator[Any]:
        """An adapter with up to 16 connections, for concurrency tests (the test's own
        ``db`` on a single-session engine); closed after the test."""
        if provisioned.backend.capabilities.single_session:
            yield db
            return
        adapter = await open_database(provisioned, connections=16)
        try:
            yield adapter
        finally:
            await adapter.close()

    @pytest_asyncio.fixture
    async def schema(
        db: Any, provisioned: Provisioner, request: pytest.FixtureRequest
    ) -> AsyncIterator[str]:
        """A schema of the test's own. For a test that installs it (``ctx``, ``sctx``,
        ``boss``) where the engine is PostgreSQL, an install from the backend's pool,
        reset to the state of a new install (:mod:`qcore.conformance.schemas`); else a
        new, empty schema, dropped (CASCADE) after the test."""
        pool = None
        if INSTALLING_FIXTURES & set(request.fixturenames):
            pool = _state(request.config).schema_pool(provisioned)
        if pool is None:
            name = fresh_name()
            await db.execute_script(f"CREATE SCHEMA {quote(name)}")
            try:
                yield name
            finally:
                await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE")
            return
        from qcore.context import Context
        from qcore.schema import install_or_migrate

        unguarded = getattr(db, "inner", db)
        taken = await pool.take(unguarded)
        if taken is None:
            taken = fresh_name()
            context = Context(db=db, backend=provisioned.backend, schema_spec=taken)
            await install_or_migrate(context)
            await pool.remember(unguarded, taken)
        try:
            yield taken
        finally:
            pool.give_back(taken)

else:  # pragma: no cover

    @pytest.fixture
    def db() -> Any:
        pytest.fail("the db fixture needs pytest-asyncio: pip install pytest-asyncio")

    @pytest.fixture
    def schema() -> Any:
        pytest.fail("the schema fixture needs pytest-asyncio: pip install pytest-asyncio")


# --------------------------------------------------------------------------- ctx, boss

if pytest_asyncio is not None:

    @pytest.fixture(params=["native", "split"])
    def sctx(request: pytest.FixtureRequest, backend: Backend) -> Any:
        """``ctx`` with the backend's own strategies, and with CockroachDB's (atomic-update
        fetch, split mutations) on the same engine: both must write the same rows."""
        from qcore.context import Context

        ctx: Context = request.getfixturevalue("ctx")
        if request.param == "native":
            return ctx
        distributed = dataclasses.replace(
            ctx.backend, fetch=FetchStrategy.ATOMIC_UPDATE, mutation=MutationStrategy.SPLIT
        )
        return Context(db=ctx.db, backend=distributed, schema_spec=ctx.schema_spec)

    @pytest_asyncio.fixture
    async def ctx(db: Any, backend: Backend, schema: str) -> Any:
        """A ``qcore.context.Context`` on the backend's ``db`` and a fresh ``schema``, with
        qcore's (pg-boss's) schema installed in it."""
        from qcore.context import Context
        from qcore.schema import install_or_migrate

        context = Context(db=db, backend=backend, schema_spec=schema)
        await install_or_migrate(context)
        return context


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def boss(db: Any, backend: Backend, schema: str) -> AsyncIterator[Any]:
        """A started ``qcore.Boss`` on the test's adapter (guarded under emulation) and
        fresh schema; stopped after the test. It shares ``db``'s connection, so on a
        single-session engine (PGlite) the two never interleave."""
        from qcore import Boss
        from qcore.conformance.helpers import running

        async with running(Boss(db=db, backend=backend, schema=schema)) as instance:
            yield instance

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

The fixtures live in :mod:`qcore.conformance.fixtures` and the run's state and report
in :mod:`qcore.conformance.report`; both are imported here, where pytest finds them.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

from qcore.conformance import SUITE

# the fixtures: pytest registers those it finds in this module's namespace
from qcore.conformance.fixtures import (  # noqa: F401
    ASYNC_FIXTURES,
    backend,
    db,
    open_database,
    provisioned,
    qcore_backend_name,
    schema,
)
from qcore.conformance.markers import DEFAULT_FEATURE
from qcore.conformance.report import (
    NOT_RUN,
    REPORT_FORMAT,
    REPORT_VARIABLE,
    SKIP_UNSUPPORTED,
    STATE_KEY,
    MatrixState,
    Recorder,
    TestRecord,
    merged,
    state_of,
)

if ASYNC_FIXTURES:  # the fixtures that exist only with pytest-asyncio
    from qcore.conformance.fixtures import boss, ctx, installed, pool, sctx  # noqa: F401

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


# --------------------------------------------------------------------------- options


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
        "--list-test-files",
        dest="qcore_list_test_files",
        metavar="PATH",
        default=None,
        help="write the files of the tests collected (after deselection), one absolute path"
        " a line, to PATH (the matrix runner hands them to each backend's run).",
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
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(Recorder(state), f"qcore_matrix_recorder_{id(config)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        state.stop_all()


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
    first = next(iter(state.backends.values()))
    return set(first.features())


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
    state = state_of(metafunc.config)
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
    state = state_of(config)
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


def pytest_collection_finish(session: pytest.Session) -> None:
    target = session.config.getoption("qcore_list_test_files")
    if target:
        files = sorted({str(item.path) for item in session.items})
        Path(target).write_text("".join(f"{name}\n" for name in files), encoding="utf-8")


# --------------------------------------------------------------------------- running


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, before any fixture starts an engine, a test needing a capability the
    backend lacks."""
    name = _backend_of(item)
    if name is None:
        return
    state = state_of(item.config)
    tested = state.backend(name)
    missing = [cap for cap in _requires_of(item) if not tested.has(cap)]
    if missing:
        record = state.records.get(item.nodeid)
        if record is not None:
            record.skip_kind = SKIP_UNSUPPORTED
        pytest.skip(
            f"{name} does not support {', '.join(missing)} (capability off in the {name} backend)"
        )


# --------------------------------------------------------------------------- the report


#: where a pytest-xdist worker hands its report to the controller
_WORKER_REPORT = "qcore_matrix_report"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = state_of(session.config)
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
        state_of(node.config).worker_reports.append(json.loads(output))


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return None
    parts = []
    for name in state.backends:
        parts.append(f"{name} ({state.provisioner_for(name).kind})")
    return "qcore backends: " + ", ".join(parts)

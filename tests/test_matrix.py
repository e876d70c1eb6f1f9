"""The compatibility-matrix machinery: provisioners, the pytest plugin, the results,
the table and the runner, each against the real thing where it is here."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from qcore import backends
from qcore.conformance import provisioners as prov
from qcore.conformance.provisioners import (
    ContainerProvisioner,
    EmulationProvisioner,
    ExternalProvisioner,
    LocalProvisioner,
    LocalServer,
    NotAvailable,
    PGliteProvisioner,
    TempCluster,
    best_provisioner,
    docker_available,
    dsn_env_var,
    to_url,
)
from qcore.conformance.results import empty_counts, load_results, summarise, write_results
from qcore.conformance.runner import BackendOutcome, RunOptions, resolve_backends, run_matrix
from qcore.conformance.table import (
    EMULATED,
    FAILING,
    GENERATED_NOTE,
    NOT_RUN,
    REAL,
    UNSUPPORTED,
    cell,
)
from qcore.errors import ConfigError

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.feature("matrix")

ROOT = Path(__file__).resolve().parent.parent


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def database_exists(admin: str, name: str) -> bool:
    return bool(rows(admin, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"))


@pytest.fixture
def local_admin() -> Any:
    """The local server's admin URL, held for the test (so a throw-away cluster, if
    that is what the local server is, outlives the provisioners under test)."""
    server = prov.local_server()
    try:
        admin = server.acquire()
    except NotAvailable as exc:
        pytest.fail(f"no local PostgreSQL and no pg_ctl: {exc.reason}")
    yield admin
    server.release()


# --------------------------------------------------------------------------- provisioners


def test_local_provisioner_creates_and_drops_a_database(local_admin: str) -> None:
    provisioner = LocalProvisioner(backends.get("postgres"))
    assert provisioner.kind == "local" and not provisioner.running
    with provisioner as p:
        name = p.database
        assert name is not None and name.startswith("qcore_matrix_")
        assert database_exists(local_admin, name)
        assert rows(p.url, "SELECT current_database()") == [(name,)]
        assert p.engine_version.startswith("PostgreSQL")
    assert not database_exists(local_admin, name)
    provisioner.stop()  # stopping twice is harmless


@pytest.mark.skipif(not TempCluster.available(), reason="pg_ctl/initdb are not on PATH")
def test_throwaway_cluster_starts_on_a_free_port_and_is_removed() -> None:
    cluster = TempCluster()
    with cluster:
        assert cluster.port > 0 and cluster.directory is not None
        directory = cluster.directory
        assert f":{cluster.port}/" in cluster.url
        assert rows(cluster.url, "SELECT current_setting('port')::int") == [(cluster.port,)]
    assert not directory.exists()
    with pytest.raises(psycopg.OperationalError):
        rows(f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres", "SELECT 1")


@pytest.mark.skipif(not TempCluster.available(), reason="pg_ctl/initdb are not on PATH")
def test_local_provisioner_on_a_throwaway_cluster() -> None:
    server = LocalServer(cluster="always")
    with LocalProvisioner(backends.get("postgres"), server) as p:
        assert server.cluster is not None
        port = server.cluster.port
        assert "throw-away cluster" in p.describe()
        assert rows(p.url, "SELECT current_database()") == [(p.database,)]
    assert server.cluster is None
    with pytest.raises(psycopg.OperationalError):
        rows(f"postgresql://postgres@127.0.0.1:{port}/postgres", "SELECT 1")


def test_local_server_not_available_without_server_or_cluster() -> None:
    server = LocalServer("postgresql://postgres@127.0.0.1:1/postgres", cluster="never")
    with pytest.raises(NotAvailable, match="no PostgreSQL answers"):
        server.acquire()


def test_container_provisioner_not_available_without_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if docker_available()[0]:
        pytest.skip("a Docker daemon answers here")
    cockroachdb = backends.get("cockroachdb")
    with pytest.raises(NotAvailable) as info:
        ContainerProvisioner(cockroachdb).start()
    assert info.value.backend == "cockroachdb"
    assert "Docker" in info.value.reason
    assert str(info.value).startswith("cockroachdb not available here: ")
    monkeypatch.delenv(dsn_env_var("cockroachdb"), raising=False)
    assert isinstance(best_provisioner(cockroachdb), EmulationProvisioner)


def test_best_provisioner_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in backends.names():
        monkeypatch.delenv(dsn_env_var(name), raising=False)
    get = backends.get
    assert type(best_provisioner(get("postgres"), docker=False)) is LocalProvisioner
    assert type(best_provisioner(get("postgres"), docker=True)) is ContainerProvisioner
    assert type(best_provisioner(get("cockroachdb"), docker=True)) is ContainerProvisioner
    assert type(best_provisioner(get("pglite"), docker=True)) is PGliteProvisioner
    for name in ("cockroachdb", "yugabytedb", "citus"):
        assert type(best_provisioner(get(name), docker=False)) is EmulationProvisioner
    no_notify = dataclasses.replace(get("postgres"), name="acme", provisioning=None)
    assert type(best_provisioner(no_notify, docker=False)) is LocalProvisioner
    no_notify = no_notify.with_capabilities(listen_notify=False)
    assert type(best_provisioner(no_notify, docker=True)) is EmulationProvisioner
    external = best_provisioner(get("cockroachdb"), "postgresql://root@db:26257/defaultdb")
    assert type(external) is ExternalProvisioner
    monkeypatch.setenv("QCORE_TEST_DSN_COCKROACHDB", "postgresql://root@elsewhere/defaultdb")
    assert dsn_env_var("cockroachdb") == "QCORE_TEST_DSN_COCKROACHDB"
    chosen = best_provisioner(get("cockroachdb"), docker=True)
    assert isinstance(chosen, ExternalProvisioner) and chosen.dsn.endswith("elsewhere/defaultdb")


def test_emulation_url_carries_the_session_settings(local_admin: str) -> None:
    with EmulationProvisioner(backends.get("cockroachdb")) as p:
        assert p.kind == "emulation" and p.emulated
        assert rows(p.url, "SHOW default_transaction_isolation") == [("serializable",)]
        assert p.engine_version.startswith("PostgreSQL")
        name = p.local.database
        assert name is not None and database_exists(local_admin, name)
    assert not database_exists(local_admin, name)


def test_external_provisioner_database_or_schema(local_admin: str) -> None:
    postgres = backends.get("postgres")
    with ExternalProvisioner(postgres, local_admin) as p:  # the spec can create databases
        assert p.kind == "external" and p.database is not None
        assert rows(p.url, "SELECT current_database()") == [(p.database,)]
        database = p.database
    assert not database_exists(local_admin, database)
    bare = dataclasses.replace(postgres, name="acme", provisioning=None)
    with ExternalProvisioner(bare, local_admin) as p:  # no spec: a throw-away schema
        assert p.database is None and p.schema is not None
        schema = p.schema
        assert rows(p.url, "SELECT current_schema()") == [(schema,)]
    assert not rows(local_admin, f"SELECT 1 FROM pg_namespace WHERE nspname = '{schema}'")


def test_the_server_identity_decides_real_or_emulated(local_admin: str) -> None:
    """A server counts as the backend's engine only when the backend recognises it:
    plain PostgreSQL given (as with --dsn) to a vendor backend, or to cockroachdb, runs
    emulated — its sessions carry the emulation's settings — whatever the provisioner."""
    with ExternalProvisioner(backends.get("postgres"), local_admin) as p:
        assert p.identity is not None and p.identity.engine == "postgres"
        assert not p.emulated
    acme = dataclasses.replace(
        backends.get("postgres"),
        name="acme",
        provisioning=None,
        detect=lambda i: "Acme" in i.version,
    )
    with ExternalProvisioner(acme, local_admin) as p:
        assert p.emulated and p.identity is not None and p.identity.emulating == "acme"
        assert rows(p.url, "SELECT current_setting('qcore.emulate')") == [("acme",)]
    with ExternalProvisioner(backends.get("cockroachdb"), local_admin) as p:
        assert p.emulated
        assert rows(p.url, "SHOW default_transaction_isolation") == [("serializable",)]
    with LocalProvisioner(backends.get("postgres")) as p:  # the engine postgres declares
        assert not p.emulated


def test_to_url() -> None:
    assert to_url("host=127.0.0.1 port=5432 user=u dbname=d") == "postgresql://u@127.0.0.1:5432/d"
    assert (
        to_url("postgresql://a:p%40ss@h:1/d?sslmode=disable", dbname="z")
        == "postgresql://a:p%40ss@h:1/z?sslmode=disable"
    )
    url = to_url("postgresql://u@h/d", options="-c search_path=s")
    assert rows_safe(url)["options"] == "-c search_path=s"


def rows_safe(url: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    return {k: str(v) for k, v in conninfo_to_dict(url).items()}


# --------------------------------------------------------------------------- results and table


def summary(backend: str, groups: dict[str, dict[str, int]], **extra: Any) -> dict[str, Any]:
    base = summarise({"backends": {}, "tests": []}, backend, exit_status=0)
    full = {
        g: {
            **empty_counts(),
            **c,
        }
        for g, c in groups.items()
    }
    base.update(groups=full, provisioner="local", engine_version="PostgreSQL 15.2")
    base.update(extra)
    return base


def parse_table(markdown: str) -> dict[str, dict[str, str]]:
    """The first table of the page: {feature: {backend: cell}}."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "backend":
            break
        table[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return table


def test_table_cells_from_results_files(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_results(summary("postgres", {"basics": {"passed": 3}, "locking": {"passed": 2}}), results)
    write_results(
        summary(
            "cockroachdb",
            {
                "basics": {"passed": 3},
                "locking": {"skipped": 2, "unsupported": 2},
                "notifications": {"skipped": 1, "unsupported": 1},
            },
            provisioner="emulation",
            emulated=True,
        ),
        results,
    )
    write_results(
        summary("citus", {"basics": {"passed": 2, "failed": 1}, "locking": {"passed": 2}}),
        results,
    )
    write_results(
        summary(
            "yugabytedb",
            {"basics": {"skipped": 3, "not_available": 3}},
            available=False,
            reason="no Docker daemon answers",
        ),
        results,
    )
    write_results(
        summary(
            "acme",
            {"basics": {"passed": 3}, "locking": {"passed": 1, "skipped": 1, "unsupported": 1}},
            provisioner="external",
        ),
        results,
    )
    (results / "notes.json").write_text("[1, 2]")  # not a results file: ignored
    from qcore.conformance.table import write_table

    page = write_table(results, tmp_path / "compatibility.md").read_text()
    assert page.startswith(GENERATED_NOTE) and "do not edit" in page
    table = parse_table(page)
    assert list(table["basics"]) == ["postgres", "acme", "citus", "cockroachdb", "yugabytedb"]
    assert table["basics"]["postgres"] == f"{REAL} 3/3"
    assert table["basics"]["cockroachdb"] == f"{EMULATED} 3/3"
    assert table["basics"]["citus"] == f"{FAILING} 2/3"
    assert table["basics"]["yugabytedb"] == NOT_RUN
    assert table["basics"]["acme"] == f"{REAL} 3/3"
    assert table["locking"]["cockroachdb"] == UNSUPPORTED
    assert table["locking"]["acme"] == f"{REAL} 1/1 +1 {UNSUPPORTED}"  # capability skips apart
    assert table["notifications"]["postgres"] == NOT_RUN  # no tests of the group there
    assert table["notifications"]["cockroachdb"] == UNSUPPORTED
    assert "not available here: no Docker daemon answers" in page
    assert "PostgreSQL 15.2" in page and "## Legend" in page


def test_the_table_says_which_server_each_column_ran_on(tmp_path: Path) -> None:
    """The first row names the server of each column: the version() the results recorded,
    the Citus extension's version where the server had it, and for an emulation the
    PostgreSQL beneath it, marked as such."""
    debian = "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc"
    results = {
        "postgres": summary("postgres", {"basics": {"passed": 1}}, engine_version=debian),
        "cockroachdb": summary(
            "cockroachdb", {"basics": {"passed": 1}}, engine_version=debian, emulated=True
        ),
        "citus": summary(
            "citus",
            {"basics": {"passed": 1}},
            engine_version="PostgreSQL 18.1 (Debian 18.1-1.pgdg13+2) on aarch64-unknown-linux-gnu",
            engine_markers={"citus": "14.0-1"},
        ),
        "pglite": summary(
            "pglite",
            {"basics": {"passed": 1}},
            engine_version="PostgreSQL 18.6 (PGlite 0.5.14) on wasm32-unknown-emscripten",
        ),
        "yugabytedb": summary(
            "yugabytedb", {}, engine_version=None, available=False, reason="no Docker"
        ),
    }
    from qcore.conformance.table import ENGINE_ROW, render

    page = render(results)
    assert parse_table(page)[ENGINE_ROW] == {
        "postgres": "PostgreSQL 15.20",
        "citus": "Citus 14.0-1 on PostgreSQL 18.1",
        "cockroachdb": "PostgreSQL 15.20 (emulation)",
        "pglite": "PostgreSQL 18.6 (PGlite 0.5.14)",
        "yugabytedb": NOT_RUN,
    }
    [where] = [line for line in page.splitlines() if line.startswith("| cockroachdb |")]
    assert "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) (beneath the emulation)" in where


def test_results_of_the_first_format_are_still_read(tmp_path: Path) -> None:
    """Results files written before ``not_run`` was counted (format 1, as CI committed
    them) load with every counter; one from a run that did not exit cleanly is flagged,
    since format 1 counted a test that never ran as passed."""
    first = summary("postgres", {"basics": {"passed": 3}}, format="qcore-matrix-results/1")
    for counts in [first["totals"], *first["groups"].values()]:
        del counts["not_run"]
    broken = {**first, "backend": "citus", "pytest_exit_status": 1}
    broken["groups"] = {"basics": {**first["groups"]["basics"], "failed": 1}}
    results = tmp_path / "results"
    write_results(first, results)
    write_results(broken, results)
    loaded = load_results(results)
    assert loaded["postgres"]["groups"]["basics"]["not_run"] == 0
    assert loaded["postgres"]["totals"]["not_run"] == 0
    from qcore.conformance.table import render

    page = render(loaded)
    assert parse_table(page)["basics"]["postgres"] == f"{REAL} 3/3"
    [clean] = [line for line in page.splitlines() if line.startswith("| postgres |")]
    [flagged] = [line for line in page.splitlines() if line.startswith("| citus |")]
    assert "format 1" not in clean
    assert "format 1, which counted a test that never ran as passed" in flagged


def test_cell_rules() -> None:
    ok = summary("x", {"g": {"passed": 1}})
    assert cell(ok, "g") == REAL and cell(ok, "missing") == NOT_RUN
    assert cell({**ok, "emulated": True}, "g") == EMULATED
    assert cell({**ok, "error": "pytest exited with status 3"}, "g") == FAILING
    other_skips = summary("x", {"g": {"skipped": 2, "unsupported": 1}})
    assert cell(other_skips, "g") == NOT_RUN  # not every skip was a capability
    errors = summary("x", {"g": {"passed": 4, "errors": 1}})
    assert cell(errors, "g") == FAILING


def test_summarise_a_plugin_report() -> None:
    report = {
        "pytest_exit_status": 1,
        "backends": {
            "cockroachdb": {
                "provisioner": "emulation",
                "emulated": True,
                "available": True,
                "engine_version": "PostgreSQL 15",
                "features": {"listen_notify": False},
            }
        },
        "tests": [
            {
                "nodeid": "a[cockroachdb]",
                "backend": "cockroachdb",
                "feature": "basics",
                "requires": [],
                "outcome": "passed",
            },
            {
                "nodeid": "b[cockroachdb]",
                "backend": "cockroachdb",
                "feature": "notify",
                "requires": ["listen_notify"],
                "outcome": "skipped",
                "skip_kind": "unsupported",
            },
            {
                "nodeid": "c[cockroachdb]",
                "backend": "cockroachdb",
                "feature": "basics",
                "requires": [],
                "outcome": "failed",
                "reason": "AssertionError: no",
            },
            {
                "nodeid": "d[postgres]",
                "backend": "postgres",
                "feature": "basics",
                "requires": [],
                "outcome": "failed",
            },
            {
                "nodeid": "e",
                "backend": None,
                "feature": "adapters",
                "requires": [],
                "outcome": "passed",
            },
        ],
    }
    s = summarise(report, "cockroachdb")
    assert s["emulated"] and s["provisioner"] == "emulation" and s["available"]
    assert s["groups"]["basics"]["passed"] == 1 and s["groups"]["basics"]["failed"] == 1
    assert s["groups"]["notify"]["unsupported"] == 1
    assert s["independent"]["adapters"]["passed"] == 1
    assert s["totals"]["failed"] == 1  # the postgres test is not counted
    assert s["unsupported"] == {"listen_notify": 1}
    assert s["failures"] == [
        {
            "nodeid": "c[cockroachdb]",
            "feature": "basics",
            "outcome": "failed",
            "message": "AssertionError: no",
        }
    ]
    assert summarise(None, "citus")["error"] == "the pytest run wrote no report"


# --------------------------------------------------------------------------- the plugin

ASYNC_INI = """
[pytest]
addopts = -p qcore.conformance.plugin
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

INNER_CONFTEST = """
from qcore import backends
from qcore.backend import Backend, Kind, FetchStrategy, MutationStrategy, LockStrategy, SchemaShape


class _Nowhere:
    url = ""

    def start(self):
        raise RuntimeError("this engine exists only in a test")

    def stop(self):
        pass


backends.register("nowhere", Backend(
    name="nowhere", kind=Kind.EMBEDDED, fetch=FetchStrategy.SKIP_LOCKED,
    mutation=MutationStrategy.CTE, schema=SchemaShape(), lock=LockStrategy.ADVISORY,
    launcher=lambda **options: _Nowhere(),
))
"""

INNER_TESTS = """
import pytest
from qcore.conformance.markers import feature, requires

pytestmark = feature("inner")


@requires("listen_notify")
def test_needs_notify(backend):
    pass


@requires("skip_locked", "advisory_locks")
def test_needs_two(backend):
    pass


def test_plain(backend):
    assert backend.name


@feature("engine")
def test_needs_an_engine(provisioned):
    assert provisioned.url


def test_not_per_backend():
    pass
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(ASYNC_INI)
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    return pytester


def load_report(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_requires_skips_with_backend_and_capability(inner: pytest.Pytester) -> None:
    report_path = inner.path / "report.json"
    result = inner.runpytest(
        "--backend",
        "cockroachdb",
        "-v",
        "-rs",
        "--matrix-report",
        str(report_path),
        "-k",
        "not engine",
    )
    result.assert_outcomes(passed=2, skipped=2, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "*test_needs_notify?cockroachdb? SKIPPED*",
            "*test_plain?cockroachdb? PASSED*",
            "*cockroachdb does not support listen_notify*",
            "*cockroachdb does not support skip_locked, advisory_locks*",
        ]
    )
    tests = {t["nodeid"].split("::")[-1]: t for t in load_report(report_path)["tests"]}
    assert tests["test_needs_notify[cockroachdb]"]["skip_kind"] == "unsupported"
    assert tests["test_needs_notify[cockroachdb]"]["feature"] == "inner"
    assert tests["test_plain[cockroachdb]"]["outcome"] == "passed"
    assert tests["test_not_per_backend"]["backend"] is None
    on_postgres = inner.runpytest("--backend", "postgres", "-k", "not engine")
    on_postgres.assert_outcomes(passed=4, deselected=1)


def test_backends_parametrise_and_independent_tests_run_once(inner: pytest.Pytester) -> None:
    result = inner.runpytest(
        "--backend",
        "postgres",
        "--backend",
        "yugabytedb,citus",
        "-k",
        "not engine",
        "--collect-only",
        "-q",
    )
    ids = [line for line in result.stdout.lines if "::" in line]
    assert sum("test_not_per_backend" in line for line in ids) == 1
    assert sum("test_plain[" in line for line in ids) == 3
    assert any(line.endswith("test_plain[yugabytedb]") for line in ids)
    only = inner.runpytest("--backend", "citus", "--backend-tests-only", "-k", "not engine")
    only.assert_outcomes(passed=3, deselected=2)  # citus has every capability


def test_not_available_backend_skips_with_reason(inner: pytest.Pytester) -> None:
    report_path = inner.path / "report.json"
    result = inner.runpytest(
        "--backend", "nowhere", "-rs", "-k", "engine", "--matrix-report", str(report_path)
    )
    result.assert_outcomes(skipped=1, deselected=4)
    result.stdout.fnmatch_lines(["*nowhere not available here: this engine exists only in a test*"])
    report = load_report(report_path)
    assert report["backends"]["nowhere"]["available"] is False
    [test] = report["tests"]
    assert test["skip_kind"] == "not_available" and test["feature"] == "engine"


STOPPED_TESTS = """
import pytest
from qcore.conformance.markers import feature


@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke before the test")


@feature("first")
def test_fails(backend):
    assert backend.name == "no such backend"


@feature("setup")
def test_setup_breaks(backend, broken):
    pass


@feature("later")
def test_never_reached(backend):
    pass
"""


def test_tests_that_never_ran_are_not_run_not_passed(pytester: pytest.Pytester) -> None:
    """``-x`` stops the session at the first failure: the tests after it were collected
    (each has a record) but never ran. They are "not_run", their group's cell says so
    and no cell of theirs is green; a setup error is an error."""
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_stopped=STOPPED_TESTS)
    report_path = pytester.path / "report.json"
    result = pytester.runpytest("--backend", "citus", "-x", "--matrix-report", str(report_path))
    result.assert_outcomes(failed=1)
    report = load_report(report_path)
    outcomes = {t["nodeid"].split("::")[-1]: t["outcome"] for t in report["tests"]}
    assert outcomes == {
        "test_fails[citus]": "failed",
        "test_setup_breaks[citus]": "not_run",
        "test_never_reached[citus]": "not_run",
    }
    s = summarise(report, "citus")
    assert s["totals"]["passed"] == 0 and s["totals"]["not_run"] == 2
    assert s["groups"]["later"]["not_run"] == 1
    from qcore.conformance.table import render

    table = parse_table(render({"citus": s}))
    assert table["later"]["citus"] == f"{NOT_RUN} 0/1, 1 not run"
    assert table["first"]["citus"] == f"{FAILING} 0/1"

    without_x = pytester.runpytest("--backend", "citus", "--matrix-report", str(report_path))
    without_x.assert_outcomes(failed=1, passed=1, errors=1)
    report = load_report(report_path)
    outcomes = {t["nodeid"].split("::")[-1]: t["outcome"] for t in report["tests"]}
    assert outcomes["test_setup_breaks[citus]"] == "error"
    assert outcomes["test_never_reached[citus]"] == "passed"


INTERRUPTED_TESTS = """
from qcore.conformance.markers import feature

pytestmark = feature("interrupted")


def test_passes(backend):
    pass


def test_interrupted(backend):
    raise KeyboardInterrupt


def test_after(backend):
    pass
"""


def test_an_interrupted_session_records_what_never_ran(pytester: pytest.Pytester) -> None:
    """An interrupt in the middle of a test: its setup passed but its call never reported,
    and the tests after it never started. Neither counts as passed, and the results of
    the interrupted run are a broken run, whatever exit status the recorder was told."""
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_interrupted=INTERRUPTED_TESTS)
    report_path = pytester.path / "report.json"
    # its own process: the interrupt would stop this session too
    pytester.runpytest_subprocess(
        "--backend", "citus", "--matrix-report", str(report_path), "-p", "no:cacheprovider"
    )
    report = load_report(report_path)
    assert report["pytest_exit_status"] == 2  # pytest's "interrupted"
    outcomes = {t["nodeid"].split("::")[-1]: t["outcome"] for t in report["tests"]}
    assert outcomes == {
        "test_passes[citus]": "passed",
        "test_interrupted[citus]": "not_run",
        "test_after[citus]": "not_run",
    }
    s = summarise(report, "citus", exit_status=0)  # as `record` is called by default
    assert s["totals"]["passed"] == 1 and s["totals"]["not_run"] == 2
    assert s["error"] == "pytest exited with status 2"
    assert cell(s, "interrupted") == FAILING
    # and were the run's status lost, the tests it left unrun still fail the matrix
    unbroken = {**s, "error": None, "pytest_exit_status": 0}
    assert cell(unbroken, "interrupted") == NOT_RUN
    assert BackendOutcome("citus", unbroken, 0, 0.0).failed


def test_unknown_capability_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.requires("teleportation")
        def test_x(backend):
            pass
        """
    )
    pytester.makeini(ASYNC_INI)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown capability 'teleportation'*listen_notify*"])


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest("--backend", "nosuchdb")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown backend 'nosuchdb'*installed backends:*cockroachdb*postgres*"]
    )
    two = pytester.runpytest("--backend", "postgres,citus", "--dsn", "postgresql://x/y")
    assert two.ret == pytest.ExitCode.USAGE_ERROR
    two.stderr.fnmatch_lines(["*--dsn is for one engine*"])
    with pytest.raises(ConfigError, match="unknown backend 'nosuchdb'; installed backends: "):
        resolve_backends(["postgres,nosuchdb"])
    assert resolve_backends(["all"]) == backends.names()


def test_unknown_backend_for_the_runner_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "matrix", "run", "--backends", "nosuchdb"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown backend 'nosuchdb'; installed backends: " in done.stderr
    assert "postgres" in done.stderr


GUARDED_TESTS = """
import pytest
from qcore.conformance.markers import feature
from qcore.conformance.guard import GuardedDatabase, UnsupportedFeature

pytestmark = feature("guarded")


async def test_db_is_guarded_under_emulation(db, backend, provisioned, schema):
    assert provisioned.kind == "emulation"
    assert isinstance(db, GuardedDatabase) and db.backend == backend
    with pytest.raises(UnsupportedFeature) as info:
        await db.execute("SELECT 1 FROM pg_class FOR UPDATE SKIP LOCKED")
    assert info.value.sqlstate == "0A000"
    rows = await db.execute("SELECT current_setting('transaction_isolation') AS iso")
    assert rows == [{"iso": "serializable"}]
    await db.execute_script(f"CREATE TABLE {schema}.t (id int)")
    assert await db.execute(f"SELECT count(*) AS n FROM {schema}.t") == [{"n": 0}]
"""


def test_db_fixture_is_guarded_under_emulation(pytester: pytest.Pytester) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_guarded=GUARDED_TESTS)
    result = pytester.runpytest_subprocess("--backend", "cockroachdb", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# --------------------------------------------------------------------------- the runner

RUNNER_TESTS = """
from qcore.conformance.markers import feature, requires


@feature("basics")
async def test_select(db):
    assert await db.execute("SELECT 1 AS one") == [{"one": 1}]


@feature("notifications")
@requires("listen_notify")
async def test_notify(db):
    pass


def test_independent():
    pass
"""


def test_runner_writes_results_and_table(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_suite=RUNNER_TESTS)
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        status = run_matrix(
            RunOptions(
                backends=["postgres", "cockroachdb"],
                tests=[pytester.path],
                results_dir=tmp_path / "results",
                table=tmp_path / "compatibility.md",
                cwd=pytester.path,
                out=stream,
            )
        )
    log = out.read_text()
    assert status == 0, log
    assert "==> [2/2] cockroachdb: emulated on local PostgreSQL" in log
    assert "[cockroachdb] " in log
    results = load_results(tmp_path / "results")
    assert set(results) == {"postgres", "cockroachdb"}
    assert results["postgres"]["independent"]["other"]["passed"] == 1
    assert "other" not in results["cockroachdb"]["independent"]
    assert results["cockroachdb"]["engine_version"].startswith("PostgreSQL")
    assert results["cockroachdb"]["engine_markers"] == {}  # read, and no Citus there
    table = parse_table((tmp_path / "compatibility.md").read_text())
    assert table["basics"] == {"postgres": f"{REAL} 1/1", "cockroachdb": f"{EMULATED} 1/1"}
    assert table["notifications"] == {"postgres": f"{REAL} 1/1", "cockroachdb": UNSUPPORTED}


def test_runner_runs_backends_at_once_and_keeps_their_lines_whole(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """With ``jobs=2`` both backends run side by side; every line of the log is one
    backend's (its prefix at the start, no other backend's inside it)."""
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_suite=RUNNER_TESTS)
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        status = run_matrix(
            RunOptions(
                backends=["postgres", "cockroachdb", "example"],
                tests=[pytester.path],
                results_dir=tmp_path / "results",
                table=None,
                cwd=pytester.path,
                out=stream,
                jobs=2,
            )
        )
    log = out.read_text()
    assert status == 0, log
    assert set(load_results(tmp_path / "results")) == {"postgres", "cockroachdb", "example"}
    prefixes = ("[postgres] ", "[cockroachdb] ", "[example] ")
    for line in log.splitlines():
        if line.startswith(prefixes):
            assert sum(line.count(p) for p in prefixes) == 1, line
    assert all(f"<== {name}: ok" in log for name in ("postgres", "cockroachdb", "example")), log


def test_runner_can_leave_the_independent_tests_out(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """``--backend-tests-only``: the postgres run skips the independent tests too (CI has
    run them in its plain pytest step)."""
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_suite=RUNNER_TESTS)
    status = run_matrix(
        RunOptions(
            backends=["postgres"],
            tests=[pytester.path],
            results_dir=tmp_path / "results",
            table=tmp_path / "compatibility.md",
            cwd=pytester.path,
            out=(tmp_path / "log.txt").open("w"),
            backend_tests_only=True,
        )
    )
    assert status == 0
    postgres = load_results(tmp_path / "results")["postgres"]
    assert postgres["independent"] == {} and postgres["totals"]["passed"] == 2
    assert "Backend-independent" not in (tmp_path / "compatibility.md").read_text()


#: a test file with no test run per backend; it notes each process that imports it
INDEPENDENT_ONLY = """
import os
import sys

with open(os.environ["QCORE_IMPORTS_LOG"], "a") as log:
    log.write(("collect" if "--collect-only" in sys.argv else "run") + "\\n")


def test_alone():
    pass
"""


def test_backend_runs_import_only_the_files_with_backend_tests(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One collection finds the files holding a per-backend test; the backend-only runs
    are handed those, so a file of independent tests is imported by neither (every
    worker of every backend would import it, to deselect all it holds)."""
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_suite=RUNNER_TESTS, test_alone=INDEPENDENT_ONLY)
    imports = tmp_path / "imports.log"
    monkeypatch.setenv("QCORE_IMPORTS_LOG", str(imports))
    options = RunOptions(
        backends=["cockroachdb", "example"],
        tests=[pytester.path],
        results_dir=tmp_path / "results",
        table=None,
        cwd=pytester.path,
        out=(tmp_path / "log.txt").open("w"),
    )
    assert run_matrix(options) == 0, (tmp_path / "log.txt").read_text()
    assert options.backend_test_files == [pytester.path / "test_suite.py"]
    assert imports.read_text().split() == ["collect"]
    results = load_results(tmp_path / "results")
    assert results["cockroachdb"]["totals"]["passed"] == 1  # test_select; notify is off
    assert results["example"]["totals"]["passed"] == 1


def test_runner_fails_on_a_failing_backend(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makepyfile(test_fail="def test_bad(backend):\n    assert backend.name != 'citus'\n")
    status = run_matrix(
        RunOptions(
            backends=["citus"],
            tests=[pytester.path],
            results_dir=tmp_path / "results",
            table=tmp_path / "compatibility.md",
            cwd=pytester.path,
            out=(tmp_path / "log.txt").open("w"),
        )
    )
    assert status == 1
    citus = load_results(tmp_path / "results")["citus"]
    assert citus["totals"]["failed"] == 1
    assert citus["failures"][0]["nodeid"].endswith("test_bad[citus]")
    assert parse_table((tmp_path / "compatibility.md").read_text())["other"]["citus"].startswith(
        FAILING
    )


# --------------------------------------------------------------------------- docker/


@pytest.mark.parametrize("name", ["postgres", "cockroachdb", "yugabytedb", "citus"])
def test_compose_file_matches_the_provisioning_spec(name: str) -> None:
    import yaml

    spec = backends.get(name).provisioning
    assert spec is not None
    compose = yaml.safe_load((ROOT / "docker" / f"{name}.yml").read_text())
    [service] = compose["services"].values()
    assert service["image"] == spec.image
    if spec.command:
        assert service["command"] == spec.command
    assert dict(service.get("environment") or {}) == dict(spec.env)
    assert any(str(p).endswith(f":{spec.port}") for p in service["ports"])


#: the PostgreSQL majors each Citus line runs on (Citus's release notes)
CITUS_POSTGRES = {12: "14–16", 13: "15–17", 14: "16–18"}


def test_the_citus_description_names_what_its_image_carries() -> None:
    """The description says which Citus and PostgreSQL the backend targets, and they
    are the ones its container image carries."""
    citus = backends.get("citus")
    assert citus.provisioning is not None
    tag = citus.provisioning.image.rpartition(":")[2]
    major = int(tag.split(".")[0])
    assert f"Citus {major} " in citus.description
    assert f"PostgreSQL {CITUS_POSTGRES[major]}" in citus.description

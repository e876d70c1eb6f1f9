"""What ``pip install qcore`` puts in a user's environment, tried as a user and as a
backend vendor would: a wheel built from this checkout, installed into a fresh virtual
environment, used from scratch projects outside the checkout.

Slow by nature (a wheel build, a venv, packages from the index), so everything runs on
one venv, built once for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN_DSN

pytestmark = [pytest.mark.feature("packaging"), pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent
#: what a user install must never bring: qcore's development and test toolchain
DEV_TOOLS = {
    "pytest",
    "pytest-asyncio",
    "mypy",
    "ruff",
    "hypothesis",
    "import-linter",
    "testcontainers",
    "docker",
    "pglast",
    "selenium",
    "httpx",
}
#: what only the dashboard extra (``qcore[web]``) brings
WEB_ONLY = {"starlette", "uvicorn", "jinja2", "prometheus-client", "python-multipart"}


def _run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """A command outside the checkout, with nothing of it on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("QCORE_TEST_DSN_EXAMPLE", None)
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


class Env:
    """A fresh virtual environment with the wheel installed, and a scratch directory."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root, self.wheel = root, wheel
        self.python = str(root / "venv" / "bin" / "python")
        self.scratch = root / "scratch"
        self.scratch.mkdir()

    def pip(self, *args: str) -> str:
        return _ok(_run([self.python, "-m", "pip", "install", "-q", *args], self.scratch))

    def installed(self) -> set[str]:
        out = _ok(_run([self.python, "-m", "pip", "list", "--format", "json"], self.scratch))
        return {str(p["name"]).lower().replace("_", "-") for p in json.loads(out)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _ok(
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
            out,
        )
    )
    (built,) = out.glob("qcore-*.whl")
    return built


@pytest.fixture(scope="module")
def user_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("venv")
    venv.create(root / "venv", with_pip=True)
    env = Env(root, wheel)
    env.pip(str(wheel))
    yield env
    shutil.rmtree(root, ignore_errors=True)


def test_the_wheel_holds_qcore_packages_and_no_self_loading_plugin(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    top_level = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"qcore", "qcore_backends"}
    assert "qcore/conformance/suite/test_job_lifecycle.py" in names  # the vendor's kit ships
    assert not [n for n in names if "node_modules" in n]
    # the dashboard ships whole: templates and assets inside the package, nothing fetched
    assert "qcore/web/templates/base.html" in names
    assert "qcore/web/static/board.js" in names
    groups = {line.strip("[]") for line in text.splitlines() if line.startswith("[")}
    assert groups == {"console_scripts", "qcore.backends"}  # no pytest11


def test_a_user_install_pulls_no_dev_tools(user_env: Env) -> None:
    installed = user_env.installed()
    assert "qcore" in installed and "psycopg" in installed
    assert not installed & DEV_TOOLS
    assert not installed & WEB_ONLY
    where = _ok(
        _run([user_env.python, "-c", "import qcore; print(qcore.__file__)"], user_env.scratch)
    )
    assert where.startswith(str(user_env.root))  # the wheel's copy, not the checkout's
    assert _ok(_run([user_env.python, "-m", "qcore", "--version"], user_env.scratch)).startswith(
        "qcore "
    )


def test_a_users_own_pytest_options_do_not_clash(user_env: Env) -> None:
    user_env.pip("pytest")
    project = user_env.scratch / "app"
    project.mkdir()
    (project / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--dsn', default='sqlite://')\n"
    )
    (project / "test_app.py").write_text(
        "import qcore\n\ndef test_dsn(request):\n"
        "    assert request.config.getoption('--dsn') == 'sqlite://'\n"
    )
    _ok(_run([user_env.python, "-m", "pytest", "-q"], project))
    help_text = _ok(_run([user_env.python, "-m", "pytest", "--help"], project))
    assert "--backend" not in help_text and "--matrix-report" not in help_text


def test_a_vendor_backend_passes_the_conformance_suite_and_is_marked_emulated(
    user_env: Env,
) -> None:
    user_env.pip(f"qcore[conformance] @ {user_env.wheel.as_uri()}")
    vendor = user_env.root / "qcore-backend-example"
    shutil.copytree(
        ROOT / "matrix" / "example_backend",
        vendor,
        ignore=shutil.ignore_patterns("build", "*.egg-info"),
    )
    user_env.pip("--no-deps", str(vendor))
    work = user_env.scratch / "vendor"
    work.mkdir()
    # the plugin, asked for by name, runs the suite (not this directory's tests)
    quick = _run(
        [
            user_env.python,
            "-m",
            "pytest",
            "-p",
            "qcore.conformance",
            "--backend",
            "example",
            "--dsn",
            ADMIN_DSN,
            "-q",
            "-k",
            "smoke",
        ],
        work,
    )
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "passed" in quick.stdout and "test_backend_smoke" not in quick.stderr
    # the kit's runner, on plain PostgreSQL: emulated, not real (three groups of the
    # suite: the matrix runs all of it against this backend from the checkout)
    run = _run(
        [
            user_env.python,
            "-m",
            "qcore.conformance",
            "run",
            "--backends",
            "example",
            "--dsn",
            ADMIN_DSN,
            "--pytest-args",
            "-k",
            "smoke or lifecycle or notify",
        ],
        work,
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    results = json.loads((work / "conformance-results" / "example.json").read_text())
    assert results["emulated"] is True and results["provisioner"] == "external"
    assert results["engine"].startswith("postgres")
    assert results["totals"]["passed"] >= 30 and not results["totals"]["failed"]
    assert results["totals"]["unsupported"] >= 1  # listen_notify is off
    table = (work / "compatibility.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| feature |"))
    assert header.split("|")[2].strip() == "example"
    example_cells = [
        line.split("|")[2] for line in table.splitlines() if line.startswith("| ") and "/" in line
    ]
    assert example_cells and all("🟡" in c or "⛔" in c or "—" in c for c in example_cells)
    assert "✅" not in "".join(example_cells)

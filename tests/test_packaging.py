"""What ``pip install qcore-queue`` puts in a user's environment, tried as a user and as
a backend vendor would: a wheel built from this checkout, installed into a fresh virtual
environment, used from scratch projects outside the checkout; the README's quickstart
among them, run as written against a database of its own.

Slow by nature (a wheel build, a venv, packages from the index), so everything runs on
one venv, built once for the module.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import venv
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import psycopg
import pytest

from qcore import __version__
from tests.conftest import ADMIN_DSN

pytestmark = [pytest.mark.feature("packaging"), pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent
#: the distribution's name on the package index (``qcore`` there is another project's);
#: the import package and the command stay ``qcore``
DISTRIBUTION = "qcore-queue"
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
#: what only the dashboard extra (``qcore-queue[web]``) brings
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
        self.python = self.bin("python")
        self.scratch = root / "scratch"
        self.scratch.mkdir()

    def bin(self, name: str) -> str:
        """A program of the environment (``python``, a console script)."""
        return str(self.root / "venv" / "bin" / name)

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
    (built,) = out.glob("*.whl")
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


def test_the_wheel_is_published_as_qcore_queue_and_imports_as_qcore(wheel: Path) -> None:
    assert wheel.name.startswith(f"qcore_queue-{__version__}-"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = f"qcore_queue-{__version__}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert metadata["Name"] == DISTRIBUTION and metadata["Version"] == __version__
    urls: dict[str, str] = {}
    for line in metadata.get_all("Project-URL") or []:
        label, _, url = line.partition(",")
        urls[label.strip()] = url.strip()
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in urls.values()), urls
    # ``all`` names the distribution itself (``qcore-queue[...]``), which the build
    # resolves into every other extra's requirements; ``qcore[...]`` would have stayed a
    # requirement on the index's other qcore
    requires = metadata.get_all("Requires-Dist") or []
    assert not [r for r in requires if r.startswith("qcore")], requires
    by_extra: dict[str, set[str]] = {}
    for requirement in requires:
        extra = re.search(r"extra == ['\"]([\w-]+)['\"]", requirement)
        if extra:
            by_extra.setdefault(extra[1], set()).add(requirement.split(";")[0].strip())
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"web", "conformance", "redis", "dev", "docs", "all"} <= extras == set(by_extra)
    assert set().union(*(r for e, r in by_extra.items() if e != "all")) == by_extra["all"]
    # the command and the import package keep the name qcore
    scripts = entry_points.split("[console_scripts]", 1)[1].split("[", 1)[0]
    assert [line.strip() for line in scripts.splitlines() if line.strip()] == [
        "qcore = qcore.cli:main"
    ]
    assert "qcore/__init__.py" in names and "qcore_queue/__init__.py" not in names


def test_a_user_install_pulls_no_dev_tools(user_env: Env) -> None:
    installed = user_env.installed()
    assert DISTRIBUTION in installed and "psycopg" in installed
    assert "qcore" not in installed  # the index's qcore is another project
    assert not installed & DEV_TOOLS
    assert not installed & WEB_ONLY
    where = _ok(
        _run([user_env.python, "-c", "import qcore; print(qcore.__file__)"], user_env.scratch)
    )
    assert where.startswith(str(user_env.root))  # the wheel's copy, not the checkout's
    assert _ok(_run([user_env.python, "-m", "qcore", "--version"], user_env.scratch)).startswith(
        "qcore "
    )
    # the console script, and the installed distribution's metadata under its own name
    assert _ok(_run([user_env.bin("qcore"), "--version"], user_env.scratch)).strip() == (
        f"qcore {__version__}"
    )
    read = f"from importlib.metadata import version; print(version({DISTRIBUTION!r}))"
    assert _ok(_run([user_env.python, "-c", read], user_env.scratch)).strip() == __version__


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
    user_env.pip(f"qcore-queue[conformance] @ {user_env.wheel.as_uri()}")
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


# -- the README's quickstart, as a new user runs it ---------------------------------------

#: a generous deadline for anything that waits on a server (two shared cores, busy)
DEADLINE = 180.0


@dataclass(frozen=True)
class Quickstart:
    """The README's quickstart: the module it says to save, and the commands it runs."""

    filename: str
    code: str
    commands: list[list[str]]

    def command(self, *start: str) -> list[str]:
        """The README's command that begins with ``start`` (there must be one)."""
        found = [c for c in self.commands if c[: len(start)] == list(start)]
        assert found, f"the README's quickstart runs no {' '.join(start)!r}: {self.commands}"
        return found[0]


def readme_quickstart() -> Quickstart:
    """The ``## Quickstart`` section of README.md: its first ```python block (whose first
    line, ``# name.py``, names the file it is saved as) and the commands of its ```sh
    blocks, comments off, but the ``pip install`` and ``export`` lines (the test
    installs from the wheel and points ``DATABASE_URL`` at a database of its own)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    heading = re.search(r"^## Quickstart$", text, re.MULTILINE)
    assert heading, "README.md has no '## Quickstart' section"
    section = re.split(r"^## ", text[heading.end() :], maxsplit=1, flags=re.MULTILINE)[0]
    blocks = re.findall(r"^```(\w+)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    python = [code for lang, code in blocks if lang == "python"]
    assert python, "the quickstart has no python block"
    first = python[0].splitlines()[0]
    named = re.fullmatch(r"# (\w+\.py)", first.strip())
    assert named, f"the quickstart's block does not open with '# name.py': {first!r}"
    commands = []
    for lang, code in blocks:
        if lang != "sh":
            continue
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] not in ("pip", "export"):
                commands.append(words)
    return Quickstart(named[1], python[0], commands)


def _wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[str], log: Path) -> None:
    """Until ``ready()``; fails with the process's output if it ends or the deadline passes."""
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {DEADLINE:.0f} s (exit status {proc.returncode}):\n"
                + log.read_text(errors="replace")
            )
        time.sleep(1)


def _stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM, as a supervisor sends it; the exit status (killed if it never exits)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("no exit within the deadline after SIGTERM") from None


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_the_readmes_quickstart_runs_as_written(user_env: Env, empty_database: str) -> None:
    """A new user's first hour: install with the dashboard extra, save the quickstart,
    run it, work its job with ``qcore work``, and look at it with ``qcore dashboard``."""
    quickstart = readme_quickstart()
    module = quickstart.filename.removesuffix(".py")
    user_env.pip(f"{DISTRIBUTION}[web] @ {user_env.wheel.as_uri()}")
    project = user_env.scratch / "quickstart"
    project.mkdir()
    (project / quickstart.filename).write_text(quickstart.code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        # the environment's python and qcore first, as an activated venv has them
        "PATH": f"{Path(user_env.python).parent}{os.pathsep}{env.get('PATH', '')}",
        "DATABASE_URL": empty_database,
        "PYTHONUNBUFFERED": "1",
    }
    for variable in ("QCORE_DATABASE_URL", "PGHOST", "PGDATABASE", "PGUSER", "PGPORT"):
        env.pop(variable, None)

    def jobs() -> list[str]:
        with psycopg.connect(empty_database, autocommit=True) as conn:
            return [str(row[0]) for row in conn.execute("SELECT state FROM pgboss.job")]

    # 1. the script: creates its queue, sends its job (nothing works it yet)
    send = quickstart.command("python", quickstart.filename)
    sent = subprocess.run(
        send, cwd=project, env=env, capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert jobs() == ["created"]

    # 2. qcore work on the quickstart's module, until the job is completed; then SIGTERM
    work = quickstart.command("qcore", "work")
    assert work[2].split(":")[0] == module, work
    log = project / "work.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            work, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
        try:
            _wait_for("the job completed", lambda: jobs() == ["completed"], worker, log)
        finally:
            status = _stop(worker)
    output = log.read_text(errors="replace")
    assert status == 0, output  # a graceful stop
    assert "qcore work: pid" in output and "stopped" in output, output

    # 3. the dashboard, on a free port: the overview, and the quickstart's queue listed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    board = [*quickstart.command("qcore", "dashboard"), "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    log = project / "dashboard.log"
    answers: dict[str, tuple[int, str]] = {}

    def answering() -> bool:
        try:
            answers["/"] = _get(f"{base}/")
        except OSError:
            return False
        return True

    with log.open("w") as out:
        server = subprocess.Popen(
            board, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
        try:
            _wait_for("the dashboard answering", answering, server, log)
            answers["/queues"] = _get(f"{base}/queues")
        finally:
            status = _stop(server)
    output = log.read_text(errors="replace")
    code, page = answers["/"]
    assert code == 200 and "Overview" in page, (code, page[:2000], output)
    code, page = answers["/queues"]
    with psycopg.connect(empty_database, autocommit=True) as conn:
        queues = [str(row[0]) for row in conn.execute("SELECT name FROM pgboss.queue")]
    assert code == 200 and queues and all(q in page for q in queues), (code, queues, output)
    # uvicorn shuts down cleanly on SIGTERM, then ends by the signal it caught (so its
    # parent knows why), as newer versions do; older ones exit 0
    assert status in (0, -signal.SIGTERM), output
    assert "shutdown complete" in output.lower(), output

"""The real pg-boss, driven from Python tests.

``run(command)`` installs the pinned pg-boss (``package.json`` and
``package-lock.json`` next to this file) once into a cache directory —
``$QCORE_CACHE_DIR/interop-<hash>`` or ``~/.cache/qcore/interop-<hash>``, the
hash covering both files, so a new pin gets a new directory — and runs
``pgboss_cli.mjs`` there with one JSON command (see that script for the
format). Tests skip when Node.js or npm is missing (:func:`missing_tools`);
a failing install is an error, not a skip.

>>> result = run_ok({
...     "connectionString": dsn, "schema": "pgboss", "migrate": False,
...     "actions": [{"op": "start"}, {"op": "createQueue", "args": ["q"]},
...                 {"op": "send", "args": ["q", {"a": 1}]}, {"op": "stop"}],
... })
>>> result[2]["result"]   # the id pg-boss returned from send
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

__all__ = [
    "PACKAGE_FILES",
    "PgBossError",
    "Stepped",
    "cache_dir",
    "ensure_installed",
    "interop",
    "missing_tools",
    "run",
    "run_ok",
]

HERE = Path(__file__).resolve().parent
PACKAGE_FILES = ("package.json", "package-lock.json")
SCRIPT = "pgboss_cli.mjs"
INSTALL_TIMEOUT_SECONDS = 600.0
_MARKER = ".qcore-installed"


class PgBossError(Exception):
    """The pg-boss run failed; ``result`` is its JSON output when it produced one."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result


def missing_tools() -> str | None:
    """Why pg-boss cannot run here (no node, no npm), or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (the pg-boss interop tests need Node.js and npm)"
    return None


def _pin(release: str | None) -> Path:
    """The directory of a pin's package files: the current pg-boss, or an older release
    (``releases/<version>``) for the upgrade tests."""
    if release is None:
        return HERE
    pin = HERE / "releases" / release
    if not (pin / "package.json").is_file():
        raise PgBossError(f"no pin of pg-boss {release} in {HERE / 'releases'}")
    return pin


def _digest(release: str | None = None) -> str:
    h = hashlib.sha256()
    for name in PACKAGE_FILES:
        h.update(name.encode() + b"\0" + (_pin(release) / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_dir(release: str | None = None) -> Path:
    """Where this pin of pg-boss (or of an older ``release``) is (or will be) installed."""
    root = os.environ.get("QCORE_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "qcore"
    return base / f"interop-{_digest(release)}"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_installed(release: str | None = None) -> Path:
    """Install the pinned packages (of an older ``release``) into :func:`cache_dir` unless
    already there (safe to call from several processes at once); the directory."""
    target = cache_dir(release)
    if (target / _MARKER).exists():
        return target
    with _file_lock(target.with_name(target.name + ".lock")):
        if (target / _MARKER).exists():
            return target
        target.mkdir(parents=True, exist_ok=True)
        for name in PACKAGE_FILES:
            shutil.copyfile(_pin(release) / name, target / name)
        done = _run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            target,
            INSTALL_TIMEOUT_SECONDS,
            f"npm ci in {target} took over {{:g}} s",
        )
        if done.returncode != 0:
            raise PgBossError(
                f"npm ci in {target} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
            )
        (target / _MARKER).write_text(_digest(release) + "\n")
    return target


def _run(
    args: list[str], cwd: Path, timeout: float, too_slow: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``args`` in ``cwd``, its output captured; ``PgBossError(too_slow)`` past ``timeout``."""
    try:
        return subprocess.run(
            args, input=stdin, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PgBossError(too_slow.format(exc.timeout)) from exc


def run(
    command: Mapping[str, Any], *, timeout: float = 120.0, release: str | None = None
) -> dict[str, Any]:
    """Run one command through ``pgboss_cli.mjs`` (on an older pg-boss ``release``); its
    JSON output (``ok``, ``results``, ``errors``). Raises ``PgBossError`` only when the
    script produced no output."""
    target = ensure_installed(release)
    shutil.copyfile(HERE / SCRIPT, target / SCRIPT)
    done = _run(
        ["node", str(target / SCRIPT)],
        target,
        timeout,
        "pg-boss did not finish within {:g} s",
        stdin=json.dumps(command),
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise PgBossError(
            f"pg-boss printed nothing (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise PgBossError(f"pg-boss printed no JSON: {lines[-1][:500]}") from exc
    return result


def run_ok(
    command: Mapping[str, Any], *, timeout: float = 120.0, release: str | None = None
) -> list[dict[str, Any]]:
    """Like :func:`run`, but raise ``PgBossError`` unless every action succeeded; the
    per-action results."""
    result = run(command, timeout=timeout, release=release)
    if not result.get("ok"):
        failed = [r for r in result.get("results", []) if "error" in r]
        detail = failed[-1]["error"] if failed else result.get("errors")
        raise PgBossError(f"pg-boss failed: {json.dumps(detail)[:3000]}", result)
    return list(result["results"])


STEPPED_SCRIPT = "pgboss_stepped.mjs"


class Stepped:
    """A pg-boss instance on a TestClock attached to the schema, stepped from here
    (``pgboss_stepped.mjs``): ``tick(ms)`` moves the shared clock and returns once
    pg-boss has run what came due; ``stop()`` ends it, returning the errors it emitted.
    Sessions that set ``pgboss.test_clock = 'on'`` read the same ``job_now()``."""

    def __init__(self, spec: Mapping[str, Any], *, timeout: float = 60.0) -> None:
        target = ensure_installed()
        shutil.copyfile(HERE / STEPPED_SCRIPT, target / STEPPED_SCRIPT)
        self.timeout = timeout
        self._proc = subprocess.Popen(
            ["node", str(target / STEPPED_SCRIPT)],
            cwd=target,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._say(json.dumps(spec), "ready")

    def _say(self, line: str, answer: str | None) -> str:
        """Send ``line``; the next line printed (which must be ``answer`` when given)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        got = self._proc.stdout.readline().strip()
        if answer is not None and got != answer:
            self._proc.kill()
            _, err = self._proc.communicate(timeout=self.timeout)
            raise PgBossError(f"pg-boss answered {got!r} to {line[:80]!r}: {err.strip()[-2000:]}")
        return got

    def tick(self, ms: int) -> None:
        self._say(f"tick {ms}", "ticked")

    def stop(self) -> list[str]:
        got = self._say("stop", None)
        self._proc.wait(self.timeout)
        errors: list[str] = json.loads(got)["errors"]
        return errors


def interop(test: T) -> T:
    """Mark one test as :func:`interop_marks` marks a whole module."""
    marked: Any = test
    for mark in interop_marks():
        marked = mark(marked)
    return marked  # type: ignore[no-any-return]


def interop_marks() -> list[pytest.MarkDecorator]:
    """The marks of a test module that runs the real pg-boss: its feature group, the
    tools it needs, and a skip naming what is missing when Node.js or npm is not here."""
    missing = missing_tools()
    return [
        pytest.mark.feature("interop"),
        pytest.mark.node,
        pytest.mark.postgres,
        pytest.mark.skipif(missing is not None, reason=missing or ""),
    ]


def run_actions(dsn: str, ctx: Any, *actions: dict[str, Any]) -> list[Any]:
    """Run pg-boss actions (after ``start``) on a qcore ``Context``'s schema; each
    action's result."""
    results = run_ok(
        {
            "connectionString": dsn,
            "schema": ctx.schema_spec,
            "migrate": False,
            "actions": [{"op": "start"}, *actions, {"op": "stop"}],
        }
    )
    return [r.get("result") for r in results[1:-1]]


async def in_thread(dsn: str, ctx: Any, *actions: dict[str, Any]) -> list[Any]:
    """:func:`run_actions` off the event loop."""
    return await asyncio.to_thread(run_actions, dsn, ctx, *actions)

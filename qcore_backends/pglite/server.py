"""Run PGlite as a local PostgreSQL server.

Node.js runs ``pglite-server`` from ``@electric-sql/pglite-socket``, installed once
per user into a cache directory.

>>> with PGliteServer(data_dir="./jobs-db") as server:
...     boss = Boss(server.url, backend="pglite")

The npm packages are pinned by ``package.json`` and ``package-lock.json`` next
to this file. On first use they are copied into
``$QCORE_CACHE_DIR/pglite-<hash>`` (default: the per-user cache directory, e.g.
``~/.cache/qcore``) and ``npm ci`` runs there; the hash covers both files, so a
version bump installs into a fresh directory. A file lock keeps two processes
from installing at once.

PGlite is one PostgreSQL session however many sockets connect to it, so use it
through qcore's PGlite adapter (one connection, everything serialised).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Any

from qcore.errors import ConfigError, NotInstalledError, QcoreError
from qcore_backends.pglite.filelock import acquire, file_lock, release

__all__ = ["MIN_NODE_MAJOR", "PGliteServer", "default_cache_dir"]

#: the oldest Node.js major version pglite-socket runs on
MIN_NODE_MAJOR = 18

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_FILES = ("package.json", "package-lock.json")
SERVER_SCRIPT = Path(
    "node_modules", "@electric-sql", "pglite-socket", "dist", "scripts", "server.js"
)
INSTALLED_MARKER = ".qcore-installed"
DATA_DIR_LOCK = ".qcore-pglite.lock"

_NODE_HELP = (
    f"Install Node.js {MIN_NODE_MAJOR}+ with npm (from https://nodejs.org or your OS package"
    " manager, e.g. `apt install nodejs npm`, `brew install node`,"
    " `winget install OpenJS.NodeJS`), or pass a PostgreSQL connection string instead of"
    " using the embedded PGlite engine."
)

# Preloaded into the Node process: when the Python process that started the
# server goes away (even by SIGKILL) its end of the stdin pipe closes, and the
# server shuts itself down the same way it does on SIGTERM (PGlite closed cleanly).
_PARENT_WATCH_JS = """\
'use strict';
// Written by qcore: stop pglite-server cleanly when the process that started it is gone.
let parentGone = false;
function onParentGone() {
  if (parentGone) return;
  parentGone = true;
  if (process.listenerCount('SIGTERM') > 0) {
    process.emit('SIGTERM', 'SIGTERM'); // the server's own handler: close PGlite, then exit
  } else {
    process.exit(0); // still starting: nothing committed yet
  }
}
process.stdin.on('end', onParentGone);
process.stdin.on('error', onParentGone);
process.stdin.resume();
"""
_PARENT_WATCH_FILE = "qcore-parent-watch.cjs"

log = logging.getLogger("qcore")

_LISTENING = re.compile(r"PGLiteSocketServer listening on (\{.*\})")


def default_cache_dir() -> Path:
    """``$QCORE_CACHE_DIR``, else the per-user cache directory of the platform plus ``qcore``."""
    env = os.environ.get("QCORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "qcore" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "qcore"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qcore"


def package_hash() -> str:
    """A short hash of the pinned npm package files: the cache subfolder's key."""
    digest = hashlib.sha256()
    for name in PACKAGE_FILES:
        digest.update(name.encode())
        digest.update((PACKAGE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def _tail(path: Path | None, max_lines: int = 40) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-max_lines:])


def _with_log(message: str, log: str) -> str:
    return f"{message}\n--- log tail ---\n{log}" if log.strip() else message


def _run_tool(args: list[str], *, cwd: Path | None, timeout: float) -> tuple[int, str]:
    """Run a command; its exit code and combined output."""
    try:
        done = subprocess.run(
            args,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else ""
        return -1, f"{output}\n(timed out after {timeout:.0f}s)"
    except OSError as exc:
        return -1, str(exc)
    return done.returncode, done.stdout.decode(errors="replace")


class PGliteServer:
    """PGlite served over the PostgreSQL wire protocol by a Node.js child process.

    ``data_dir=None`` keeps the database in memory (gone on :meth:`stop`); a
    directory keeps it on disk across restarts (one server per directory at a
    time). ``port=0`` lets the server pick a free port; :attr:`url` tells it.
    ``node`` and ``npm`` name the executables (default: found on ``PATH``).
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_seconds: float = 60.0,
        shutdown_timeout_seconds: float = 30.0,
        install_timeout_seconds: float = 600.0,
        cache_dir: str | os.PathLike[str] | None = None,
        node: str | None = None,
        npm: str | None = None,
        max_connections: int = 100,
        debug: int = 0,
    ) -> None:
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"port must be an integer 0..65535 (0 = any free port), got {port!r}")
        if not host:
            raise ConfigError("host must be a host name or address to bind to, e.g. 127.0.0.1")
        for name, value in (
            ("startup_timeout_seconds", startup_timeout_seconds),
            ("shutdown_timeout_seconds", shutdown_timeout_seconds),
            ("install_timeout_seconds", install_timeout_seconds),
        ):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigError(
                f"max_connections must be a positive integer, got {max_connections!r}"
            )
        if not isinstance(debug, int) or not 0 <= debug <= 5:
            raise ConfigError(f"debug must be an integer 0..5, got {debug!r}")
        self.data_dir = None if data_dir is None else Path(data_dir).expanduser().resolve()
        self.host = host
        self.port = port
        self.startup_timeout_seconds = float(startup_timeout_seconds)
        self.shutdown_timeout_seconds = float(shutdown_timeout_seconds)
        self.install_timeout_seconds = float(install_timeout_seconds)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.max_connections = max_connections
        self.debug = debug
        self._node_option = node
        self._npm_option = npm
        self._node: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, PGliteServer] | None = None
        self._log_path: Path | None = None
        self._url: str | None = None
        self._dir_lock: IO[bytes] | None = None
        #: how the last server process ended (0 after a clean stop), None while it runs
        self.exit_code: int | None = None
        self._mutex = threading.RLock()

    # -- Server protocol ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """``postgresql://postgres@HOST:PORT/postgres?sslmode=disable`` while running."""
        if self._url is None:
            raise QcoreError("the PGlite server is not running; call start() first")
        return self._url

    def __enter__(self) -> PGliteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = "memory" if self.data_dir is None else str(self.data_dir)
        state = self._url or "stopped"
        return f"<PGliteServer {where} {state}>"

    @property
    def install_dir(self) -> Path:
        """Where the pinned npm packages are installed."""
        return self.cache_dir / f"pglite-{package_hash()}"

    @property
    def log_path(self) -> Path | None:
        """The server's output while it runs (removed by :meth:`stop`)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, max_lines: int = 40) -> str:
        return _tail(self._log_path, max_lines)

    # -- Node.js and npm ---------------------------------------------------------------

    def node_executable(self) -> str:
        """The Node.js executable, checked to be version 18 or newer."""
        if self._node is not None:
            return self._node
        node = (
            _which(self._node_option)
            if self._node_option
            else (shutil.which("node") or shutil.which("nodejs"))
        )
        if node is None:
            where = (
                f"{self._node_option!r} does not exist"
                if self._node_option
                else ("`node` is not on PATH")
            )
            raise ConfigError(
                f"the embedded PGlite engine needs Node.js, but {where}. {_NODE_HELP}"
            )
        code, output = _run_tool([node, "--version"], cwd=None, timeout=30)
        match = re.match(r"\s*v?(\d+)\.", output)
        if code != 0 or match is None:
            raise ConfigError(
                f"cannot run Node.js at {node} (`node --version` said: {output.strip()[:200]!r})."
                f" {_NODE_HELP}"
            )
        if int(match.group(1)) < MIN_NODE_MAJOR:
            raise ConfigError(
                f"the embedded PGlite engine needs Node.js {MIN_NODE_MAJOR} or newer; {node} is"
                f" {output.strip()}. {_NODE_HELP}"
            )
        self._node = node
        return node

    def npm_executable(self) -> str:
        if self._npm_option:
            npm = _which(self._npm_option)
            where = f"{self._npm_option!r} does not exist"
        else:
            node_dir = Path(self.node_executable()).parent
            npm = _which(str(node_dir / "npm")) or shutil.which("npm")
            where = "`npm` is not on PATH"
        if npm is None:
            raise ConfigError(
                f"the embedded PGlite engine installs its Node.js packages with npm, but {where}."
                f" {_NODE_HELP}"
            )
        return npm

    def ensure_installed(self) -> Path:
        """Install the pinned npm packages into the cache (first use only).

        Returns the path of the ``pglite-server`` script.
        """
        target = self.install_dir
        script = target / SERVER_SCRIPT
        if self._installed(target):
            return script
        self.node_executable()
        npm = self.npm_executable()
        lock = target.parent / f"{target.name}.lock"
        with file_lock(lock, timeout=self.install_timeout_seconds, what="installing PGlite"):
            if self._installed(target):  # another process finished while we waited
                return script
            target.mkdir(parents=True, exist_ok=True)
            (target / INSTALLED_MARKER).unlink(missing_ok=True)
            for name in PACKAGE_FILES:
                shutil.copyfile(PACKAGE_DIR / name, target / name)
            flags = ["--no-audit", "--no-fund", "--ignore-scripts", "--omit=dev"]
            code, output = _run_tool(
                [npm, "ci", *flags], cwd=target, timeout=self.install_timeout_seconds
            )
            if code != 0:
                code, more = _run_tool(
                    [npm, "install", *flags], cwd=target, timeout=self.install_timeout_seconds
                )
                output = f"{output}\n$ npm install\n{more}"
            if code != 0 or not script.is_file():
                tail = "\n".join(output.strip().splitlines()[-30:])
                raise NotInstalledError(
                    _with_log(
                        f"could not install PGlite's npm packages into {target} (npm ci and npm"
                        " install failed). Check that the npm registry is reachable (or set"
                        " QCORE_CACHE_DIR to a directory where they are installed), or pass a"
                        " PostgreSQL connection string instead.",
                        tail,
                    )
                )
            (target / INSTALLED_MARKER).write_text(package_hash() + "\n")
        return script

    @staticmethod
    def _installed(target: Path) -> bool:
        marker = target / INSTALLED_MARKER
        try:
            return (
                marker.read_text().strip() == package_hash() and (target / SERVER_SCRIPT).is_file()
            )
        except OSError:
            return False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> PGliteServer:
        """Start the server and wait until it answers a query.

        The npm packages are installed first if needed. Starting a running server does
        nothing.
        """
        with self._mutex:
            if self._proc is not None and self._proc.poll() is None and self._url is not None:
                return self
            self._discard()
            node = self.node_executable()
            script = self.ensure_installed()
            home = self.install_dir
            watcher = self._write_watcher(home)
            if self.data_dir is not None:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                self._dir_lock = acquire(
                    self.data_dir / DATA_DIR_LOCK,
                    timeout=0,
                    what=f"PGlite data_dir {self.data_dir} is in use by another PGlite server",
                )
            fd, log_name = tempfile.mkstemp(prefix="qcore-pglite-", suffix=".log")
            self._log_path = Path(log_name)
            args = [
                node,
                "--require",
                str(watcher),
                str(script),
                f"--db={self.data_dir if self.data_dir is not None else 'memory://'}",
                f"--host={self.host}",
                f"--port={self.port}",
                f"--max-connections={self.max_connections}",
                f"--debug={self.debug}",
            ]
            popen_extra: dict[str, Any] = {}
            if sys.platform == "win32":
                popen_extra["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
            else:
                popen_extra["start_new_session"] = True  # Ctrl-C reaches Python, which stops it
            try:
                with os.fdopen(fd, "wb") as log:
                    self._proc = subprocess.Popen(
                        args,
                        cwd=home,
                        stdin=subprocess.PIPE,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        **popen_extra,
                    )
            except OSError as exc:
                self._discard()
                raise ConfigError(f"could not run Node.js at {node}: {exc}. {_NODE_HELP}") from exc
            self.exit_code = None
            # Stops the process on stop(), when this object is collected, or at
            # interpreter exit (weakref.finalize runs pending finalizers from atexit).
            self._finalizer = weakref.finalize(
                self, _terminate, self._proc, self.shutdown_timeout_seconds, self._log_path
            )
            try:
                self._url = self._wait_ready()
            except _StartFailed as exc:
                tail = self.log_tail()
                self._discard()
                raise QcoreError(_with_log(str(exc), tail)) from None
            except BaseException:
                self._discard()
                raise
            return self

    def _wait_ready(self) -> str:
        """Wait for the "listening" line, then for a query to succeed.

        The line comes once PGlite is initialised; with ``port=0`` it tells the port.
        """
        import psycopg

        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_seconds
        delay = 0.02
        last: Exception | None = None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise _StartFailed(f"the PGlite server exited with code {code} while starting")
            port = self._listening_port()
            if port is not None:
                url = self._make_url(port)
                try:
                    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                        row = conn.execute("SELECT version()").fetchone()
                except psycopg.Error as exc:
                    last = exc
                else:
                    version = str(row[0]) if row else ""
                    if "PGlite" not in version:
                        raise _StartFailed(
                            f"{url} answered, but not as PGlite ({version[:80]!r}); is another"
                            " server on that port?"
                        )
                    return url
            if time.monotonic() >= deadline:
                raise _StartFailed(
                    f"the PGlite server did not accept a connection within"
                    f" {self.startup_timeout_seconds:g}s"
                    + (f" (last error: {last})" if last is not None else "")
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _listening_port(self) -> int | None:
        match = _LISTENING.search(self.log_tail(200))
        if match is None:
            return None
        try:
            port = json.loads(match.group(1)).get("port")
        except ValueError:
            return None
        return port if isinstance(port, int) and port > 0 else None

    def _make_url(self, port: int) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"postgresql://postgres@{host}:{port}/postgres?sslmode=disable"

    def stop(self) -> None:
        """Stop the server.

        On SIGTERM it closes PGlite cleanly (PostgreSQL shuts down with a checkpoint, so
        what was committed is in ``data_dir`` when this returns); after
        ``shutdown_timeout_seconds`` it is killed. Stopping a stopped server does nothing.
        """
        with self._mutex:
            self._discard()

    def _discard(self) -> None:
        """Stop the process if it runs and release everything it held."""
        self._url = None
        if self._finalizer is not None:
            self.exit_code = self._finalizer()  # runs _terminate, once
            self._finalizer = None
        self._proc = None
        if self._dir_lock is not None:
            release(self._dir_lock)
            self._dir_lock = None
        self._log_path = None

    def _write_watcher(self, directory: Path) -> Path:
        path = directory / _PARENT_WATCH_FILE
        try:
            if path.read_text() == _PARENT_WATCH_JS:
                return path
        except OSError:
            pass
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(_PARENT_WATCH_JS)
        os.replace(tmp, path)
        return path


class _StartFailed(Exception):
    """The server did not come up; the message says how."""


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    path = Path(name).expanduser()
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def _terminate(proc: subprocess.Popen[bytes], timeout: float, log_path: Path | None) -> int | None:
    """Stop a server process; its exit code.

    SIGTERM (the server closes PGlite cleanly and exits 0), then SIGKILL if it is still
    there after ``timeout``. Also run at interpreter exit.
    """
    try:
        if proc.poll() is None:
            if sys.platform == "win32":
                # No SIGTERM on Windows: closing stdin makes the preloaded watcher run
                # the server's own shutdown.
                _close_stdin(proc)
            else:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning(
                    "the PGlite server (pid %s) did not stop within %gs; killing it",
                    proc.pid,
                    timeout,
                )
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        return proc.returncode
    finally:
        _close_stdin(proc)
        if log_path is not None:
            with contextlib.suppress(OSError):
                log_path.unlink()


def _close_stdin(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()

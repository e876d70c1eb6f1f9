"""The local PostgreSQL: the server at ``QCORE_TEST_DSN`` or a throw-away ``initdb``
cluster, a database of its own per session, and the emulation of other engines on it."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psycopg

from qcore.backend import Backend
from qcore.conformance.provisioners.base import (
    NotAvailable,
    Provisioner,
    admin_dsn,
    drop_database,
    execute,
    first_line,
    throwaway_name,
    to_url,
)
from qcore.identifiers import quote


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_tool(name: str, pg_ctl: str | None = None) -> str | None:
    """A PostgreSQL program, preferably from the directory ``pg_ctl`` lives in."""
    ctl = pg_ctl or shutil.which("pg_ctl")
    if ctl is not None:
        sibling = Path(ctl).resolve().parent / name
        if sibling.is_file() and os.access(sibling, os.X_OK):
            return str(sibling)
    return shutil.which(name)


class TempCluster:
    """A throw-away PostgreSQL cluster: ``initdb`` into a temporary directory, started
    by ``pg_ctl`` on a free port of 127.0.0.1 (trust authentication, superuser
    ``postgres``, durability off), deleted by :meth:`stop`.

    PostgreSQL refuses to run as root; as root, the cluster runs as ``run_as``
    (default: the ``postgres`` account, else ``nobody``).
    """

    def __init__(
        self, *, port: int = 0, pg_ctl: str | None = None, run_as: str | None = None
    ) -> None:
        self.port = port
        self.pg_ctl = pg_ctl or shutil.which("pg_ctl")
        self.run_as = run_as
        self.directory: Path | None = None
        self._url: str | None = None

    @staticmethod
    def available() -> bool:
        """Whether ``pg_ctl`` and ``initdb`` are on this machine."""
        return shutil.which("pg_ctl") is not None and _pg_tool("initdb") is not None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the throw-away cluster is not running; call start() first")
        return self._url

    def __enter__(self) -> TempCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _user(self) -> str | None:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return None
        if self.run_as:
            return self.run_as
        import pwd

        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                return name
        raise RuntimeError("running as root and no unprivileged account to run PostgreSQL as")

    def _run(self, args: list[str], user: str | None, timeout: float = 120) -> None:
        done = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
            user=user,
            cwd=self.directory,
        )
        if done.returncode != 0:
            output = done.stdout.decode(errors="replace").strip()
            raise RuntimeError(f"{Path(args[0]).name} failed ({done.returncode}): {output[-1500:]}")

    def start(self) -> TempCluster:
        if self._url is not None:
            return self
        if self.pg_ctl is None:
            raise FileNotFoundError("pg_ctl is not on PATH")
        initdb = _pg_tool("initdb", self.pg_ctl)
        if initdb is None:
            raise FileNotFoundError("initdb is not on PATH")
        user = self._user()
        self.directory = Path(tempfile.mkdtemp(prefix="qcore-pg-"))
        try:
            if user is not None:
                shutil.chown(self.directory, user=user)
            data = self.directory / "data"
            self._run(
                [
                    initdb,
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--locale=C",
                ],
                user,
            )
            port = self.port or free_port()
            options = (
                f"-p {port} -k {self.directory} -c listen_addresses=127.0.0.1"
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            self._run(
                [
                    self.pg_ctl,
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(self.directory / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
                user,
            )
            self.port = port
            self._url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        except BaseException:
            self._remove()
            raise
        return self

    def stop(self) -> None:
        if self.directory is None:
            return
        data = self.directory / "data"
        if self._url is not None and self.pg_ctl is not None:
            with contextlib.suppress(Exception):
                self._run(
                    [self.pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], self._user()
                )
        self._url = None
        self._remove()

    def _remove(self) -> None:
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


class LocalServer:
    """The local PostgreSQL that local and emulation provisioners create their
    databases in: the server at ``admin_dsn`` (default ``QCORE_TEST_DSN``), or,
    when none answers and ``pg_ctl`` is here, one :class:`TempCluster`.

    ``dsn`` is the server's admin DSN. ``cluster``: ``"auto"`` (a cluster only when
    no server answers), ``"always"`` or ``"never"``. Reference counted: the cluster
    stops when the last user releases it.
    """

    def __init__(self, dsn: str | None = None, *, cluster: str = "auto") -> None:
        if cluster not in ("auto", "always", "never"):
            raise ValueError(f"cluster must be 'auto', 'always' or 'never', got {cluster!r}")
        self.dsn = dsn or admin_dsn()
        self.cluster_mode = cluster
        self.cluster: TempCluster | None = None
        self._admin: str | None = None
        self._refs = 0
        self._lock = threading.Lock()

    @property
    def admin_url(self) -> str:
        if self._admin is None:
            raise RuntimeError("the local server is not acquired")
        return self._admin

    def describe(self) -> str:
        if self.cluster is not None:
            return f"throw-away cluster on port {self.cluster.port}"
        return "server at " + to_url(self.dsn, password=None)

    def acquire(self) -> str:
        """The admin URL, finding (or starting) the server on first use."""
        with self._lock:
            if self._refs == 0:
                self._admin = self._find()
            self._refs += 1
            return self.admin_url

    def release(self) -> None:
        with self._lock:
            if self._refs == 0:
                return
            self._refs -= 1
            if self._refs == 0:
                cluster, self.cluster = self.cluster, None
                self._admin = None
                if cluster is not None:
                    cluster.stop()

    def _find(self) -> str:
        why = ""
        if self.cluster_mode != "always":
            try:
                execute(self.dsn, "SELECT 1")
                return self.dsn
            except psycopg.Error as exc:
                where = to_url(self.dsn, password=None)
                why = f"no PostgreSQL answers at {where} ({first_line(exc)})"
            if self.cluster_mode == "never":
                raise NotAvailable("local PostgreSQL", why)
        if not TempCluster.available():
            raise NotAvailable(
                "local PostgreSQL",
                (why + " and " if why else "") + "pg_ctl/initdb are not on PATH for a throw-away"
                " cluster",
            )
        cluster = TempCluster()
        try:
            cluster.start()
        except Exception as exc:
            raise NotAvailable(
                "local PostgreSQL",
                (why + "; " if why else "") + f"a throw-away cluster did not start: {exc}",
            ) from exc
        self.cluster = cluster
        return cluster.url


_shared_servers: dict[str, LocalServer] = {}


_shared_lock = threading.Lock()


def local_server(admin: str | None = None) -> LocalServer:
    """The process-wide :class:`LocalServer` for ``admin`` (default ``QCORE_TEST_DSN``)."""
    key = admin or admin_dsn()
    with _shared_lock:
        server = _shared_servers.get(key)
        if server is None:
            server = _shared_servers[key] = LocalServer(key)
        return server


class LocalProvisioner(Provisioner):
    """A throw-away database (dropped at stop) on the local PostgreSQL: the server at
    ``QCORE_TEST_DSN``, or a throw-away ``initdb`` + ``pg_ctl`` cluster when no
    server answers (see :class:`LocalServer`)."""

    kind = "local"

    def __init__(self, backend: Backend, server: LocalServer | None = None) -> None:
        super().__init__(backend)
        self.server = server or local_server()
        self.database: str | None = None
        self._admin: str | None = None
        #: drop the database from a detached process at stop, not waiting for it: a
        #: ``DROP DATABASE`` waits for the checkpoint it forces, seconds to tens of seconds
        #: on a busy server (a test session's end sets it; a throw-away cluster is
        #: removed whole anyway)
        self.detach_drop = False

    def describe(self) -> str:
        return f"local PostgreSQL ({self.server.describe()})"

    def _start(self) -> str:
        try:
            admin = self.server.acquire()
        except NotAvailable as exc:
            raise NotAvailable(self.backend.name, exc.reason) from exc
        try:
            database = throwaway_name()
            execute(admin, f"CREATE DATABASE {quote(database)}")
        except BaseException:
            self.server.release()
            raise
        self._admin, self.database = admin, database
        return to_url(admin, dbname=database)

    def _stop(self) -> None:
        admin, database = self._admin, self.database
        self._admin = self.database = None
        try:
            if admin and database:
                if self.detach_drop and self.server.cluster is None:
                    _drop_detached(admin, database)
                else:
                    drop_database(admin, database)
        finally:
            self.server.release()


def _drop_detached(admin: str, database: str) -> None:
    """Drop ``database`` from a process of its own that outlives this one (the admin
    URL, which may hold a password, goes through its environment, not its arguments)."""
    code = (
        "import os\n"
        "from qcore.conformance.provisioners.base import drop_database\n"
        "drop_database(os.environ['QCORE_DROP_ADMIN'], os.environ['QCORE_DROP_DATABASE'])\n"
    )
    subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "QCORE_DROP_ADMIN": admin, "QCORE_DROP_DATABASE": database},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class EmulationProvisioner(Provisioner):
    """Real PostgreSQL (a :class:`LocalProvisioner`) standing in for an engine that
    cannot run here. The URL carries the backend's session settings
    (``qcore.conformance.guard.emulation_conninfo``); whoever hands out adapters for it wraps
    them in ``qcore.conformance.guard.GuardedDatabase``."""

    kind = "emulation"

    def __init__(self, backend: Backend, server: LocalServer | None = None) -> None:
        super().__init__(backend)
        self.local = LocalProvisioner(backend, server)

    def describe(self) -> str:
        return f"emulated on {self.local.describe()}"

    def _start(self) -> str:
        from qcore.conformance.guard import emulation_conninfo

        self.local.start()
        try:
            return to_url(emulation_conninfo(self.local.url, self.backend))
        except BaseException:
            self.local.stop()
            raise

    def _stop(self) -> None:
        self.local.stop()

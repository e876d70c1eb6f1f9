"""Provisioners: where the compatibility matrix gets a database for one backend.

Every provisioner has the same small interface (the ``qcore.backend.Server``
protocol plus two read-only facts):

>>> with best_provisioner(backends.get("cockroachdb")) as p:
...     p.url             # a database of its own for this session
...     p.kind            # "container", "local", "pglite", "emulation" or "external"
...     p.engine_version  # SELECT version()

``start()`` raises :class:`NotAvailable` when the engine cannot run here
(no Docker daemon, no Node.js, no PostgreSQL and no ``pg_ctl``): the matrix
then reports the backend as *not available here*, never as passed.
``stop()`` drops what ``start()`` created (a throw-away database, schema,
cluster or container) and may be called any number of times.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote as urlquote
from urllib.parse import urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from typing_extensions import Self

from qcore.backend import Backend, EngineIdentity, Kind, ProvisioningSpec, Server
from qcore.engine import has_markers, identity_of
from qcore.identifiers import quote
from qcore.sql import engine as engine_sql

__all__ = [
    "DEFAULT_ADMIN_DSN",
    "KINDS",
    "ContainerProvisioner",
    "EmulationProvisioner",
    "ExternalProvisioner",
    "LocalProvisioner",
    "LocalServer",
    "NotAvailable",
    "PGliteProvisioner",
    "ProvisionError",
    "Provisioner",
    "TempCluster",
    "best_provisioner",
    "docker_available",
    "dsn_env_var",
    "dsn_from_env",
    "is_postgres_like",
    "local_server",
    "to_url",
]

#: the provisioner kinds, as results and the table name them
KINDS = ("container", "local", "pglite", "emulation", "external")
#: kinds whose results count as the real engine (everything but emulation)
REAL_KINDS = frozenset({"container", "local", "pglite", "external"})

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
CONNECT_TIMEOUT = 5


class ProvisionError(Exception):
    """An engine the user pointed at (``--dsn``) does not answer: an error, not a skip."""


class NotAvailable(Exception):
    """The backend's engine cannot be provisioned here; ``reason`` says why."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend} not available here: {reason}")
        self.backend = backend
        self.reason = reason


# --------------------------------------------------------------------------- helpers


def admin_dsn() -> str:
    """The PostgreSQL server local provisioners use: ``QCORE_TEST_DSN`` or the default."""
    return os.environ.get("QCORE_TEST_DSN") or DEFAULT_ADMIN_DSN


def dsn_env_var(backend_name: str) -> str:
    """``QCORE_TEST_DSN_<BACKEND>``: upper case, other characters as underscores."""
    return "QCORE_TEST_DSN_" + re.sub(r"[^A-Za-z0-9]", "_", backend_name).upper()


def dsn_from_env(backend_name: str) -> str | None:
    """The DSN a user gave for the backend's engine in the environment, if any."""
    return os.environ.get(dsn_env_var(backend_name)) or None


def to_url(dsn: str, **changes: Any) -> str:
    """``dsn`` (a URL or a ``key=value`` conninfo) as a ``postgresql://`` URL, with
    some parameters changed (``dbname=...``, ``options=...``; ``None`` removes one)."""
    params: dict[str, Any] = dict(conninfo_to_dict(dsn))
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    auth = ""
    if params.get("user"):
        auth = urlquote(str(params.pop("user")), safe="")
        if params.get("password"):
            auth += ":" + urlquote(str(params.pop("password")), safe="")
        auth += "@"
    params.pop("password", None)
    host = str(params.pop("host", "") or "")
    if "," not in host:  # a host list stays a query parameter
        host = f"[{host}]" if ":" in host else urlquote(host, safe="")
    else:
        params["host"] = host
        host = ""
    port = params.pop("port", None)
    netloc = f"{auth}{host}" + (f":{port}" if port and host else "")
    if port and not host:
        params["port"] = port
    dbname = urlquote(str(params.pop("dbname", "") or ""), safe="")
    query = urlencode({k: str(v) for k, v in params.items()}, quote_via=urlquote)
    return f"postgresql://{netloc}/{dbname}" + (f"?{query}" if query else "")


def _execute(dsn: str, *statements: str) -> list[tuple[Any, ...]]:
    """Run statements on one autocommit connection; the rows of the last one."""
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        for sql in statements:
            cur = conn.execute(sql)
            rows = cur.fetchall() if cur.description else []
    return rows


def engine_identity_of(dsn: str) -> EngineIdentity:
    """What the server at ``dsn`` says it is (``qcore.engine``'s probes, on one
    blocking connection)."""
    with psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        prepare_threshold=None,
        row_factory=dict_row,
    ) as conn:
        first = conn.execute(engine_sql.server_version.sql).fetchone()
        version = str(first["version"]) if first else ""
        markers = None
        if has_markers(version):
            with contextlib.suppress(psycopg.Error):
                markers = conn.execute(engine_sql.server_markers.sql).fetchone()
    return identity_of(version, markers)


def engine_version_of(dsn: str) -> str:
    """``SELECT version()`` on ``dsn``."""
    with psycopg.connect(
        dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, prepare_threshold=None
    ) as conn:
        row = conn.execute("SELECT version()").fetchone()
    return str(row[0]) if row else ""


def _throwaway_name(prefix: str = "qcore_matrix") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def _drop_database(admin: str, name: str) -> None:
    """Drop a throw-away database, however the engine spells it (PostgreSQL 13+ forces
    out other sessions; CockroachDB wants CASCADE; older engines take the plain form)."""
    for sql in (
        f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)",
        f"DROP DATABASE IF EXISTS {quote(name)} CASCADE",
        f"DROP DATABASE IF EXISTS {quote(name)}",
    ):
        try:
            _execute(admin, sql)
            return
        except psycopg.errors.SyntaxError:
            continue
        except psycopg.Error:
            return  # the engine is gone or refuses; nothing more to do at stop


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------- the interface


class Provisioner(abc.ABC):
    """Runs (or finds) the engine of one backend and gives a database of its own.

    Subclasses implement ``_start`` (returning the URL) and ``_stop``.
    """

    #: "container", "local", "pglite", "emulation" or "external"
    kind: ClassVar[str]

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._url: str | None = None
        self._version: str | None = None
        #: what the server said it is (while started)
        self.identity: EngineIdentity | None = None
        self._mutex = threading.RLock()

    # -- Server protocol ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """The connection URL of this session's database (while started)."""
        if self._url is None:
            raise RuntimeError(f"{self!r} is not started; call start() first")
        return self._url

    @property
    def running(self) -> bool:
        return self._url is not None

    def start(self) -> Self:
        """Provision the database; :class:`NotAvailable` if the engine cannot run here.
        Starting a started provisioner does nothing.

        The server's identity decides whether results count as real: a server that is
        not the backend's own engine (``Backend.recognises``) is an emulation, so its
        URL gets the emulation's session settings and its adapters the capability guard,
        whichever provisioner found it."""
        with self._mutex:
            if self._url is None:
                url = self._start()
                try:
                    identity = engine_identity_of(url)
                    if identity.emulating is None and not self.backend.recognises(identity):
                        from qcore.conformance.guard import emulation_conninfo

                        url = to_url(emulation_conninfo(url, self.backend))
                        identity = engine_identity_of(url)
                except BaseException:
                    self._stop()
                    raise
                self._url, self.identity = url, identity
            return self

    def stop(self) -> None:
        """Drop what :meth:`start` created. Safe to call when not started."""
        with self._mutex:
            if self._url is None:
                return
            self._url = self.identity = None
            self._stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- facts ----------------------------------------------------------------------------

    @property
    def engine_version(self) -> str:
        """The engine's ``SELECT version()`` (queried once, while started)."""
        if self._version is None:
            self._version = engine_version_of(self.url)
        return self._version

    @property
    def emulated(self) -> bool:
        """Whether the engine stands in for the backend's own: by the server's identity
        once started, by the provisioner's kind before."""
        if self.identity is not None:
            return self.identity.emulating is not None
        return self.kind == "emulation"

    def describe(self) -> str:
        """One line for people: the kind and where it runs."""
        return self.kind

    def __repr__(self) -> str:
        state = "started" if self._url is not None else "stopped"
        return f"<{type(self).__name__} {self.backend.name} {state}>"

    @abc.abstractmethod
    def _start(self) -> str: ...

    @abc.abstractmethod
    def _stop(self) -> None: ...


# --------------------------------------------------------------------------- Docker


_docker_lock = threading.Lock()
_docker_state: tuple[bool, str] | None = None


def docker_available(*, refresh: bool = False) -> tuple[bool, str]:
    """Whether a Docker daemon answers here, and if not why (asked once per process)."""
    global _docker_state
    with _docker_lock:
        if _docker_state is None or refresh:
            _docker_state = _probe_docker()
        return _docker_state


def _probe_docker() -> tuple[bool, str]:
    try:
        docker: Any = importlib.import_module("docker")
    except ImportError:
        return False, "the docker package is not installed (pip install 'qcore[containers]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
    except Exception as exc:
        return False, f"no Docker daemon answers ({_first_line(exc)})"
    return True, ""


def _remember_docker_failure(reason: str) -> None:
    global _docker_state
    with _docker_lock:
        _docker_state = (False, reason)


class ContainerProvisioner(Provisioner):
    """The engine in a container built from the backend's provisioning spec
    (testcontainers), a throw-away database created in it as the spec says."""

    kind = "container"

    def __init__(self, backend: Backend) -> None:
        if backend.provisioning is None:
            raise ValueError(f"backend {backend.name} has no provisioning spec")
        super().__init__(backend)
        self.spec: ProvisioningSpec = backend.provisioning
        self._container: Any = None
        self._admin: str | None = None
        self._database: str | None = None

    def describe(self) -> str:
        return f"container {self.spec.image}"

    def _start(self) -> str:
        name = self.backend.name
        known_ok, known_reason = _docker_state if _docker_state is not None else (True, "")
        if not known_ok:  # a daemon that did not answer once is not asked again
            raise NotAvailable(name, known_reason)
        try:
            from docker.errors import DockerException
            from testcontainers.core.container import DockerContainer
        except ImportError as exc:
            raise NotAvailable(
                name, f"testcontainers is not installed ({exc}); pip install 'qcore[containers]'"
            ) from exc
        spec = self.spec
        try:
            container = DockerContainer(
                spec.image, command=spec.command, env=dict(spec.env), ports=[spec.port]
            )
        except DockerException as exc:
            reason = f"no Docker daemon answers ({_first_line(exc)})"
            _remember_docker_failure(reason)
            raise NotAvailable(name, reason) from exc
        try:
            container.start()
        except DockerException as exc:
            raise NotAvailable(name, f"could not start {spec.image}: {_first_line(exc)}") from exc
        self._container = container
        try:
            host = container.get_container_host_ip()
            port = int(container.get_exposed_port(spec.port))
            self._admin = self._format_url(host, port, spec.database)
            self._wait_ready(self._admin)
            if spec.create_database:
                database = _throwaway_name()
                _execute(self._admin, spec.create_database.format(database=quote(database)))
                self._database = database
                url = self._format_url(host, port, database)
            else:
                url = self._admin
            if spec.setup_database:
                _execute(url, *spec.setup_database)
            return url
        except BaseException:
            self._stop()
            raise

    def _format_url(self, host: str, port: int, database: str) -> str:
        spec = self.spec
        user = urlquote(spec.user, safe="")
        if spec.password and "{password}" not in spec.url_template:
            user += ":" + urlquote(spec.password, safe="")
        return spec.url_template.format(
            user=user,
            password=urlquote(spec.password or "", safe=""),
            host=host,
            port=port,
            database=database,
        )

    def _wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + self.spec.ready_timeout_seconds
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                _execute(url, "SELECT 1")
                return
            except psycopg.Error as exc:
                last = exc
                time.sleep(0.5)
        raise NotAvailable(
            self.backend.name,
            f"{self.spec.image} did not accept connections within"
            f" {self.spec.ready_timeout_seconds:g}s"
            + (f" (last error: {_first_line(last)})" if last else ""),
        )

    def _stop(self) -> None:
        container, self._container = self._container, None
        if self._admin and self._database:
            _drop_database(self._admin, self._database)
        self._database = None
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop()


# --------------------------------------------------------------------------- local PostgreSQL


def _free_port() -> int:
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
            port = self.port or _free_port()
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
                _execute(self.dsn, "SELECT 1")
                return self.dsn
            except psycopg.Error as exc:
                where = to_url(self.dsn, password=None)
                why = f"no PostgreSQL answers at {where} ({_first_line(exc)})"
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

    def describe(self) -> str:
        return f"local PostgreSQL ({self.server.describe()})"

    def _start(self) -> str:
        try:
            admin = self.server.acquire()
        except NotAvailable as exc:
            raise NotAvailable(self.backend.name, exc.reason) from exc
        try:
            database = _throwaway_name()
            _execute(admin, f"CREATE DATABASE {quote(database)}")
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
                _drop_database(admin, database)
        finally:
            self.server.release()


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


# --------------------------------------------------------------------------- PGlite


class PGliteProvisioner(Provisioner):
    """An embedded engine started through the backend's ``launcher`` (PGlite: Node.js
    runs pglite-socket, in memory, on a free port). PGlite is one database, so the
    session uses it as it is; it is gone when the server stops."""

    kind = "pglite"

    def __init__(self, backend: Backend, **launcher_options: Any) -> None:
        if backend.launcher is None:
            raise ValueError(f"backend {backend.name} has no launcher")
        super().__init__(backend)
        self.launcher: Callable[..., Server] = backend.launcher
        self.options = launcher_options
        self.server: Server | None = None

    def describe(self) -> str:
        return f"{self.backend.name} launcher"

    def _start(self) -> str:
        try:
            server = self.launcher(**self.options)
            server.start()
        except Exception as exc:
            raise NotAvailable(self.backend.name, _first_line(exc)) from exc
        self.server = server
        return server.url

    def _stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()


# --------------------------------------------------------------------------- external


class ExternalProvisioner(Provisioner):
    """An engine the user runs, reached at a DSN they give (``--dsn`` or
    ``QCORE_TEST_DSN_<BACKEND>``). A throw-away database is created in it with the
    backend's ``create_database`` statement when its provisioning spec has one;
    otherwise the given database is used with a throw-away schema first on the
    search path. Either is dropped at stop."""

    kind = "external"

    def __init__(self, backend: Backend, dsn: str) -> None:
        super().__init__(backend)
        self.dsn = dsn
        self.database: str | None = None
        self.schema: str | None = None

    def describe(self) -> str:
        return "external " + to_url(self.dsn, password=None)

    def _start(self) -> str:
        spec = self.backend.provisioning
        try:
            _execute(self.dsn, "SELECT 1")
        except psycopg.Error as exc:
            # the user asked for this engine: it not answering is an error, not a skip
            raise ProvisionError(
                f"{self.backend.name}: nothing answers at {to_url(self.dsn, password=None)}:"
                f" {_first_line(exc)}"
            ) from exc
        if spec is not None and spec.create_database:
            database = _throwaway_name()
            _execute(self.dsn, spec.create_database.format(database=quote(database)))
            self.database = database
            url = to_url(self.dsn, dbname=database)
            try:
                if spec.setup_database:
                    _execute(url, *spec.setup_database)
            except BaseException:
                self._stop()
                raise
            return url
        schema = _throwaway_name()
        _execute(self.dsn, f"CREATE SCHEMA {quote(schema)}")
        self.schema = schema
        options = conninfo_to_dict(self.dsn).get("options")
        search_path = f"-c search_path={schema},public"
        return to_url(self.dsn, options=f"{options} {search_path}" if options else search_path)

    def _stop(self) -> None:
        database, schema = self.database, self.schema
        self.database = self.schema = None
        if database:
            _drop_database(self.dsn, database)
        if schema:
            with contextlib.suppress(psycopg.Error):
                _execute(self.dsn, f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")


# --------------------------------------------------------------------------- the choice


def is_postgres_like(backend: Backend) -> bool:
    """Whether any PostgreSQL serves the backend as its real engine: a standard
    backend that declares every capability PostgreSQL has (and is not single-session)
    and needs no engine-specific setup (no setup statements, no session settings)."""
    if backend.kind is not Kind.STANDARD:
        return False
    features = backend.features()
    if features.pop("single_session", False) or not all(features.values()):
        return False
    spec = backend.provisioning
    return spec is None or (not spec.setup_database and not spec.session_settings)


def best_provisioner(
    backend: Backend, dsn: str | None = None, *, docker: bool | None = None
) -> Provisioner:
    """The best way to get the backend's engine here (not started yet).

    The first row that holds decides:

    ======================================================  ===========  ============
    condition                                               provisioner  kind
    ======================================================  ===========  ============
    ``dsn`` given, or ``QCORE_TEST_DSN_<BACKEND>`` is set   External     external
    Docker answers and the backend has a provisioning spec  Container    container
    standard backend, postgres-like (:func:`is_postgres_    Local        local
    like`): any PostgreSQL is its real engine
    embedded backend with a ``launcher`` (PGlite)           PGlite       pglite
    anything else: PostgreSQL behind the capability guard   Emulation    emulation
    ======================================================  ===========  ============

    ``docker`` overrides the Docker probe (``None``: ask the daemon, once).
    A vendor backend that switches a capability off but has no engine here runs
    emulated: PostgreSQL has the capability, so only the guard can prove qcore
    does without it.
    """
    dsn = dsn or dsn_from_env(backend.name)
    if dsn:
        return ExternalProvisioner(backend, dsn)
    if backend.provisioning is not None:
        has_docker = docker if docker is not None else docker_available()[0]
        if has_docker:
            return ContainerProvisioner(backend)
    if is_postgres_like(backend):
        return LocalProvisioner(backend)
    if backend.kind is Kind.EMBEDDED and backend.launcher is not None:
        return PGliteProvisioner(backend)
    return EmulationProvisioner(backend)


@contextlib.contextmanager
def provisioned(backend: Backend, dsn: str | None = None) -> Iterator[Provisioner]:
    """``best_provisioner(backend, dsn)``, started, stopped on exit."""
    with best_provisioner(backend, dsn) as provisioner:
        yield provisioner

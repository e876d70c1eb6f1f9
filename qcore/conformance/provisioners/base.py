"""What every provisioner is (:class:`Provisioner`), its errors, and the helpers they
share: DSNs, throw-away names, the engine's identity and version."""

from __future__ import annotations

import abc
import contextlib
import os
import re
import threading
import uuid
from typing import Any, ClassVar
from urllib.parse import quote as urlquote
from urllib.parse import urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from typing_extensions import Self

from qcore.backend import Backend, EngineIdentity
from qcore.engine import has_markers, identity_of
from qcore.identifiers import quote
from qcore.sql import engine as engine_sql

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


def execute(dsn: str, *statements: str) -> list[tuple[Any, ...]]:
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


def throwaway_name(prefix: str = "qcore_matrix") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def drop_database(admin: str, name: str) -> None:
    """Drop a throw-away database, however the engine spells it (PostgreSQL 13+ forces
    out other sessions; CockroachDB wants CASCADE; older engines take the plain form)."""
    for sql in (
        f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)",
        f"DROP DATABASE IF EXISTS {quote(name)} CASCADE",
        f"DROP DATABASE IF EXISTS {quote(name)}",
    ):
        try:
            execute(admin, sql)
            return
        except psycopg.errors.SyntaxError:
            continue
        except psycopg.Error:
            return  # the engine is gone or refuses; nothing more to do at stop


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Provisioner(abc.ABC):
    """Runs (or finds) the engine of one backend and gives a database of its own.

    Subclasses implement ``_start`` (returning the URL) and ``_stop``.
    """

    #: "container", "local", "pglite", "emulation" or "external"
    kind: ClassVar[str]

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._url: str | None = None
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
        """The engine's ``SELECT version()``, as :meth:`start` read it (while started)."""
        if self.identity is None:
            raise RuntimeError(f"{self!r} is not started; call start() first")
        return self.identity.version

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

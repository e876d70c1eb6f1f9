"""``Boss``: the public face of qcore — options, lifecycle, and the queue and job verbs.

``Boss`` decides nothing about SQL: it validates its options, owns the
adapter (or wraps the caller's), resolves the backend, installs or migrates
the schema at start, and forwards each verb to the operation modules with a
``Context``. A per-call ``db=`` runs that one call inside the caller's own
transaction.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from qcore import backends
from qcore.backend import Backend, Server
from qcore.context import Context
from qcore.db import Database, adapt, check_pool_options, connect
from qcore.errors import ConfigError
from qcore.identifiers import schema_name

__all__ = ["Boss"]


class Boss:
    """A qcore instance on one database and schema.

    Give a connection string (``postgresql://…``), connection options, or a
    ``db=`` object you own (see ``qcore.db.adapt``). With ``backend="pglite"``
    and none of these, an embedded PGlite is started (``data_dir`` keeps its
    data on disk; in memory otherwise).
    """

    def __init__(
        self,
        connection_string: str | None = None,
        *,
        backend: str | Backend = "postgres",
        db: Any = None,
        schema: str = "pgboss",
        host: str | None = None,
        port: int | None = None,
        database: str | None = None,
        user: str | None = None,
        password: str | None = None,
        ssl: bool | str | None = None,
        max: int = 10,  # pg-boss's name for the pool size
        application_name: str = "qcore",
        connection_timeout: float = 10.0,
        migrate: bool = True,
        create_schema: bool = True,
        allow_schema_case_variant: bool = False,
        data_dir: str | None = None,
    ) -> None:
        self.backend = backends.get(backend)
        schema_name(schema)  # validate now: a bad name never reaches the database
        options_given = any(v is not None for v in (host, port, database, user, password, ssl))
        if db is not None and (connection_string or options_given):
            raise ConfigError(
                "give either db= (a connection you own) or a connection string / connection"
                " options, not both"
            )
        check_pool_options(max=max, connection_timeout=connection_timeout)
        embedded = self.backend.launcher is not None
        if db is None and not connection_string and not options_given and not embedded:
            raise ConfigError(
                f"the {self.backend.name} backend needs a connection: pass a connection string"
                " (postgresql://user@host:port/database), connection options (host=, database=,"
                " ...) or db=; only an embedded backend (pglite) starts without one"
            )
        if data_dir is not None and not embedded:
            raise ConfigError(f"data_dir is for an embedded backend; {self.backend.name} is not")
        self.schema = schema
        self.migrate = migrate
        self.create_schema = create_schema
        self.allow_schema_case_variant = allow_schema_case_variant
        self._connection_string = connection_string
        self._connect_options: dict[str, Any] = dict(
            host=host,
            port=port,
            database=database,
            user=user,
            password=password,
            ssl=ssl,
            max=max,
            application_name=application_name,
            connection_timeout=connection_timeout,
        )
        self._given_db = adapt(db) if db is not None else None
        self._data_dir = data_dir
        self._db: Database | None = self._given_db
        self._server: Server | None = None
        self._ctx: Context | None = None
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> Boss:
        """Open the connection, then install or migrate the schema (under the backend's lock)."""
        if self._started:
            return self
        if self._db is None:
            self._db = await self._open()
        ctx = Context(db=self._db, backend=self.backend, schema_spec=self.schema)
        from qcore.schema import install_or_migrate

        await install_or_migrate(
            ctx,
            migrate=self.migrate,
            create_schema=self.create_schema,
            allow_schema_case_variant=self.allow_schema_case_variant,
        )
        self._ctx = ctx
        self._started = True
        return self

    async def stop(self) -> None:
        """Close what qcore opened: its pool and an embedded engine. Safe to call twice."""
        self._started = False
        self._ctx = None
        db, self._db = self._db, self._given_db
        if db is not None and db is not self._given_db:
            await db.close()
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()

    async def __aenter__(self) -> Boss:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _open(self) -> Database:
        url = self._connection_string
        options = self._connect_options
        has_options = any(options[k] is not None for k in ("host", "port", "database", "user"))
        if self.backend.capabilities.single_session:
            if url is None and not has_options:
                assert self.backend.launcher is not None
                launch = self.backend.launcher
                self._server = launch(data_dir=self._data_dir).start()
                url = self._server.url
            from qcore.db.pglite import PGliteDatabase

            return await PGliteDatabase.connect(url or "")
        return await connect(url, **options)

    # -- helpers ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started

    @property
    def db(self) -> Database:
        """The adapter this instance uses (after ``start()``)."""
        return self.context().db

    def context(self, db: Any = None) -> Context:
        """The operation context; with ``db``, bound to the caller's connection or transaction."""
        if self._ctx is None:
            raise ConfigError("this Boss is not started: await boss.start() first")
        return self._ctx if db is None else self._ctx.with_db(adapt(db))

    async def is_installed(self) -> bool:
        """Whether the schema holds a qcore/pg-boss installation."""
        from qcore.schema import is_installed

        return await is_installed(self._any_context())

    async def schema_version(self) -> int | None:
        """The installed schema version, or None when nothing is installed."""
        from qcore.schema import schema_version

        return await schema_version(self._any_context())

    def _any_context(self) -> Context:
        if self._ctx is not None:
            return self._ctx
        if self._db is None:
            raise ConfigError("this Boss has no connection yet: await boss.start() first")
        return Context(db=self._db, backend=self.backend, schema_spec=self.schema)

"""``Boss``: the public face of qcore — options, lifecycle, and the queue and job verbs.

``Boss`` decides nothing about SQL: it validates its options, owns the
adapter (or wraps the caller's), resolves the backend, installs or migrates
the schema at start, and forwards each verb to the operation modules with a
``Context``. A per-call ``db=`` runs that one call inside the caller's own
transaction.
"""

from __future__ import annotations

import datetime as dt
import uuid
from types import TracebackType
from typing import Any, TypedDict

from typing_extensions import Unpack

from qcore import backends
from qcore import jobs as job_ops
from qcore import queues as queue_ops
from qcore.backend import Backend, Server
from qcore.context import Context
from qcore.db import Database, adapt, check_pool_options, connect
from qcore.errors import ConfigError
from qcore.identifiers import schema_name
from qcore.job import CommandResult, Job, Policy, Queue
from qcore.jobs import Ids
from qcore.schema import install_or_migrate, is_installed, schema_version

__all__ = ["Boss", "FetchOptions", "QueueOptions", "ScheduledSendOptions", "SendOptions"]


class QueueOptions(TypedDict, total=False):
    """Options of ``create_queue`` and ``update_queue`` (seconds; unset means the default
    on create, unchanged on update)."""

    policy: str | Policy
    partition: bool
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int | None
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    warning_queue_size: int
    dead_letter: str | None
    heartbeat_seconds: int | None
    notify: bool


class ScheduledSendOptions(TypedDict, total=False):
    """Options of ``send_after``: those of ``send`` but ``start_after``."""

    priority: int
    singleton_key: str
    singleton_seconds: int
    singleton_next_slot: bool
    retry_limit: int
    retry_delay: int
    retry_backoff: bool
    retry_delay_max: int
    expire_in_seconds: int
    retention_seconds: int
    delete_after_seconds: int
    heartbeat_seconds: int
    dead_letter: str
    id: uuid.UUID | str
    group_id: str
    group_tier: str


class SendOptions(ScheduledSendOptions, total=False):
    """Options of ``send``; each one left out is inherited from the queue."""

    start_after: dt.datetime | dt.timedelta | float | str


class FetchOptions(TypedDict, total=False):
    """Options of ``fetch``."""

    batch_size: int
    priority: bool
    include_metadata: bool
    ignore_start_after: bool
    min_priority: int | None
    max_priority: int | None


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
        return await is_installed(self._any_context())

    async def schema_version(self) -> int | None:
        """The installed schema version, or None when nothing is installed."""
        return await schema_version(self._any_context())

    def _any_context(self) -> Context:
        if self._ctx is not None:
            return self._ctx
        if self._db is None:
            raise ConfigError("this Boss has no connection yet: await boss.start() first")
        return Context(db=self._db, backend=self.backend, schema_spec=self.schema)

    # -- queues ----------------------------------------------------------------------------

    async def create_queue(
        self, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Create a queue (a no-op if it exists; its options are not changed then)."""
        await queue_ops.create_queue(self.context(db), name, **options)

    async def update_queue(
        self, name: str, *, db: Any = None, **options: Unpack[QueueOptions]
    ) -> None:
        """Change the given options of a queue; policy and partition cannot change."""
        await queue_ops.update_queue(self.context(db), name, **options)

    async def delete_queue(self, name: str, *, db: Any = None) -> None:
        """Delete a queue and its jobs (a no-op for an unknown queue)."""
        await queue_ops.delete_queue(self.context(db), name)

    async def get_queue(self, name: str, *, db: Any = None) -> Queue | None:
        """A queue's settings and cached counts, or None."""
        return await queue_ops.get_queue(self.context(db), name)

    async def get_queues(self, names: list[str] | None = None, *, db: Any = None) -> list[Queue]:
        """Every queue (or those named), ordered by name."""
        return await queue_ops.get_queues(self.context(db), names)

    async def delete_queued_jobs(self, name: str, *, db: Any = None) -> int:
        """Delete a queue's created and retry jobs; how many."""
        return await queue_ops.delete_queued_jobs(self.context(db), name)

    async def delete_stored_jobs(self, name: str, *, db: Any = None) -> int:
        """Delete a queue's completed, cancelled and failed jobs; how many."""
        return await queue_ops.delete_stored_jobs(self.context(db), name)

    async def delete_all_jobs(self, name: str | None = None, *, db: Any = None) -> int | None:
        """Delete every job of a queue (of every queue without a name)."""
        return await queue_ops.delete_all_jobs(self.context(db), name)

    async def get_blocked_keys(self, name: str, *, db: Any = None) -> list[str]:
        """The singleton keys of a key_strict_fifo queue held back by a failed job."""
        return await queue_ops.get_blocked_keys(self.context(db), name)

    # -- jobs ------------------------------------------------------------------------------

    async def send(
        self, name: str, data: Any = None, *, db: Any = None, **options: Unpack[SendOptions]
    ) -> uuid.UUID | None:
        """Queue a job: its id, or None when the queue's policy dropped it."""
        return await job_ops.send(self.context(db), name, data, **options)

    async def send_after(
        self,
        name: str,
        data: Any,
        start_after: dt.datetime | dt.timedelta | float | str,
        *,
        db: Any = None,
        **options: Unpack[ScheduledSendOptions],
    ) -> uuid.UUID | None:
        """Queue a job that becomes ready at ``start_after``."""
        return await job_ops.send(self.context(db), name, data, start_after=start_after, **options)

    async def send_throttled(
        self,
        name: str,
        data: Any,
        seconds: int,
        key: str | None = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> uuid.UUID | None:
        """Queue a job unless one for ``key`` was sent in the current ``seconds`` slot."""
        return await job_ops.send_throttled(
            self.context(db), name, data, seconds=seconds, key=key, **options
        )

    async def send_debounced(
        self,
        name: str,
        data: Any,
        seconds: int,
        key: str | None = None,
        *,
        db: Any = None,
        **options: Unpack[SendOptions],
    ) -> uuid.UUID | None:
        """As ``send_throttled``, but a job whose slot is taken goes into the next one."""
        return await job_ops.send_debounced(
            self.context(db), name, data, seconds=seconds, key=key, **options
        )

    async def insert(
        self, name: str, jobs: list[dict[str, Any]], *, return_id: bool = True, db: Any = None
    ) -> list[uuid.UUID] | None:
        """Queue a batch of jobs in one statement (each a dict of ``data`` and send options)."""
        return await job_ops.insert(self.context(db), name, jobs, return_id=return_id)

    async def fetch(
        self, name: str, *, db: Any = None, **options: Unpack[FetchOptions]
    ) -> list[Job]:
        """Claim up to ``batch_size`` ready jobs; they are active until settled."""
        return await job_ops.fetch(self.context(db), name, **options)

    async def complete(
        self,
        name: str,
        ids: Ids,
        data: Any = None,
        *,
        include_queued: bool = False,
        db: Any = None,
    ) -> CommandResult:
        """Complete active jobs (``include_queued``: queued ones too), storing ``data``."""
        return await job_ops.complete(
            self.context(db), name, ids, data, include_queued=include_queued
        )

    async def fail(self, name: str, ids: Ids, data: Any = None, *, db: Any = None) -> CommandResult:
        """Fail jobs: retry them while retries are left, else failed and dead-lettered."""
        return await job_ops.fail(self.context(db), name, ids, data)

    async def cancel(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Cancel jobs that have not finished."""
        return await job_ops.cancel(self.context(db), name, ids)

    async def resume(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Bring cancelled jobs back to created."""
        return await job_ops.resume(self.context(db), name, ids)

    async def retry(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Retry failed jobs (one more attempt each)."""
        return await job_ops.retry(self.context(db), name, ids)

    async def delete_job(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Delete jobs whatever their state."""
        return await job_ops.delete_job(self.context(db), name, ids)

    async def touch(self, name: str, ids: Ids, *, db: Any = None) -> CommandResult:
        """Refresh the heartbeat of active jobs."""
        return await job_ops.touch(self.context(db), name, ids)

    async def get_job_by_id(self, name: str, id: uuid.UUID | str, *, db: Any = None) -> Job | None:
        """One job of a queue by id, or None."""
        return await job_ops.get_job_by_id(self.context(db), name, id)

    async def find_jobs(
        self,
        name: str,
        *,
        id: uuid.UUID | str | None = None,
        key: str | None = None,
        data: Any = None,
        queued: bool = False,
        db: Any = None,
    ) -> list[Job]:
        """Jobs of a queue by id, singleton key or data containment (``queued``: waiting only)."""
        return await job_ops.find_jobs(
            self.context(db), name, id=id, key=key, data=data, queued=queued
        )

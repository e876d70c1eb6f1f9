"""``Boss``: the public face of qcore — options, lifecycle, and the queue and job verbs.

``Boss`` decides nothing about SQL: it validates its options, owns the
adapter (or wraps the caller's), resolves the backend, installs or migrates
the schema at start, and forwards each verb to the operation modules with a
``Context``. A per-call ``db=`` runs that one call inside the caller's own
transaction.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

from typing_extensions import Unpack

from qcore import backends
from qcore.affinity import Affinity
from qcore.arguments import constructor, verb
from qcore.backend import EngineIdentity, Server
from qcore.boss.options import BossOptions, settings_of, signature
from qcore.boss.services import SERVICES, Running, registry_of, stop_all
from qcore.boss.verbs import (
    FlowVerbs,
    InstanceVerbs,
    MaintenanceVerbs,
    QueueAndJobVerbs,
    ScheduleVerbs,
    SchemaVerbs,
)
from qcore.boss.workers import Handler, WorkerVerbs
from qcore.context import Context
from qcore.db import (
    ADDRESS_OPTIONS,
    CONNECTION_OPTIONS,
    DEFAULT_MAX,
    ConnectionOptions,
    Database,
    adapt,
    check_connection_options,
    check_url,
    connect,
    make_conninfo,
)
from qcore.engine import identify
from qcore.errors import (
    ConfigError,
    NotInstalledError,
    NotStartedError,
    QcoreError,
    SchemaVersionError,
    ValidationError,
)
from qcore.events import Events
from qcore.identifiers import schema_name
from qcore.job import Job
from qcore.options import (
    FetchOptions,
    QueueOptions,
    ScheduledSendOptions,
    SendOptions,
)
from qcore.services import Service
from qcore.services.instances import InstanceRegistry, recorded_config
from qcore.services.notifier import Notifier
from qcore.services.pause_watch import PauseWatch
from qcore.services.warnings import WarningRecorder, slow_query_watch
from qcore.verbs.instances import InstanceNotice
from qcore.verbs.jobs.shared import SharedStatements
from qcore.verbs.schema import (
    affinity_tables_present,
    install_or_migrate,
    is_installed,
    schema_version,
)
from qcore.worker import SharedPoll, WipReporter, Worker
from qcore.worker.failures import FailureLog
from qcore.worker.loops import STOP_SETTLE_SECONDS

__all__ = ["Boss", "FetchOptions", "Handler", "QueueOptions", "ScheduledSendOptions", "SendOptions"]


async def _no_workers(seconds: float) -> None:
    """The workers are not stopped by a failed start (they were registered, not started)."""


class Boss(
    WorkerVerbs,
    QueueAndJobVerbs,
    InstanceVerbs,
    MaintenanceVerbs,
    ScheduleVerbs,
    FlowVerbs,
    SchemaVerbs,
):
    """A qcore instance on one database and schema.

    Give a connection string (``postgresql://…``), connection options, or a
    ``db=`` object you own (see ``qcore.db.adapt``). With ``backend="pglite"``
    and none of these, an embedded PGlite is started (``data_dir`` keeps its
    data on disk; in memory otherwise).

    ``start()`` reads the server's identity (:attr:`engine`) and emits a
    ``warning`` of type ``backend_mismatch`` when the server is not the chosen
    backend's engine; ``backend="auto"`` picks the installed backend whose engine
    it is instead.
    """

    #: the ``backend=`` value that picks the backend from the server's identity
    AUTO = "auto"

    @constructor(ConnectionOptions)
    @signature
    def __init__(
        self, connection_string: str | None = None, **options: Unpack[BossOptions]
    ) -> None:
        connection = cast(
            ConnectionOptions,
            {k: options.pop(k) for k in CONNECTION_OPTIONS if k in options},  # type: ignore[misc]
        )
        backend = options.get("backend", "postgres")
        self._auto = backend == self.AUTO
        # with "auto", the default stands in until start() has read the server
        self.backend = backends.get("postgres" if self._auto else backend)
        #: the server's identity, read by start()
        self.engine: EngineIdentity | None = None
        schema_name(options.get("schema", "pgboss"))  # a bad name never reaches the database
        check_connection_options(dict(connection))
        check_url(connection_string)  # a scheme typo, named before any connection
        db = options.get("db")
        options_given = any(connection.get(k) is not None for k in ADDRESS_OPTIONS)
        if db is not None and (connection_string or options_given):
            raise ConfigError(
                "give either db= (a connection you own) or a connection string / connection"
                " options, not both"
            )
        embedded = self.backend.launcher is not None
        if self._auto and db is None and not connection_string and not options_given:
            raise ConfigError(
                "backend='auto' reads the engine from the server: pass a connection string,"
                " connection options or db= (or name the backend, e.g. backend='pglite' for"
                " the embedded engine)"
            )
        if db is None and not connection_string and not options_given and not embedded:
            raise ConfigError(
                f"the {self.backend.name} backend needs a connection: pass a connection string"
                " (postgresql://user@host:port/database), connection options (host=, database=,"
                " ...) or db=; only an embedded backend (pglite) starts without one"
            )
        if options.get("data_dir") is not None and not embedded:
            raise ConfigError(f"data_dir is for an embedded backend; {self.backend.name} is not")
        #: every owner's settings (validated: ConfigError names the option)
        self.settings = settings = settings_of(options)
        registry = settings.registry
        #: this object's id in the instance registry, kept across stop() and start()
        self.instance_id = uuid.uuid4()
        self.register_instance = registry.register_instance
        self.instance_name = registry.instance_name
        self.instance_heartbeat_seconds = int(registry.instance_heartbeat_seconds)
        #: this server's stable key (``$QCORE_INSTANCE_KEY`` unless given), or None
        self.instance_key = registry.instance_key
        #: the key's side of job affinity, shared by every context of this Boss
        self._affinity = Affinity(key=self.instance_key)
        #: whether an operator paused this server (its workers claim nothing meanwhile)
        self.paused = False
        #: why the system limiter holds this server's claiming (None: it does not)
        self.limited: str | None = None
        if registry.register_instance is not False and connection.get("application_name") is None:
            # its connections name it, so pg_stat_activity joins its row
            connection = {**connection, "application_name": f"qcore:{str(self.instance_id)[:8]}"}
        self._recorded_config = recorded_config(
            settings.recorded(
                adapter="custom" if db is not None else "qcore",
                backend=self.backend.name if not self._auto else self.AUTO,
                pool_max=connection.get("max", DEFAULT_MAX),
            )
        )
        #: what a supervise pass does besides expiry
        self.maintenance = settings.maintenance
        #: cron and the clock-skew check
        self.timekeeping = settings.timekeeper
        #: handlers registered with handler(), run by work_handlers()
        self.handlers: list[Handler] = []
        self.supervise_enabled = settings.supervisor.supervise
        self.supervise_interval_seconds = float(settings.supervisor.supervise_interval_seconds)
        self.monitor_interval_seconds = float(settings.supervisor.monitor_interval_seconds)
        self.events = Events()
        if (
            self.maintenance.persist_warnings
        ):  # every warning, whoever raises it, also goes to the table
            self.events.on("warning", WarningRecorder(self.context))
        self.schema = settings.connection.schema
        self.migrate = settings.connection.migrate
        self._connection_string = connection_string
        self._connect_options = connection
        self._given_db = adapt(db) if db is not None else None
        self._data_dir = settings.connection.data_dir
        self._db: Database | None = self._given_db
        self._server: Server | None = None
        self._ctx: Context | None = None
        self._started = False  # background processing runs
        self._start_attempt = 1
        self._stopped = False  # stop() ended a start(): explicit passes return at once
        self._stop_requested = asyncio.Event()
        self._workers: dict[str, Worker] = {}
        #: one statement a polling interval for all the idle workers
        self._poll = SharedPoll(self._workers.values)
        #: fetch() calls sharing one statement, per queue and options (unlocked claims only)
        self._shared = SharedStatements()
        #: the background services start() started, by name (stop() stops them)
        self._running = Running({})
        #: builders of the caller's own services (:meth:`add_service`)
        self._extra_services: list[Callable[[Context, Events], Service]] = []
        #: emits ``wip`` for this instance's workers
        self._wip = WipReporter(self.events, self.worker_statuses)
        #: the failure lines of this instance's workers, rate-limited per queue
        self._failures = FailureLog()

    # -- lifecycle -------------------------------------------------------------------------

    @verb()
    async def start(self, *, attempts: int = 1) -> Boss:
        """Bring this ``Boss`` up: schema first, then its loops and workers.

        Open the connection, install or migrate the schema (under the backend's lock),
        then start the background loops and the workers.

        With ``attempts`` > 1 a failure is tried again after 1 s, doubling up to 30 s
        (one ``start_retry`` warning per call); a configuration error never is. With
        ``migrate=False``, a schema not installed yet or older than this qcore is tried
        again too: another process with ``migrate=True`` may be installing or migrating
        it.
        ``stop()`` during a wait ends it. Calling ``start()`` again is safe.
        """
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValidationError(f"attempts must be an integer >= 1, got {attempts!r}")
        if self._started:
            return self
        self._stop_requested.clear()
        try:
            await self._start(attempts)
        except BaseException:
            await self._abandon_start()
            raise
        return self

    async def _start(self, attempts: int) -> None:
        delay = 1.0
        for attempt in range(1, attempts + 1):
            try:
                await self._open_and_install()
                self._start_attempt = attempt  # recorded in its registry row (startAttempt)
                break
            except (SchemaVersionError, NotInstalledError) as exc:
                if not exc.awaiting_migration or attempt == attempts:
                    raise  # trying again changes nothing, or no tries are left
                # another process may be installing or migrating it: wait as for an outage
                if await self._retry_after(exc, attempt, attempts, delay):
                    raise
                delay *= 2
            except ConfigError:
                raise  # trying again changes nothing
            except QcoreError as exc:
                if attempt == attempts or await self._retry_after(exc, attempt, attempts, delay):
                    raise
                delay *= 2
        self._started = True
        self._stopped = False
        ctx = self.context()
        services: dict[str, Service] = {}
        for registration in SERVICES:
            service = registration.build(self)
            if service is not None:
                services[registration.name] = service
        for number, make in enumerate(self._extra_services):
            services[f"own:{number}"] = make(ctx, self.events)
        started: dict[str, Service] = {}
        try:
            for name, service in services.items():  # stopped in the same order by stop()
                await service.start()
                started[name] = service
        finally:
            self._running = Running(started)  # what a failed start stops again
        self._running = Running(services)

    async def _abandon_start(self) -> None:
        """A ``start()`` failed: close what it opened (services, the pool, a server).

        Nothing is left running or open behind the error. Workers registered before it
        stay registered; a later ``start()`` or ``stop()`` deals with them.
        """
        if self._started:
            self._started = False
            running, self._running = self._running, Running({})
            await stop_all(
                running,
                self.events,
                timeout=0,
                graceful=False,
                settle=STOP_SETTLE_SECONDS,
                stop_workers=_no_workers,
            )
        await self._close()

    @verb()
    async def add_service(self, make: Callable[[Context, Events], Service]) -> None:
        """Run a background service of your own beside the built-in ones.

        The metrics recorder is one (:func:`qcore.metrics.record_metrics`):
        ``make(context, events)`` builds it on every :meth:`start` (at once when started
        already); :meth:`stop` stops it with the others.
        """
        if not callable(make):
            raise ValidationError(f"add_service takes a callable, got {make!r}")
        self._extra_services.append(make)
        if self._started:
            service = make(self.context(), self.events)
            await service.start()
            self._running.services[f"own:{len(self._extra_services) - 1}"] = service

    @property
    def services(self) -> Running:
        """The background services the last :meth:`start` started, by name, in start order.

        Empty while stopped. ``boss.services.get("registry", InstanceRegistry)`` is the
        instance registry when it runs (the names: :data:`qcore.boss.services.SERVICES`;
        a service of :meth:`add_service` is ``own:<n>``).
        """
        return self._running

    def _set_limited(self, reason: str | None) -> None:
        """The system limiter holds claiming (``reason``) or lets it go (None).

        The row says so at once: the registry beats now rather than at its next
        heartbeat.
        """
        self.limited = reason
        if reason is None:
            self._wake_all()
        registry = self._running.get("registry", InstanceRegistry)
        if registry is not None:
            registry.soon()  # a heartbeat out of turn

    async def _register_late(self) -> None:
        """A ``Boss`` left to register when it works: its first worker registers it."""
        if not self._started or "registry" in self._running.services:
            return
        if self.settings.registry.register_instance is not None:
            return
        registry = registry_of(self)
        await registry.start()
        self._running.services = {"registry": registry, **self._running.services}

    def _notices_reach(self) -> bool:
        """Whether a NOTIFY reaches this instance now (its listener is up)."""
        notifier = self._running.get("notifier", Notifier)
        return notifier is not None and notifier.available

    def _instance_noticed(self, notice: InstanceNotice | None) -> None:
        """Another process paused, resumed or removed a key (None: notices may be lost).

        This server's own key: its pause watch reads it now (and announces the change
        itself). Another key: the ``instance_<action>`` event here too, unless this
        ``Boss`` did it (it emitted the event already).
        """
        watch = self._running.get("pause_watch", PauseWatch)
        if notice is None or notice.key == self.instance_key:
            if watch is not None:
                watch.poke()
            return
        if notice.by != str(self.instance_id):
            event = {"instance_key": notice.key, "by": notice.by}
            self.events.emit(f"instance_{notice.action}", event)

    def _reconnected(self) -> None:
        """The listener is back: what it may have missed is read again."""
        self._wake_all()
        self._instance_noticed(None)

    @property
    def _owns_db(self) -> bool:
        """Whether qcore opened the connection (it was not given as ``db=``)."""
        return self._given_db is None

    def _set_paused(self, paused: bool, *, announce: bool = True) -> None:
        """This server's pause state, as the registry read it or its own verb stored it.

        Workers follow it from their next claim.
        """
        if paused == self.paused:
            return
        self.paused = paused
        if announce:
            self.events.emit(
                "instance_paused" if paused else "instance_resumed",
                {"instance_key": self.instance_key, "instance_id": str(self.instance_id)},
            )
        if not paused:
            self._wake_all()

    async def _open_and_install(self) -> None:
        if self._ctx is not None:
            return
        identity = None
        if self._db is None:
            if self._auto:  # the adapter depends on the engine: look with one connection
                one: ConnectionOptions = {**self._connect_options, "max": 1}
                probe = await connect(self._connection_string, **one)
                try:
                    identity = await identify(probe)
                finally:
                    await probe.close()
                self.backend = backends.for_engine(identity)
            self._db = await self._open()
        if identity is None:
            identity = await identify(self._db)
            if self._auto:
                self.backend = backends.for_engine(identity)
        self.engine = identity
        if not self.backend.recognises(identity) and identity.emulating != self.backend.name:
            hint = f"backend={identity.engine!r} or " if identity.engine != "unknown" else ""
            self.events.warn(
                "backend_mismatch",
                f"the {self.backend.name} backend is for its own engine, but the server is"
                f" {identity.describe()}; choose {hint}backend='auto'",
                backend=self.backend.name,
                engine=identity.engine,
                version=identity.version,
            )
        ctx = Context(
            db=self._db,
            backend=self.backend,
            schema_spec=self.schema,
            watch=slow_query_watch(self.events, self.maintenance.warning_slow_query_seconds),
            affinity=self._affinity,
        )
        await install_or_migrate(
            ctx,
            migrate=self.migrate,
            create_schema=self.settings.connection.create_schema,
            allow_schema_case_variant=self.settings.connection.allow_schema_case_variant,
        )
        self._affinity.installed = await affinity_tables_present(ctx)
        self._ctx = ctx

    async def _retry_after(
        self, exc: QcoreError, attempt: int, attempts: int, delay: float
    ) -> bool:
        """Warn ``start_retry`` on the first failure, then wait; True when stop() ended it."""
        if attempt == 1:
            self.events.warn(
                "start_retry",
                f"start failed, trying again ({attempts - 1} attempts left): {exc}",
                error=str(exc),
            )
        return await self._stop_requested_within(min(delay, 30.0))

    async def _stop_requested_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._stop_requested.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    @verb()
    async def stop(
        self, *, graceful: bool = True, close: bool = True, timeout: float = 30.0
    ) -> None:
        """Stop fetching, let active handlers finish, and give back what is still held.

        Active handlers get up to ``timeout`` seconds (none with ``graceful=False``); what is
        still held is failed, then ``stopped`` is emitted; then, with ``close``, what qcore
        opened (its pool, an embedded engine) is closed. With ``close=False`` the connection
        stays for ``send``/``fetch`` until a later ``stop()``.
        """
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValidationError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self._stop_requested.set()
        if not graceful and self._halting:  # a graceful stop is under way: end it now
            await asyncio.gather(*(w.stop(graceful=False) for w in self._halting))
        if self._started:
            self._started = False
            self._stopped = True
            running, self._running = self._running, Running({})

            async def stop_workers(seconds: float) -> None:
                await self._stop_workers(graceful=graceful, timeout=seconds)

            await stop_all(
                running,
                self.events,
                timeout=timeout,
                graceful=graceful,
                settle=STOP_SETTLE_SECONDS,
                stop_workers=stop_workers,
            )
            self.events.emit("stopped")
            await self.events.drain()
        elif self._workers or self._retiring:  # registered before a start() that failed
            await self._stop_workers(graceful=graceful, timeout=timeout)
        if close:
            await self._close()

    async def _close(self) -> None:
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
        if self.backend.capabilities.single_session:
            if url is None and not any(options.get(k) is not None for k in ADDRESS_OPTIONS):
                assert self.backend.launcher is not None
                launch = self.backend.launcher
                self._server = launch(data_dir=self._data_dir).start()
                url = self._server.url
            from qcore.db.pglite import PGliteDatabase

            return await PGliteDatabase.connect(url or make_conninfo(None, **options))
        return await connect(url, **options)

    # -- helpers ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether background processing (workers, supervisor, notifier) runs."""
        return self._started

    @property
    def unsettled_jobs(self) -> list[Job]:
        """The jobs the last ``stop()`` left held.

        The database did not answer in time to store how they ended (``qcore work``
        exits 75 for them). They stay active until they expire, then retry as their
        queue says.
        """
        return list(self._unsettled)

    @verb()
    def on(self, event: str, callback: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe to an event; returns an unsubscribe.

        The events: ``error``, ``warning``, ``wip``, ``stopped``, ``flow``,
        ``instance_paused``, ``instance_resumed``, ``instance_removed``.
        """
        return self.events.on(event, callback)

    @property
    def db(self) -> Database:
        """The adapter this instance uses (after ``start()``)."""
        return self.context().db

    def context(self, db: Any = None) -> Context:
        """The operation context; with ``db``, bound to the caller's connection or transaction."""
        if self._ctx is None:
            raise NotStartedError("this Boss is not started: await boss.start() first")
        if db is None:
            return self._ctx
        try:
            return self._ctx.with_db(adapt(db))
        except ConfigError as exc:  # a verb's db= argument: a bad value like any other
            raise ValidationError(str(exc)) from None

    @verb()
    async def is_installed(self) -> bool:
        """Whether the schema holds a qcore/pg-boss installation."""
        return await is_installed(self._any_context())

    @verb()
    async def schema_version(self) -> int | None:
        """The installed schema version, or None when nothing is installed."""
        return await schema_version(self._any_context())

    def _any_context(self) -> Context:
        if self._ctx is not None:
            return self._ctx
        if self._db is None:
            raise NotStartedError("this Boss has no connection yet: await boss.start() first")
        return Context(
            db=self._db, backend=self.backend, schema_spec=self.schema, affinity=self._affinity
        )

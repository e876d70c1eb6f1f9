"""The background services a ``Boss`` runs, as one table keyed by name.

Each :class:`Registration` says how to build its service from the ``Boss`` (or that
this ``Boss`` runs none, its option being off), what its busy flag is (read by
``is_maintaining()`` and the other ``is_*`` verbs through :func:`busy`), and how a
stop treats it. ``start()`` builds them in table order and starts them; ``stop()``
stops them in the same order, all together, within one deadline.

A new service is one module under :mod:`qcore.services` (a
:class:`~qcore.periodic.Periodic`, say) and one :class:`Registration` in
:data:`SERVICES`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from qcore._version import __version__
from qcore.context import Context
from qcore.db import Database
from qcore.events import Events
from qcore.periodic import Service
from qcore.services.bam import BamWorker
from qcore.services.flows import FlowResolver
from qcore.services.instances import InstanceRegistry, RegistrySettings
from qcore.services.limiter import SystemLimiter
from qcore.services.monitor import Supervisor
from qcore.services.notifier import Notifier
from qcore.services.pause_watch import PauseWatch
from qcore.services.timekeeper import ClockSkew, Timekeeper
from qcore.tasks import UNWIND_SECONDS
from qcore.verbs.instances import InstanceNotice
from qcore.worker import Worker, WorkerStatus

__all__ = ["SERVICES", "Host", "Registration", "Running", "busy", "registry_of"]

S = TypeVar("S", bound=Service)


class Host(Protocol):
    """What the builders take from the ``Boss`` that runs them."""

    events: Events

    @property
    def settings(self) -> Any: ...

    def context(self, db: Any = None) -> Context: ...

    @property
    def _worker(self) -> Callable[..., Worker]: ...

    def _wake(self, queue: str) -> None: ...

    def _wake_all(self) -> None: ...

    @property
    def instance_id(self) -> uuid.UUID: ...

    @property
    def limited(self) -> str | None: ...

    @property
    def _db(self) -> Database | None: ...

    @property
    def _recorded_config(self) -> dict[str, Any]: ...

    @property
    def _start_attempt(self) -> int: ...

    def worker_statuses(self) -> list[WorkerStatus]: ...

    def _set_paused(self, paused: bool, *, announce: bool = True) -> None: ...

    @property
    def _workers(self) -> Mapping[str, Worker]: ...

    def _instance_noticed(self, notice: InstanceNotice | None) -> None: ...

    def _notices_reach(self) -> bool: ...

    def _reconnected(self) -> None: ...

    def _set_limited(self, reason: str | None) -> None: ...

    @property
    def _wip(self) -> Service: ...

    @property
    def _owns_db(self) -> bool: ...


class Patient(Protocol):
    """A service a stop waits for while busy (see :attr:`Registration.patient`)."""

    async def stop_within(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Registration:
    """One service of the table: its name, its builder and its busy flag.

    The builder is None when the service is not on this ``Boss``; the busy flag is False
    while it does not run.
    """

    name: str
    build: Callable[[Host], Service | None]
    busy: Callable[[Any], bool] = lambda _: False
    #: a stop lets its pass in flight finish first (up to the stop's timeout), and
    #: otherwise stops it beside the workers, after them (``stop_within(seconds)``)
    patient: bool = False


def _notifier(boss: Host) -> Service | None:
    connection = boss.settings.connection
    if not connection.use_listen_notify:
        return None
    return Notifier(
        boss.context(),
        boss.events,
        on_queue=boss._wake,
        on_instance=boss._instance_noticed,
        on_reconnect=boss._reconnected,
        listening=connection.listening(),
    )


def _supervisor(boss: Host) -> Service:
    # built with supervise=False too: it serialises explicit supervise() calls and
    # stop() waits for them; only its background loop depends on the option
    supervisor = boss.settings.supervisor
    return Supervisor(
        boss.context,
        boss.events,
        interval_seconds=float(supervisor.supervise_interval_seconds),
        monitor_interval_seconds=float(supervisor.monitor_interval_seconds),
        settings=boss.settings.maintenance,
        enabled=supervisor.supervise,
    )


def _flows(boss: Host) -> Service:
    # as the supervisor: built with supervise=False too, for explicit resolve_flow()
    return FlowResolver(
        boss.context,
        boss.events,
        float(boss.settings.flows.flow_interval_seconds),
        enabled=boss.settings.supervisor.supervise,
    )


def _bam(boss: Host) -> Service:
    # async migrations run where this instance may migrate, as pg-boss runs them
    return BamWorker(
        boss.context,
        boss.events,
        float(boss.settings.bam.bam_interval_seconds),
        enabled=boss.settings.connection.migrate,
        leave_builds=boss._owns_db,
    )


def _clock_skew(boss: Host) -> Service | None:
    timekeeping = boss.settings.timekeeper
    if not timekeeping.schedule:
        return None
    return ClockSkew(boss.context, boss.events, timekeeping.clock_monitor_interval_seconds)


def _timekeeper(boss: Host) -> Service | None:
    timekeeping = boss.settings.timekeeper
    if not timekeeping.schedule:
        return None
    return Timekeeper(boss.context, boss.events, timekeeping, worker=boss._worker)


def _registry(boss: Host) -> Service | None:
    # a process that only sends registers at its first work() (Boss._register_late)
    settings = boss.settings
    registers = settings.registry.registers_at_start(
        supervise=settings.supervisor.supervise, schedule=settings.timekeeper.schedule
    )
    late = settings.registry.register_instance is None and bool(boss._workers)
    return registry_of(boss) if registers or late else None


def registry_of(boss: Host) -> InstanceRegistry:
    """The instance registry of ``boss`` (also built by its first worker when it
    registers late)."""
    settings = boss.settings
    registry, db = settings.registry, boss._db
    row = RegistrySettings(
        id=boss.instance_id,
        name=registry.instance_name,
        instance_key=registry.instance_key,
        heartbeat_seconds=int(registry.instance_heartbeat_seconds),
        version=__version__,
        supervise=settings.supervisor.supervise,
        schedule=settings.timekeeper.schedule,
        migrate=settings.connection.migrate,
        persist_queue_stats=settings.maintenance.persist_queue_stats,
        persist_warnings=settings.maintenance.persist_warnings,
        # as pg-boss records it: the attempt of start(attempts=N) that got through, past the first
        config={**boss._recorded_config, **_start_attempt(boss._start_attempt)},
    )
    # the pool's counts only where qcore opened it (a caller's db= is the caller's)
    pool = db.pool_counts if boss._owns_db and db is not None else (lambda: None)
    return InstanceRegistry(
        boss.context,
        boss.events,
        row,
        workers=boss.worker_statuses,
        pool=pool,
        on_paused=boss._set_paused,
        limited=lambda: boss.limited,
        on_notice=boss._instance_noticed,
        hears_notify=boss._notices_reach,
    )


def _limiter(boss: Host) -> Service | None:
    limits = boss.settings.registry.system_limiter
    if limits is None:
        return None
    return SystemLimiter(boss.events, limits, on_limited=boss._set_limited)


def _start_attempt(attempt: int) -> dict[str, int]:
    return {"startAttempt": attempt} if attempt > 1 else {}


def _pause_watch(boss: Host) -> Service | None:
    # a keyed server only (it registers at start): an operator pauses a server by its key
    key = boss.settings.registry.instance_key
    if key is None:
        return None
    return PauseWatch(
        boss.context,
        boss.events,
        key=key,
        intervals=lambda: [w.options.polling_interval_seconds for w in boss._workers.values()],
        listening=boss._notices_reach,
        on_paused=boss._set_paused,
    )


#: the built-in services, in the order they start (and stop): the registry first, so
#: a paused server knows it before anything claims
SERVICES: tuple[Registration, ...] = (
    Registration("registry", _registry),
    Registration("pause_watch", _pause_watch),
    Registration("limiter", _limiter),
    Registration("notifier", _notifier),
    Registration("supervisor", _supervisor, busy=lambda s: s.maintaining),
    Registration("flows", _flows, busy=lambda s: s.busy),
    Registration("bam", _bam, busy=lambda s: s.working, patient=True),
    Registration("wip", lambda boss: boss._wip),
    Registration("clock_skew", _clock_skew, busy=lambda s: s.busy),
    Registration("timekeeper", _timekeeper, busy=lambda s: s.busy),
)
BY_NAME: Mapping[str, Registration] = {r.name: r for r in SERVICES}


@dataclass
class Running:
    """The services one ``start()`` started, by name, in start order.

    The caller's own services are under their service's name.
    """

    services: dict[str, Service]

    def get(self, name: str, kind: type[S]) -> S | None:
        """The running service ``name``, if it runs and is a ``kind``."""
        service = self.services.get(name)
        return service if isinstance(service, kind) else None


def busy(running: Running | None, name: str) -> bool:
    """Whether the service ``name`` runs and its busy flag is up."""
    service = None if running is None else running.services.get(name)
    return service is not None and BY_NAME[name].busy(service)


async def stop_all(
    running: Running,
    events: Events,
    *,
    timeout: float,
    graceful: bool,
    settle: float,
    stop_workers: Callable[[float], Any],
) -> None:
    """Stop every running service and the workers within one deadline.

    The workers stop through ``stop_workers(seconds)``. A database that does not answer
    holds the stop no longer but for the workers' short last try (``settle`` seconds).

    A patient service busy with a pass gets the timeout first (the handlers get what is
    left); an idle one stops beside the workers, bounded after them. The others stop
    together before the workers; one still stopping at the deadline is cancelled and
    reported (an ``error`` event), as is a stop that failed."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + (timeout if graceful else 0.0)
    later: dict[asyncio.Future[None], str] = {}
    others: dict[asyncio.Future[None], str] = {}
    for name, service in running.services.items():
        registration = BY_NAME.get(name)
        if registration is not None and registration.patient:
            patient = cast(Patient, service)
            if registration.busy(service):
                await patient.stop_within(timeout if graceful else 0.0)
            else:
                later[asyncio.ensure_future(patient.stop_within(timeout))] = name
    for name, service in running.services.items():
        registration = BY_NAME.get(name)
        if registration is None or not registration.patient:
            others[asyncio.ensure_future(service.stop())] = service.name
    await bounded(others, events, until=max(deadline, started + settle))
    await stop_workers(max(0.0, deadline - loop.time()))
    await bounded(later, events, until=deadline + settle)


async def bounded(stops: dict[asyncio.Future[None], str], events: Events, *, until: float) -> None:
    """Wait for the services' stops until a deadline, then cancel and report the late ones.

    ``stops`` holds each service's stop, by the service's name; the deadline is loop
    time ``until``. One still stopping then (its pass waits on a database that does not
    answer) is cancelled, left to end on its own, and reported; so is a stop that
    failed.
    """
    if not stops:
        return
    left = max(0.0, until - asyncio.get_running_loop().time())
    done, late = await asyncio.wait(stops, timeout=left)
    for task in late:
        task.cancel()
        events.emit("error", TimeoutError(f"the {stops[task]} service did not stop in time"))
    if late:  # their passes' transactions roll back before the pool closes under them
        await asyncio.wait(late, timeout=UNWIND_SECONDS)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            events.emit("error", task.exception())

"""The constructor options of ``Boss``, declared once.

:class:`BossOptions` types ``Boss(**options)`` for type checkers, under pg-boss's
names. Each option belongs to one owner's settings dataclass, which holds its
default and its check (a bad value raises ``ConfigError`` naming it):

=================================  ==============================================
:class:`ConnectionSettings`        the backend, the connection, the schema
:class:`SupervisorSettings`        the supervise pass and expiry monitoring
:class:`~qcore.services.maintenance.Maintenance`  retention, caches, warnings, reindex
:class:`~qcore.services.timekeeper.TimekeeperSettings`  cron and the clock-skew check
:class:`FlowSettings`              the flow resolver
:class:`BamSettings`               async migration commands
:class:`RegistryOptions`           the instance registry
=================================  ==============================================

:func:`settings_of` builds them from what ``Boss`` was given; :func:`signature` gives
``Boss.__init__`` the signature it had when every option was written out (names,
defaults, types); :meth:`BossSettings.recorded` is the ``config`` an instance's row
records. A field's metadata says how the option differs from the setting: ``option``
(the option's default and the conversion of a given value: ``reindex``) and
``record`` (False: never recorded, a connection setting or a name).

A new option is one field on its owner's dataclass and one key of
:class:`BossOptions`; a test holds the two together.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar, get_type_hints

from qcore.backend import Backend
from qcore.db import DEFAULT_LISTEN, ConnectionOptions, ListenOptions
from qcore.errors import ConfigError, ValidationError
from qcore.identifiers import schema_name
from qcore.services.limiter import SystemLimits
from qcore.services.maintenance import DAY_SECONDS, Maintenance
from qcore.services.timekeeper import TimekeeperSettings
from qcore.verbs import instances as instance_ops
from qcore.verbs.reindex import check_number

__all__ = [
    "OPTION_NAMES",
    "OWNERS",
    "BamSettings",
    "BossOptions",
    "BossSettings",
    "ConnectionSettings",
    "FlowSettings",
    "RegistryOptions",
    "SupervisorSettings",
    "settings_of",
    "signature",
]

#: field metadata: an option never recorded in the instance row
UNRECORDED: Mapping[str, Any] = {"record": False}


class BossOptions(ConnectionOptions, total=False):
    """The keyword options of ``Boss(...)`` and ``SyncBoss(...)``.

    They include the connection options of :class:`~qcore.db.ConnectionOptions`.
    Defaults and ranges: the guide's configuration page.
    """

    backend: str | Backend
    db: Any
    schema: str
    migrate: bool
    create_schema: bool
    allow_schema_case_variant: bool
    data_dir: str | None
    use_listen_notify: bool
    notify_heartbeat_interval_seconds: float
    notify_heartbeat_timeout_seconds: float
    notify_keep_alive_initial_delay_seconds: float
    supervise: bool
    supervise_interval_seconds: float
    monitor_interval_seconds: float
    maintenance_interval_seconds: float
    queue_cache_interval_seconds: float
    warning_slow_query_seconds: float
    warning_queue_size: int
    warning_affinity_unmatched_seconds: float
    persist_warnings: bool
    warning_retention_days: int | None
    persist_queue_stats: bool
    queue_stat_retention_days: int
    reindex: bool | Mapping[str, float]
    reindex_interval_seconds: float
    monitor_vacuum: bool
    schedule: bool
    cron_monitor_interval_seconds: float
    cron_worker_interval_seconds: float
    clock_monitor_interval_seconds: float
    flow_interval_seconds: float
    bam_interval_seconds: float
    register_instance: bool | None
    instance_name: str | None
    instance_heartbeat_seconds: int
    instance_key: str | None
    system_limiter: SystemLimits | Mapping[str, Any] | None


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the jobs live and how this ``Boss`` reaches them.

    The backend (a name, ``"auto"``, or a ``Backend``), a ``db=`` you own, the schema
    and how it is installed, an embedded engine's ``data_dir``, and whether workers
    listen for NOTIFY.
    """

    backend: str | Backend = field(default="postgres", metadata=UNRECORDED)
    db: Any = field(default=None, metadata=UNRECORDED)
    schema: str = field(default="pgboss", metadata=UNRECORDED)
    migrate: bool = True
    create_schema: bool = True
    allow_schema_case_variant: bool = field(default=False, metadata=UNRECORDED)
    data_dir: str | None = field(default=None, metadata=UNRECORDED)
    use_listen_notify: bool = False
    #: the listening connection's heartbeat and keepalive (pg-boss's notify*Ms, in seconds)
    notify_heartbeat_interval_seconds: float = field(
        default=DEFAULT_LISTEN.heartbeat_seconds, metadata=UNRECORDED
    )
    notify_heartbeat_timeout_seconds: float = field(
        default=DEFAULT_LISTEN.heartbeat_timeout_seconds, metadata=UNRECORDED
    )
    notify_keep_alive_initial_delay_seconds: float = field(
        default=DEFAULT_LISTEN.keepalive_idle_seconds, metadata=UNRECORDED
    )

    def __post_init__(self) -> None:
        schema_name(self.schema)  # validate now: a bad name never reaches the database
        for option in (
            "notify_heartbeat_interval_seconds",
            "notify_heartbeat_timeout_seconds",
            "notify_keep_alive_initial_delay_seconds",
        ):
            check_number(option, getattr(self, option), 0.1, 3600, integer=False)

    def listening(self) -> ListenOptions:
        """How the listening connection is kept alive, from the ``notify_*`` options."""
        return ListenOptions(
            heartbeat_seconds=self.notify_heartbeat_interval_seconds,
            heartbeat_timeout_seconds=self.notify_heartbeat_timeout_seconds,
            keepalive_idle_seconds=self.notify_keep_alive_initial_delay_seconds,
        )


def _interval(owner: object, *options: str) -> None:
    for option in options:
        check_number(option, getattr(owner, option), 1, DAY_SECONDS, integer=False)


@dataclass(frozen=True)
class SupervisorSettings:
    """The settings of the supervise pass.

    Whether it runs in the background, and how often it and the expiry monitor run.
    """

    supervise: bool = True
    supervise_interval_seconds: float = 60.0
    monitor_interval_seconds: float = 60.0

    def __post_init__(self) -> None:
        _interval(self, "supervise_interval_seconds", "monitor_interval_seconds")


@dataclass(frozen=True)
class FlowSettings:
    """The flow resolver's interval (it runs where the supervise pass does)."""

    flow_interval_seconds: float = 5.0

    def __post_init__(self) -> None:
        _interval(self, "flow_interval_seconds")


@dataclass(frozen=True)
class BamSettings:
    """The async migration worker's interval (it runs where this instance migrates)."""

    bam_interval_seconds: float = 60.0

    def __post_init__(self) -> None:
        _interval(self, "bam_interval_seconds")


@dataclass(frozen=True)
class RegistryOptions:
    """The settings of the instance registry.

    Whether this ``Boss`` registers and beats (None: when it runs as a server, see
    :meth:`registers_at_start`), its name, its heartbeat, and its stable key
    (``$QCORE_INSTANCE_KEY`` unless given).
    """

    register_instance: bool | None = field(default=None, metadata=UNRECORDED)
    instance_name: str | None = field(default=None, metadata=UNRECORDED)
    instance_heartbeat_seconds: int = 30
    instance_key: str | None = None
    #: pause claiming while this process lacks CPU or memory (see qcore.services.limiter)
    system_limiter: SystemLimits | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        name = self.instance_name
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigError(f"instance_name must be a non-empty string, got {name!r}")
        check_number(
            "instance_heartbeat_seconds", self.instance_heartbeat_seconds, 1, 3600, integer=True
        )
        key = self.instance_key
        if key is None:
            key = os.environ.get(instance_ops.INSTANCE_KEY_ENV)
        try:
            key = None if key is None else instance_ops.instance_key(key)
        except ValidationError as exc:
            raise ConfigError(str(exc)) from None
        object.__setattr__(self, "instance_key", key)
        object.__setattr__(self, "system_limiter", SystemLimits.of(self.system_limiter))
        if self.register_instance not in (None, True, False):
            raise ConfigError(
                f"register_instance must be True, False or None, got {self.register_instance!r}"
            )
        if key is not None and self.register_instance is False:
            raise ConfigError("instance_key needs register_instance=True (a keyed server beats)")

    def registers_at_start(self, *, supervise: bool, schedule: bool) -> bool:
        """Whether ``start()`` registers this ``Boss``.

        Asked to (``register_instance=True``), or left to qcore (None) and it runs as a
        server: it supervises, keeps time or has an instance key. Left to qcore, a process
        that only sends registers at its first :meth:`~qcore.Boss.work` instead, and one
        that never works stays out of the registry.
        """
        if self.register_instance is not None:
            return self.register_instance
        return supervise or schedule or self.instance_key is not None


#: the owners of the options, in the order ``Boss``'s signature lists them
OWNERS: tuple[type, ...] = (
    ConnectionSettings,
    SupervisorSettings,
    Maintenance,
    TimekeeperSettings,
    FlowSettings,
    BamSettings,
    RegistryOptions,
)


def _option_default(f: Field[Any]) -> Any:
    """The option's default: the field's, unless its metadata gives the option's own."""
    if "option" in f.metadata:
        return f.metadata["option"][0]
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def _converted(f: Field[Any], value: Any) -> Any:
    convert: Callable[[Any], Any] | None = f.metadata.get("option", (None, None))[1]
    return value if convert is None else convert(value)


@dataclass(frozen=True)
class BossSettings:
    """Every owner's settings, as one ``Boss`` was given them."""

    connection: ConnectionSettings
    supervisor: SupervisorSettings
    maintenance: Maintenance
    timekeeper: TimekeeperSettings
    flows: FlowSettings
    bam: BamSettings
    registry: RegistryOptions
    #: the options as given (or defaulted), before any conversion
    given: Mapping[str, Any]

    def recorded(self, *, adapter: str, backend: str, pool_max: int) -> dict[str, Any]:
        """The options an instance's row records, under their own names.

        Never a connection setting or a credential: each option as given, but the
        registry's key as resolved.
        """
        config: dict[str, Any] = {"adapter": adapter, "backend": backend, "max": pool_max}
        for owner in OWNERS:
            for f in fields(owner):
                if f.metadata.get("record", True):
                    config[f.name] = self.given[f.name]
        config["instance_key"] = self.registry.instance_key
        return config


def settings_of(options: Mapping[str, Any]) -> BossSettings:
    """Split ``Boss``'s keyword options into each owner's settings.

    The connection options are left out; the owners check them in the order of
    :data:`OWNERS`.
    """
    given: dict[str, Any] = {}
    built: list[Any] = []
    for owner in OWNERS:
        values = {}
        for f in fields(owner):
            value = options.get(f.name, _option_default(f))
            given[f.name] = value
            values[f.name] = _converted(f, value)
        built.append(owner(**values))
    connection, supervisor, maintenance, timekeeper, flows, bam, registry = built
    return BossSettings(
        connection, supervisor, maintenance, timekeeper, flows, bam, registry, given=given
    )


Init = TypeVar("Init", bound=Callable[..., None])


def signature(init: Init) -> Init:
    """Give ``Boss.__init__`` the signature it would have with every option written out.

    The signature of ``init``: ``connection_string``, each option keyword-only with its
    default and type, then ``**connection``. ``inspect.signature`` and ``help()`` show
    it.
    """
    hints = get_type_hints(BossOptions)
    P = inspect.Parameter
    parameters = [
        P("self", P.POSITIONAL_OR_KEYWORD),
        P("connection_string", P.POSITIONAL_OR_KEYWORD, default=None, annotation=str | None),
    ]
    for owner in OWNERS:
        parameters += [
            P(f.name, P.KEYWORD_ONLY, default=_option_default(f), annotation=hints[f.name])
            for f in fields(owner)
        ]
    parameters.append(P("connection", P.VAR_KEYWORD, annotation=ConnectionOptions))
    init.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    return init


#: every option, by owner (``ConnectionOptions`` aside)
OPTION_NAMES: tuple[str, ...] = tuple(f.name for owner in OWNERS for f in fields(owner))

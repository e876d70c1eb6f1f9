"""What a backend is: a frozen description of one engine's strategies and capabilities.

A backend holds no code paths. The core reads its strategy choices and
capability flags and builds SQL from them; the compatibility matrix reads
its provisioning spec to start the engine and derives, from the same flags,
which SQL features the capability guard must refuse.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from qcore.errors import ConfigError

__all__ = [
    "Backend",
    "Capabilities",
    "EngineIdentity",
    "FetchStrategy",
    "Kind",
    "LockStrategy",
    "MutationStrategy",
    "ProvisioningSpec",
    "SchemaShape",
    "Server",
]


class Kind(str, enum.Enum):
    """How the engine is deployed."""

    STANDARD = "standard"
    DISTRIBUTED = "distributed"
    EMBEDDED = "embedded"


class FetchStrategy(str, enum.Enum):
    """How a worker claims jobs."""

    SKIP_LOCKED = "skip_locked"  # SELECT ... FOR UPDATE SKIP LOCKED inside the claiming UPDATE
    ATOMIC_UPDATE = "atomic_update"  # unlocked candidate read, UPDATE ... RETURNING rechecks state


class MutationStrategy(str, enum.Enum):
    """How a command that touches several rows or tables is sent."""

    CTE = "cte"  # one statement with data-modifying CTEs
    SPLIT = "split"  # the same effect as several statements in one transaction


class LockStrategy(str, enum.Enum):
    """How instances exclude each other for install, migration and maintenance."""

    ADVISORY = "advisory"  # pg_advisory_xact_lock with pg-boss's keys
    LEASE = "lease"  # a row with an expiry in qcore's lock table


@dataclass(frozen=True)
class SchemaShape:
    """The physical layout of the job storage."""

    partitioned: bool = True  # per-queue list partitions of the job table
    deferrable_foreign_keys: bool = True
    covering_indexes: bool = True  # CREATE INDEX ... INCLUDE (...)


@dataclass(frozen=True)
class Capabilities:
    """Features the engine has. Each flag switches a code path or a test on or off."""

    listen_notify: bool = True  # LISTEN / NOTIFY / pg_notify
    reindex: bool = True  # REINDEX [CONCURRENTLY]
    vacuum_stats: bool = True  # pg_stat_* tables are populated
    index_build_progress: bool = True  # pg_stat_progress_create_index
    drift_catalog: bool = True  # pg_get_indexdef, pg_get_constraintdef & co. for drift checks
    transactional_ddl: bool = True  # DDL inside a transaction rolls back with it
    plpgsql_dynamic: bool = True  # EXECUTE and PERFORM inside PL/pgSQL bodies
    planner_settings: bool = True  # set_config of planner switches (enable_bitmapscan)
    single_session: bool = False  # every connection shares one server session (PGlite)


class Server(Protocol):
    """Something that runs an engine and gives its address.

    A container, a local cluster, an embedded PGlite. Used as a context manager.
    """

    @property
    def url(self) -> str: ...

    def start(self) -> Server: ...

    def stop(self) -> None: ...

    def __enter__(self) -> Server: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass(frozen=True)
class ProvisioningSpec:
    """How the compatibility matrix starts this engine in a container."""

    image: str
    port: int
    command: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    user: str = "postgres"
    password: str | None = None
    database: str = "postgres"
    # SQL run as the admin user once the engine answers; {database} is replaced
    # by a validated, quoted identifier.
    create_database: str = "CREATE DATABASE {database}"
    # SQL run inside each new database before the suite uses it.
    setup_database: tuple[str, ...] = ()
    url_template: str = "postgresql://{user}@{host}:{port}/{database}"
    ready_timeout_seconds: float = 120.0
    # Session settings the engine is expected to run with (for emulation too).
    session_settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineIdentity:
    """What a server says it is (read by ``qcore.engine.identify``)."""

    engine: str  # postgres, cockroachdb, yugabytedb, citus, pglite or unknown
    version: str  # the server's version() text
    markers: Mapping[str, str] = field(default_factory=dict)  # e.g. {"citus": "12.1"}
    emulating: str | None = None  # the backend a capability-guard emulation stands in for

    def describe(self) -> str:
        """One line for people: the engine and the first part of its version text."""
        text = f"{self.engine} ({self.version.split(' on ')[0].split(',')[0]})"
        return f"{text}, emulating {self.emulating}" if self.emulating else text


@dataclass(frozen=True)
class Backend:
    """One engine's profile. Instances are values: compare, hash and copy them freely."""

    name: str
    kind: Kind
    fetch: FetchStrategy
    mutation: MutationStrategy
    schema: SchemaShape
    lock: LockStrategy
    capabilities: Capabilities = field(default_factory=Capabilities)
    # SQLSTATEs after which the whole transaction is run again.
    retryable_sqlstates: frozenset[str] = frozenset({"40001", "40P01"})
    provisioning: ProvisioningSpec | None = None
    # For embedded engines: builds a Server to start when no connection is given.
    launcher: Callable[..., Server] | None = field(default=None, compare=False)
    description: str = ""
    # Whether a server is this backend's engine. Without one, a server is when its
    # identity's engine is this backend's name (how the built-ins recognise theirs).
    detect: Callable[[EngineIdentity], bool] | None = field(default=None, compare=False)

    def recognises(self, identity: EngineIdentity) -> bool:
        """Whether the server of ``identity`` is this backend's own engine."""
        if self.detect is not None:
            return bool(self.detect(identity))
        return identity.engine == self.name

    def with_capabilities(self, **flags: bool) -> Backend:
        """A copy with some features switched (e.g. ``listen_notify=False``).

        Any name of :meth:`features`; a strategy-derived one picks the strategy without
        it (``advisory_locks=False``: the lease lock; ``skip_locked=False``: the atomic
        update claim; ``multi_mutation_cte=False``: split statements; ``partitioning``,
        ``deferrable_foreign_keys``, ``covering_indexes``: the schema shape).
        """
        known = {f.name for f in dataclasses.fields(Capabilities)}
        unknown = sorted(set(flags) - known - set(_DERIVED))
        if unknown:
            raise ConfigError(
                f"unknown capability {', '.join(unknown)}; known:"
                f" {', '.join(sorted(known | set(_DERIVED)))}"
            )
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise ConfigError(f"capability {name} must be True or False, got {value!r}")
        backend = dataclasses.replace(
            self,
            capabilities=dataclasses.replace(
                self.capabilities, **{k: v for k, v in flags.items() if k in known}
            ),
        )
        for name, value in flags.items():
            if name in _DERIVED:
                backend = _DERIVED[name](backend, value)
        return backend

    def has(self, capability: str) -> bool:
        """Whether the backend has a capability or a strategy-derived feature, by name.

        Names are the ``Capabilities`` fields plus ``skip_locked``,
        ``advisory_locks``, ``partitioning``, ``deferrable_foreign_keys``,
        ``covering_indexes`` and ``multi_mutation_cte``.
        """
        derived = self.features()
        if capability not in derived:
            raise ConfigError(
                f"unknown capability {capability!r}; known: {', '.join(sorted(derived))}"
            )
        return derived[capability]

    def features(self) -> dict[str, bool]:
        """Every named capability, the strategy-derived ones included."""
        flags: dict[str, Any] = dataclasses.asdict(self.capabilities)
        flags.update(
            skip_locked=self.fetch is FetchStrategy.SKIP_LOCKED,
            advisory_locks=self.lock is LockStrategy.ADVISORY,
            partitioning=self.schema.partitioned,
            deferrable_foreign_keys=self.schema.deferrable_foreign_keys,
            covering_indexes=self.schema.covering_indexes,
            multi_mutation_cte=self.mutation is MutationStrategy.CTE,
        )
        return {k: bool(v) for k, v in flags.items()}


def _shape(name: str) -> Callable[[Backend, bool], Backend]:
    def switch(backend: Backend, value: bool) -> Backend:
        return dataclasses.replace(
            backend, schema=dataclasses.replace(backend.schema, **{name: value})
        )

    return switch


#: the derived feature names ``with_capabilities`` accepts, and the strategy each sets
_DERIVED: dict[str, Callable[[Backend, bool], Backend]] = dict(
    skip_locked=lambda b, on: dataclasses.replace(
        b, fetch=FetchStrategy.SKIP_LOCKED if on else FetchStrategy.ATOMIC_UPDATE
    ),
    advisory_locks=lambda b, on: dataclasses.replace(
        b, lock=LockStrategy.ADVISORY if on else LockStrategy.LEASE
    ),
    multi_mutation_cte=lambda b, on: dataclasses.replace(
        b, mutation=MutationStrategy.CTE if on else MutationStrategy.SPLIT
    ),
    partitioning=_shape("partitioned"),
    deferrable_foreign_keys=_shape("deferrable_foreign_keys"),
    covering_indexes=_shape("covering_indexes"),
)

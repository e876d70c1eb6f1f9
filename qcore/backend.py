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
    single_session: bool = False  # every connection shares one server session (PGlite)


class Server(Protocol):
    """Something that runs an engine and gives its address: a container, a local
    cluster, an embedded PGlite. Used as a context manager."""

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

    def with_capabilities(self, **flags: bool) -> Backend:
        """A copy with some capability flags changed (e.g. ``listen_notify=True``)."""
        known = {f.name for f in dataclasses.fields(Capabilities)}
        unknown = sorted(set(flags) - known)
        if unknown:
            raise ConfigError(
                f"unknown capability {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return dataclasses.replace(
            self, capabilities=dataclasses.replace(self.capabilities, **flags)
        )

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

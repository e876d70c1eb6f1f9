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

import contextlib
from collections.abc import Iterator

from qcore.backend import Backend, Kind
from qcore.conformance.provisioners.base import (  # noqa: F401
    DEFAULT_ADMIN_DSN,
    KINDS,
    REAL_KINDS,
    NotAvailable,
    Provisioner,
    ProvisionError,
    admin_dsn,
    dsn_env_var,
    dsn_from_env,
    engine_identity_of,
    to_url,
)
from qcore.conformance.provisioners.container import ContainerProvisioner, docker_available
from qcore.conformance.provisioners.external import ExternalProvisioner
from qcore.conformance.provisioners.local import (
    EmulationProvisioner,
    LocalProvisioner,
    LocalServer,
    TempCluster,
    local_server,
)
from qcore.conformance.provisioners.local import free_port as free_port
from qcore.conformance.provisioners.pglite import PGliteProvisioner

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

"""The backend registry: built-ins, a third-party package's entry point, errors."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from qcore import backends
from qcore.backend import Backend, FetchStrategy, LockStrategy, MutationStrategy
from qcore.errors import ConfigError

pytestmark = pytest.mark.feature("registry")

BUILT_INS = {"postgres", "cockroachdb", "yugabytedb", "citus", "pglite"}


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_built_ins_resolve(name: str) -> None:
    backend = backends.get(name)
    assert isinstance(backend, Backend)
    assert backend.name == name
    assert backends.get(name) is backend  # cached
    assert name in backends.names()


def test_strategies_follow_the_design_table() -> None:
    crdb = backends.get("cockroachdb")
    assert (crdb.fetch, crdb.mutation, crdb.lock) == (
        FetchStrategy.ATOMIC_UPDATE,
        MutationStrategy.SPLIT,
        LockStrategy.LEASE,
    )
    assert not crdb.schema.partitioned and not crdb.schema.deferrable_foreign_keys
    assert not crdb.has("listen_notify") and not crdb.has("skip_locked")
    assert backends.get("yugabytedb").has("skip_locked")
    assert not backends.get("yugabytedb").has("advisory_locks")
    for name in ("postgres", "citus", "pglite"):
        assert backends.get(name).has("partitioning")
    assert backends.get("pglite").capabilities.single_session
    assert backends.get("pglite").launcher is not None


def test_unknown_backend_lists_the_installed_ones() -> None:
    with pytest.raises(ConfigError) as info:
        backends.get("oracle")
    message = str(info.value)
    assert "unknown backend 'oracle'" in message
    for name in BUILT_INS:
        assert name in message


def test_unknown_capability_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown capability 'teleport'"):
        backends.get("postgres").has("teleport")
    with pytest.raises(ConfigError, match="unknown capability teleport"):
        backends.get("postgres").with_capabilities(teleport=True)


def test_with_capabilities_is_a_copy() -> None:
    yb = backends.get("yugabytedb")
    on = yb.with_capabilities(listen_notify=True)
    assert on.has("listen_notify") and not yb.has("listen_notify")
    assert on.fetch is yb.fetch


@pytest.fixture
def vendor_package(tmp_path: Path) -> Iterator[str]:
    """A third-party backend package on sys.path with a real entry point, as pip installs it."""
    pkg = tmp_path / "qcore_backend_acme"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            import dataclasses
            from qcore_backends.postgres import BACKEND as _PG

            BACKEND = dataclasses.replace(_PG, name="acme", provisioning=None).with_capabilities(
                reindex=False
            )
            NOT_A_BACKEND = object()
            """
        )
    )
    dist = tmp_path / "qcore_backend_acme-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: qcore-backend-acme\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[qcore.backends]\nacme = qcore_backend_acme:BACKEND\n"
        "broken = qcore_backend_acme:NOT_A_BACKEND\n"
        "missing = qcore_backend_nowhere:BACKEND\n"
        "liar = qcore_backend_acme:BACKEND\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield "acme"
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("acme", "broken", "missing", "liar"):
            backends.unregister(name)
        sys.modules.pop("qcore_backend_acme", None)


def test_third_party_backend_resolves_by_name(vendor_package: str) -> None:
    assert vendor_package in backends.names()
    acme = backends.get(vendor_package)
    assert acme.name == "acme"
    assert not acme.has("reindex")
    assert acme.fetch is FetchStrategy.SKIP_LOCKED


def test_bad_entry_points_fail_clearly(vendor_package: str) -> None:
    with pytest.raises(ConfigError, match="gave object, not a qcore Backend"):
        backends.get("broken")
    with pytest.raises(
        ConfigError, match=r"could not be loaded from qcore\.backends:qcore_backend_no"
    ):
        backends.get("missing")
    with pytest.raises(ConfigError, match="registered as 'liar' calls itself 'acme'"):
        backends.get("liar")


def test_register_overrides_for_this_process() -> None:
    custom = dataclasses.replace(backends.get("postgres"), name="mine")
    backends.register("mine", custom)
    try:
        assert backends.get("mine") is custom
        assert "mine" in backends.names()
    finally:
        backends.unregister("mine")
    with pytest.raises(ConfigError):
        backends.get("mine")

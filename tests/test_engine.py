"""Knowing which engine is on the other end: the identity a server reports, the backend
that recognises it, ``backend="auto"`` and the ``backend_mismatch`` warning."""

from __future__ import annotations

import dataclasses

import pytest

from qcore import Boss, backends
from qcore.backend import EngineIdentity, FetchStrategy, LockStrategy, MutationStrategy
from qcore.conformance.guard import emulation_conninfo
from qcore.db import connect
from qcore.db.pglite import PGliteDatabase
from qcore.engine import classify, identify
from qcore.errors import ConfigError
from qcore.events import WarningEvent
from qcore_backends.pglite.server import PGliteServer
from tests.test_pglite import pglite_server  # noqa: F401  (the session's PGlite)

pytestmark = pytest.mark.feature("engine")

POSTGRES = backends.get("postgres")

PG15 = "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc"
CRDB = "CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu, built 2024/05/15 21:28:29, go1.22.2)"
YUGA = "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 16"
LITE = "PostgreSQL 18.6 (PGlite 0.5.14) on wasm32-unknown-emscripten, compiled by emcc"
VERSIONS = [
    (PG15, {}, "postgres"),
    (CRDB, {}, "cockroachdb"),
    (YUGA, {}, "yugabytedb"),
    ("PostgreSQL 16.2 on x86_64-pc-linux-gnu, compiled by gcc", {"citus": "12.1-1"}, "citus"),
    (LITE, {}, "pglite"),
    ("8.0.36 MySQL Community Server", {}, "unknown"),
]


@pytest.mark.parametrize(("version", "markers", "engine"), VERSIONS, ids=[v[2] for v in VERSIONS])
def test_classify_names_each_engine(version: str, markers: dict[str, str], engine: str) -> None:
    assert classify(version, markers) == engine


def test_each_builtin_recognises_its_own_engine_only() -> None:
    for name in ("postgres", "cockroachdb", "yugabytedb", "citus", "pglite"):
        backend = backends.get(name)
        for engine in ("postgres", "cockroachdb", "yugabytedb", "citus", "pglite", "unknown"):
            identity = EngineIdentity(engine, "v")
            assert backend.recognises(identity) is (engine == name), (name, engine)


def test_a_vendor_backend_recognises_by_its_detector_or_not_at_all() -> None:
    renamed = dataclasses.replace(POSTGRES, name="acme")
    assert not renamed.recognises(EngineIdentity("postgres", "PostgreSQL 15"))  # not acme's
    acme = dataclasses.replace(renamed, detect=lambda i: i.version.startswith("AcmeDB"))
    assert acme.recognises(EngineIdentity("postgres", "AcmeDB 3.1 (PostgreSQL 15 compatible)"))
    assert not acme.recognises(EngineIdentity("postgres", "PostgreSQL 15"))


def test_for_engine_prefers_a_vendor_detector_then_the_engine_name() -> None:
    assert backends.for_engine(EngineIdentity("postgres", "PostgreSQL 15")).name == "postgres"
    assert backends.for_engine(EngineIdentity("cockroachdb", "CockroachDB")).name == "cockroachdb"
    emulated = EngineIdentity("postgres", "PostgreSQL 15", emulating="citus")
    assert backends.for_engine(emulated).name == "citus"
    acme = dataclasses.replace(POSTGRES, name="acme", detect=lambda i: "Acme" in i.version)
    backends.register("acme", acme)
    try:
        assert backends.for_engine(EngineIdentity("postgres", "Acme 1 / PostgreSQL 15")) is acme
        backends.register("acme2", dataclasses.replace(acme, name="acme2"))
        with pytest.raises(ConfigError, match=r"several backends recognise.*acme, acme2"):
            backends.for_engine(EngineIdentity("postgres", "Acme 1"))
    finally:
        backends.unregister("acme")
        backends.unregister("acme2")
    with pytest.raises(ConfigError, match="no installed backend is for unknown"):
        backends.for_engine(EngineIdentity("unknown", "8.0.36 MySQL"))


def test_with_capabilities_switches_strategy_derived_features() -> None:
    acme = POSTGRES.with_capabilities(
        advisory_locks=False, listen_notify=False, skip_locked=False, multi_mutation_cte=False
    )
    assert acme.lock is LockStrategy.LEASE and acme.fetch is FetchStrategy.ATOMIC_UPDATE
    assert acme.mutation is MutationStrategy.SPLIT and not acme.capabilities.listen_notify
    off = POSTGRES.with_capabilities(partitioning=False, covering_indexes=False)
    assert not off.has("partitioning") and not off.has("covering_indexes")
    assert off.has("deferrable_foreign_keys")
    assert off.with_capabilities(partitioning=True).has("partitioning")
    with pytest.raises(ConfigError, match=r"unknown capability telepathy; known: .*advisory_locks"):
        POSTGRES.with_capabilities(telepathy=True)
    with pytest.raises(ConfigError, match="advisory_locks must be True or False, got 'no'"):
        POSTGRES.with_capabilities(advisory_locks="no")  # type: ignore[arg-type]


@pytest.mark.postgres
async def test_identify_reads_postgres_and_an_emulation(pg_dsn: str) -> None:
    db = await connect(pg_dsn, max=1)
    try:
        identity = await identify(db)
    finally:
        await db.close()
    assert identity.engine == "postgres" and identity.emulating is None
    assert identity.version.startswith("PostgreSQL")
    db = await connect(emulation_conninfo(pg_dsn, backends.get("cockroachdb")), max=1)
    try:
        emulated = await identify(db)
    finally:
        await db.close()
    assert emulated.engine == "postgres" and emulated.emulating == "cockroachdb"
    assert emulated.describe().endswith("emulating cockroachdb")


def _warnings(boss: Boss) -> list[WarningEvent]:
    seen: list[WarningEvent] = []
    boss.on("warning", seen.append)
    return seen


@pytest.mark.postgres
async def test_auto_picks_postgres_and_a_right_choice_is_quiet(pg_dsn: str) -> None:
    for choice in ("auto", "postgres"):
        boss = Boss(pg_dsn, backend=choice, schema="qcore_engine_auto", supervise=False)
        seen = _warnings(boss)
        async with boss:
            assert boss.backend.name == "postgres"
            assert boss.engine is not None and boss.engine.engine == "postgres"
            await boss.create_queue("q")
            assert await boss.send("q", {"n": 1}) is not None
            await boss.delete_queue("q")
        assert [w for w in seen if w.type == "backend_mismatch"] == []


@pytest.mark.postgres
async def test_a_wrong_backend_choice_warns_backend_mismatch(pg_dsn: str) -> None:
    boss = Boss(pg_dsn, backend="cockroachdb", schema="qcore_engine_wrong", supervise=False)
    seen = _warnings(boss)
    async with boss:
        (warning,) = [w for w in seen if w.type == "backend_mismatch"]
    assert warning.data["backend"] == "cockroachdb" and warning.data["engine"] == "postgres"
    assert "backend='postgres' or backend='auto'" in warning.message


@pytest.mark.pglite
async def test_auto_picks_pglite_and_its_single_session_adapter(
    pglite_server: PGliteServer,  # noqa: F811
) -> None:
    url = pglite_server.url
    boss = Boss(url, backend="auto", schema="qcore_engine_pglite", supervise=False)
    seen = _warnings(boss)
    async with boss:
        assert boss.backend.name == "pglite" and isinstance(boss.db, PGliteDatabase)
        assert boss.engine is not None and boss.engine.engine == "pglite"
        await boss.create_queue("q")
        job_id = await boss.send("q", {"n": 1})
        (job,) = await boss.fetch("q")
        assert job.id == job_id
        await boss.db.execute_script("DROP SCHEMA qcore_engine_pglite CASCADE")
    assert [w for w in seen if w.type == "backend_mismatch"] == []


def test_auto_needs_a_connection_to_read() -> None:
    with pytest.raises(ConfigError, match="backend='auto' reads the engine from the server"):
        Boss(backend="auto")

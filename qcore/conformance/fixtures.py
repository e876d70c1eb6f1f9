"""The conformance kit's fixtures: the backend under test, its provisioned engine,
and the adapter, schema, context and Boss a test runs on.

They are imported into :mod:`qcore.conformance.plugin`, which pytest loads, so that
pytest registers them; see that module's docstring for what each one gives.
:func:`open_database` is the adapter the ``db`` fixture opens, for tests that need one
of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore.backend import Backend, FetchStrategy, MutationStrategy
from qcore.conformance.provisioners import NotAvailable, Provisioner
from qcore.conformance.report import state_of
from qcore.conformance.schemas import fresh_name
from qcore.identifiers import quote

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the db fixtures need it; the rest works without
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "ASYNC_FIXTURES",
    "INSTALLING_FIXTURES",
    "open_database",
]

#: whether pytest-asyncio is installed, and with it the fixtures ``pool``, ``sctx``,
#: ``ctx`` and ``boss`` (without it ``db`` and ``schema`` fail, naming what to install)
ASYNC_FIXTURES = pytest_asyncio is not None

#: the fixtures that install the test's schema, which may then come from the pool
INSTALLING_FIXTURES = frozenset({"ctx", "sctx", "boss", "installed"})


@pytest.fixture(scope="session")
def qcore_backend_name(request: pytest.FixtureRequest) -> str:
    """The name of the backend this test runs on (the parametrised value)."""
    param = getattr(request, "param", None)
    if param is None:  # reached through getfixturevalue, outside the parametrisation
        return next(iter(state_of(request.config).backends))
    return str(param)


@pytest.fixture(scope="session")
def backend(qcore_backend_name: str, request: pytest.FixtureRequest) -> Backend:
    """The qcore Backend under test."""
    return state_of(request.config).backend(qcore_backend_name)


@pytest.fixture(scope="session")
def provisioned(qcore_backend_name: str, request: pytest.FixtureRequest) -> Provisioner:
    """The running provisioner of the backend (started on first use, stopped at the end
    of the session); skips with "<backend> not available here: <why>" if it cannot run."""
    state = state_of(request.config)
    try:
        return state.start(qcore_backend_name)
    except NotAvailable as exc:
        pytest.skip(str(exc))


async def open_database(provisioner: Provisioner, connections: int = 4) -> Any:
    """A qcore ``Database`` adapter on the provisioner's database: ``PGliteDatabase``
    for a single-session engine, else ``qcore.db.connect`` with up to ``connections``;
    wrapped in the capability guard when the backend is emulated. The caller closes it."""
    backend = provisioner.backend
    if backend.capabilities.single_session:
        from qcore.db.pglite import PGliteDatabase

        inner: Any = await PGliteDatabase.connect(provisioner.url)
    else:
        from qcore.db import connect

        inner = await connect(provisioner.url, max=connections)
    if provisioner.emulated:
        from qcore.conformance.guard import GuardedDatabase

        return GuardedDatabase(inner, backend)
    return inner


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def db(provisioned: Provisioner) -> AsyncIterator[Any]:
        """A qcore Database adapter connected to the backend's database (guarded when
        emulated); closed after the test."""
        adapter = await open_database(provisioned)
        try:
            yield adapter
        finally:
            await adapter.close()

    @pytest_asyncio.fixture
    async def pool(provisioned: Provisioner, db: Any) -> AsyncIterator[Any]:
        """An adapter with up to 16 connections, for concurrency tests (the test's own
        ``db`` on a single-session engine); closed after the test."""
        if provisioned.backend.capabilities.single_session:
            yield db
            return
        adapter = await open_database(provisioned, connections=16)
        try:
            yield adapter
        finally:
            await adapter.close()

    @pytest_asyncio.fixture
    async def schema(
        db: Any, provisioned: Provisioner, request: pytest.FixtureRequest
    ) -> AsyncIterator[str]:
        """A schema of the test's own. For a test that installs it (``ctx``, ``sctx``,
        ``boss``) where the engine is PostgreSQL, an install from the backend's pool,
        reset to the state of a new install (:mod:`qcore.conformance.schemas`); else a
        new, empty schema, dropped (CASCADE) after the test."""
        pool = None
        if INSTALLING_FIXTURES & set(request.fixturenames):
            pool = state_of(request.config).schema_pool(provisioned)
        if pool is None:
            name = fresh_name()
            await db.execute_script(f"CREATE SCHEMA {quote(name)}")
            try:
                yield name
            finally:
                await db.execute_script(f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE")
            return
        from qcore.context import Context
        from qcore.schema import install_or_migrate

        unguarded = getattr(db, "inner", db)
        taken = await pool.take(unguarded)
        if taken is None:
            taken = fresh_name()
            context = Context(db=db, backend=provisioned.backend, schema_spec=taken)
            await install_or_migrate(context)
            await pool.remember(unguarded, taken)
        try:
            yield taken
        finally:
            pool.give_back(taken)

else:  # pragma: no cover

    @pytest.fixture
    def db() -> Any:
        pytest.fail("the db fixture needs pytest-asyncio: pip install pytest-asyncio")

    @pytest.fixture
    def schema() -> Any:
        pytest.fail("the schema fixture needs pytest-asyncio: pip install pytest-asyncio")


# --------------------------------------------------------------------------- ctx, boss

if pytest_asyncio is not None:

    @pytest.fixture(params=["native", "split"])
    def sctx(request: pytest.FixtureRequest, backend: Backend) -> Any:
        """``ctx`` with the backend's own strategies, and with CockroachDB's (atomic-update
        fetch, split mutations) on the same engine: both must write the same rows."""
        from qcore.context import Context

        ctx: Context = request.getfixturevalue("ctx")
        if request.param == "native":
            return ctx
        distributed = dataclasses.replace(
            ctx.backend, fetch=FetchStrategy.ATOMIC_UPDATE, mutation=MutationStrategy.SPLIT
        )
        return Context(db=ctx.db, backend=distributed, schema_spec=ctx.schema_spec)

    @pytest_asyncio.fixture
    async def ctx(db: Any, backend: Backend, schema: str) -> Any:
        """A ``qcore.context.Context`` on the backend's ``db`` and a fresh ``schema``, with
        qcore's (pg-boss's) schema installed in it."""
        from qcore.context import Context
        from qcore.schema import install_or_migrate

        context = Context(db=db, backend=backend, schema_spec=schema)
        await install_or_migrate(context)
        return context

    @pytest_asyncio.fixture
    async def installed(ctx: Any) -> str:
        """The test's ``schema`` with qcore's schema installed in it (from the pool where
        the engine allows): for a test that starts ``Boss`` objects of its own on it
        (``@pytest.mark.usefixtures("installed")``) and needs no empty schema."""
        return str(ctx.schema_spec)


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def boss(db: Any, backend: Backend, schema: str) -> AsyncIterator[Any]:
        """A started ``qcore.Boss`` on the test's adapter (guarded under emulation) and
        fresh schema; stopped after the test. It shares ``db``'s connection, so on a
        single-session engine (PGlite) the two never interleave."""
        from qcore import Boss
        from qcore.conformance.helpers import running

        async with running(Boss(db=db, backend=backend, schema=schema)) as instance:
            yield instance

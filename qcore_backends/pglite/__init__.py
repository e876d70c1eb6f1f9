"""PGlite: PostgreSQL compiled to WebAssembly, run by Node.js as an embedded engine.

One PGlite is one PostgreSQL session however many sockets connect, so qcore
talks to it through a single serialised connection (``single_session``).
"""

from __future__ import annotations

from typing import Any

from qcore.backend import (
    Backend,
    Capabilities,
    FetchStrategy,
    Kind,
    LockStrategy,
    MutationStrategy,
    SchemaShape,
    Server,
)


def launch(**options: Any) -> Server:
    """A PGlite server (not yet started); see :class:`qcore_backends.pglite.server.PGliteServer`."""
    from qcore_backends.pglite.server import PGliteServer

    return PGliteServer(**options)


BACKEND = Backend(
    name="pglite",
    kind=Kind.EMBEDDED,
    fetch=FetchStrategy.SKIP_LOCKED,
    mutation=MutationStrategy.CTE,
    schema=SchemaShape(partitioned=True, deferrable_foreign_keys=True, covering_indexes=True),
    lock=LockStrategy.ADVISORY,
    capabilities=Capabilities(
        reindex=False,  # REINDEX CONCURRENTLY needs a second session
        vacuum_stats=False,
        index_build_progress=False,
        single_session=True,
    ),
    launcher=launch,
    description="PGlite 0.5 through @electric-sql/pglite-socket, started by qcore",
)

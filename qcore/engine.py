"""Which engine is on the other end of a connection: its identity, read from the server.

``identify(db)`` reads ``version()`` and, on engines that speak PostgreSQL's
catalog, the Citus extension and the emulation marker the compatibility kit sets.
A :class:`~qcore.backend.Backend` recognises its engine from that identity (by name,
or with a vendor's own ``detect``); ``Boss`` warns when the chosen backend does not,
and ``backend="auto"`` picks the backend that does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qcore.backend import EngineIdentity
from qcore.db import Database
from qcore.errors import QcoreError
from qcore.sql import engine as sql

__all__ = ["EngineIdentity", "classify", "has_markers", "identify", "identity_of"]

_YUGABYTE = re.compile(r"-YB-", re.IGNORECASE)
_PGLITE = re.compile(r"emscripten|wasm32|pglite", re.IGNORECASE)


def classify(version: str, markers: Mapping[str, str] | None = None) -> str:
    """The engine name for a ``version()`` text and the catalog markers.

    postgres, cockroachdb, yugabytedb, citus, pglite, or unknown for anything else.
    """
    markers = markers or {}
    if "cockroachdb" in version.lower():
        return "cockroachdb"
    if _YUGABYTE.search(version):
        return "yugabytedb"
    if markers.get("citus"):
        return "citus"
    if _PGLITE.search(version):
        return "pglite"
    if version.startswith("PostgreSQL"):
        return "postgres"
    return "unknown"


def has_markers(version: str) -> bool:
    """Whether an engine of this ``version()`` text has the catalog the markers are read from.

    Everything but CockroachDB has.
    """
    return classify(version) != "cockroachdb"


def identity_of(version: str, markers_row: Mapping[str, Any] | None) -> EngineIdentity:
    """The identity from the two probes' answers (``markers_row`` None: not asked)."""
    row = markers_row or {}
    markers = {"citus": str(row["citus"])} if row.get("citus") else {}
    emulating = str(row["emulating"]) if row.get("emulating") else None
    return EngineIdentity(classify(version, markers), version, markers, emulating)


async def identify(db: Database) -> EngineIdentity:
    """Ask the server behind ``db`` which engine it is."""
    rows = await db.execute(sql.server_version.sql)
    version = str(rows[0]["version"]) if rows else ""
    row: Mapping[str, Any] | None = None
    if has_markers(version):
        try:
            row = (await db.execute(sql.server_markers.sql))[0]
        except QcoreError:  # an engine without PostgreSQL's catalog: version() said enough
            row = None
    return identity_of(version, row)

"""SQL that asks the server which engine it is (the same on every backend).

It is the same everywhere because it runs before qcore knows which backend is on the other
end.

Two statements, so an engine that lacks the second's catalog still answers the first:
``version()`` alone tells CockroachDB and YugabyteDB apart from PostgreSQL; the
markers of the second (the Citus extension, a capability-guard emulation) are only
read from engines that speak PostgreSQL's catalog.
"""

from __future__ import annotations

from qcore.sql._statement import Statement

__all__ = ["EMULATION_SETTING", "server_markers", "server_version"]

#: the session setting the compatibility kit's emulation sets to the emulated backend
EMULATION_SETTING = "qcore.emulate"

# The version text every PostgreSQL-compatible engine returns, forks included.
server_version = Statement("SELECT version() AS version")

# PostgreSQL's markers: the Citus extension's version (NULL without it) and the
# backend an emulation session stands in for (NULL outside one).
server_markers = Statement(
    "SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus')"
    " AS citus,"
    f" nullif(current_setting('{EMULATION_SETTING}', true), '') AS emulating"
)

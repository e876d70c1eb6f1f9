"""What a failed connection attempt means, and whether to retry it.

The server refused the settings (a configuration error, not worth retrying) or could not
be reached (worth retrying).

libpq reports both as text, without a SQLSTATE, so the server's own words decide.
Messages name the DSN without its password.
"""

from __future__ import annotations

import os
import re

from psycopg.conninfo import conninfo_to_dict

from qcore.errors import ConnectionLostError, ConnectionSettingsError, DatabaseError, QcoreError

__all__ = ["connect_error", "redacted"]

# the server (or libpq) rejecting what was asked for, as opposed to not answering
_SETTINGS = re.compile(
    r"does not exist|authentication failed|no pg_hba\.conf entry|not permitted to log in"
    r"|unrecognized configuration parameter|invalid value for parameter|permission denied"
    r"|invalid (?:URI|connection option|integer value|sslmode|port)|missing \"=\""
    r"|key/value separator|does not support SSL|SSL is not enabled|unsupported frontend",
    re.IGNORECASE,
)


def redacted(conninfo: str) -> str:
    """``conninfo`` as a URL without its password (what error messages show)."""
    try:
        params = conninfo_to_dict(conninfo)
    except Exception:
        return "<unreadable connection string>"
    user = params.get("user")
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    database = params.get("dbname") or ""
    return f"postgresql://{f'{user}@' if user else ''}{host}{port}/{database}"


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # libpq's tabs and newlines
    if isinstance(exc, OSError) and exc.errno:  # a socket error (asyncpg): say it in words
        return f"{os.strerror(exc.errno)} ({text})"
    if " failed: " in text:  # libpq: connection to server at "host", port N failed: <why>
        text = text.rsplit(" failed: ", 1)[1]
    text = text.removeprefix("connection failed: ").replace("FATAL: ", "")
    return text.strip() or type(exc).__name__


def connect_error(exc: BaseException, conninfo: str) -> QcoreError:
    """The qcore error for a failed attempt to open a connection to ``conninfo``."""
    if isinstance(exc, QcoreError) and not isinstance(exc, DatabaseError):
        return exc
    reason = _reason(exc)
    message = f"cannot connect to {redacted(conninfo)}: {reason}"
    sqlstate = getattr(exc, "sqlstate", None)
    if _SETTINGS.search(reason) or (sqlstate or "")[:2] in ("28", "3D"):
        return ConnectionSettingsError(message, sqlstate=sqlstate)
    return ConnectionLostError(message, sqlstate=sqlstate, retryable=True)

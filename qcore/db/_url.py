"""A connection string's first check: a URL must be a PostgreSQL one.

libpq reads anything without ``postgresql://`` or ``postgres://`` in front as
``key=value`` pairs, so a scheme typo (``postgress://``, ``http://``) would come back
from it as ``missing "=" after …``, far from the mistake. This names it instead, before
any connection is tried, and never echoes the rest of the URL (its password).
"""

from __future__ import annotations

import re

from qcore.errors import ConfigError

__all__ = ["check_url"]

#: the schemes libpq takes
SCHEMES = ("postgresql", "postgres")

_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.\-]*)://")


def check_url(connection_string: str | None) -> None:
    """Raise ``ConfigError`` for a URL whose scheme is not ``postgresql`` or ``postgres``.

    A ``key=value`` connection string (no ``scheme://`` in front) passes, as does an
    empty one.
    """
    if not connection_string or not isinstance(connection_string, str):
        return
    found = _SCHEME.match(connection_string)
    if found is None:
        return  # key=value pairs (host=... dbname=...), left to libpq
    scheme = found.group(1)
    if scheme.lower() in SCHEMES:
        return
    hint = ""
    base = scheme.split("+", 1)[0].lower()
    if base in SCHEMES:
        hint = f"; drop the driver part '+{scheme.split('+', 1)[1]}' (an SQLAlchemy URL)"
    raise ConfigError(
        f"not a PostgreSQL URL: scheme {scheme!r} (expected postgresql:// or postgres://){hint}"
    )

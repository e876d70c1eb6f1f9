"""Identifier validation and quoting: the one place an identifier enters SQL text.

Values always travel as bind parameters; only names (schemas, tables,
channels) are spliced into statements, and only through :func:`quote`.
"""

from __future__ import annotations

import re

from qcore.errors import ValidationError

__all__ = ["MAX_SCHEMA_BYTES", "quote", "schema_name"]

MAX_SCHEMA_BYTES = 50
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED_FORBIDDEN = re.compile(r"[\"'%.$\\\x00-\x1f\x7f]")


def quote(name: str) -> str:
    """Quote an identifier for SQL text, doubling embedded double quotes."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"an identifier must be a non-empty string, got {name!r}")
    if "\x00" in name:
        raise ValidationError("an identifier may not contain a NUL character")
    if len(_utf8(name, "an identifier")) > 63:
        raise ValidationError(f"identifier {name!r} is longer than PostgreSQL's 63 bytes")
    return '"' + name.replace('"', '""') + '"'


def schema_name(spec: str) -> str:
    """The schema name a user's ``schema`` option stands for, as PostgreSQL stores it.

    A bare name (letters, digits, underscore, not starting with a digit) is
    folded to lower case as PostgreSQL does; a name written in double quotes is
    taken verbatim without the quotes and may hold any character except double
    and single quotes, percent signs, periods, dollar signs, backslashes and
    control characters. Either way the name may be at most 50 bytes and may not begin
    with ``pg_`` (PostgreSQL's own).
    """
    if not isinstance(spec, str) or not spec:
        raise ValidationError(f"schema must be a non-empty string, got {spec!r}")
    if len(spec) >= 2 and spec.startswith('"') and spec.endswith('"'):
        name = spec[1:-1]
        if not name:
            raise ValidationError('schema "" is empty')
        bad = _QUOTED_FORBIDDEN.search(name)
        if bad:
            raise ValidationError(
                f"schema {spec!r} contains {bad.group()!r}; a quoted schema name may not contain"
                " double quotes, single quotes, %, ., $, backslashes or control characters"
            )
    else:
        if not _BARE.fullmatch(spec):
            raise ValidationError(
                f"schema {spec!r} is not a bare identifier (letters, digits and underscore, not"
                " starting with a digit); write it in double quotes, e.g. '\"My-Schema\"',"
                " to use other characters"
            )
        name = spec.lower()
    size = len(_utf8(name, f"schema {spec!r}"))
    if size > MAX_SCHEMA_BYTES:
        raise ValidationError(
            f"schema {spec!r} is {size} bytes long; the limit is {MAX_SCHEMA_BYTES}"
        )
    if name.startswith("pg_"):
        raise ValidationError(
            f"schema {spec!r} begins with pg_, which PostgreSQL keeps for its own schemas;"
            " choose another name"
        )
    return name


def _utf8(name: str, what: str) -> bytes:
    """``name`` in UTF-8, as the server receives it.

    A lone surrogate (no Unicode character) is a ValidationError.
    """
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            f"{what} contains a lone surrogate, which is not Unicode text"
        ) from None

"""Rewrite ``$1..$n`` placeholders into a driver's parameter style.

qcore writes every statement with PostgreSQL's ``$n`` placeholders. Drivers
that use ``%s`` (psycopg, psycopg2) need each ``$n`` outside literals turned
into ``%s`` with the parameter list reordered and repeated to match, and
every literal ``%`` doubled. A small lexer skips string literals
(``'...'``, ``E'...'``), quoted identifiers, dollar-quoted bodies and
comments, so a ``$1`` or ``?`` inside them is left alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from qcore.errors import ValidationError

__all__ = ["reorder", "to_format"]

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\uffff][A-Za-z0-9_\x80-\uffff]*)?\$")
_PARAM = re.compile(r"\$([0-9]+)")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$\x80-\uffff]")


@functools.lru_cache(maxsize=2048)
def to_format(sql: str) -> tuple[str, tuple[int, ...]]:
    """``sql`` in ``%s`` style, and for each ``%s`` the 0-based index of its parameter."""
    out: list[str] = []
    order: list[int] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not _IDENT_CHAR.match(sql[i - 2]))
            end = _end_of_quoted(sql, i, "'", backslash=escapes)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == '"':
            end = _end_of_quoted(sql, i, '"', backslash=False)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "/" and sql.startswith("/*", i):
            end = _end_of_block_comment(sql, i)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "$":
            prev_is_ident = i > 0 and _IDENT_CHAR.match(sql[i - 1]) is not None
            param = _PARAM.match(sql, i)
            tag = _DOLLAR_TAG.match(sql, i)
            if param and not prev_is_ident:
                order.append(int(param.group(1)) - 1)
                out.append("%s")
                i = param.end()
            elif tag and not prev_is_ident:
                close = sql.find(tag.group(0), tag.end())
                end = n if close < 0 else close + len(tag.group(0))
                out.append(sql[i:end].replace("%", "%%"))
                i = end
            else:
                out.append(c)
                i += 1
        elif c == "%":
            out.append("%%")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out), tuple(order)


def reorder(order: Sequence[int], params: Sequence[Any]) -> list[Any]:
    """The parameter list for a ``%s`` statement built by :func:`to_format`."""
    try:
        return [params[k] for k in order]
    except IndexError:
        raise ValidationError(
            f"the statement uses ${max(order) + 1} but {len(params)} parameter(s) were given"
        ) from None


def _end_of_quoted(sql: str, start: int, quote: str, *, backslash: bool) -> int:
    i, n = start + 1, len(sql)
    while i < n:
        c = sql[i]
        if backslash and c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < n and sql[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return n


def _end_of_block_comment(sql: str, start: int) -> int:
    depth, i, n = 0, start, len(sql)
    while i < n:
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n

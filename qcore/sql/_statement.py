"""A built statement and the names of its ``$n`` parameters.

Builders write placeholders by name (``p("queue")`` gives ``$1`` the first
time and the same ``$1`` again); the resulting :class:`Statement` knows the
order, and :meth:`Statement.bind` turns keyword values into the positional
list an adapter takes. So a builder can leave out an optional clause, and
its parameter with it, without renumbering anything by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DDL", "Params", "Statement", "before_keyset", "row_limit"]


@dataclass(frozen=True)
class Statement:
    """SQL text with ``$1..$n`` placeholders and, for each, the name of its value."""

    sql: str
    params: tuple[str, ...] = ()

    def bind(self, **values: Any) -> list[Any]:
        """The positional parameters for ``execute(sql, params)``; every name must be given."""
        missing = [n for n in self.params if n not in values]
        if missing:
            raise TypeError(f"missing statement parameter(s): {', '.join(missing)}")
        return [values[n] for n in self.params]


@dataclass(frozen=True)
class DDL:
    """One schema-changing statement, skipped when its object is already there.

    It has no parameters: DDL is sent as a script. It is skipped when ``skip_if`` — a
    probe :class:`Statement` and its values, answering one row with a boolean ``present``
    — says the object it creates is already there.
    """

    sql: str
    skip_if: tuple[Statement, Mapping[str, Any]] | None = None


class Params:
    """Hands out ``$n`` placeholders by name, in order of first use."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, name: str) -> str:
        if name not in self.names:
            self.names.append(name)
        return f"${self.names.index(name) + 1}"

    def statement(self, sql: str) -> Statement:
        return Statement(sql, tuple(self.names))


def before_keyset(p: Params, alias: str = "") -> str:
    """Rows past the previous page's last ``(before_created, before_id)``, newest first.

    A newest-first walk over ``created_on`` then ``id``: the first term is an index's own
    bound on ``created_on``, the second breaks ties by id.
    """
    created, before = p("before_created"), p("before_id")
    return (
        f"{alias}created_on <= {created}::timestamptz"
        f" AND ({alias}created_on < {created}::timestamptz OR {alias}id < {before}::uuid)"
    )


#: the largest LIMIT a statement takes (PostgreSQL's int4)
MAX_ROW_LIMIT = 2**31 - 1


def row_limit(n: int) -> str:
    """``LIMIT`` ``n`` written into the statement, the one value a builder does not bind.

    A prepared statement's generic plan estimates ``LIMIT $n`` at a tenth of the table,
    so the server plans every claim afresh (a third of a small claim's server time); with
    the number in the text it keeps one generic plan per batch size. ``n`` must be an
    int (so nothing but digits reaches the text); larger than int4 reads as its maximum.
    """
    if type(n) is not int or n < 1:
        raise ValueError(f"a row limit is an int >= 1, got {n!r}")
    return str(min(n, MAX_ROW_LIMIT))

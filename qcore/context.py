"""What every runtime operation needs: the adapter, the backend and the schema.

Operations take a ``Context`` instead of a ``Boss``, so they stay below the
public facade and can be tested on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from qcore.affinity import Affinity
from qcore.backend import Backend
from qcore.db import Database
from qcore.identifiers import quote, schema_name

__all__ = ["Context", "QueueRoute", "Watch"]

#: ``watch(seconds, sql, values)``: one statement run, and how long it took
Watch = Callable[[float, str, Sequence[Any]], None]


class QueueRoute(NamedTuple):
    """What the hot statements need to know of a queue: its policy and its physical job table.

    The table is ``job_common``, its own partition, or ``job`` in the single-table
    shape. Neither changes while the queue exists.
    """

    policy: str
    table: str


@dataclass(frozen=True)
class Context:
    """An adapter, a backend and a schema, as one value."""

    db: Database
    backend: Backend
    #: the ``schema`` option as the user wrote it (``pgboss``, ``'"My-Schema"'``);
    #: pg-boss derives lock keys and the NOTIFY channel from this spelling
    schema_spec: str = "pgboss"
    #: the name PostgreSQL stores (bare names folded to lower case)
    schema: str = field(init=False)
    #: the schema quoted for SQL text
    q: str = field(init=False)
    #: queue name -> its route, as last read; statements built for a route check it
    #: against the queue row, so a queue deleted or recreated elsewhere is noticed
    routes: dict[str, QueueRoute] = field(default_factory=dict, compare=False, repr=False)
    #: each queue's ``notify`` as the last claim on it read it
    notify_seen: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    #: told how long each statement (or transaction) run through the retry policy took:
    #: ``watch(seconds, sql, values)``; the ``Boss`` warns ``slow_query`` from it
    watch: Watch | None = field(default=None, compare=False, repr=False)
    #: this server's instance key and what it has judged of each queue's affinity patterns
    #: (anonymous by default: claims take only jobs without a pattern)
    affinity: Affinity = field(default_factory=Affinity, compare=False, repr=False)

    def __post_init__(self) -> None:
        stored = schema_name(self.schema_spec)
        object.__setattr__(self, "schema", stored)
        object.__setattr__(self, "q", quote(stored))

    def table(self, name: str) -> str:
        """A schema-qualified, quoted table name."""
        return f"{self.q}.{quote(name)}"

    def with_db(self, db: Database) -> Context:
        """The same context on another adapter.

        The adapter is a caller's transaction or a bound connection; every other field is
        carried over, the route cache shared.
        """
        return replace(self, db=db)

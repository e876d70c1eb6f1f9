"""Instance notices: how every server hears that a key was paused, resumed or removed.

Each such change is told twice, by the statement that makes it: NOTIFY on the schema's
channel where the engine has it (a listening server hears it at once), and a row of
qcore's own ``qcore_instance_notice`` table, which a server's registry reads at its
heartbeat while no NOTIFY reaches it (an engine without LISTEN/NOTIFY, a listener
turned off or down). Maintenance forgets the rows older than a day. Plain statements,
the same on every backend.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import DDL, Params, Statement
from qcore.sql.probes import table_in_schema

__all__ = [
    "NOTICE_KEEP_HOURS",
    "NOTICE_TABLE",
    "create_notice_index",
    "create_notice_table",
    "forget_notices",
    "notify_instances",
    "read_notices",
    "written_with",
]

#: qcore's table of instance notices
NOTICE_TABLE = "qcore_instance_notice"
#: hours a notice is kept (a server reads the last minute's at each heartbeat)
NOTICE_KEEP_HOURS = 24


def _notices(q: str) -> str:
    return f"{q}.{quote(NOTICE_TABLE)}"


def create_notice_table(schema: str) -> DDL:
    """The notices: ``id``, ``at``, ``instance_key``, ``action``, ``by``. Idempotent."""
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(NOTICE_TABLE)} ("
        " id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
        " at timestamptz NOT NULL DEFAULT now(),"
        " instance_key text NOT NULL, action text NOT NULL, by text)",
        skip_if=(table_in_schema, {"schema": schema, "name": NOTICE_TABLE}),
    )


def create_notice_index(schema: str) -> DDL:
    """(at): the notices since a moment, and the ones to forget."""
    return DDL(
        "CREATE INDEX IF NOT EXISTS qcore_instance_notice_i1"
        f" ON {quote(schema)}.{quote(NOTICE_TABLE)} (at)"
    )


def written_with(q: str, rows: str) -> str:
    """A common table expression to append to a change's ``WITH``: a notice for each row
    of ``rows`` (a ``SELECT`` of the key, the action and ``by``)."""
    return f", told AS (INSERT INTO {_notices(q)} (instance_key, action, by) {rows} RETURNING id)"


@lru_cache(maxsize=8)
def forget_notices(q: str) -> Statement:
    """Delete the notices older than :data:`NOTICE_KEEP_HOURS` (maintenance's; not in the
    changes' own statements: CockroachDB modifies a table once per statement)."""
    return Statement(
        f"DELETE FROM {_notices(q)} WHERE at < now() - interval '{NOTICE_KEEP_HOURS} hours'"
    )


@lru_cache(maxsize=1)
def notify_instances() -> Statement:
    """Send ``payload`` on ``channel`` (a removal's notice; LISTEN/NOTIFY backends only)."""
    p = Params()
    return p.statement(
        f"SELECT pg_notify({p('channel')}::text, {p('payload')}::text) IS NOT NULL AS notified"
    )


@lru_cache(maxsize=16)
def read_notices(q: str) -> Statement:
    """The notices after ``since`` (NULL: the last ``margin_seconds``), oldest first.

    Always at least one row: ``read_at`` (the server's time) with the notice's ``id``,
    ``at``, ``instance_key``, ``action`` and ``by``, all NULL when there is none.
    """
    p = Params()
    since = p("since")
    return p.statement(
        "SELECT t.read_at, n.id, n.at, n.instance_key, n.action, n.by"
        " FROM (SELECT now() AS read_at) t"
        f" LEFT JOIN {_notices(q)} n ON n.at > coalesce({since}::timestamptz,"
        f" t.read_at - {p('margin_seconds')}::float8 * interval '1 second')"
        " ORDER BY n.at, n.id"
    )

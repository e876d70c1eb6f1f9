"""Read-only questions the install asks, the same on every backend.

Is the schema there, which version is it at, does an object exist (for idempotent DDL),
the server's date.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement

# Whether constraint ``name`` exists on the table (a qualified, quoted ``table``).
constraint_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint"
    " WHERE conrelid = to_regclass($1) AND conname = $2) AS present",
    ("table", "name"),
)


# Whether type ``name`` (qualified, quoted) exists.
type_exists = Statement("SELECT to_regtype($1) IS NOT NULL AS present", ("name",))


# Whether the table (qualified, quoted) is attached as a partition.
is_partition = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits"
    " WHERE inhrelid = to_regclass($1)) AS present",
    ("table",),
)


# Whether ``schema`` holds a version table (pg-boss's "installed"); every backend. Reads
# pg_class rather than calling to_regclass: inside a transaction that has just waited for
# the install lock, to_regclass may still answer from a catalog cache older than the
# install another instance committed meanwhile.
version_table_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = $1 AND c.relname = 'version' AND c.relkind IN ('r', 'p'))"
    " AS present",
    ("schema",),
)


# Whether ``schema`` holds table ``name`` (pg_class, as above); every backend.
table_in_schema = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')) AS present",
    ("schema", "name"),
)


# Whether table ``table`` of ``schema`` has column ``column``; every backend. Reads
# pg_attribute: information_schema.columns computes every column's privileges and type
# names first (about 2 ms a probe, run at every start).
column_in_table = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a"
    " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3"
    " AND a.attnum > 0 AND NOT a.attisdropped) AS present",
    ("schema", "table", "column"),
)


@lru_cache(maxsize=16)
def select_version(schema: str) -> Statement:
    """The installed version (NULL when the table is empty); every backend."""
    return Statement(f"SELECT max(version) AS version FROM {quote(schema)}.version")


@lru_cache(maxsize=16)
def update_version(schema: str) -> Statement:
    """Move the version row from ``from_version`` to ``to_version``.

    A row comes back only if it was at ``from_version``. The same on every backend.
    """
    return Statement(
        f"UPDATE {quote(schema)}.version SET version = $1::integer"
        " WHERE version = $2::integer RETURNING version",
        ("to_version", "from_version"),
    )


@lru_cache(maxsize=64)
def claim_interval(q: str, column: str) -> Statement:
    """pg-boss's interval gate on the version row: ``column`` moves to now when due.

    ``column`` (``flow_on``, ``bam_on``, ``reindex_on``) moves to now when at least
    ``seconds`` old (or never set); a row back (``claimed``) means this instance owns the
    interval. Every backend.
    """
    p = Params()
    now = f"{q}.job_now()"
    return p.statement(
        f"UPDATE {q}.version SET {column} = {now} WHERE EXTRACT(EPOCH FROM ({now}"
        f" - COALESCE({column}, {now} - interval '1 week'))) >= {p('seconds')}::float8"
        " RETURNING true AS claimed"
    )


# Whether a schema of exactly the stored name ``schema`` exists; every backend.
schema_exists = Statement(
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1) AS present",
    ("schema",),
)


# Other schemas whose names differ from ``schema`` only by letter case and that hold a
# version table (an install); every backend.
case_variants = Statement(
    "SELECT n.nspname AS name FROM pg_catalog.pg_namespace n"
    " JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid"
    " AND c.relname = 'version' AND c.relkind IN ('r', 'p')"
    " WHERE lower(n.nspname) = lower($1) AND n.nspname <> $1"
    " ORDER BY n.nspname",
    ("schema",),
)


# The server's current UTC date as YYYY-MM-DD text (names the first queue_stats
# partition; text so that every adapter returns the same type); every backend.
server_today = Statement("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS today")


def job_tables(q: str, column: str) -> str:
    """A condition: ``column`` names one of the schema's physical job tables.

    Every queue's ``table_name`` (a partitioned queue's own ``j<hash>`` table among
    them), the common table even with no queue left on it (a drained backlog leaves its
    bloat behind), and ``job`` itself where it is a plain table (the engines without
    partitioning). What the maintenance checks read, as pg-boss's own checks do.
    """
    return f"({column} IN ('job', 'job_common') OR {column} IN (SELECT table_name FROM {q}.queue))"

"""Schema drift detection's two sides, as data: what an install holds, what a schema holds.

:func:`expected` is what an install of a backend holds in a schema (tables with their
columns and constraints, indexes with their keys, INCLUDE columns, predicate and
uniqueness, functions), read from the declarations in :mod:`qcore.sql.catalog` that the
install renders. The catalog reads are what a schema holds, from the system catalogs
alone (no lock, no table scan). The schema is a bound value (``schema``, its name as the
catalog stores it). Statements with ``definitions`` also render the objects
(``pg_get_indexdef``, ``pg_get_expr``, ``pg_get_constraintdef``), which only backends
with the ``drift_catalog`` capability offer; the others get presence alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from qcore.backend import Backend
from qcore.identifiers import quote
from qcore.sql import schema as schema_sql
from qcore.sql._statement import Params, Statement
from qcore.sql.catalog import (
    ALL_INDEXES,
    BASE_INDEXES,
    INSTANCE_TABLE,
    JOB_DEPENDENCY_INDEX,
    JOB_DEPENDENCY_TABLE,
    POLICY_INDEXES,
    QUEUE_STATS_INDEX,
    QUEUE_STATS_TIME_INDEX,
    WARNING_INDEX,
    WARNING_TABLE,
    Column,
    IndexSpec,
    TableSpec,
    job_index_spec,
    job_table,
    literal,
    queue_stats_table,
)
from qcore.sql.functions import partition_commands

__all__ = [
    "Expected",
    "ExpectedIndex",
    "ExpectedTable",
    "expected",
    "partitioned_queues",
    "schema_columns",
    "schema_constraints",
    "schema_functions",
    "schema_indexes",
    "schema_tables",
    "state_labels",
    "unfinished_bam_commands",
]

_IN_SCHEMA = "JOIN pg_namespace n ON n.oid = {rel}.{ns} WHERE n.nspname = {schema}::text"


def _in_schema(p: Params, rel: str, ns: str = "relnamespace") -> str:
    return _IN_SCHEMA.format(rel=rel, ns=ns, schema=p("schema"))


@lru_cache(maxsize=1)
def schema_tables() -> Statement:
    """Ordinary and partitioned tables of the schema (``table``); the same everywhere."""
    p = Params()
    return p.statement(
        f"SELECT c.relname AS table FROM pg_class c {_in_schema(p, 'c')}"
        " AND c.relkind IN ('r', 'p')"
    )


# a key column's ordering as pg_get_indexdef spells it after the column (btree's options)
_KEY_ORDER = (
    "CASE WHEN i.indoption[k - 1] & 1 = 1"
    " THEN ' DESC' || CASE WHEN i.indoption[k - 1] & 2 = 0 THEN ' NULLS LAST' ELSE '' END"
    " WHEN i.indoption[k - 1] & 2 = 2 THEN ' NULLS FIRST' ELSE '' END"
)

# a key's collation and operator class where they are not the defaults, as
# pg_get_indexdef spells them between the column and its ordering (the column-wise
# rendering leaves both out)
_KEY_COLLATION = (
    "CASE WHEN i.indcollation[k - 1] NOT IN (0, 100) THEN ' COLLATE ' || (SELECT"
    " quote_ident(l.collname) FROM pg_collation l WHERE l.oid = i.indcollation[k - 1])"
    " ELSE '' END"
)
_KEY_OPCLASS = (
    "COALESCE((SELECT ' ' || quote_ident(o.opcname) FROM pg_opclass o"
    " WHERE o.oid = i.indclass[k - 1] AND NOT o.opcdefault), '')"
)

# the index's column positions ``k`` (1-based), keys then included columns. Read from
# indkey rather than generate_series: the planner takes a series over a column for a
# thousand rows and priced the statement above ``jit_above_cost`` (half a second of
# compiling per drift check); an array of unknown length counts as ten
_POSITIONS = (
    "(SELECT n::int AS k FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS u(attnum, n)) AS p"
)

_RENDERED_INDEX = (
    ", pg_get_indexdef(i.indexrelid) AS definition,"
    " (SELECT a.amname FROM pg_am a WHERE a.oid = c.relam) AS method,"
    " ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, false) || "
    + " || ".join((_KEY_COLLATION, _KEY_OPCLASS, _KEY_ORDER))
    + f" FROM {_POSITIONS} WHERE k <= i.indnkeyatts ORDER BY k) AS keys,"
    " ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, false)"
    f" FROM {_POSITIONS} WHERE k > i.indnkeyatts ORDER BY k) AS include,"
    " pg_get_expr(i.indpred, i.indrelid) AS predicate"
)


@lru_cache(maxsize=2)
def schema_indexes(definitions: bool) -> Statement:
    """Every index of the schema, with its parts when ``definitions`` is set.

    Columns: ``name``, ``table``, ``valid`` (false for an interrupted concurrent build),
    ``unique``, ``constraint_backed`` and with ``definitions`` its parts: ``method`` (the
    access method), ``keys`` (each key column or expression with its collation and
    operator class where not the default, and its ordering), ``include`` (the covered columns),
    ``predicate`` (NULL without one), and the whole ``definition`` to show.
    """
    p = Params()
    rendered = _RENDERED_INDEX if definitions else ""
    return p.statement(
        "SELECT c.relname AS name, t.relname AS table, i.indisvalid AS valid,"
        " i.indisunique AS unique,"
        " EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)"
        f" AS constraint_backed{rendered}"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        f" JOIN pg_class t ON t.oid = i.indrelid {_in_schema(p, 'c')}"
    )


@lru_cache(maxsize=1)
def schema_functions() -> Statement:
    """The schema's functions: ``name`` and ``body`` (the stored source, verbatim)."""
    p = Params()
    return p.statement(
        "SELECT f.proname AS name, f.prosrc AS body"
        f" FROM pg_proc f {_in_schema(p, 'f', 'pronamespace')}"
    )


@lru_cache(maxsize=2)
def schema_columns(definitions: bool) -> Statement:
    """Every column of the schema's tables: ``table``, ``column``, and with ``definitions`` more.

    With ``definitions``: its canonical ``type`` (format_type), ``not_null`` and
    ``default`` expression.
    """
    p = Params()
    rendered = (
        ", format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,"
        " pg_get_expr(d.adbin, d.adrelid) AS default"
        if definitions
        else ""
    )
    defaults = (
        " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        if definitions
        else ""
    )
    return p.statement(
        f"SELECT c.relname AS table, a.attname AS column{rendered}"
        f" FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid{defaults}"
        f" {_in_schema(p, 'c')} AND c.relkind IN ('r', 'p') AND a.attnum > 0"
        " AND NOT a.attisdropped"
    )


@lru_cache(maxsize=1)
def schema_constraints() -> Statement:
    """The constraints of the schema's tables other than NOT NULL.

    Columns: ``table``, ``name``, ``definition`` (drift_catalog backends only).
    """
    p = Params()
    return p.statement(
        "SELECT c.relname AS table, k.conname AS name, pg_get_constraintdef(k.oid) AS definition"
        f" FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid {_in_schema(p, 'c')}"
        " AND k.contype <> 'n'"
    )


@lru_cache(maxsize=1)
def state_labels() -> Statement:
    """The ``job_state`` enum's labels in declaration order (``label``)."""
    p = Params()
    return p.statement(
        "SELECT e.enumlabel AS label FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid"
        f" {_in_schema(p, 't', 'typnamespace')} AND t.typname = 'job_state'"
        " ORDER BY e.enumsortorder"
    )


@lru_cache(maxsize=8)
def unfinished_bam_commands(q: str) -> Statement:
    """The commands of async migrations not completed yet (pending, in progress or failed).

    Columns: ``table_name``, ``command``, ``status``.
    """
    return Statement(
        f"SELECT table_name, command, status FROM {q}.bam"
        " WHERE status IN ('pending', 'in_progress', 'failed')"
    )


@lru_cache(maxsize=8)
def partitioned_queues(q: str) -> Statement:
    """The queues with a job table of their own: ``name``, ``policy``, ``table_name``."""
    return Statement(f"SELECT name, policy, table_name FROM {q}.queue WHERE partition")


# ------------------------------------------------------------------ what is expected


@dataclass(frozen=True)
class ExpectedTable:
    """A table the install makes: ``definition`` creates it.

    ``constraints`` (name and clause, the schema filled in) are the fixed tables' named
    constraints.
    """

    name: str
    definition: str
    columns: tuple[Column, ...]
    constraints: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ExpectedIndex:
    """An index the install makes, as data and as the statement that makes it.

    As data (``include`` only where the backend covers) and as the statement that makes
    it (``definition``).
    """

    name: str
    table: str
    unique: bool
    keys: str
    include: str
    predicate: str
    definition: str


@dataclass
class Expected:
    """What an install holds in ``schema``: tables, indexes and functions.

    Each maps a name to the statement that recreates it, in the order the install makes
    them.
    """

    schema: str
    tables: dict[str, ExpectedTable] = field(default_factory=dict)
    indexes: dict[str, ExpectedIndex] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)

    def qualified(self, name: str) -> str:
        """``name`` qualified with the quoted schema, both quoted."""
        return f"{quote(self.schema)}.{quote(name)}"

    def add_table(self, spec: TableSpec, definition: str | None = None) -> None:
        q = quote(self.schema)
        self.tables[spec.name] = ExpectedTable(
            spec.name,
            spec.create(q) if definition is None else definition,
            spec.columns,
            tuple((c.name, c.render(q)) for c in spec.constraints),
        )

    def add_index(self, backend: Backend, index: IndexSpec, on: str) -> None:
        covering = backend.schema.covering_indexes
        self.indexes[index.name] = ExpectedIndex(
            index.name,
            index.table,
            index.unique,
            index.keys,
            index.include if covering else "",
            index.predicate,
            index.create(on, covering=covering, if_not_exists=False),
        )


def expected(backend: Backend, schema: str, partitions: Sequence[Mapping[str, object]]) -> Expected:
    """The objects a v46 install of ``backend`` holds in ``schema`` (qcore's own tables aside).

    With the job tables of ``partitions`` (queue rows with a table of their own: ``name``,
    ``policy``, ``table_name``).
    """
    q = quote(schema)
    found = Expected(schema, functions=schema_sql.function_statements(backend, schema))
    for table in schema_sql.SHARED_TABLES:
        found.add_table(table)
    job = job_table(backend)
    found.add_table(job)
    partitioned = backend.schema.partitioned
    if partitioned:
        common = TableSpec("job_common", job.columns)
        found.add_table(common, schema_sql.job_common_table(schema))
        numbers = (*BASE_INDEXES, *(n for ns in POLICY_INDEXES.values() for n in ns))
        on = found.qualified("job_common")
        for number in numbers:
            found.add_index(backend, job_index_spec(number, "job_common"), on)
    else:
        for number in ALL_INDEXES:
            found.add_index(backend, job_index_spec(number), f"{q}.job")
    found.add_table(WARNING_TABLE)
    found.add_table(queue_stats_table(partitioned=partitioned))
    found.add_table(JOB_DEPENDENCY_TABLE)
    found.add_table(INSTANCE_TABLE)
    found.add_index(backend, WARNING_INDEX, f"{q}.warning")
    found.add_index(backend, QUEUE_STATS_INDEX, f"{q}.queue_stats")
    if not partitioned:
        found.add_index(backend, QUEUE_STATS_TIME_INDEX, f"{q}.queue_stats")
    found.add_index(backend, JOB_DEPENDENCY_INDEX, f"{q}.job_dependency")
    for queue in partitions:
        _add_partition(found, backend, job, queue)
    return found


def _add_partition(
    found: Expected, backend: Backend, job: TableSpec, queue: Mapping[str, object]
) -> None:
    """A queue's own job table: made by ``create_queue(..., partition => true)``."""
    schema = found.schema
    own = str(queue["table_name"])
    name = literal(str(queue["name"]))
    ref = found.qualified(own)
    common, _ = partition_commands(backend, schema, table=own)
    commands = [
        f"CREATE TABLE {ref} (LIKE {quote(schema)}.job INCLUDING DEFAULTS)",
        f"ALTER TABLE {ref} ADD CONSTRAINT cjc CHECK (name = {name})",
        *(command for constraint, command in common if constraint is not None),
        f"ALTER TABLE {quote(schema)}.job ATTACH PARTITION {ref} FOR VALUES IN ({name})",
    ]
    found.add_table(TableSpec(own, job.columns), ";\n".join(commands))
    for number in (*BASE_INDEXES, *POLICY_INDEXES.get(str(queue["policy"]), ())):
        found.add_index(backend, job_index_spec(number, own), ref)

"""Catalog reads for schema drift detection: what a schema holds, from the system
catalogs alone (no lock, no table scan). The schema is a bound value (``schema``, its
name as the catalog stores it). Statements with ``definitions`` also render the
objects (``pg_get_indexdef``, ``pg_get_expr``, ``pg_get_constraintdef``), which only
backends with the ``drift_catalog`` capability offer; the others get presence alone."""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement

__all__ = [
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


@lru_cache(maxsize=2)
def schema_indexes(definitions: bool) -> Statement:
    """Every index of the schema: ``name``, ``table``, ``valid`` (false for an interrupted
    concurrent build), ``unique``, ``constraint_backed`` and with ``definitions`` its
    ``definition``."""
    p = Params()
    rendered = ", pg_get_indexdef(i.indexrelid) AS definition" if definitions else ""
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
    """Every column of the schema's tables: ``table``, ``column``, and with ``definitions``
    its canonical ``type`` (format_type), ``not_null`` and ``default`` expression."""
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
    """The constraints of the schema's tables other than NOT NULL: ``table``, ``name``,
    ``definition`` (drift_catalog backends only)."""
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
    """The commands of async migrations not completed yet (pending, in progress or
    failed): ``table_name``, ``command``, ``status``."""
    return Statement(
        f"SELECT table_name, command, status FROM {q}.bam"
        " WHERE status IN ('pending', 'in_progress', 'failed')"
    )


@lru_cache(maxsize=8)
def partitioned_queues(q: str) -> Statement:
    """The queues with a job table of their own: ``name``, ``policy``, ``table_name``."""
    return Statement(f"SELECT name, policy, table_name FROM {q}.queue WHERE partition")

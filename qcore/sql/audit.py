"""The board's audit log, in qcore's own table (pg-boss neither has nor reads it).

One row per operator action taken on the dashboard: who, what, on what, when. Plain
statements, the same on every backend.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import DDL, Params, Statement
from qcore.sql.probes import table_in_schema

__all__ = [
    "AUDIT_RETENTION_DAYS",
    "AUDIT_TABLE",
    "create_audit_index",
    "create_audit_table",
    "list_audit",
    "prune_audit",
    "record_audit",
]

#: qcore's table of operator actions
AUDIT_TABLE = "qcore_audit"
#: days an audit row is kept
AUDIT_RETENTION_DAYS = 90


def _audit(q: str) -> str:
    return f"{q}.{quote(AUDIT_TABLE)}"


def create_audit_table(schema: str) -> DDL:
    """The audit log: ``at``, ``actor``, ``action``, ``target``, ``detail``. Idempotent."""
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(AUDIT_TABLE)} ("
        " id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
        " at timestamptz NOT NULL DEFAULT now(),"
        " actor text NOT NULL, action text NOT NULL, target text NOT NULL, detail jsonb)",
        skip_if=(table_in_schema, {"schema": schema, "name": AUDIT_TABLE}),
    )


def create_audit_index(schema: str) -> DDL:
    """(at, id): the log newest first, a page at a time, and its retention."""
    return DDL(
        "CREATE INDEX IF NOT EXISTS qcore_audit_i1"
        f" ON {quote(schema)}.{quote(AUDIT_TABLE)} (at, id)"
    )


@lru_cache(maxsize=8)
def record_audit(q: str) -> Statement:
    """One action: ``actor``, ``action``, ``target`` and ``detail`` (JSON text or NULL)."""
    p = Params()
    return p.statement(
        f"INSERT INTO {_audit(q)} (at, actor, action, target, detail)"
        f" VALUES ({q}.job_now(), {p('actor')}::text, {p('action')}::text,"
        f" {p('target')}::text, {p('detail')}::jsonb)"
    )


@lru_cache(maxsize=8)
def list_audit(q: str, *, after: bool) -> Statement:
    """The log newest first, at most ``limit``; with ``after``, older than (``at``, ``id``)."""
    p = Params()
    where = f" WHERE (at, id) < ({p('at')}::timestamptz, {p('id')}::uuid)" if after else ""
    return p.statement(
        f"SELECT id, at, actor, action, target, detail FROM {_audit(q)}{where}"
        f" ORDER BY at DESC, id DESC LIMIT {p('limit')}::int"
    )


@lru_cache(maxsize=8)
def prune_audit(q: str) -> Statement:
    """Delete the rows older than ``days`` days."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_audit(q)} WHERE at < {q}.job_now() - {p('days')}::int * interval '1 day'"
    )

"""SQL for the index bloat check: the indexes and their figures, the claim, the rebuilds.

The job tables' indexes with the figures the check reads, the interval claim of the
background rebuild, and the rebuild statements.

PostgreSQL's catalog only (``pg_class``, ``pg_index``, ``pg_stats``): backends
without the ``reindex`` capability (CockroachDB, YugabyteDB) never run these.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement
from qcore.sql.catalog import literal
from qcore.sql.probes import claim_interval, job_tables

__all__ = [
    "bloat_plan",
    "claim_reindex",
    "drop_stub",
    "job_indexes",
    "rebuild",
    "unfinished_migrations",
]


@lru_cache(maxsize=4)
def job_indexes(q: str) -> Statement:
    """Every index of schema ``schema``'s job tables (``job`` and its partitions), with figures.

    Its name, pages, live entries, bytes, whether it is valid (an interrupted concurrent
    rebuild leaves an invalid ``*_ccnew`` stub), whether the connected role owns it,
    and ``needed_pages``: the pages its live entries need, from the average width of
    each of its columns in ``pg_stats`` (a table column's, or for an expression such as
    ``COALESCE(singleton_key, '')`` the index's own statistics of it; 16 bytes per entry
    of overhead, 90 % full pages).
    """
    p = Params()
    sql = (
        "SELECT i.relname AS index, t.relname AS table_name, i.relpages::bigint AS pages,"
        " GREATEST(i.reltuples, 0)::float8 AS entries, pg_relation_size(i.oid)::bigint AS bytes,"
        " x.indisvalid AS valid, pg_has_role(i.relowner, 'USAGE') AS owned,"
        " ceil(GREATEST(i.reltuples, 0) * (16 + COALESCE((SELECT"
        " sum(COALESCE(col.avg_width, expr.avg_width, 32)) FROM pg_attribute ia"
        " LEFT JOIN pg_attribute ta ON ta.attrelid = t.oid AND ta.attnum = x.indkey[ia.attnum - 1]"
        " LEFT JOIN pg_stats col ON col.schemaname = n.nspname AND col.tablename = t.relname"
        " AND col.attname = ta.attname"
        " LEFT JOIN pg_stats expr ON expr.schemaname = n.nspname AND expr.tablename = i.relname"
        " AND expr.attname = ia.attname"
        " WHERE ia.attrelid = i.oid AND ia.attnum > 0), 32)) / (8192 * 0.9))::bigint"
        " AS needed_pages"
        " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
        f" WHERE n.nspname = {p('schema')}::text AND t.relkind = 'r'"
        f" AND {job_tables(q, 't.relname')}"
        " ORDER BY t.relname, i.relname"
    )
    return p.statement(sql)


def bloat_plan(schema: str, *, min_pages: int, max_entries_per_page: float, ratio: float) -> str:
    """The bloat check as one statement to run by hand (psql, no qcore): the bloated job
    indexes of ``schema``, the thresholds written into it.

    The rule :func:`qcore.verbs.reindex.bloated_indexes` applies to :func:`job_indexes`'
    rows: valid, at least ``min_pages`` pages, fewer live entries a page than
    ``max_entries_per_page``, at least ``ratio`` times the pages its entries need.
    PostgreSQL only (``pg_stats``, ``relpages``).
    """
    figures = job_indexes(quote(schema)).sql.replace("$1::text", f"{literal(schema)}::text")
    return (
        "SELECT f.index, f.table_name, f.pages, f.entries, f.bytes, f.needed_pages"
        f" FROM ({figures}) f WHERE f.valid AND f.pages >= GREATEST({int(min_pages)}, 1)"
        f" AND f.entries / NULLIF(f.pages, 0) < {float(max_entries_per_page)!r}"
        f" AND f.pages >= {float(ratio)!r} * f.needed_pages"
        " ORDER BY f.table_name, f.index"
    )


@lru_cache(maxsize=4)
def unfinished_migrations(q: str) -> Statement:
    """The commands of the background migrations not completed on the tables ``tables``.

    An index one of them is building is invalid until it finishes, and is that
    migration's, not the bloat check's.
    """
    p = Params()
    return p.statement(
        f"SELECT command FROM {q}.bam WHERE status <> 'completed'"
        f" AND table_name = ANY({p('tables')}::text[])"
    )


def claim_reindex(q: str) -> Statement:
    """The rebuild's interval claim, pg-boss's: ``reindex_on`` on the version row.

    ``reindex_on`` moves to now when at least ``seconds`` old (or never set); a row back
    means this instance owns the interval.
    """
    return claim_interval(q, "reindex_on")


def rebuild(q: str, index: str) -> str:
    """Rebuild one index without blocking writes (outside any transaction)."""
    return f"REINDEX INDEX CONCURRENTLY {q}.{quote(index)}"


def drop_stub(q: str, index: str) -> str:
    """Drop the invalid stub an interrupted concurrent rebuild left.

    Run outside any transaction.
    """
    return f"DROP INDEX CONCURRENTLY IF EXISTS {q}.{quote(index)}"

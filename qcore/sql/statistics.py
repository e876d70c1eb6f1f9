"""SQL for the statistics step: the job tables with stale planner statistics, and ANALYZE.

The job tables whose planner statistics describe a table far smaller than the one there
is now, and the ``ANALYZE`` that refreshes them.

PostgreSQL's statistics views only (``pg_stat_user_tables``): backends without the
``vacuum_stats`` capability never run these.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement
from qcore.sql.probes import job_tables

__all__ = ["analyze", "stale_job_tables"]


@lru_cache(maxsize=4)
def stale_job_tables(q: str) -> Statement:
    """The physical job tables of schema ``schema`` whose statistics are out of date.

    Every queue's ``table_name``, a partitioned queue's own included, that this role may
    analyze, whose rows changed since their last analyze number at least ``min_rows``
    and ``growth`` times the rows their statistics count (a table never analyzed counts
    none): a plan made on those statistics is a plan for a different table. Its changed
    rows and counted rows.
    """
    p = Params()
    sql = (
        "SELECT t.relname AS table_name, s.n_mod_since_analyze::bigint AS changed,"
        " GREATEST(t.reltuples, 0)::bigint AS counted"
        " FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace"
        " JOIN pg_stat_user_tables s ON s.relid = t.oid"
        f" WHERE n.nspname = {p('schema')}::text AND t.relkind = 'r'"
        f" AND {job_tables(q, 't.relname')}"
        " AND pg_has_role(t.relowner, 'USAGE')"
        f" AND s.n_mod_since_analyze >= GREATEST({p('min_rows')}::bigint,"
        f" {p('growth')}::float8 * GREATEST(t.reltuples, 0))"
        " ORDER BY t.relname"
    )
    return p.statement(sql)


def analyze(q: str, table: str) -> str:
    """Refresh one job table's statistics; skipped, not waited for, while the table is busy.

    Skipped while another analyze or a vacuum holds the table (two instances' passes
    never queue up).
    """
    return f"ANALYZE (SKIP_LOCKED) {q}.{quote(table)}"

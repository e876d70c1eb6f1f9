"""Reading the server's plans in tests: a statement's custom and generic plans, the nodes
of an ``EXPLAIN (FORMAT JSON)`` plan, the sorts and the rows over the job tables, test
values written as SQL literals for ``EXECUTE`` (which takes no bind parameters), and an
exception that undoes what ``EXPLAIN ANALYZE`` changed, and the plan a driver's prepared
statement runs with on its connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from qcore.db import Database
from qcore.identifiers import quote


class Undo(Exception):
    """Raised to roll a test's transaction back (what ``EXPLAIN ANALYZE`` changed)."""


async def custom_and_generic_plans(
    tx: Database, sql: str, params: Sequence[Any], *, analyze: bool = False
) -> list[dict[str, Any]]:
    """The plans of ``sql`` in the transaction ``tx``: the one made for ``params``, then
    the generic one a prepared statement settles on (``force_generic_plan`` for the rest
    of ``tx``). With ``analyze`` both run: the caller undoes what they did (:class:`Undo`)."""
    explain = f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) "
    (custom,) = await tx.execute(explain + sql, params)
    await tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    await tx.execute("PREPARE qcore_test_plan AS " + sql)
    literals = ", ".join(literal(v) for v in params)  # EXECUTE takes no binds
    arguments = f"({literals})" if literals else ""
    (generic,) = await tx.execute(f"{explain}EXECUTE qcore_test_plan{arguments}")
    await tx.execute("DEALLOCATE qcore_test_plan")  # a rollback would keep it
    return [custom["QUERY PLAN"][0]["Plan"], generic["QUERY PLAN"][0]["Plan"]]


def nodes(plan: dict[str, Any], *, inputs_only: bool = False) -> Iterator[dict[str, Any]]:
    """The node and those beneath it; with ``inputs_only`` only the rows it reads (not
    the CTEs and subqueries attached to it as init plans)."""
    yield plan
    for child in plan.get("Plans", []):
        if inputs_only and child.get("Parent Relationship") in ("InitPlan", "SubPlan"):
            continue
        yield from nodes(child, inputs_only=inputs_only)


def cte_plan(plan: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The node that computes the CTE ``name`` in ``plan`` (None when it has none)."""
    for node in nodes(plan):
        if node.get("Subplan Name") == f"CTE {name}":
            return node
    return None


def sorts_over_jobs(plan: dict[str, Any], tables: set[str]) -> list[str]:
    """The sort nodes (Sort, Incremental Sort) that read rows of a job table."""
    found = []
    for node in nodes(plan):
        if "Sort" in node["Node Type"]:
            scanned = {str(n.get("Relation Name")) for n in nodes(node, inputs_only=True)}
            if scanned & tables:
                found.append(f"{node['Node Type']} over {sorted(scanned & tables)}")
    return found


def rows_read(plan: dict[str, Any], tables: set[str]) -> int:
    """Rows the plan's scans of a job table read (returned or filtered out), over all
    their loops: what a statement's cost grows with (``EXPLAIN ANALYZE``)."""
    read = 0
    for node in nodes(plan):
        if str(node.get("Relation Name")) in tables:
            rows = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            read += rows * node.get("Actual Loops", 1)
    return read


def literal(value: object) -> str:
    """A fixed test value as SQL text: NULL, ints, UUIDs, lists of them (as an array's
    text), and strings without quotes in them."""
    if value is None:
        return "NULL"
    if isinstance(value, list):
        text = "{" + ",".join(str(v) for v in value) + "}"
    elif isinstance(value, (int, uuid.UUID)):
        return str(value) if isinstance(value, int) else f"'{value}'"
    else:
        text = str(value)
    assert "'" not in text
    return f"'{text}'"


async def prepared_plan(
    db: Database, sql: str, params: Sequence[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The counters (``generic_plans``, ``custom_plans``) of the statement ``sql`` as the
    driver prepared it on the connection ``db`` runs on, and the plan that connection
    now runs it with (``EXPLAIN ANALYZE EXECUTE``: the server's own choice between its
    cached generic plan and a custom one). The caller undoes what it did (:class:`Undo`)."""
    rows = await db.execute(
        "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
        [sql],
    )
    assert len(rows) == 1, f"{len(rows)} prepared statements hold the text given"
    literals = ", ".join(literal(v) for v in params)
    (plan,) = await db.execute(
        f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {quote(rows[0]['name'])}({literals})"
    )
    counters = {k: rows[0][k] for k in ("generic_plans", "custom_plans")}
    return counters, plan["QUERY PLAN"][0]["Plan"]

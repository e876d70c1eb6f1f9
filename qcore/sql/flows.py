"""SQL for flows (job dependencies): the edges, the reads of a job's relatives, the resolver.

It covers pg-boss's ``job_dependency`` edges, the reads of a job's parents and children,
and the resolver that unblocks children.

A flow's children are inserted ``blocked`` with ``pending_dependencies`` = their parent
count; a parent is inserted ``blocking``. Once a parent has **completed**, the resolver
takes it (the ``job_i9`` index holds exactly the completed blocking jobs), lowers each
child's count by the edges from the parents it took, unblocks a child at zero (its
``start_after`` moved up to the release), and clears the parent's ``blocking``, so it is
never taken again. Parents that failed, were cancelled or deleted release nothing.

Where the engine takes several mutations in one statement (MutationStrategy.CTE) a
batch is one statement; elsewhere the same three steps run as three statements in one
transaction (the parents locked first). ``SKIP LOCKED`` lets concurrent resolvers take
disjoint parents where the engine has it.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.identifiers import quote
from qcore.sql._statement import Params, Statement
from qcore.sql.probes import claim_interval

__all__ = [
    "FLOW_BATCH_SIZE",
    "claim_flow_pass",
    "clear_blocking",
    "decrement_dependents",
    "get_edges",
    "insert_dependencies",
    "lock_blocking_parents",
    "resolve_flow_batch",
]

#: the completed parents one resolver statement takes at most
FLOW_BATCH_SIZE = 1000


@lru_cache(maxsize=16)
def insert_dependencies(q: str) -> Statement:
    """Insert the edges of a flow; how many were inserted.

    The edges are given as one JSON array of {child_name, child_id, parent_name,
    parent_id}.
    """
    p = Params()
    return p.statement(
        f"WITH added AS (INSERT INTO {q}.job_dependency (child_name, child_id, parent_name,"
        " parent_id) SELECT child_name, child_id, parent_name, parent_id FROM"
        f" jsonb_to_recordset({p('edges')}::jsonb) AS e (child_name text, child_id uuid,"
        " parent_name text, parent_id uuid) RETURNING 1)"
        " SELECT count(*)::int AS n FROM added"
    )


@lru_cache(maxsize=16)
def get_edges(q: str, *, parents: bool, after: bool) -> Statement:
    """A job's parents (``parents``) or children, in (name, id) order, at most ``limit``.

    After a (name, id) when ``after``.
    """
    p = Params()
    mine, theirs = ("child", "parent") if parents else ("parent", "child")
    where = f"{mine}_name = {p('name')}::text AND {mine}_id = {p('id')}::uuid"
    if after:
        where += (
            f" AND ({theirs}_name, {theirs}_id) > ({p('after_name')}::text, {p('after_id')}::uuid)"
        )
    return p.statement(
        f"SELECT {theirs}_name AS name, {theirs}_id AS id FROM {q}.job_dependency"
        f" WHERE {where} ORDER BY {theirs}_name, {theirs}_id LIMIT {p('limit')}::int"
    )


def claim_flow_pass(q: str) -> Statement:
    """Take this interval's resolver pass (pg-boss's ``flow_on`` gate on the version row).

    A row back when this instance has it.
    """
    return claim_interval(q, "flow_on")


def _parents(q: str, table: str, p: Params, skip_locked: bool) -> str:
    """Up to a batch of the completed blocking parents of the named queues, locked."""
    skip = " SKIP LOCKED" if skip_locked else ""
    return (
        f"SELECT j.name, j.id FROM {q}.{quote(table)} j WHERE j.blocking"
        f" AND j.state = 'completed' AND j.name = ANY({p('names')}::text[])"
        f" ORDER BY j.name, j.id LIMIT {FLOW_BATCH_SIZE} FOR UPDATE OF j{skip}"
    )


def _locked_children(q: str) -> str:
    """The children of ``edges`` (a CTE of child_name, child_id, n) still blocked, locked."""
    return (
        f"locked_children AS (SELECT j.name, j.id, e.n FROM {q}.job j JOIN edges e"
        " ON e.child_name = j.name AND e.child_id = j.id WHERE j.blocked"
        " ORDER BY j.name, j.id FOR UPDATE OF j)"
    )


def _unblock(q: str) -> str:
    """Those children counted down, and released at zero.

    ``start_after`` is moved up to the release, so their wait counts from when they
    could first run.
    """
    left = "GREATEST(j.pending_dependencies - c.n, 0)"
    return (
        f"UPDATE {q}.job j SET pending_dependencies = {left}, blocked = {left} > 0,"
        f" start_after = CASE WHEN {left} = 0 THEN GREATEST(j.start_after, {q}.job_now())"
        " ELSE j.start_after END"
        " FROM locked_children c WHERE j.name = c.name AND j.id = c.id"
    )


def _edges(q: str, parents: str) -> str:
    """How many edges lead to each child from ``parents`` (rows of name, id)."""
    return (
        "edges AS (SELECT d.child_name, d.child_id, count(*)::int AS n"
        f" FROM {q}.job_dependency d JOIN {parents}"
        " ON d.parent_name = parents.name AND d.parent_id = parents.id"
        " GROUP BY d.child_name, d.child_id)"
    )


@lru_cache(maxsize=64)
def resolve_flow_batch(q: str, table: str, *, skip_locked: bool) -> Statement:
    """One batch of the resolver in one statement (MutationStrategy.CTE).

    Parents taken, children counted down and released, parents' ``blocking`` cleared;
    ``resolved``: how many parents (a full batch means there may be more).
    """
    p = Params()
    return p.statement(
        f"WITH parents AS ({_parents(q, table, p, skip_locked)}), {_edges(q, 'parents')},"
        f" {_locked_children(q)}, unblocked AS ({_unblock(q)} RETURNING 1),"
        f" cleared AS (UPDATE {q}.{quote(table)} j SET blocking = false FROM parents"
        " WHERE j.name = parents.name AND j.id = parents.id RETURNING 1)"
        " SELECT (SELECT count(*) FROM cleared)::int AS resolved"
    )


@lru_cache(maxsize=64)
def lock_blocking_parents(q: str, table: str, *, skip_locked: bool) -> Statement:
    """The split resolver's first step: a batch of completed blocking parents, locked."""
    p = Params()
    return p.statement(_parents(q, table, p, skip_locked))


@lru_cache(maxsize=16)
def decrement_dependents(q: str) -> Statement:
    """The split resolver's second step: the children of the parents given counted down.

    The parents are given as ``names`` and ``ids``, pairwise; their children are counted
    down and released at zero.
    """
    p = Params()
    parents = f"unnest({p('names')}::text[], {p('ids')}::uuid[]) AS parents(name, id)"
    return p.statement(f"WITH {_edges(q, parents)}, {_locked_children(q)} {_unblock(q)}")


@lru_cache(maxsize=64)
def clear_blocking(q: str, table: str) -> Statement:
    """The split resolver's last step: the parents given no longer blocking."""
    p = Params()
    return p.statement(
        f"UPDATE {q}.{quote(table)} j SET blocking = false FROM unnest({p('names')}::text[],"
        f" {p('ids')}::uuid[]) AS parents(name, id)"
        " WHERE j.name = parents.name AND j.id = parents.id"
    )

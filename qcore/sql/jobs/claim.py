"""The claim: the next ready jobs of a queue, marked active, in the fetch index's order."""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement, row_limit
from qcore.sql.affinity import affinity_condition, patterned_column, record_processed_cte
from qcore.sql.jobs.columns import (
    ATTEMPT_COUNT,
    FETCH_COLUMNS,
    JOB_COLUMNS,
    job_now,
    job_table,
    queue_cte,
    returning_columns,
)
from qcore.sql.jobs.settle import complete_update
from qcore.sql.jobs.spec import DEFAULT_FETCH, FetchSpec


@lru_cache(maxsize=1024)
def fetch_jobs(
    q: str,
    *,
    skip_locked: bool,
    spec: FetchSpec = DEFAULT_FETCH,
    policy: str = "standard",
    table: str | None = None,
    settle: bool = False,
    affinity: bool = True,
    patterned: bool = False,
    keyed: bool = False,
    record: bool = False,
    limit: int = 1,
) -> Statement:
    """Claim up to ``limit`` ready jobs of a queue with ``policy``: mark them active, return them.

    The jobs are read in ``table`` (see :func:`job_table`).

    One statement, built for one policy so the server plans only what that policy
    needs (a queue's policy never changes; the statement checks it). ``skip_locked``
    (FetchStrategy.SKIP_LOCKED) locks the candidates FOR UPDATE SKIP LOCKED, so
    concurrent claimers take disjoint rows; without it (ATOMIC_UPDATE, for
    engines without SKIP LOCKED) the candidates are read unlocked and the UPDATE
    rechecks that the row is still in the state it was read in, so a row two
    claimers both picked goes to one of them and the other simply gets fewer (the
    candidates are a MATERIALIZED CTE there, and the recheck a join condition: else
    PostgreSQL's planner, on statistics older than the backlog, read every waiting row
    of the queue per claim). key_strict_fifo takes only the head
    of each key and nothing from a key with a job active, in retry or failed;
    singleton and stately skip keys with an active job and take one job per key
    per batch.

    ``spec`` gives the fetch's options (checked when it was built; its values travel
    as parameters, only whether each is set shapes the statement).

    Claim order: ``priority DESC`` (unless ``priority=False``), then ``created_on``
    (unless ``order_by_created_on=False``): exactly the order of the fetch index
    (i11), so the default claim reads the index up to its LIMIT and sorts nothing,
    whatever the backlog and however stale the table's statistics. Rows sharing a
    ``created_on`` (a pg-boss batch, sends in one transaction) are claimed in the
    index's order, as pg-boss claims them; qcore's own batches give each row its own
    ``created_on`` (see :func:`insert_jobs`), so one insert is claimed as given. The
    claimed rows come back sorted by the same keys, then ``id``.

    The UPDATE reaches each candidate by both columns of the primary key, ``j.name =
    c.name AND j.id = c.id``, and tests no queue name of its own: with ``j.name = $1``
    a generic plan made while the table held a few pages (a queue never analyzed, its
    statistics those of an empty table) found the row through i15 among every job of
    the queue, and kept that plan as the backlog grew (100,000 rows read a claim of
    one). Joined on the whole key, with no queue test for i15 to serve, the primary
    key's lookup of each candidate is the cheapest path at any size the planner assumes
    for a never analyzed table (ten pages at least), so every plan of it reads what it
    claims.

    Rows: the claimed jobs (``FETCH_COLUMNS`` or, with ``include_metadata``,
    every column) in claim order; one row of NULLs when none; no row, and nothing
    claimed, when the queue does not exist or has another policy or table.

    ``settle``: the worker's settle-and-claim, on engines that take several mutations
    of a table in one statement (MutationStrategy.CTE): the statement first completes
    the jobs given (``ids``, fenced as :func:`complete_jobs` is, with ``output``), so
    a batch's settle and the next claim are one round trip and one commit, both or
    neither. The claim cannot take a job being completed (those are active).

    ``spec.group_concurrency`` (pg-boss's ``groupConcurrency``): at most ``group_limit``
    jobs of one ``group_id`` active at once, counting those already active (jobs with no
    group are not limited); with tiers a group's limit is its jobs' ``group_tier``
    in the ``group_tiers`` JSON object, else ``group_limit``. The active jobs are
    counted once per claim, as pg-boss does, into one JSON object (an uncorrelated
    subquery, which the planner evaluates once rather than per candidate), excluding
    those the settle completes; the claim then keeps, per group, the first jobs in
    claim order that fit. Candidates are read up to ``limit`` before that cut, so a
    claim can return fewer than asked while more would fit. ``spec.ignore_groups``: jobs of
    the groups in the ``ignore_groups`` text array are not claimed (what a worker with
    ``local_group_concurrency`` leaves to others). Both the same on every backend.

    ``affinity`` (qcore's pattern table exists): rows carry ``patterned``, whether the
    queue has patterned jobs; without ``patterned`` the claim takes nothing from such a
    queue, with it only jobs without a pattern or with one of ``matching`` (see
    :func:`~qcore.sql.affinity.affinity_condition`). ``keyed``: rows carry
    ``processed_on_instance_key`` (``instance_key``), and with ``record`` the statement
    also writes it to qcore's attribution table (engines with MutationStrategy.CTE; the
    others write it in the claim's transaction).
    """
    p = Params()
    now = job_now(q)
    jobs = job_table(q, table)
    groups = spec.group_concurrency
    group_limit = groups is not None
    group_tiers = bool(groups and groups.tiers)
    keys = claim_keys(spec.priority, spec.order_by_created_on)
    order = f" ORDER BY {', '.join('j.' + k for k in keys)}" if keys else ""
    returned = ", ".join("claimed." + k for k in [*keys, "id"])
    ready = ready_filter(
        q,
        p,
        jobs,
        policy=policy,
        ignore_start_after=spec.ignore_start_after,
        min_priority=spec.min_priority is not None,
        max_priority=spec.max_priority is not None,
        ignore_groups=bool(spec.ignore_groups),
        affinity=affinity,
        patterned=patterned,
    )
    shape = ""
    room = ""
    if group_limit:
        allowed = f"{p('group_limit')}::int"
        if group_tiers:
            allowed = f"COALESCE(({p('group_tiers')}::jsonb ->> j.group_tier)::int, {allowed})"
        active = "COALESCE(((SELECT counts FROM active_groups) ->> j.group_id)::int, 0)"
        room = f"{allowed} - {active}"
        shape += f" AND (j.group_id IS NULL OR {room} > 0)"
    lock = " FOR UPDATE OF j SKIP LOCKED" if skip_locked else ""
    # unlocked, the UPDATE finds a row a concurrent claim took changed: only a row still
    # in the state it was read in is claimed (a join condition, so the planner still
    # reaches the rows from the candidates by primary key however stale its statistics)
    recheck = "" if skip_locked else " AND j.state = c.state"
    columns = JOB_COLUMNS if spec.include_metadata else FETCH_COLUMNS
    ctes = [
        queue_cte(q, p, claim_queue_columns(q, p, affinity), table=table, policy=True),
        *([f"done AS ({complete_update(q, p, fenced=True, table=table)})"] if settle else []),
    ]
    group_columns = ""
    if group_limit:
        completing = " AND a.id NOT IN (SELECT id FROM done)" if settle else ""
        ctes.append(
            f"""active_groups AS (
  SELECT COALESCE(jsonb_object_agg(g.group_id, g.n), '{{}}'::jsonb) AS counts
  FROM (SELECT a.group_id, count(*) AS n FROM {jobs} a
    WHERE a.name = {p("queue")}::text AND a.state = 'active' AND a.group_id IS NOT NULL{completing}
    GROUP BY a.group_id) g
)"""
        )
        group_columns = f", j.group_id, {room} AS group_room"
    query = f"""
  SELECT j.name, j.id, j.state, j.singleton_key, j.priority, j.created_on{group_columns}
  FROM {jobs} j
  WHERE EXISTS (SELECT 1 FROM q) AND j.name = {p("queue")}::text AND j.state < 'active'
    AND NOT j.blocked{ready}{shape}
  {order} LIMIT {row_limit(limit)}{lock}
"""
    # unlocked, the candidates must still be read once, up to the LIMIT: left to itself
    # the planner inlines the CTE into the UPDATE and runs it once per waiting row
    materialized = "" if skip_locked else " MATERIALIZED"
    ctes.append(f"candidates AS{materialized} ({query})")
    chosen = "candidates"
    if policy in ("singleton", "stately"):
        # one job per key per batch: the first of each key in claim order
        key_order = ", ".join(["COALESCE(singleton_key, '')", *keys, "id"])
        ctes.append(
            "chosen AS (SELECT DISTINCT ON (COALESCE(singleton_key, '')) * FROM candidates"
            f" ORDER BY {key_order})"
        )
        chosen = "chosen"
    if group_limit:
        # per group, the first jobs in claim order that fit in the room it has left
        rank = ", ".join([*keys, "id"])
        ctes.append(
            f"""grouped AS (
  SELECT r.name, r.id, r.state FROM (SELECT c.name, c.id, c.state, c.group_id, c.group_room,
    row_number() OVER (PARTITION BY c.group_id ORDER BY {rank}) AS group_rank
    FROM {chosen} c) r
  WHERE r.group_id IS NULL OR r.group_rank <= r.group_room
)"""
        )
        chosen = "grouped"
    ctes.append(
        f"""claimed AS (
  UPDATE {jobs} j SET state = 'active', started_on = {now}, heartbeat_on = {now},
    retry_count = {ATTEMPT_COUNT}
  FROM {chosen} c
  WHERE j.name = c.name AND j.id = c.id{recheck}
  RETURNING {returning_columns(columns, "j", lazy_data=True)}
)"""
    )
    if record:
        ctes.append(record_processed_cte(q, p))
    extra = claim_extra_columns(p, affinity, keyed)
    select = f"SELECT claimed.*{extra} FROM q LEFT JOIN claimed ON true ORDER BY {returned}"
    return p.statement(f"WITH {', '.join(ctes)}\n{select}")


def claim_queue_columns(q: str, p: Params, affinity: bool, columns: str = "name") -> str:
    """The columns a claim reads of its queue row.

    ``columns``, ``notify``, and ``patterned`` with ``affinity``.
    """
    columns += ", notify"
    return f"{columns}, {patterned_column(q, p)}" if affinity else columns


def claim_extra_columns(p: Params, affinity: bool, keyed: bool) -> str:
    """The claim rows' columns beyond the job's: ``queue_notify``, ``patterned``, the key.

    ``queue_notify`` (the queue's ``notify``, so a worker learns from its polls whether a
    NOTIFY would wake it), ``patterned`` (with ``affinity``) and the claiming server's key
    (``keyed``).
    """
    extra = ", q.notify AS queue_notify"
    extra += ", q.patterned" if affinity else ""
    if keyed:
        extra += f", {p('instance_key')}::text AS processed_on_instance_key"
    return extra


def claim_keys(priority: bool, order_by_created_on: bool) -> list[str]:
    """The claim order's keys (the fetch index's order): ``priority DESC``, ``created_on``."""
    return (["priority DESC"] if priority else []) + (["created_on"] if order_by_created_on else [])


def ready_filter(
    q: str,
    p: Params,
    jobs: str,
    *,
    policy: str,
    ignore_start_after: bool,
    min_priority: bool,
    max_priority: bool,
    ignore_groups: bool,
    affinity: bool,
    patterned: bool,
) -> str:
    """The ``AND ...`` conditions a ready job ``j`` of the queue meets beyond being queued.

    Beyond being queued and unblocked: due, within the priority bounds, allowed by the
    policy (see :func:`fetch_jobs`), not of an ignored group, and with ``affinity`` the
    branch's :func:`~qcore.sql.affinity.affinity_condition` (the claim's queue row
    ``q`` has ``patterned``).
    """
    now = job_now(q)
    due = "" if ignore_start_after else f" AND j.start_after <= {now}"
    bounds = ""
    if min_priority:
        bounds += f" AND j.priority >= {p('min_priority')}::int"
    if max_priority:
        bounds += f" AND j.priority <= {p('max_priority')}::int"
    if policy == "key_strict_fifo":
        other_due = "" if ignore_start_after else f" AND o.start_after <= {now}"
        shape = (
            f" AND NOT EXISTS (SELECT 1 FROM {jobs} o WHERE o.name = {p('queue')}::text"
            " AND o.singleton_key = j.singleton_key AND o.id <> j.id"
            " AND (o.state IN ('retry', 'active', 'failed')"
            " OR (j.state = 'created' AND o.state = 'created' AND NOT o.blocked"
            f"{other_due} AND (o.created_on, o.id) < (j.created_on, j.id))))"
        )
    elif policy in ("singleton", "stately"):
        shape = (
            f" AND NOT EXISTS (SELECT 1 FROM {jobs} a WHERE a.name = {p('queue')}::text"
            " AND a.state = 'active' AND a.policy = j.policy"
            " AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, ''))"
        )
    else:
        shape = ""
    if ignore_groups:
        shape += f" AND (j.group_id IS NULL OR j.group_id <> ALL({p('ignore_groups')}::text[]))"
    if affinity:
        shape += affinity_condition(q, p, patterned)
    return due + bounds + shape


#: the planner switch :func:`pin_claim_plan` turns off for a claim's transaction
CLAIM_PLAN_SWITCH = "enable_bitmapscan"
#: where a pin that keeps the caller's value saves it, for :func:`unpin_claim_plan`
SAVED_CLAIM_PLAN_SWITCH = f"qcore.saved_{CLAIM_PLAN_SWITCH}"


@lru_cache(maxsize=2)
def pin_claim_plan(*, keep: bool = False) -> Statement:
    """Keep the claim that follows, in the same transaction, on the fetch index's order.

    Whatever the statistics say: PostgreSQL-family planners only (Capabilities.
    planner_settings). A queue filled since its table was last analyzed looks, to the
    planner, like a handful of rows; below the batch size, a bitmap scan of every
    ready row plus a sort of them costs less, on paper, than the index read in order
    up to the LIMIT (measured: 52 ms for a claim of 100 at 40,000 waiting, 3 ms with
    this). Without bitmap scans every other plan is that same index scan plus a sort,
    or a sequential scan plus a sort, so the ordered read wins at any estimate, and the
    plan costs nothing extra (no disabled node is left in it, which would also wake
    JIT compilation). ``keep``: first save the caller's value, for :func:`unpin_claim_plan`
    to put back in a transaction that goes on after the claim.
    """
    switch, saved = CLAIM_PLAN_SWITCH, SAVED_CLAIM_PLAN_SWITCH
    keeping = f"set_config('{saved}', current_setting('{switch}'), true), " if keep else ""
    return Statement(f"SELECT {keeping}set_config('{switch}', 'off', true) AS pinned")


@lru_cache(maxsize=1)
def unpin_claim_plan() -> Statement:
    """The caller's planner switch back, as :func:`pin_claim_plan` (``keep``) saved it."""
    return Statement(
        f"SELECT set_config('{CLAIM_PLAN_SWITCH}',"
        f" current_setting('{SAVED_CLAIM_PLAN_SWITCH}'), true) AS unpinned"
    )

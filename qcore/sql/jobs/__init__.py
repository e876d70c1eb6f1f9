"""SQL for the job verbs, the job reads and the monitor's expiry batches.

The verbs: send/insert, fetch, complete, fail, cancel, resume, retry, delete, touch, the
edits (update, redrive) and the job reads; and the monitor's expiry batches, which fail
jobs exactly as fail does.

Every builder is a pure function of the quoted schema (``q``, from
``Context.q``) and a few flags; it returns a :class:`Statement` whose
``params`` name the ``$n`` values in order. Values only ever travel as
parameters. Builders are cached: the same flags give the same text, so
drivers can reuse their prepared statements.

Statements address the job table ``<schema>.job``: in the partitioned shape
PostgreSQL routes each row to the queue's partition (or ``job_common``), in
the single-table shape it is the table itself (the expiry batches pick from one
physical table, as pg-boss's do). Every timestamp is
``<schema>.job_now()``, pg-boss's one clock.

Most verbs begin with ``q``, the queue's row, and end by selecting from ``q
LEFT JOIN <result>``: no row back means the queue does not exist, a row with
NULLs means it exists and nothing matched. So one round trip both does the
work and tells an unknown queue apart, and nothing is written for one.
"""

from __future__ import annotations

from qcore.sql.catalog import JOB_COLUMN_TYPES
from qcore.sql.jobs.claim import fetch_jobs, pin_claim_plan, unpin_claim_plan
from qcore.sql.jobs.columns import FETCH_COLUMNS, JOB_COLUMNS, REINSERT_COLUMNS
from qcore.sql.jobs.edit import (
    fail_not_redriven,
    insert_redriven,
    preview_redrive,
    redrive_candidates,
    redrive_jobs,
    update_jobs,
)
from qcore.sql.jobs.enqueue import insert_jobs, send_job
from qcore.sql.jobs.fail import (
    expire_jobs,
    expire_remove,
    fail_jobs,
    fail_reinsert_failed,
    fail_reinsert_retry,
    fail_remove,
)
from qcore.sql.jobs.locked import claim_held, complete_held, fail_held, hold_longer, lock_released
from qcore.sql.jobs.reads import browse_jobs, find_jobs, get_job
from qcore.sql.jobs.ready import ready_queues
from qcore.sql.jobs.settle import (
    cancel_jobs,
    complete_each,
    complete_jobs,
    delete_jobs,
    restore_jobs,
    resume_jobs,
    retry_jobs,
    touch_jobs,
)
from qcore.sql.jobs.spec import DEFAULT_FETCH, FetchSpec

__all__ = [
    "DEFAULT_FETCH",
    "FETCH_COLUMNS",
    "JOB_COLUMNS",
    "JOB_COLUMN_TYPES",
    "REINSERT_COLUMNS",
    "FetchSpec",
    "browse_jobs",
    "cancel_jobs",
    "claim_held",
    "complete_each",
    "complete_held",
    "complete_jobs",
    "delete_jobs",
    "expire_jobs",
    "expire_remove",
    "fail_held",
    "fail_jobs",
    "fail_not_redriven",
    "fail_reinsert_failed",
    "fail_reinsert_retry",
    "fail_remove",
    "fetch_jobs",
    "find_jobs",
    "get_job",
    "hold_longer",
    "insert_jobs",
    "insert_redriven",
    "lock_released",
    "pin_claim_plan",
    "preview_redrive",
    "ready_queues",
    "redrive_candidates",
    "redrive_jobs",
    "restore_jobs",
    "resume_jobs",
    "retry_jobs",
    "send_job",
    "touch_jobs",
    "unpin_claim_plan",
    "update_jobs",
]

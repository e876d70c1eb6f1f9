"""The job verbs: send and insert, fetch, and the commands that settle or move jobs.

Each verb validates its input first (nothing is written for bad input), then
runs statements built by :mod:`qcore.sql.jobs` for the context's backend:

* fetch claims with ``FOR UPDATE SKIP LOCKED`` or, on engines without it,
  with an unlocked read and an ``UPDATE`` that rechecks the state
  (``FetchStrategy``);
* fail is one statement of data-modifying CTEs, or the same effect as
  several statements in one transaction with the retry backoff computed
  here (``MutationStrategy``).

Everything else is one statement on every backend. Statements outside a
caller's transaction are run again on a retryable failure (``qcore.retry``);
inside one they are the caller's to run again.

Most verbs address the queue's own physical job table, as pg-boss does (no
partition routing, no other partition planned or locked): its route, the
policy and table read once per context and checked by every statement, so a
queue deleted or recreated by another process is noticed and read again.

Ids may be given as a UUID, its string, a :class:`~qcore.job.Job`, or a list
of these. A ``Job`` fences the command on the attempt it was fetched in
(``retry_count``): a worker whose claim lapsed cannot settle a newer attempt.
"""

from __future__ import annotations

from qcore.verbs.jobs.claim import claim, complete_and_fetch, fetch, settles_and_claims
from qcore.verbs.jobs.edit import KEEP, RedriveFilter, preview_redrive, redrive, update, upsert
from qcore.verbs.jobs.enqueue import insert, send, send_debounced, send_throttled
from qcore.verbs.jobs.fail import (
    EXPIRY_BATCH_SIZE,
    HEARTBEAT_LOST,
    TIMED_OUT,
    ExpiryBatch,
    expire,
    fail,
)
from qcore.verbs.jobs.locked import (
    LockedBatch,
    fail_released,
    locked_claim,
    locked_fetch,
    locked_spec,
)
from qcore.verbs.jobs.reads import browse_jobs, find_jobs, get_job_by_id, ready_queues
from qcore.verbs.jobs.routes import Ids
from qcore.verbs.jobs.settle import (
    cancel,
    complete,
    complete_each,
    delete_job,
    restore,
    resume,
    retry,
    touch,
)

__all__ = [
    "EXPIRY_BATCH_SIZE",
    "HEARTBEAT_LOST",
    "KEEP",
    "TIMED_OUT",
    "ExpiryBatch",
    "Ids",
    "LockedBatch",
    "RedriveFilter",
    "browse_jobs",
    "cancel",
    "claim",
    "complete",
    "complete_and_fetch",
    "complete_each",
    "delete_job",
    "expire",
    "fail",
    "fail_released",
    "fetch",
    "find_jobs",
    "get_job_by_id",
    "insert",
    "locked_claim",
    "locked_fetch",
    "locked_spec",
    "preview_redrive",
    "ready_queues",
    "redrive",
    "restore",
    "resume",
    "retry",
    "send",
    "send_debounced",
    "send_throttled",
    "settles_and_claims",
    "touch",
    "update",
    "upsert",
]

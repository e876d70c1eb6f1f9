"""Workers: the loops that fetch jobs of one queue and run a handler on them.

A worker runs ``local_concurrency`` loops, each an asyncio task. A loop fetches a
batch for itself (one statement), runs the handler on it and settles the batch
(one statement): ``complete`` when the handler returns, ``fail`` when it raises,
runs past the batch's expiry, or the worker stops before it ends. Settling
passes the ``Job`` objects, so it is fenced on the attempt they were fetched in:
a worker whose claim lapsed can never settle the job's next attempt.

**Shared statements.** Loops that fetch at the same moment share one fetch
(``batch_size`` jobs each, split in order), and loops that complete without
output at the same moment share one ``complete``: a worker has at most two such
statements in flight (more past eight loops; :mod:`qcore.worker.lanes`), and a
call that finds one free runs at once, so merging adds no latency; it only packs
what would have queued for a connection anyway. Fewer, fuller statements are what
let a worker keep up with a hand-written claim/complete loop on the same pool.

**Drain, poll, wake.** A loop that received a full batch fetches again as soon
as it has settled it, and first wakes one idle loop, so a backlog is drained at
full concurrency. Idle loops share one poll: of the loops that found nothing,
one is the *poller* and sleeps out the polling interval (counted from the last
fetch) before fetching; the others are parked. An empty queue therefore costs
one fetch per polling interval per worker, however many loops it has, and never
a busy loop. And the idle workers of one Boss share their polls
(:mod:`qcore.worker.poll`): the first whose poll falls due asks, in one read, for
every worker idle then; only those whose queue has a job claim, and the others count
the answer as their poll. Ten idle queues cost one statement an interval, not ten.
``wake()`` (a NOTIFY for the queue) wakes one idle loop; if that
one finds a full batch it wakes the next, and so on, so a wake never starts a
herd. While the Boss says a NOTIFY would reach the worker (``listening``), the
poller sleeps ``notify_polling_interval_seconds`` instead.

**Connections.** A loop holds a pool connection only for the one statement it
runs (fetch, touch, complete, fail), never while a handler runs and never two
at once, so no ``local_concurrency`` can deadlock on a pool of any size: loops
beyond the pool's ``max`` wait their turn for a connection (up to its
connection timeout; past it the statement fails, is emitted as ``error``, and
the loop goes on).

**Errors.** Nothing a loop meets kills it: a failed fetch (database gone, Boss
not started yet) is emitted as ``error`` (and logged on the ``qcore`` logger)
and the loop goes back to polling, so a worker resumes by itself when the
database returns. A failed ``complete``/``fail`` is emitted and tried again
with backoff, the batch kept in hand, until it lands or the batch expires (then
the monitor fails it); settling is idempotent, being fenced.

**Handlers.** ``async def`` handlers run as a task per batch; plain functions
run on a thread owned by their loop (so a slow one never waits for a shared
pool). A handler is bounded by the largest ``expire_in_seconds`` of its batch;
past it the batch is failed, every job's ``cancelled`` event is set and an
async handler is cancelled. A thread cannot be interrupted: a timed-out plain
function keeps its thread until it returns, and its loop carries on with a new
one. Jobs with ``heartbeat_seconds`` are touched every
``heartbeat_refresh_seconds`` (default: half the smallest ``heartbeat_seconds``
of the batch) while the handler runs; a job the touch no longer finds active in
its attempt has ``cancelled`` set (and, when the whole batch is lost, an async
handler is cancelled and the batch is left to whoever holds it now).
"""

from __future__ import annotations

from qcore.coalescer import Coalescer
from qcore.worker.gate import Gate
from qcore.worker.handlers import refresh_seconds
from qcore.worker.loops import Worker
from qcore.worker.options import MIN_POLLING_INTERVAL_SECONDS, WorkOptions
from qcore.worker.poll import SharedPoll
from qcore.worker.running import SHUTDOWN_MESSAGE
from qcore.worker.status import WIP_INTERVAL_SECONDS, WipReporter, WorkerStatus

__all__ = [
    "MIN_POLLING_INTERVAL_SECONDS",
    "SHUTDOWN_MESSAGE",
    "WIP_INTERVAL_SECONDS",
    "Coalescer",
    "Gate",
    "SharedPoll",
    "WipReporter",
    "WorkOptions",
    "Worker",
    "WorkerStatus",
    "refresh_seconds",
]

"""How many statements a worker's loops keep in flight at once (its lanes).

They are completes, fetches and settle-and-claims; loops asking meanwhile share the next
statement.
"""

from __future__ import annotations

from qcore.backend import FetchStrategy
from qcore.context import Context
from qcore.worker.options import WorkOptions

#: the largest batch that settles and claims the next in one transaction where the
#: backend splits them into two statements; larger batches complete (two lanes) and
#: claim (one) apart. Measured, cockroachdb profile on PostgreSQL, 2 cores, 20,000 jobs,
#: jobs/s chained / apart: batch 1 x 8 loops 1,407 / 901, batch 10 x 8 6,466 / 6,177,
#: batch 100 x 4 15,230 / 17,926 (one transaction per batch serialises the per-row
#: work of both statements, where apart the completes overlap the claims)
SPLIT_CHAIN_MAX_BATCH = 10


def complete_lanes(local_concurrency: int) -> int:
    """How many complete statements a worker's loops may have in flight at once.

    Two, one more per four loops past eight (fetches: one). Measured on the drain
    benchmarks (batch 1 with 8 loops, batch 100 with 4): one fetch in flight and the
    others merged into the next claims the most per second; completes, which never
    collide, keep the database busy in two lanes while their statements stay full.
    """
    if local_concurrency == 1:
        return 1
    return max(2, local_concurrency // 4)


def claim_lanes(ctx: Context, options: WorkOptions) -> tuple[int, int]:
    """How many claims a worker's loops may have in flight at once.

    As fetches and as settle-and-claim statements; loops asking meanwhile share the next
    statement.

    One of each where claims are unlocked (two in flight would race for one set of
    rows). Under SKIP LOCKED, which never collides: fetches one at batch size 1 (the
    loops waiting share the next claim: fewer statements), else two; settle-and-claims
    two at batch size 1, else four. Measured on 2 cores: batch 100 with 4 loops,
    settle-and-claims in 2 / 4 lanes 22,800–24,000 / 23,600–27,000 jobs/s (five runs
    each); ratio to raw SQL of the same run: batch 100 with 4 loops, fetches in 1 / 2 /
    4 lanes 0.62 / 0.70 / 0.72; batch 1 with 8 loops,
    settle-and-claims in 1 / 2 / 4 / 8 lanes 0.95 / 1.07 / 0.87 / 0.72 (more lanes:
    more claimers scanning past each other's locked rows, server CPU per job 700 µs
    at two lanes, 2,066 at eight); batch 100 with 4 loops, 1 / 2 lanes 0.58 / 0.67.
    Unlocked (the cockroachdb profile on PostgreSQL), batch 1 with 8 loops,
    settle-and-claims in 1 / 2 lanes: 2,436 / 1,107 jobs/s (the second lane's claims
    wait for the first's rows, then find them taken: most came back short or empty)."""
    if ctx.backend.fetch is not FetchStrategy.SKIP_LOCKED:
        return 1, 1
    if options.batch_size == 1:
        return 1, 2
    return 2, 4

"""SQL for the monitor pass: which queues to look at, the per-queue monitor claim, and
the stamp a finished pass leaves.

The claim is pg-boss's (reference 6.13, 6.14): every instance tries it on its own
timer, and the conditional UPDATE lets one of them per ``monitorIntervalSeconds``
do a queue's work, whichever runtime it is (qcore or pg-boss). The expiry batches
the pass runs for the claimed queues are in :mod:`qcore.sql.jobs`, next to the fail
statement they share.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement

__all__ = ["CLAIM_CHUNK_SIZE", "claim_monitor", "monitor_queues", "stamp_monitored"]

#: queue names per claim statement (pg-boss's chunk)
CLAIM_CHUNK_SIZE = 100


@lru_cache(maxsize=4)
def monitor_queues(q: str, *, by_name: bool = False) -> Statement:
    """The queues a pass covers, each with its physical job table, in table then name
    order; with ``by_name`` only the queue ``name``. Rows ``name, table_name``."""
    p = Params()
    where = f" WHERE name = {p('name')}::text" if by_name else ""
    return p.statement(f"SELECT name, table_name FROM {q}.queue{where} ORDER BY table_name, name")


@lru_cache(maxsize=8)
def claim_monitor(q: str, *, gated: bool = True, skip_locked: bool = False) -> Statement:
    """Claim the queues ``names`` for one monitor pass: stamp ``monitor_claim_on`` = now
    and return them. Rows ``name``: the queues this pass may work on.

    ``gated`` (the background pass) claims only queues whose last claim — or, never
    claimed, last finished pass (``monitor_on``); neither: a week ago, so a new queue
    is due at once — is at least ``seconds`` old, so instances sharing the schema do a
    queue's work once per interval between them. Without it (an explicit
    ``supervise()``) every named queue is claimed, and the stamp still spares the
    other instances' background passes. Rows are locked in name order ``FOR NO KEY
    UPDATE`` (``FOR UPDATE`` would block the key-share lock a job insert takes through
    the queue foreign key), with ``skip_locked`` skipping queues another claim holds.
    """
    p = Params()
    now = f"{q}.job_now()"
    due = ""
    if gated:
        due = (
            f" AND extract(epoch FROM ({now} - COALESCE(monitor_claim_on, monitor_on,"
            f" {now} - interval '1 week'))) >= {p('seconds')}::float8"
        )
    lock = "FOR NO KEY UPDATE SKIP LOCKED" if skip_locked else "FOR NO KEY UPDATE"
    sql = (
        f"WITH due AS (SELECT name FROM {q}.queue WHERE name = ANY({p('names')}::text[]){due}"
        f" ORDER BY name {lock})"
        f" UPDATE {q}.queue SET monitor_claim_on = {now} FROM due"
        " WHERE queue.name = due.name RETURNING queue.name"
    )
    return p.statement(sql)


@lru_cache(maxsize=4)
def stamp_monitored(q: str) -> Statement:
    """Record that the queues ``names`` were monitored: ``monitor_on`` = now."""
    p = Params()
    sql = f"UPDATE {q}.queue SET monitor_on = {q}.job_now() WHERE name = ANY({p('names')}::text[])"
    return p.statement(sql)

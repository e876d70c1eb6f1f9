"""SQL for publish/subscribe: the ``subscription`` table as pg-boss writes it.

One row per (event, queue), removed with its queue (ON DELETE CASCADE).

The same on every backend: plain single-row statements on a fixed table.
"""

from __future__ import annotations

from functools import lru_cache

from qcore.sql._statement import Params, Statement

__all__ = ["subscribe", "subscribers", "unsubscribe"]


@lru_cache(maxsize=16)
def subscribe(q: str) -> Statement:
    """Add (event, queue), or touch its ``updated_on`` when it exists (pg-boss's upsert)."""
    p = Params()
    return p.statement(
        f"INSERT INTO {q}.subscription (event, name, created_on, updated_on)"
        f" VALUES ({p('event')}::text, {p('queue')}::text, {q}.job_now(), {q}.job_now())"
        f" ON CONFLICT (event, name) DO UPDATE SET updated_on = {q}.job_now()"
    )


@lru_cache(maxsize=16)
def unsubscribe(q: str) -> Statement:
    """Remove (event, queue); how many rows (0 or 1)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {q}.subscription WHERE event = {p('event')}::text"
        f" AND name = {p('queue')}::text RETURNING name"
    )


@lru_cache(maxsize=16)
def subscribers(q: str) -> Statement:
    """The queues subscribed to an event, by name."""
    p = Params()
    return p.statement(
        f"SELECT name FROM {q}.subscription WHERE event = {p('event')}::text ORDER BY name"
    )

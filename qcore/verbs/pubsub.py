"""Publish/subscribe: queues subscribe to an event; ``publish`` sends one job to each.

The ``subscription`` table is pg-boss's, so a subscription made by either runtime is
honoured by both. A publish sends to every subscribed queue on its own (concurrently,
each its own transaction, outside a caller's transaction): one queue refusing the job
does not keep it from the others, and the ones that failed are raised together with
what was sent (:class:`~qcore.errors.PublishError`), never swallowed. A queue deleted
between reading the subscriptions and sending is no subscriber any more and is left out.
Inside a caller's transaction (``db=``) the sends run one after another and the first
failure is raised as it is: the transaction is aborted, so nothing of it stands.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from typing_extensions import Unpack

from qcore import retry as retrying
from qcore.context import Context
from qcore.errors import (
    FOREIGN_KEY_VIOLATION,
    DatabaseError,
    PublishError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.options import SendOptions, check_key, job_record, queue_name, records_json
from qcore.sql import pubsub as sql
from qcore.verbs.jobs import enqueue
from qcore.verbs.queues import missing_queue

__all__ = ["event_name", "publish", "subscribe", "unsubscribe"]


def event_name(event: object) -> str:
    """Check an event's name and return it.

    A name is any non-empty text the database can store as a key (pg-boss puts no other
    rule on it).
    """
    return check_key("event", event)


async def subscribe(ctx: Context, event: str, name: str) -> None:
    """Subscribe queue ``name`` to ``event`` (again: nothing changes but ``updated_on``)."""
    event_name(event)
    queue_name(name)
    try:
        await retrying.run(ctx, sql.subscribe(ctx.q), event=event, queue=name)
    except DatabaseError as exc:
        if exc.sqlstate == FOREIGN_KEY_VIOLATION:
            raise missing_queue(name) from None
        raise


async def unsubscribe(ctx: Context, event: str, name: str) -> bool:
    """End queue ``name``'s subscription to ``event``; whether there was one."""
    event_name(event)
    queue_name(name)
    return bool(await retrying.run(ctx, sql.unsubscribe(ctx.q), event=event, queue=name))


async def publish(
    ctx: Context, event: str, data: Any = None, **options: Unpack[SendOptions]
) -> dict[str, uuid.UUID | None]:
    """Send ``data`` with ``options`` to every queue subscribed to ``event``.

    Returns each queue's job id (None where its policy dropped the job), by queue name;
    empty when nothing is subscribed. The options are checked before anything is sent.
    """
    event_name(event)
    if options.get("id") is not None:
        raise ValidationError("publish sends a job to each subscribed queue: it takes no id")
    # a bad option or payload is refused here, for every queue alike
    records_json([job_record(data, **options)], numbered=False)
    rows = await retrying.run(ctx, sql.subscribers(ctx.q), event=event)
    names = [r["name"] for r in rows]
    sent: dict[str, uuid.UUID | None] = {}
    if ctx.db.in_transaction:
        for name in names:
            sent[name] = await enqueue.send(ctx, name, data, **options)
        return sent
    results = await asyncio.gather(
        *(enqueue.send(ctx, name, data, **options) for name in names), return_exceptions=True
    )
    failed: dict[str, BaseException] = {}
    for name, result in zip(names, results, strict=True):
        if isinstance(result, QueueNotFoundError):
            continue  # deleted since the subscriptions were read: no subscriber any more
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result  # cancelled, interrupted: not a queue's failure
            failed[name] = result
        else:
            sent[name] = result
    if failed:
        raise PublishError(event, sent, failed)
    return sent

"""The LISTEN/NOTIFY listener that wakes idle workers.

With ``use_listen_notify=True`` a ``Boss`` listens on its schema's channel —
pg-boss's name, ``pgboss_`` + 24 hex digits of SHA-224 of the schema spelling,
so a pg-boss producer wakes qcore workers and the other way round. A job insert
(send, insert, retry) on a queue with ``notify`` sends the queue's name as the
payload; each one calls ``on_queue(name)``, which wakes that queue's idle workers. A
job with an affinity pattern notifies JSON instead (see :mod:`qcore.affinity`): a
server whose key the pattern cannot match skips it. An operator's pause or resume of a
server (or a removal) notifies ``{"instanceKey": ..., "action": ..., "by": ...}``:
``on_instance(notice)`` (see :mod:`qcore.services.pause_watch`); pg-boss ignores it.

A notification is only a latency hint: workers keep polling. The adapter owns
the dedicated connection, its heartbeat and keepalive (every 10 s, 5 s timeout by
default: ``ListenOptions``, from the ``notify_*`` options of ``Boss``) and the
reconnect; after a reconnect ``on_reconnect()`` lets every worker fetch once,
since notifications sent while the listener was away are lost. PGlite delivers
the notifications sent through its adapter in process.

Where listening is impossible — a backend without LISTEN/NOTIFY (CockroachDB,
YugabyteDB unless enabled), an adapter that cannot pin a connection
(SQLAlchemy, a custom ``db=``), or a listener that fails to start — one
``listen_notify_unavailable`` warning is emitted and workers only poll.
"""

from __future__ import annotations

from collections.abc import Callable

from qcore.affinity import parse_notify_payload
from qcore.context import Context
from qcore.db import DEFAULT_LISTEN, Listener, ListenOptions
from qcore.events import Events
from qcore.sql.locks import notify_channel
from qcore.verbs.instances import InstanceNotice

__all__ = ["UNAVAILABLE", "Notifier"]

#: the type of the warning emitted when the listener cannot run
UNAVAILABLE = "listen_notify_unavailable"


class Notifier:
    """One LISTEN on the schema's channel for the lifetime of a started ``Boss``.

    It is a :class:`~qcore.periodic.Service`; the adapter keeps the connection alive.
    """

    name = "notifier"
    busy = False  # its work is the adapter's: nothing of its own runs

    def __init__(
        self,
        ctx: Context,
        events: Events,
        *,
        on_queue: Callable[[str], None],
        on_reconnect: Callable[[], None],
        on_instance: Callable[[InstanceNotice | None], None] | None = None,
        listening: ListenOptions = DEFAULT_LISTEN,
    ) -> None:
        self._ctx = ctx
        self._events = events
        self._on_queue = on_queue
        self._on_instance = on_instance
        self._on_reconnect = on_reconnect
        self._listening = listening
        #: the channel, resolved from the schema as configured (pg-boss's spelling rules)
        self.channel = notify_channel(ctx.schema_spec)
        self._listener: Listener | None = None

    @property
    def available(self) -> bool:
        """Whether the listener runs (workers may then poll less often)."""
        return self._listener is not None

    async def start(self) -> bool:
        """Listen; False (after one ``listen_notify_unavailable`` warning) when it cannot."""
        if self._listener is not None:
            return True
        backend, db = self._ctx.backend, self._ctx.db
        if not backend.capabilities.listen_notify:
            self._unavailable(
                f"use_listen_notify is not supported on the {backend.name} backend;"
                " continuing with polling only",
                backend=backend.name,
            )
            return False
        if not db.can_listen:
            self._unavailable(
                f"use_listen_notify is on but the {db.driver or type(db).__name__} adapter"
                " cannot LISTEN (it needs a connection it can pin: the psycopg or asyncpg"
                " adapter, or PGlite); continuing with polling only",
                backend=backend.name,
                driver=db.driver,
            )
            return False
        try:
            self._listener = await db.listen(
                self.channel, self._message, self._reconnected, options=self._listening
            )
        except Exception as exc:  # no connection, a refused LISTEN, a pooler in the way
            self._unavailable(
                f"failed to start the LISTEN/NOTIFY listener; continuing with polling only: {exc}",
                backend=backend.name,
                error=str(exc),
            )
            return False
        return True

    def _unavailable(self, message: str, **data: object) -> None:
        self._events.warn(UNAVAILABLE, message, channel=self.channel, **data)

    def _message(self, _channel: str, payload: str) -> None:
        notice = InstanceNotice.parse(payload)
        if notice is not None:
            if self._on_instance is not None:
                self._on_instance(notice)
            return
        queue, pattern = parse_notify_payload(payload)
        if pattern is not None and not self._ctx.affinity.matches(pattern):
            return  # a job only other servers may run: nothing here to wake for
        self._on_queue(queue)

    def _reconnected(self) -> None:
        self._on_reconnect()

    async def stop(self) -> None:
        """Stop listening and free the listening connection."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        try:
            await listener.close()
        except Exception as exc:  # the connection is gone already; nothing to give back
            self._events.emit("error", exc)

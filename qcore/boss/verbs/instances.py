"""The instance registry's verbs of ``Boss``."""

from __future__ import annotations

import uuid
from typing import Any

from qcore.arguments import verb
from qcore.boss.verbs.parts import BossParts
from qcore.job import InstanceCounts, InstanceListing, InstancePage
from qcore.options import queue_name
from qcore.verbs import affinity as affinity_ops
from qcore.verbs import instances as instance_ops
from qcore.verbs.affinity import PatternBacklog

__all__ = ["InstanceVerbs"]


class InstanceVerbs:
    """The instance registry's verbs (a part of ``Boss``).

    List the instances of this database, pause, resume and forget a server by its key.
    """

    @verb()
    async def get_instances(
        self: BossParts,
        *,
        limit: int = 1000,
        after: uuid.UUID | str | None = None,
        offset: int | None = None,
        db: Any = None,
    ) -> InstancePage:
        """The ``Boss`` and pg-boss objects registered in this database, oldest start first.

        At most ``limit`` (1 to 100,000); ``after``: the last id of the previous page,
        or ``offset``: rows to skip. Each comes with ``live`` and, for a keyed server,
        its key, pause state and ``jobs_processed``; the list's ``total`` is the
        registry's row count.
        """
        return await instance_ops.get_instances(
            self.context(db), limit=limit, after=after, offset=offset
        )

    @verb()
    async def list_instances(
        self: BossParts,
        *,
        live: bool | None = None,
        keyed: bool | None = None,
        paused: bool | None = None,
        search: str | None = None,
        limit: int = 50,
        after: str | None = None,
        db: Any = None,
    ) -> InstanceListing:
        """The registry as an operator reads it: live servers first, then the latest heard.

        Filters (None: either): ``live``, ``keyed`` (has an instance key), ``paused``,
        ``search`` (a piece of the key, name or host). At most ``limit`` (1 to 1,000);
        ``after``: the previous page's ``next``.
        """
        return await instance_ops.list_instances(
            self.context(db),
            live=live,
            keyed=keyed,
            paused=paused,
            search=search,
            limit=limit,
            after=after,
        )

    @verb()
    async def instance_counts(self: BossParts, *, db: Any = None) -> InstanceCounts:
        """The registry's counts: rows, live, keyed, anonymous live and paused servers."""
        return await instance_ops.instance_counts(self.context(db))

    @verb()
    async def get_affinity_backlog(
        self: BossParts, name: str, *, db: Any = None
    ) -> list[PatternBacklog]:
        """Queue ``name``'s waiting jobs by affinity pattern, most first.

        Each with how many wait, since when one has been ready, and how many live
        servers' keys match it (0: none can run them now; the supervise pass warns of
        that as ``affinity_unmatched``).
        """
        return await affinity_ops.pattern_backlog(self.context(db), [queue_name(name)])

    @verb()
    async def pause_instance(self: BossParts, instance_key: str, *, db: Any = None) -> None:
        """Pause the server with ``instance_key``, from any process.

        It keeps heartbeating and its workers claim nothing until resumed: this
        ``Boss``'s own key at once; another server's at once where LISTEN/NOTIFY reaches
        it, else within one polling interval of its workers (at the latest its next
        heartbeat). The server acknowledges the pause in its row
        (:attr:`~qcore.Instance.pause_acknowledged`); the pause persists across its
        restarts. Emits ``instance_paused`` here.
        """
        own = instance_key == self.instance_key
        by = str(self.instance_id)
        await instance_ops.pause_instance(self.context(db), instance_key, own=own, by=by)
        if own:
            self._set_paused(True, announce=False)
        self.events.emit("instance_paused", {"instance_key": instance_key})

    @verb()
    async def resume_instance(self: BossParts, instance_key: str, *, db: Any = None) -> None:
        """Let a paused server claim again.

        As soon as a pause reaches it (see :meth:`pause_instance`). Emits
        ``instance_resumed`` here.
        """
        own = instance_key == self.instance_key
        by = str(self.instance_id)
        await instance_ops.resume_instance(self.context(db), instance_key, own=own, by=by)
        if own:
            self._set_paused(False, announce=False)
        self.events.emit("instance_resumed", {"instance_key": instance_key})

    @verb()
    async def remove_instance(self: BossParts, instance_key: str, *, db: Any = None) -> int:
        """Remove a server from the registry once it has been gone 30 minutes.

        Its key, pause state and registry rows go (the number of rows is returned); jobs
        are never touched. Before that, a ``ValidationError``. Emits ``instance_removed``.
        """
        by = str(self.instance_id)
        removed = await instance_ops.remove_instance(self.context(db), instance_key, by=by)
        self.events.emit("instance_removed", {"instance_key": instance_key})
        return removed

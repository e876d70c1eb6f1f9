"""What the verb mixins of ``Boss`` need from it, said once.

Each mixin's methods take ``self`` as a :class:`BossParts`, and ``Boss`` is one.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from qcore.boss.services import Running
from qcore.context import Context
from qcore.events import Events
from qcore.services.maintenance import Maintenance
from qcore.verbs.jobs.shared import SharedStatements

__all__ = ["BossParts"]


class BossParts(Protocol):
    """The parts of a ``Boss`` its verbs use."""

    #: the event emitter behind ``on()``
    events: Events
    #: the supervise pass's settings
    maintenance: Maintenance
    supervise_interval_seconds: float
    monitor_interval_seconds: float
    #: the statements concurrent calls share
    _shared: SharedStatements
    #: the background services running, by name
    _running: Running
    #: whether stop() ended a start() (explicit passes then return without running)
    _stopped: bool
    #: this server's instance key (None: anonymous)
    instance_key: str | None
    instance_id: uuid.UUID

    def _set_paused(self, paused: bool, *, announce: bool = True) -> None: ...

    def context(self, db: Any = None) -> Context:
        """The operation context of a call.

        With ``db``, it is bound to the caller's connection or transaction.
        """
        ...

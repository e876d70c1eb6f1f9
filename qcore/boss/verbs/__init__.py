"""The verbs of ``Boss`` that forward to :mod:`qcore.verbs`, as mixins by subject.

Each checks its arguments (:func:`qcore.arguments.verb`) and calls the operation with
the context of the call (with ``db=``, the caller's own transaction). What they need of
``Boss`` is one protocol, :class:`~qcore.boss.verbs.parts.BossParts`.

A new verb is a method on the mixin of its subject (``Boss`` inherits it, ``SyncBoss``
wraps it with one line).
"""

from qcore.boss.verbs.flows import FlowVerbs
from qcore.boss.verbs.instances import InstanceVerbs
from qcore.boss.verbs.jobs import QueueAndJobVerbs
from qcore.boss.verbs.maintenance import MaintenanceVerbs
from qcore.boss.verbs.schedules import ScheduleVerbs
from qcore.boss.verbs.schema import SchemaVerbs

__all__ = [
    "FlowVerbs",
    "InstanceVerbs",
    "MaintenanceVerbs",
    "QueueAndJobVerbs",
    "ScheduleVerbs",
    "SchemaVerbs",
]

"""``Boss``: the public face of qcore — options, lifecycle, and the queue and job verbs.

``from qcore.boss import Boss`` (and ``from qcore import Boss``) is the entry point;
the modules of this package are its parts: :mod:`qcore.boss.core` the lifecycle,
:mod:`qcore.boss.workers` the workers, :mod:`qcore.boss.verbs` the forwarding verbs.
"""

from qcore.boss.core import Boss
from qcore.boss.options import BossOptions
from qcore.boss.workers import Handler
from qcore.options import FetchOptions, QueueOptions, ScheduledSendOptions, SendOptions

__all__ = [
    "Boss",
    "BossOptions",
    "FetchOptions",
    "Handler",
    "QueueOptions",
    "ScheduledSendOptions",
    "SendOptions",
]

"""The service protocol and the periodic kind, under their old path.

They live in :mod:`qcore.periodic` now, beneath the primitives that run on them.
"""

from qcore.periodic import Periodic, Service

__all__ = ["Periodic", "Service"]

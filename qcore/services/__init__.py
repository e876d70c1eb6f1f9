"""The background services of a ``Boss``: one module per concern, on one protocol.

:mod:`qcore.periodic` says what a service is (:class:`Service`) and gives the
periodic kind (:class:`Periodic`). A new subsystem is one module here with one
``Periodic`` subclass (its interval, its gate, its pass) and one line in
``Boss.start`` that adds it to the services it starts and stops.
"""

from qcore.periodic import Periodic, Service

__all__ = ["Periodic", "Service"]

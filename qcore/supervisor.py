"""The monitor pass, under its historical name: see :mod:`qcore.services.monitor`."""

from qcore.services.monitor import MonitorResult, Supervisor, supervise

__all__ = ["MonitorResult", "Supervisor", "supervise"]

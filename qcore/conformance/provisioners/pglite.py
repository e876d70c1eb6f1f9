"""An embedded engine started through its backend's ``launcher`` (PGlite)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qcore.backend import Backend, Server
from qcore.conformance.provisioners.base import NotAvailable, Provisioner, first_line


class PGliteProvisioner(Provisioner):
    """An embedded engine started through the backend's ``launcher`` (PGlite: Node.js
    runs pglite-socket, in memory, on a free port). PGlite is one database, so the
    session uses it as it is; it is gone when the server stops."""

    kind = "pglite"

    def __init__(self, backend: Backend, **launcher_options: Any) -> None:
        if backend.launcher is None:
            raise ValueError(f"backend {backend.name} has no launcher")
        super().__init__(backend)
        self.launcher: Callable[..., Server] = backend.launcher
        self.options = launcher_options
        self.server: Server | None = None

    def describe(self) -> str:
        return f"{self.backend.name} launcher"

    def _start(self) -> str:
        try:
            server = self.launcher(**self.options)
            server.start()
        except Exception as exc:
            raise NotAvailable(self.backend.name, first_line(exc)) from exc
        self.server = server
        return server.url

    def _stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()

"""A TCP relay in front of the test PostgreSQL that can go silent: an outage as a client
sees one when the server's host stops answering (no reset, no refusal: every read
waits), which a killed backend or a stopped server does not show."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

from psycopg.conninfo import conninfo_to_dict


class SilentRelay:
    """Relays connections on a port of its own to ``dsn``'s server until :meth:`silence`:
    from then on no byte moves either way and new connections are accepted but never
    served. ``url(dsn)`` is ``dsn`` pointed at the relay."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        self._target = (str(params.get("host", "127.0.0.1")), int(str(params.get("port", 5432))))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._silent = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def url(self, dsn: str) -> str:
        params = conninfo_to_dict(dsn)
        user = params.get("user", "postgres")
        database = params.get("dbname", "postgres")
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def silence(self) -> None:
        """Stop moving bytes: every connection hangs, as behind a dead network."""
        self._silent.set()

    def close(self) -> None:
        self._closed.set()
        self._silent.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                # shutdown first: it ends the connection (and wakes a pump blocked in
                # recv) where close alone waits for that pump
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> SilentRelay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            if self._silent.is_set():
                continue  # accepted, never served
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            self._keep(server)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="relay-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data or self._silent.is_set():
                # silent: swallow what arrives and send nothing; the peer waits
                if not data:
                    return
                continue
            try:
                sink.sendall(data)
            except OSError:
                return

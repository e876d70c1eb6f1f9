"""Engines in Docker containers, through testcontainers, from a backend's provisioning
spec (where a Docker daemon answers)."""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from typing import Any
from urllib.parse import quote as urlquote

import psycopg

from qcore.backend import Backend, ProvisioningSpec
from qcore.conformance.provisioners.base import (
    NotAvailable,
    Provisioner,
    drop_database,
    execute,
    first_line,
    throwaway_name,
)
from qcore.identifiers import quote

_docker_lock = threading.Lock()


_docker_state: tuple[bool, str] | None = None


def docker_available(*, refresh: bool = False) -> tuple[bool, str]:
    """Whether a Docker daemon answers here, and if not why (asked once per process)."""
    global _docker_state
    with _docker_lock:
        if _docker_state is None or refresh:
            _docker_state = _probe_docker()
        return _docker_state


def _probe_docker() -> tuple[bool, str]:
    try:
        docker: Any = importlib.import_module("docker")
    except ImportError:
        return False, "the docker package is not installed (pip install 'qcore-queue[containers]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
    except Exception as exc:
        return False, f"no Docker daemon answers ({first_line(exc)})"
    return True, ""


def _remember_docker_failure(reason: str) -> None:
    global _docker_state
    with _docker_lock:
        _docker_state = (False, reason)


class ContainerProvisioner(Provisioner):
    """The engine in a container built from the backend's provisioning spec
    (testcontainers), a throw-away database created in it as the spec says."""

    kind = "container"

    def __init__(self, backend: Backend) -> None:
        if backend.provisioning is None:
            raise ValueError(f"backend {backend.name} has no provisioning spec")
        super().__init__(backend)
        self.spec: ProvisioningSpec = backend.provisioning
        self._container: Any = None
        self._admin: str | None = None
        self._database: str | None = None

    def describe(self) -> str:
        return f"container {self.spec.image}"

    def _start(self) -> str:
        name = self.backend.name
        known_ok, known_reason = _docker_state if _docker_state is not None else (True, "")
        if not known_ok:  # a daemon that did not answer once is not asked again
            raise NotAvailable(name, known_reason)
        try:
            from docker.errors import DockerException
            from testcontainers.core.container import DockerContainer
        except ImportError as exc:
            raise NotAvailable(
                name,
                f"testcontainers is not installed ({exc}); pip install 'qcore-queue[containers]'",
            ) from exc
        spec = self.spec
        try:
            container = DockerContainer(
                spec.image, command=spec.command, env=dict(spec.env), ports=[spec.port]
            )
        except DockerException as exc:
            reason = f"no Docker daemon answers ({first_line(exc)})"
            _remember_docker_failure(reason)
            raise NotAvailable(name, reason) from exc
        try:
            container.start()
        except DockerException as exc:
            raise NotAvailable(name, f"could not start {spec.image}: {first_line(exc)}") from exc
        self._container = container
        try:
            host = container.get_container_host_ip()
            port = int(container.get_exposed_port(spec.port))
            self._admin = self._format_url(host, port, spec.database)
            self._wait_ready(self._admin)
            if spec.create_database:
                database = throwaway_name()
                execute(self._admin, spec.create_database.format(database=quote(database)))
                self._database = database
                url = self._format_url(host, port, database)
            else:
                url = self._admin
            if spec.setup_database:
                execute(url, *spec.setup_database)
            return url
        except BaseException:
            self._stop()
            raise

    def _format_url(self, host: str, port: int, database: str) -> str:
        spec = self.spec
        user = urlquote(spec.user, safe="")
        if spec.password and "{password}" not in spec.url_template:
            user += ":" + urlquote(spec.password, safe="")
        return spec.url_template.format(
            user=user,
            password=urlquote(spec.password or "", safe=""),
            host=host,
            port=port,
            database=database,
        )

    def _wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + self.spec.ready_timeout_seconds
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                execute(url, "SELECT 1")
                return
            except psycopg.Error as exc:
                last = exc
                time.sleep(0.5)
        raise NotAvailable(
            self.backend.name,
            f"{self.spec.image} did not accept connections within"
            f" {self.spec.ready_timeout_seconds:g}s"
            + (f" (last error: {first_line(last)})" if last else ""),
        )

    def _stop(self) -> None:
        container, self._container = self._container, None
        if self._admin and self._database:
            drop_database(self._admin, self._database)
        self._database = None
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop()

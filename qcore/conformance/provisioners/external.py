"""An engine the user runs, reached at a DSN they give."""

from __future__ import annotations

import contextlib

import psycopg
from psycopg.conninfo import conninfo_to_dict

from qcore.backend import Backend
from qcore.conformance.provisioners.base import (
    Provisioner,
    ProvisionError,
    drop_database,
    execute,
    first_line,
    throwaway_name,
    to_url,
)
from qcore.identifiers import quote


class ExternalProvisioner(Provisioner):
    """An engine the user runs, reached at a DSN they give (``--dsn`` or
    ``QCORE_TEST_DSN_<BACKEND>``). A throw-away database is created in it with the
    backend's ``create_database`` statement when its provisioning spec has one;
    otherwise the given database is used with a throw-away schema first on the
    search path. Either is dropped at stop."""

    kind = "external"

    def __init__(self, backend: Backend, dsn: str) -> None:
        super().__init__(backend)
        self.dsn = dsn
        self.database: str | None = None
        self.schema: str | None = None

    def describe(self) -> str:
        return "external " + to_url(self.dsn, password=None)

    def _start(self) -> str:
        spec = self.backend.provisioning
        try:
            execute(self.dsn, "SELECT 1")
        except psycopg.Error as exc:
            # the user asked for this engine: it not answering is an error, not a skip
            raise ProvisionError(
                f"{self.backend.name}: nothing answers at {to_url(self.dsn, password=None)}:"
                f" {first_line(exc)}"
            ) from exc
        if spec is not None and spec.create_database:
            database = throwaway_name()
            execute(self.dsn, spec.create_database.format(database=quote(database)))
            self.database = database
            url = to_url(self.dsn, dbname=database)
            try:
                if spec.setup_database:
                    execute(url, *spec.setup_database)
            except BaseException:
                self._stop()
                raise
            return url
        schema = throwaway_name()
        execute(self.dsn, f"CREATE SCHEMA {quote(schema)}")
        self.schema = schema
        options = conninfo_to_dict(self.dsn).get("options")
        search_path = f"-c search_path={schema},public"
        return to_url(self.dsn, options=f"{options} {search_path}" if options else search_path)

    def _stop(self) -> None:
        database, schema = self.database, self.schema
        self.database = self.schema = None
        if database:
            drop_database(self.dsn, database)
        if schema:
            with contextlib.suppress(psycopg.Error):
                execute(self.dsn, f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")

"""An example vendor backend: PostgreSQL's strategies, without LISTEN/NOTIFY.

A vendor whose engine speaks the PostgreSQL protocol but has no LISTEN/NOTIFY
starts from the built-in ``postgres`` profile, renames it and switches the
capability off; qcore then polls instead of listening, and the compatibility
matrix skips the notification tests for it (⛔ in the table).

There is no provisioning spec (no container image to start), so without
``--dsn`` the matrix runs it *emulated*: on the local PostgreSQL behind the
capability guard, which refuses LISTEN, NOTIFY and ``pg_notify`` as the
vendor's engine would. With ``--dsn`` (or ``QCORE_TEST_DSN_EXAMPLE``) it runs
on the vendor's real engine, in a throw-away schema of the given database.
"""

from __future__ import annotations

import dataclasses

from qcore_backends.postgres import BACKEND as POSTGRES

__all__ = ["BACKEND"]

BACKEND = dataclasses.replace(
    POSTGRES,
    name="example",
    provisioning=None,
    description="Example vendor engine: PostgreSQL without LISTEN/NOTIFY",
).with_capabilities(listen_notify=False)

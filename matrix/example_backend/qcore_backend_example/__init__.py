"""An example vendor backend: PostgreSQL's strategies, without LISTEN/NOTIFY.

A vendor whose engine speaks the PostgreSQL protocol but has no LISTEN/NOTIFY
starts from the built-in ``postgres`` profile, renames it and switches the
capability off; qcore then polls instead of listening, and the conformance suite
skips the notification tests for it (⛔ in the table).

It says how to recognise its engine (``detect``): the example engine names itself
in its ``version()`` text. A server that does not — plain PostgreSQL, say — is not
its engine, so qcore's ``Boss`` warns (``backend_mismatch``) and the conformance
kit runs it *emulated*: behind the capability guard, which refuses LISTEN, NOTIFY
and ``pg_notify`` as the vendor's engine would, and marked 🟡, never ✅. That holds
with ``--dsn`` too. There is no provisioning spec (no container image to start).
"""

from __future__ import annotations

import dataclasses

from qcore.backend import EngineIdentity
from qcore_backends.postgres import BACKEND as POSTGRES

__all__ = ["BACKEND"]


def is_example_engine(identity: EngineIdentity) -> bool:
    """Whether the server is the example engine: it says ``ExampleDB`` in ``version()``."""
    return "ExampleDB" in identity.version


BACKEND = dataclasses.replace(
    POSTGRES,
    name="example",
    provisioning=None,
    detect=is_example_engine,
    description="Example vendor engine: PostgreSQL without LISTEN/NOTIFY",
).with_capabilities(listen_notify=False)

"""The capability guard: real PostgreSQL standing in for an engine that cannot run here.

When the compatibility matrix *emulates* a backend (CockroachDB, YugabyteDB,
Citus ...) on a plain PostgreSQL, every statement qcore sends goes through a
:class:`GuardedDatabase`. The guard parses the statement with ``pglast``
(PostgreSQL's own parser) — PL/pgSQL bodies of ``CREATE FUNCTION`` and ``DO``
blocks and SQL-language function bodies included — and raises
:class:`UnsupportedFeature` (SQLSTATE ``0A000``, what a real engine sends)
before the statement reaches the server if it uses a feature the emulated
backend lacks.

What is forbidden is *derived* from the backend's flags: :data:`DETECTORS`
maps a feature name (a key of :meth:`qcore.backend.Backend.features`) to a
detector, and a backend forbids every feature that is ``False`` in its
flags and has a detector. There is no per-backend list. The behavioural
flags ``transactional_ddl`` and ``single_session`` have no detector: no
statement text reveals them.

The guard also injects faults so retry paths run without a real distributed
engine: :meth:`GuardedDatabase.inject_serialization_failure`.

Unparseable SQL is refused with :class:`GuardParseError` (SQLSTATE ``42601``,
a ``DatabaseError``) instead of being passed to the server: a statement the
guard cannot read is one it cannot vouch for, and the server would reject it
as well.
"""

from __future__ import annotations

from qcore.conformance.guard.analysis import StatementFeatures, analyse, features_used, violations
from qcore.conformance.guard.database import GuardedDatabase, emulation_conninfo
from qcore.conformance.guard.detectors import (
    DETECTORS,
    Detector,
    GuardParseError,
    UnsupportedFeature,
    forbidden_features,
)

__all__ = [
    "DETECTORS",
    "Detector",
    "GuardParseError",
    "GuardedDatabase",
    "StatementFeatures",
    "UnsupportedFeature",
    "analyse",
    "emulation_conninfo",
    "features_used",
    "forbidden_features",
    "violations",
]

"""qcore: a job queue on PostgreSQL and compatible engines, wire-compatible with pg-boss."""

from qcore.backend import Backend
from qcore.boss import Boss
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    NotInstalledError,
    QcoreError,
    SerializationError,
    UniqueViolation,
    ValidationError,
)

__all__ = [
    "Backend",
    "Boss",
    "ConfigError",
    "ConnectionLostError",
    "DatabaseError",
    "NotInstalledError",
    "QcoreError",
    "SerializationError",
    "UniqueViolation",
    "ValidationError",
]
__version__ = "0.1.0"

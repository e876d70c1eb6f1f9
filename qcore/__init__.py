"""qcore: a job queue on PostgreSQL and compatible engines, wire-compatible with pg-boss."""

from qcore._version import __version__
from qcore.backend import Backend
from qcore.boss import Boss
from qcore.errors import (
    ConfigError,
    ConnectionLostError,
    DatabaseError,
    NotInstalledError,
    PublishError,
    QcoreError,
    QueueNotFoundError,
    SchemaVersionError,
    SerializationError,
    UniqueViolation,
    ValidationError,
)
from qcore.job import (
    CommandResult,
    EditResult,
    Instance,
    InstancePage,
    Job,
    JobResult,
    JobState,
    Policy,
    Queue,
    RedrivePreview,
)
from qcore.options import GroupConcurrency
from qcore.sync import SyncBoss
from qcore.verbs.drift import DriftReport
from qcore.verbs.jobs.locked import LockedBatch

__all__ = [
    "Backend",
    "Boss",
    "CommandResult",
    "ConfigError",
    "ConnectionLostError",
    "DatabaseError",
    "DriftReport",
    "EditResult",
    "GroupConcurrency",
    "Instance",
    "InstancePage",
    "Job",
    "JobResult",
    "JobState",
    "LockedBatch",
    "NotInstalledError",
    "Policy",
    "PublishError",
    "QcoreError",
    "Queue",
    "QueueNotFoundError",
    "RedrivePreview",
    "SchemaVersionError",
    "SerializationError",
    "SyncBoss",
    "UniqueViolation",
    "ValidationError",
    "__version__",
]

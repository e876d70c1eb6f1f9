"""Install, migrate and roll back the schema, under its documented old path.

The module is :mod:`qcore.verbs.schema` now, and this one re-exports it.
"""

from qcore.verbs.schema import (
    SCHEMA_VERSION,
    affinity_tables_present,
    get_construction_plans,
    get_migration_plans,
    get_rollback_plans,
    get_uninstall_plans,
    install_or_migrate,
    is_installed,
    rollback,
    schema_version,
)

__all__ = [
    "SCHEMA_VERSION",
    "affinity_tables_present",
    "get_construction_plans",
    "get_migration_plans",
    "get_rollback_plans",
    "get_uninstall_plans",
    "install_or_migrate",
    "is_installed",
    "rollback",
    "schema_version",
]

"""Citus: PostgreSQL with the citus extension; qcore's tables stay local to the coordinator."""

from qcore.backend import (
    Backend,
    FetchStrategy,
    Kind,
    LockStrategy,
    MutationStrategy,
    ProvisioningSpec,
    SchemaShape,
)

BACKEND = Backend(
    name="citus",
    kind=Kind.DISTRIBUTED,
    fetch=FetchStrategy.SKIP_LOCKED,
    mutation=MutationStrategy.CTE,
    schema=SchemaShape(partitioned=True, deferrable_foreign_keys=True, covering_indexes=True),
    lock=LockStrategy.ADVISORY,
    provisioning=ProvisioningSpec(
        image="citusdata/citus:14.0",
        port=5432,
        env={"POSTGRES_HOST_AUTH_METHOD": "trust"},
        setup_database=("CREATE EXTENSION IF NOT EXISTS citus",),
    ),
    description="Citus 14 coordinator (tables are not distributed)",
)

"""PostgreSQL: every strategy at its fastest."""

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
    name="postgres",
    kind=Kind.STANDARD,
    fetch=FetchStrategy.SKIP_LOCKED,
    mutation=MutationStrategy.CTE,
    schema=SchemaShape(partitioned=True, deferrable_foreign_keys=True, covering_indexes=True),
    lock=LockStrategy.ADVISORY,
    provisioning=ProvisioningSpec(
        image="postgres:18",
        port=5432,
        env={"POSTGRES_HOST_AUTH_METHOD": "trust"},
    ),
    description="PostgreSQL 13 or newer",
)

"""CockroachDB: a distributed engine without SKIP LOCKED.

No SKIP LOCKED claim, no advisory locks, no LISTEN/NOTIFY, one mutation of a table per
statement, SERIALIZABLE transactions that must be retried.
"""

from qcore.backend import (
    Backend,
    Capabilities,
    FetchStrategy,
    Kind,
    LockStrategy,
    MutationStrategy,
    ProvisioningSpec,
    SchemaShape,
)

BACKEND = Backend(
    name="cockroachdb",
    kind=Kind.DISTRIBUTED,
    fetch=FetchStrategy.ATOMIC_UPDATE,
    mutation=MutationStrategy.SPLIT,
    schema=SchemaShape(partitioned=False, deferrable_foreign_keys=False, covering_indexes=False),
    lock=LockStrategy.LEASE,
    capabilities=Capabilities(
        listen_notify=False,
        reindex=False,
        vacuum_stats=False,
        index_build_progress=False,
        drift_catalog=False,
        transactional_ddl=False,
        plpgsql_dynamic=False,
        planner_settings=False,
    ),
    provisioning=ProvisioningSpec(
        image="cockroachdb/cockroach:v26.2.0",
        port=26257,
        command="start-single-node --insecure",
        user="root",
        database="defaultdb",
        session_settings={"default_transaction_isolation": "serializable"},
    ),
    description="CockroachDB 24.1 or newer",
)

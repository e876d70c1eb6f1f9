"""YugabyteDB (YSQL): pg-boss's shape on a distributed engine.

SKIP LOCKED, multi-mutation CTEs, deferrable foreign keys and covering indexes work
(the shape pg-boss builds there); no partitions of the job table, no advisory locks by
default, no LISTEN/NOTIFY unless enabled.
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
    name="yugabytedb",
    kind=Kind.DISTRIBUTED,
    fetch=FetchStrategy.SKIP_LOCKED,
    mutation=MutationStrategy.CTE,
    schema=SchemaShape(partitioned=False, deferrable_foreign_keys=True, covering_indexes=True),
    lock=LockStrategy.LEASE,
    capabilities=Capabilities(
        listen_notify=False,
        reindex=False,
        vacuum_stats=False,
        index_build_progress=False,
        drift_catalog=True,
        transactional_ddl=False,
        plpgsql_dynamic=True,
    ),
    provisioning=ProvisioningSpec(
        image="yugabytedb/yugabyte:2025.2.0.0-b131",
        port=5433,
        command=(
            "bin/yugabyted start --background=false"
            ' --tserver_flags="ysql_yb_enable_advisory_locks=true,enable_pg_cron=false"'
        ),
        user="yugabyte",
        database="yugabyte",
        ready_timeout_seconds=240.0,
    ),
    description="YugabyteDB 2025.2 (YSQL)",
)

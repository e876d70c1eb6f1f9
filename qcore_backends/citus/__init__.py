"""Citus: PostgreSQL with the citus extension; qcore's tables stay local to the
coordinator, so every strategy is PostgreSQL's."""

import dataclasses

from qcore.backend import Kind, ProvisioningSpec
from qcore_backends.postgres import BACKEND as POSTGRES

BACKEND = dataclasses.replace(
    POSTGRES,
    name="citus",
    kind=Kind.DISTRIBUTED,
    provisioning=ProvisioningSpec(
        image="citusdata/citus:14.0",
        port=5432,
        env={"POSTGRES_HOST_AUTH_METHOD": "trust"},
        setup_database=("CREATE EXTENSION IF NOT EXISTS citus",),
    ),
    description="Citus 14 coordinator (tables are not distributed)",
)

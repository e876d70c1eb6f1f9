"""Citus: PostgreSQL with the citus extension.

qcore's tables stay local to the coordinator, so every strategy is PostgreSQL's.

The target is Citus 14, which runs on PostgreSQL 16, 17 and 18 (Citus 13.x is the
line for PostgreSQL 15): the provisioning spec pins the ``citusdata/citus:14.0``
image, and the description says both, so a reader of the compatibility table knows
what a real run exercised. A run under emulation is on whatever PostgreSQL stands in
for Citus; the table names that server's version for each backend's cells.
"""

import dataclasses

from qcore.backend import Kind, ProvisioningSpec
from qcore_backends.postgres import BACKEND as POSTGRES

#: the Citus line the image below carries, and the PostgreSQL majors that line supports
CITUS_MAJOR = 14
POSTGRES_MAJORS = (16, 17, 18)

BACKEND = dataclasses.replace(
    POSTGRES,
    name="citus",
    kind=Kind.DISTRIBUTED,
    provisioning=ProvisioningSpec(
        image=f"citusdata/citus:{CITUS_MAJOR}.0",
        port=5432,
        env={"POSTGRES_HOST_AUTH_METHOD": "trust"},
        setup_database=("CREATE EXTENSION IF NOT EXISTS citus",),
    ),
    description=(
        f"Citus {CITUS_MAJOR} coordinator on PostgreSQL"
        f" {POSTGRES_MAJORS[0]}–{POSTGRES_MAJORS[-1]} (tables are not distributed)"
    ),
)

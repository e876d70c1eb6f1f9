"""The pg-boss schema's lock keys, channel names and install statements, checked once
(not per backend) against the reference values; the per-backend schema tests are in
the conformance suite (``qcore/conformance/suite/test_schema.py``)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from qcore import locks
from qcore.sql import locks as lock_sql
from qcore.sql import schema as schema_sql
from tests.conftest import ADMIN_DSN, admin_execute, with_database

REFERENCE_KEYS = {
    "": 7656354120165383864,
    "create-queue": -1492401963413634707,
    "delete-queue": 4589745509179030457,
    "queue-stats": -7902177750030409515,
    "queue-stats-insert": -8453987887643741509,
    "bamClaim": 2095179870837218517,
    "job_commonfailJobsByTimeout": 7502616842399629689,
    "job_commondeletion": 3694488865252177776,
}


def test_lock_keys_equal_the_reference_values() -> None:
    for suffix, key in REFERENCE_KEYS.items():
        assert lock_sql.lock_key("pgboss_ref_pg", "pgboss", suffix) == key
        # a redundantly quoted name is the same schema and the same key
        assert lock_sql.lock_key("pgboss_ref_pg", '"pgboss"', suffix) == key


def test_lock_keys_follow_the_configured_spelling() -> None:
    # bare names are not folded: MySchema and myschema differ (reference, fact 9)
    assert lock_sql.normalized_schema("MySchema") == "MySchema"
    assert lock_sql.normalized_schema('"myschema"') == "myschema"
    assert lock_sql.normalized_schema('"MySchema"') == '"MySchema"'
    assert lock_sql.lock_key("d", "MySchema") != lock_sql.lock_key("d", "myschema")
    assert lock_sql.lock_key("d", '"My-Schema"') != lock_sql.lock_key("d", "my_schema")
    assert lock_sql.lock_key("d1", "pgboss") != lock_sql.lock_key("d2", "pgboss")


@pytest.mark.postgres
def test_lock_keys_computed_in_a_database_named_as_the_reference() -> None:
    """The server-side expression, in a database called ``pgboss_ref_pg``, gives the
    reference's numbers (the database is created for the test unless it exists)."""
    name = "pgboss_ref_pg"
    existed = bool(admin_execute(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"))
    if not existed:
        admin_execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(with_database(ADMIN_DSN, name), autocommit=True) as conn:
            for suffix, key in REFERENCE_KEYS.items():
                statement = f"SELECT {lock_sql.lock_key_expression('%s')} AS key"
                row = conn.execute(statement, [lock_sql.lock_key_text("pgboss", suffix)]).fetchone()
                assert row is not None and row[0] == key, suffix
    finally:
        if not existed:
            admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_bytea_reading_of_backslashes_matches_postgres() -> None:
    assert lock_sql._bytea_input("a\\\\b") == b"a\\b"
    assert lock_sql._bytea_input("a\\101b") == b"aAb"
    assert lock_sql._bytea_input("\\x4142") == b"AB"
    with pytest.raises(ValueError):
        lock_sql._bytea_input("a\\q")


def test_notify_channel_names() -> None:
    assert lock_sql.notify_channel("pgboss") == "pgboss_454650302e472074f72063fd"
    assert lock_sql.notify_channel('"pgboss"') == "pgboss_454650302e472074f72063fd"
    assert locks.notify_channel("pgboss") == "pgboss_454650302e472074f72063fd"
    assert lock_sql.notify_channel("MySchema") != lock_sql.notify_channel("myschema")
    assert len(lock_sql.notify_channel('"Any-Name"')) == len("pgboss_") + 24


def test_install_statements_use_only_what_each_backend_has() -> None:
    """Every install statement, function bodies included, passes the capability guard of
    every registered backend; the partitioned shape would not pass cockroachdb's."""
    from qcore import backends
    from qcore.conformance.guard import violations

    today = dt.date(2026, 11, 29)
    for name in backends.names():
        backend = backends.get(name)
        steps = schema_sql.install(backend, "pgboss", today=today)
        for step in steps:
            assert violations(step.sql, backend) == [], (name, step.sql[:80])
            if step.skip_if is not None:
                probe = step.skip_if[0].sql
                assert violations(probe, backend) == [], (name, probe)
    cockroach = backends.get("cockroachdb")
    partitioned = schema_sql.install(backends.get("postgres"), "pgboss", today=today)
    found = {f for step in partitioned for f in violations(step.sql, cockroach)}
    # (its DEFERRABLE keys hide in commands handed to job_table_run as text)
    assert {"partitioning", "covering_indexes", "plpgsql_dynamic"} <= found

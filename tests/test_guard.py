"""The capability guard of the compatibility matrix: detectors, derivation from the
backend's flags, and the guarded adapter on the local PostgreSQL."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from qcore import backends
from qcore.backend import Backend, FetchStrategy, LockStrategy, MutationStrategy
from qcore.conformance.guard import (
    DETECTORS,
    GuardedDatabase,
    GuardParseError,
    UnsupportedFeature,
    emulation_conninfo,
    forbidden_features,
    violations,
)
from qcore.conformance.guard.analysis import analyse, analyse_text
from qcore.conformance.schemas import fresh_name
from qcore.db import Database, Rows
from qcore.db.psycopg import PsycopgDatabase
from qcore.errors import DatabaseError, SerializationError

pytestmark = pytest.mark.feature("guard")

DSN = os.environ.get("QCORE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

POSTGRES = backends.get("postgres")
COCKROACH = backends.get("cockroachdb")
YUGABYTE = backends.get("yugabytedb")
CITUS = backends.get("citus")


def without(feature: str, base: Backend = POSTGRES) -> Backend:
    """``base`` with exactly one feature switched off, whatever kind of flag it is."""
    if feature == "skip_locked":
        return dataclasses.replace(base, fetch=FetchStrategy.ATOMIC_UPDATE)
    if feature == "advisory_locks":
        return dataclasses.replace(base, lock=LockStrategy.LEASE)
    if feature == "multi_mutation_cte":
        return dataclasses.replace(base, mutation=MutationStrategy.SPLIT)
    schema_field = {
        "partitioning": "partitioned",
        "deferrable_foreign_keys": "deferrable_foreign_keys",
        "covering_indexes": "covering_indexes",
    }.get(feature)
    if schema_field is not None:
        return dataclasses.replace(
            base, schema=dataclasses.replace(base.schema, **{schema_field: False})
        )
    return base.with_capabilities(**{feature: False})


# ----------------------------------------------------------------------------- detectors

FUNC = "CREATE FUNCTION f(a int) RETURNS int LANGUAGE plpgsql AS $$"

CASES: list[tuple[str, str]] = [
    # skip_locked
    ("skip_locked", "SELECT id FROM pgboss.job WHERE state = 'created' FOR UPDATE SKIP LOCKED"),
    ("skip_locked", "select * from job for share skip locked"),
    (
        "skip_locked",
        "WITH next AS (SELECT id FROM pgboss.job ORDER BY priority DESC LIMIT $1"
        " FOR UPDATE SKIP LOCKED) UPDATE pgboss.job j SET state = 'active' FROM next"
        " WHERE j.id = next.id RETURNING j.*",
    ),
    (
        "skip_locked",
        "UPDATE job SET state = 'active' WHERE id IN"
        " (SELECT id FROM job WHERE name = $1 FOR NO KEY UPDATE OF job SKIP LOCKED)",
    ),
    (
        "skip_locked",
        "SELECT * FROM (SELECT * FROM (SELECT id FROM job FOR KEY SHARE SKIP LOCKED) a) b",
    ),
    # advisory_locks
    ("advisory_locks", "SELECT pg_advisory_xact_lock(1)"),
    ("advisory_locks", "SELECT pg_catalog.pg_try_advisory_xact_lock($1::bigint)"),
    ("advisory_locks", "SELECT PG_ADVISORY_LOCK(hashtext('pgboss'))"),
    ("advisory_locks", "SELECT * FROM pg_advisory_unlock_all()"),
    ("advisory_locks", "WITH l AS (SELECT pg_advisory_lock_shared(1, 2)) SELECT 1 FROM l"),
    ("advisory_locks", "SELECT CASE WHEN pg_try_advisory_lock(7) THEN 1 END"),
    # partitioning
    ("partitioning", "CREATE TABLE job (id uuid, name text) PARTITION BY LIST (name)"),
    ("partitioning", "CREATE TABLE j1 PARTITION OF job FOR VALUES IN ('email')"),
    ("partitioning", "CREATE TABLE jdef PARTITION OF pgboss.job DEFAULT"),
    ("partitioning", "ALTER TABLE pgboss.job ATTACH PARTITION pgboss.j1 FOR VALUES IN ('x')"),
    ("partitioning", "ALTER TABLE job DETACH PARTITION j1"),
    ("partitioning", "ALTER TABLE job DETACH PARTITION j1 CONCURRENTLY"),
    # deferrable_foreign_keys
    (
        "deferrable_foreign_keys",
        "CREATE TABLE job (id int, q text REFERENCES queue (name) DEFERRABLE INITIALLY DEFERRED)",
    ),
    (
        "deferrable_foreign_keys",
        "CREATE TABLE job (id int, q text REFERENCES queue (name) INITIALLY DEFERRED)",
    ),
    (
        "deferrable_foreign_keys",
        "CREATE TABLE job (q text, FOREIGN KEY (q) REFERENCES queue (name) DEFERRABLE)",
    ),
    (
        "deferrable_foreign_keys",
        "ALTER TABLE pgboss.job ADD CONSTRAINT q_fk FOREIGN KEY (name)"
        " REFERENCES pgboss.queue (name) DEFERRABLE INITIALLY IMMEDIATE",
    ),
    ("deferrable_foreign_keys", "ALTER TABLE job ALTER CONSTRAINT q_fk DEFERRABLE"),
    ("deferrable_foreign_keys", "SET CONSTRAINTS ALL DEFERRED"),
    ("deferrable_foreign_keys", "SET CONSTRAINTS pgboss.q_fk DEFERRED"),
    # covering_indexes
    ("covering_indexes", "CREATE INDEX i ON job (name) INCLUDE (state)"),
    (
        "covering_indexes",
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS i ON pgboss.job USING btree"
        " (name, id) INCLUDE (state, priority) WHERE state < 'active'",
    ),
    ("covering_indexes", "ALTER TABLE job ADD CONSTRAINT u UNIQUE (name) INCLUDE (state)"),
    ("covering_indexes", "CREATE TABLE t (id int, x int, PRIMARY KEY (id) INCLUDE (x))"),
    # multi_mutation_cte
    (
        "multi_mutation_cte",
        "WITH gone AS (DELETE FROM job WHERE id = $1 RETURNING *)"
        " INSERT INTO job SELECT * FROM gone",
    ),
    (
        "multi_mutation_cte",  # schema-qualified and unqualified may be one table
        "WITH a AS (UPDATE pgboss.job SET state = 'x' RETURNING id)"
        " DELETE FROM job WHERE id IN (SELECT id FROM a)",
    ),
    (
        "multi_mutation_cte",  # unquoted identifiers fold to lower case
        "WITH a AS (UPDATE PgBoss.Job SET state = 'x' RETURNING id)"
        " INSERT INTO pgboss.job (id) SELECT id FROM a",
    ),
    (
        "multi_mutation_cte",  # two data-modifying CTEs, a reading main statement
        "WITH a AS (INSERT INTO job (id) VALUES (1) RETURNING id),"
        " b AS (UPDATE job SET x = 1 WHERE id = 2 RETURNING id)"
        " SELECT * FROM a UNION ALL SELECT * FROM b",
    ),
    (
        "multi_mutation_cte",
        'WITH a AS (DELETE FROM "Job" RETURNING *) INSERT INTO "Job" SELECT * FROM a',
    ),
    (
        "multi_mutation_cte",
        "WITH a AS (DELETE FROM job RETURNING *) MERGE INTO job USING a ON job.id = a.id"
        " WHEN NOT MATCHED THEN INSERT (id) VALUES (a.id)",
    ),
    # listen_notify
    ("listen_notify", "LISTEN pgboss_jobs"),
    ("listen_notify", "UNLISTEN *"),
    ("listen_notify", "NOTIFY pgboss_jobs, 'email'"),
    ("listen_notify", "SELECT pg_notify('pgboss_jobs', $1)"),
    ("listen_notify", "SELECT pg_catalog.pg_notify($1, $2) FROM queue"),
    # reindex
    ("reindex", "REINDEX TABLE job"),
    ("reindex", "REINDEX INDEX CONCURRENTLY pgboss.job_i1"),
    # vacuum_stats
    ("vacuum_stats", "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'job'"),
    ("vacuum_stats", "SELECT last_autovacuum FROM pg_catalog.pg_stat_all_tables"),
    ("vacuum_stats", "SELECT heap_blks_read FROM pg_statio_user_tables"),
    ("vacuum_stats", "SELECT n_distinct FROM pg_stats WHERE tablename = 'job'"),
    ("vacuum_stats", "SELECT pg_stat_get_dead_tuples('pgboss.job'::regclass)"),
    # index_build_progress
    ("index_build_progress", "SELECT phase FROM pg_stat_progress_create_index"),
    (
        "index_build_progress",
        "SELECT blocks_done FROM pg_catalog.pg_stat_progress_create_index WHERE relid = $1",
    ),
    # drift_catalog
    ("drift_catalog", "SELECT pg_get_indexdef(indexrelid) FROM pg_index"),
    ("drift_catalog", "SELECT pg_catalog.pg_get_constraintdef(oid, true) FROM pg_constraint"),
    ("drift_catalog", "SELECT pg_get_functiondef('pgboss.f'::regproc)"),
    ("drift_catalog", "SELECT pg_get_triggerdef(oid) FROM pg_trigger"),
    ("drift_catalog", "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef"),
    # plpgsql_dynamic
    ("plpgsql_dynamic", f"{FUNC} BEGIN EXECUTE 'SELECT 1'; RETURN a; END $$"),
    (
        "plpgsql_dynamic",
        f"{FUNC} BEGIN EXECUTE format('DELETE FROM %I', 'job') USING a; RETURN a; END $$",
    ),
    ("plpgsql_dynamic", f"{FUNC} BEGIN PERFORM 1; RETURN a; END $$"),
    ("plpgsql_dynamic", "DO $$ BEGIN PERFORM count(*) FROM job; END $$"),
    ("plpgsql_dynamic", "DO LANGUAGE plpgsql $body$ BEGIN EXECUTE 'SELECT 1'; END $body$"),
    (
        "plpgsql_dynamic",
        "CREATE FUNCTION f() RETURNS SETOF int LANGUAGE plpgsql AS $$ DECLARE r record;"
        " BEGIN FOR r IN EXECUTE 'SELECT 1' LOOP END LOOP; RETURN QUERY EXECUTE 'SELECT 2';"
        " END $$",
    ),
    ("plpgsql_dynamic", "CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN PERFORM 1; END $$"),
    # planner_settings
    ("planner_settings", "SELECT set_config('enable_bitmapscan', 'off', true)"),
    ("planner_settings", "SET LOCAL enable_sort = off"),
    ("planner_settings", "SET enable_seqscan TO on"),
    # features inside PL/pgSQL and SQL function bodies
    (
        "advisory_locks",
        f"{FUNC} BEGIN IF pg_try_advisory_xact_lock(a) THEN RETURN 1; END IF; RETURN 0; END $$",
    ),
    (
        "advisory_locks",
        f"{FUNC} DECLARE ok bool := pg_try_advisory_lock(1); BEGIN RETURN a; END $$",
    ),
    (
        "advisory_locks",
        f"{FUNC} DECLARE ok bool; BEGIN ok := pg_try_advisory_lock(a); RETURN a; END $$",
    ),
    (
        "advisory_locks",
        f"{FUNC} DECLARE ok bool; BEGIN SELECT pg_try_advisory_lock(a) INTO ok; RETURN a; END $$",
    ),
    (
        "skip_locked",
        "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ DECLARE r record; BEGIN"
        " FOR r IN SELECT id FROM job FOR UPDATE SKIP LOCKED LOOP END LOOP; END $$",
    ),
    ("listen_notify", "DO $$ BEGIN NOTIFY pgboss_jobs; END $$"),
    (
        "multi_mutation_cte",
        "DO $$ BEGIN WITH a AS (DELETE FROM job RETURNING *) INSERT INTO job SELECT * FROM a;"
        " END $$",
    ),
    (
        "vacuum_stats",
        f"{FUNC} BEGIN RETURN (SELECT count(*) FROM pg_stat_user_tables); END $$",
    ),
    (
        "advisory_locks",
        "CREATE FUNCTION f() RETURNS bool LANGUAGE sql AS $$ SELECT pg_try_advisory_lock(1) $$",
    ),
    (
        "advisory_locks",
        "CREATE FUNCTION f() RETURNS bool LANGUAGE sql RETURN pg_try_advisory_lock(1)",
    ),
    (
        "multi_mutation_cte",
        "CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC"
        " WITH a AS (DELETE FROM job RETURNING *) INSERT INTO job SELECT * FROM a; END",
    ),
    ("reindex", "EXPLAIN ANALYZE SELECT 1; REINDEX TABLE job"),
    ("listen_notify", "PREPARE n AS SELECT pg_notify('c', 'p')"),
    ("skip_locked", "CREATE VIEW v AS SELECT id FROM job FOR UPDATE SKIP LOCKED"),
]


def _case_id(case: tuple[str, str]) -> str:
    return f"{case[0]}:{case[1][:50]}"


@pytest.mark.parametrize(("feature", "sql"), CASES, ids=[_case_id(c) for c in CASES])
def test_detector_rejects_for_backend_without_feature(feature: str, sql: str) -> None:
    assert violations(sql, without(feature)) == [feature]
    assert violations(sql, POSTGRES) == []
    assert violations(sql, CITUS) == []
    assert feature in violations(sql, COCKROACH)


def test_every_detector_has_a_case() -> None:
    assert {feature for feature, _ in CASES} == set(DETECTORS)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM job FOR UPDATE SKIP LOCKED", []),  # yugabytedb has SKIP LOCKED
        ("SELECT pg_advisory_xact_lock(1)", ["advisory_locks"]),
        ("CREATE TABLE t (x int) PARTITION BY RANGE (x)", ["partitioning"]),
        ("CREATE INDEX i ON t (x) INCLUDE (y)", []),  # covering indexes work on yugabytedb
        ("ALTER TABLE t ADD FOREIGN KEY (x) REFERENCES u DEFERRABLE", []),  # and deferrable FKs
        ("NOTIFY c", ["listen_notify"]),
        ("SELECT pg_get_indexdef(1)", []),  # drift_catalog is on for yugabytedb
        ("DO $$ BEGIN PERFORM 1; END $$", []),  # so is plpgsql_dynamic
        ("WITH a AS (DELETE FROM t RETURNING *) INSERT INTO t SELECT * FROM a", []),
        # a constant EXECUTE text is checked as SQL too
        ("DO $$ BEGIN EXECUTE 'SELECT pg_advisory_lock(1)'; END $$", ["advisory_locks"]),
    ],
)
def test_real_yugabytedb_flags(sql: str, expected: list[str]) -> None:
    assert violations(sql, YUGABYTE) == expected


LOOKALIKES = [
    "SELECT id FROM job WHERE state = 'created' ORDER BY id LIMIT 1 FOR UPDATE",
    "SELECT id FROM job FOR UPDATE NOWAIT",
    "SELECT id FROM job FOR NO KEY UPDATE",
    "WITH u AS (UPDATE a SET x = 1 RETURNING id) INSERT INTO b SELECT id FROM u",
    "WITH r AS (SELECT id FROM job), d AS (DELETE FROM job WHERE id IN (SELECT id FROM r)"
    " RETURNING id) SELECT count(*) FROM d, r, job",
    "WITH u AS (UPDATE s1.job SET x = 1 RETURNING id) INSERT INTO s2.job SELECT id FROM u",
    'WITH u AS (UPDATE job SET x = 1 RETURNING id) INSERT INTO "Job" SELECT id FROM u',
    "INSERT INTO job (id) SELECT id FROM job WHERE false ON CONFLICT (id) DO UPDATE SET x = 1",
    "UPDATE job SET data = $1 WHERE id = $2",
    "SELECT my_pg_notify_helper('x'), notify_all(), pg_notifyx(1), my_pg_advisory_lock(1)",
    "SELECT 'FOR UPDATE SKIP LOCKED' AS a, 'pg_advisory_lock(1)' AS b, 'LISTEN x' AS c",
    "INSERT INTO log (msg) VALUES ('REINDEX TABLE t; NOTIFY c; SET CONSTRAINTS ALL DEFERRED')",
    "SELECT $1::text -- FOR UPDATE SKIP LOCKED, pg_notify('a', 'b')",
    "SELECT 1 /* PARTITION BY LIST (x) INCLUDE (y) */",
    'SELECT "pg_advisory_lock" FROM t',  # a column, not a call
    "CREATE TABLE t (id int PRIMARY KEY, q text REFERENCES q (name) NOT DEFERRABLE)",
    "CREATE TABLE pgboss.job (id uuid, name text, state text, PRIMARY KEY (name, id))",
    "CREATE INDEX job_i1 ON pgboss.job (name, state) WHERE state < 'active'",
    "SET CONSTRAINTS ALL IMMEDIATE",
    "SELECT set_config('idle_in_transaction_session_timeout', '1000', true)",
    "SET LOCAL statement_timeout = 1000",
    "SELECT * FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    "SELECT relname FROM pg_class WHERE relname = 'pg_stat_user_tables'",
    "SELECT * FROM app.pg_stat_user_tables",  # a user table, not the catalog view
    "SELECT pg_get_userbyid(relowner), pg_get_serial_sequence('t', 'id') FROM pg_class",
    "SELECT 1; SELECT 2; VACUUM ANALYZE job",
    FUNC + " DECLARE x int; BEGIN SELECT count(*) INTO x FROM job WHERE id = a;"
    " IF x > 0 THEN UPDATE job SET state = 'x' WHERE id = a; END IF;"
    " RAISE NOTICE 'EXECUTE %, PERFORM pg_advisory_lock', x; RETURN x; END $$",
    "DO $$ BEGIN RAISE NOTICE 'PERFORM pg_notify(1)'; END $$",
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
    "CREATE FUNCTION f() RETURNS void LANGUAGE sql"
    " BEGIN ATOMIC UPDATE job SET x = 1; DELETE FROM job; END",  # two statements, not one
    "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$"
    " BEGIN UPDATE job SET x = 1; DELETE FROM job; END $$",
    "CREATE RULE r AS ON INSERT TO t DO ALSO"
    " (INSERT INTO log VALUES (1); INSERT INTO log VALUES (2))",
]


@pytest.mark.parametrize("sql", LOOKALIKES, ids=[s[:60] for s in LOOKALIKES])
def test_lookalikes_are_accepted_everywhere(sql: str) -> None:
    for name in backends.names():
        assert violations(sql, backends.get(name)) == [], name


def test_several_statements_report_every_feature() -> None:
    sql = "SELECT pg_notify('c', 'x'); SELECT 1; LISTEN c; REINDEX TABLE t"
    assert violations(sql, COCKROACH) == ["listen_notify", "reindex"]
    assert violations(sql, POSTGRES.with_capabilities(reindex=False)) == ["reindex"]


def test_unparseable_sql_is_refused_with_a_clear_error() -> None:
    with pytest.raises(GuardParseError) as info:
        violations("SELEC id FROM job", POSTGRES)
    assert info.value.sqlstate == "42601"
    assert "SELEC id FROM job" in str(info.value)
    assert isinstance(info.value, DatabaseError)
    with pytest.raises(GuardParseError, match="PL/pgSQL"):
        violations(f"{FUNC} BEGIN RETURN undeclared_var.x; ENDD $$", POSTGRES)


def test_parse_results_are_cached() -> None:
    sql = f"SELECT pg_advisory_xact_lock(1) /* {uuid.uuid4()} */"
    before = analyse_text.cache_info()
    for _ in range(5):
        assert violations(sql, COCKROACH) == ["advisory_locks"]
    after = analyse_text.cache_info()
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == 4


def test_statements_on_two_test_schemas_share_one_analysis() -> None:
    """Each test runs the same statements on a schema of its own: they are parsed once,
    and what the guard says of each still names its own schema."""
    marker = uuid.uuid4().hex
    first, second = fresh_name(), fresh_name()
    texts = [
        f'SELECT pg_advisory_xact_lock(1) FROM "{name}".job /* {marker} */'
        for name in (first, second)
    ]
    before = analyse_text.cache_info()
    found = [analyse(text) for text in texts]
    after = analyse_text.cache_info()
    assert after.misses - before.misses == 1 and after.hits - before.hits == 1
    assert [f.features for [f] in found] == [("advisory_locks",), ("advisory_locks",)]
    assert [f.statement for [f] in found] == texts


# ----------------------------------------------------------------------------- derivation


def _flag_variants() -> list[Backend]:
    """Every registered backend, plus postgres and cockroachdb with each feature flipped."""
    found = [backends.get(n) for n in backends.names()]
    for feature in POSTGRES.features():
        found.append(without(feature))
    for name in COCKROACH.capabilities.__dataclass_fields__:
        flipped = not getattr(COCKROACH.capabilities, name)
        found.append(COCKROACH.with_capabilities(**{name: flipped}))
    return found


def test_forbidden_set_is_derived_from_flags() -> None:
    for backend in _flag_variants():
        flags = backend.features()
        expected = {f for f, on in flags.items() if not on} & set(DETECTORS)
        assert forbidden_features(backend) == expected, backend.name
        assert GuardedDatabase(_Unused(), backend).forbidden == expected


def test_registered_backends_forbid_what_their_flags_say() -> None:
    for name in backends.names():
        backend = backends.get(name)
        flags = backend.features()
        expected = {f for f, on in flags.items() if not on} & set(DETECTORS)
        assert forbidden_features(backend) == expected, name
    assert forbidden_features(POSTGRES) == frozenset()
    assert forbidden_features(CITUS) == frozenset()
    assert forbidden_features(YUGABYTE) == {
        "advisory_locks",
        "partitioning",
        "listen_notify",
        "reindex",
        "vacuum_stats",
        "index_build_progress",
    }


def test_every_missing_cockroachdb_feature_has_a_detector() -> None:
    missing = {f for f, on in COCKROACH.features().items() if not on}
    # behaviour, not syntax (and single_session is off for every engine but PGlite)
    assert missing - set(DETECTORS) == {"transactional_ddl", "single_session"}
    assert {f for f in missing if f not in ("single_session", "transactional_ddl")} <= set(
        DETECTORS
    )
    assert set(DETECTORS) <= set(POSTGRES.features())  # every detector names a real flag


def test_switching_a_flag_on_lifts_the_ban() -> None:
    assert violations("LISTEN c", COCKROACH) == ["listen_notify"]
    assert violations("LISTEN c", COCKROACH.with_capabilities(listen_notify=True)) == []


class _Unused(Database):
    """An inner adapter for tests that never reach a database."""

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        raise AssertionError(f"nothing may run here: {sql}")

    async def _execute_script(self, sql: str) -> None:
        raise AssertionError(f"nothing may run here: {sql}")

    def _transaction(self) -> Any:
        raise AssertionError("nothing may run here")


# ----------------------------------------------------------------------------- the adapter


@pytest.fixture
async def inner() -> AsyncIterator[PsycopgDatabase]:
    db = await PsycopgDatabase.connect(DSN, max_size=3)
    yield db
    await db.close()


@pytest.fixture
async def schema(inner: PsycopgDatabase) -> AsyncIterator[str]:
    name = f"qcore_guard_{uuid.uuid4().hex[:10]}"
    await inner.execute_script(f"CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int)")
    yield name
    await inner.execute_script(f"DROP SCHEMA {name} CASCADE")


async def _exists(db: PsycopgDatabase, name: str) -> bool:
    rows = await db.execute("SELECT to_regclass($1) IS NOT NULL AS found", [name])
    return bool(rows[0]["found"])


async def _count(db: PsycopgDatabase, schema: str) -> int:
    rows = await db.execute(f"SELECT count(*) AS n FROM {schema}.t")
    return int(rows[0]["n"])


pg = pytest.mark.postgres


@pg
async def test_forbidden_statement_is_refused_and_not_executed(
    inner: PsycopgDatabase, schema: str
) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    ddl = f"CREATE TABLE {schema}.parted (id int, name text)\n  PARTITION BY LIST (name)"
    with pytest.raises(UnsupportedFeature) as info:
        await guarded.execute(ddl)
    err = info.value
    assert err.sqlstate == "0A000"
    assert err.feature == "partitioning"
    assert err.backend == "cockroachdb"
    assert err.retryable is False
    assert err.statement == f"CREATE TABLE {schema}.parted (id int, name text)"
    text = str(err)
    assert "cockroachdb" in text and "partitioning" in text and "parted (id int" in text
    assert not await _exists(inner, f"{schema}.parted")

    with pytest.raises(UnsupportedFeature):  # in a script, the allowed part does not run either
        await guarded.execute_script(f"CREATE TABLE {schema}.before (id int); {ddl}")
    assert not await _exists(inner, f"{schema}.before")
    assert not await _exists(inner, f"{schema}.parted")

    # the same statement through a postgres guard does run: the check above is not vacuous
    await GuardedDatabase(inner, POSTGRES).execute(ddl)
    assert await _exists(inner, f"{schema}.parted")


@pg
async def test_plpgsql_function_with_advisory_lock_is_not_created(
    inner: PsycopgDatabase, schema: str
) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    fn = (
        f"CREATE FUNCTION {schema}.claim() RETURNS void LANGUAGE plpgsql AS $$\n"
        "BEGIN\n  IF pg_try_advisory_xact_lock(42) THEN RETURN; END IF;\nEND $$"
    )
    with pytest.raises(UnsupportedFeature) as info:
        await guarded.execute_script(fn)
    assert info.value.feature == "advisory_locks"
    rows = await inner.execute("SELECT to_regprocedure($1) IS NULL AS gone", [f"{schema}.claim()"])
    assert rows[0]["gone"] is True
    plain = (
        f"CREATE FUNCTION {schema}.plain(a int) RETURNS int LANGUAGE plpgsql AS $$\n"
        f"DECLARE n int; BEGIN SELECT count(*) INTO n FROM {schema}.t; RETURN n + a; END $$"
    )
    await guarded.execute_script(plain)
    rows = await guarded.execute(f"SELECT {schema}.plain($1) AS n", [5])
    assert rows == [{"n": 5}]


@pg
async def test_allowed_statements_run(inner: PsycopgDatabase, schema: str) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    assert guarded.driver == "psycopg"
    assert guarded.can_listen is False
    await guarded.execute(f"INSERT INTO {schema}.t (id) VALUES ($1), ($2)", [1, 2])
    async with guarded.transaction() as tx:
        assert tx is not guarded
        rows = await tx.execute(f"SELECT id FROM {schema}.t ORDER BY id FOR UPDATE")
        assert rows == [{"id": 1}, {"id": 2}]
        rows = await guarded.execute(  # the root adapter joins the open transaction
            f"WITH u AS (UPDATE {schema}.t SET id = id + 10 RETURNING id)"
            " SELECT count(*) AS n FROM u"
        )
        assert rows == [{"n": 2}]
        with pytest.raises(UnsupportedFeature):
            await tx.execute(f"SELECT id FROM {schema}.t FOR UPDATE SKIP LOCKED")
    # the refused statement aborted the transaction, as an error on the engine would
    assert await _count(inner, schema) == 2
    rows = await guarded.execute(f"SELECT sum(id) AS s FROM {schema}.t")
    assert rows == [{"s": 3}]


@pg
async def test_listen_is_refused_without_listen_notify(inner: PsycopgDatabase) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    with pytest.raises(UnsupportedFeature) as info:
        await guarded.listen("pgboss_jobs", lambda channel, payload: None)
    assert info.value.feature == "listen_notify"
    assert GuardedDatabase(inner, POSTGRES).can_listen is True


@pg
async def test_injected_failure_rolls_the_transaction_back(
    inner: PsycopgDatabase, schema: str
) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    guarded.inject_serialization_failure(2)
    with pytest.raises(SerializationError) as info:
        async with guarded.transaction() as tx:
            await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (1)")
            await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (2)")
            pytest.fail("the second statement should have failed")
    err = info.value
    assert err.sqlstate == "40001"
    assert err.retryable is True
    assert err.statement == f"INSERT INTO {schema}.t (id) VALUES (2)"
    assert guarded.injected == 1
    assert await _count(inner, schema) == 0  # the first insert was rolled back

    async with guarded.transaction() as tx:  # the injection was used up
        await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (1)")
        await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (2)")
    assert await _count(inner, schema) == 2
    assert guarded.injected == 1


@pg
async def test_retry_loop_runs_through_injected_failures(
    inner: PsycopgDatabase, schema: str
) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    guarded.inject_serialization_failure(3, times=2)
    attempts = 0
    while True:
        attempts += 1
        try:
            async with guarded.transaction() as tx:
                for i in range(3):
                    await tx.execute(f"INSERT INTO {schema}.t (id) VALUES ($1)", [i])
            break
        except SerializationError as exc:
            assert exc.retryable
            assert attempts < 5
    assert attempts == 3
    assert guarded.injected == 2
    assert await _count(inner, schema) == 3


@pg
async def test_caught_injected_failure_still_aborts(inner: PsycopgDatabase, schema: str) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    guarded.inject_serialization_failure(2)
    async with guarded.transaction() as tx:
        await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (1)")
        with pytest.raises(SerializationError):
            await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (2)")
        with pytest.raises(DatabaseError) as info:
            await tx.execute(f"INSERT INTO {schema}.t (id) VALUES (3)")
        assert info.value.sqlstate == "25P02"
    assert await _count(inner, schema) == 0  # leaving the block rolled back, not committed


@pg
async def test_injection_outside_transactions(inner: PsycopgDatabase, schema: str) -> None:
    guarded = GuardedDatabase(inner, COCKROACH)
    guarded.inject_serialization_failure(2, times=2, in_transaction=False)
    insert = f"INSERT INTO {schema}.t (id) VALUES ($1)"
    await guarded.execute(insert, [1])
    for _ in range(2):
        with pytest.raises(SerializationError) as info:
            await guarded.execute(insert, [2])
        assert info.value.sqlstate == "40001" and info.value.retryable
    await guarded.execute(insert, [3])
    rows = await inner.execute(f"SELECT array_agg(id ORDER BY id) AS ids FROM {schema}.t")
    assert rows == [{"ids": [1, 3]}]
    assert guarded.injected == 2


@pg
async def test_emulation_conninfo_sets_cockroachdb_session() -> None:
    conninfo = emulation_conninfo(DSN, COCKROACH)
    assert "default_transaction_isolation=serializable" in conninfo
    db = await PsycopgDatabase.connect(conninfo, max_size=1)
    try:
        rows = await db.execute("SHOW transaction_isolation")
        assert rows == [{"transaction_isolation": "serializable"}]
    finally:
        await db.close()
    # existing options are kept alongside
    both = emulation_conninfo(make_conninfo(DSN, options="-c statement_timeout=12345"), COCKROACH)
    db = await PsycopgDatabase.connect(both, max_size=1)
    try:
        rows = await db.execute(
            "SELECT current_setting('transaction_isolation') AS iso,"
            " current_setting('statement_timeout') AS timeout"
        )
        assert rows == [{"iso": "serializable", "timeout": "12345ms"}]
    finally:
        await db.close()
    # every emulated session says which backend it stands in for, so the engine check
    # (qcore.engine.identify) reports an emulation, not a mismatch
    db = await PsycopgDatabase.connect(emulation_conninfo(DSN, POSTGRES), max_size=1)
    try:
        rows = await db.execute("SELECT current_setting('qcore.emulate') AS emulating")
        assert rows == [{"emulating": "postgres"}]
    finally:
        await db.close()

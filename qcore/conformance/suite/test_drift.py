"""Schema drift detection: a fresh install reports nothing; each kind of drift, injected
by hand, is reported in its category, and running the report's repair statements makes
the schema clean again. On a backend whose catalog cannot render definitions
(``drift_catalog`` off, CockroachDB) only presence is checked, and the report says what
it skipped."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from qcore.context import Context
from qcore.verbs.drift import DriftReport, detect_schema_drift
from qcore.verbs.queues import create_queue

pytestmark = pytest.mark.feature("drift")

Check = Callable[[DriftReport, str], bool]


def _job_table(ctx: Context) -> str:
    return "job_common" if ctx.backend.schema.partitioned else "job"


async def _queues(ctx: Context) -> None:
    await create_queue(ctx, "plain")
    for policy in ("short", "singleton", "stately", "exclusive", "key_strict_fifo"):
        await create_queue(ctx, f"p-{policy}", policy=policy)
    if ctx.backend.schema.partitioned:
        await create_queue(ctx, "own", partition=True, policy="key_strict_fifo")


async def test_a_fresh_install_has_no_drift(ctx: Context) -> None:
    await _queues(ctx)
    report = await detect_schema_drift(ctx)
    assert report.ok, report
    assert report.extra_indexes == ()
    if ctx.backend.capabilities.drift_catalog:
        assert report.skipped == ()
    else:
        assert "constraints" in report.skipped


# (what is injected, the report's finding, whether it needs definitions)
DRIFTS: dict[str, tuple[str, Check, bool]] = {
    "missing table": (
        "DROP TABLE {q}.warning",
        lambda r, t: (
            [m.table for m in r.missing_tables] == ["warning"]
            and [i.name for i in r.missing] == ["warning_i1"]
        ),
        False,
    ),
    "missing index": (
        "DROP INDEX {q}.{t}_i11",
        lambda r, t: [i.name for i in r.missing] == [f"{t}_i11"],
        False,
    ),
    "mismatched predicate": (
        "DROP INDEX {q}.{t}_i9; CREATE INDEX {t}_i9 ON {q}.{t} (name, id)"
        " WHERE blocking AND state = 'active'",
        lambda r, t: (
            [(i.name, i.differs) for i in r.mismatched] == [(f"{t}_i9", ("predicate",))]
            and r.mismatched[0].actual_predicate == "blocking AND (state = 'active')"
        ),
        True,
    ),
    "mismatched keys": (
        "DROP INDEX {q}.{t}_i15; CREATE INDEX {t}_i15 ON {q}.{t} (created_on, name)",
        lambda r, t: [(i.name, i.differs) for i in r.mismatched] == [(f"{t}_i15", ("keys",))],
        True,
    ),
    "changed index method": (
        "DROP INDEX {q}.{t}_i9; CREATE INDEX {t}_i9 ON {q}.{t} USING brin (name, id)"
        " WHERE blocking AND state = 'completed'",
        lambda r, t: (
            [(i.name, i.differs) for i in r.mismatched] == [(f"{t}_i9", ("method",))]
            and "USING brin" in (r.mismatched[0].actual_definition or "")
        ),
        True,
    ),
    "changed operator class": (
        "DROP INDEX {q}.{t}_i9; CREATE INDEX {t}_i9 ON {q}.{t} (name text_pattern_ops, id)"
        " WHERE blocking AND state = 'completed'",
        lambda r, t: (
            [(i.name, i.differs, i.actual_keys) for i in r.mismatched]
            == [(f"{t}_i9", ("keys",), "name text_pattern_ops, id")]
        ),
        True,
    ),
    "changed collation": (
        'DROP INDEX {q}.{t}_i9; CREATE INDEX {t}_i9 ON {q}.{t} (name COLLATE "C", id)'
        " WHERE blocking AND state = 'completed'",
        lambda r, t: (
            [(i.name, i.differs, i.actual_keys) for i in r.mismatched]
            == [(f"{t}_i9", ("keys",), 'name COLLATE "C", id')]
        ),
        True,
    ),
    "missing function": (
        "DROP FUNCTION {q}.delete_queue(text)",
        lambda r, t: [f.name for f in r.missing_functions] == ["delete_queue"],
        False,
    ),
    "changed function": (
        "CREATE OR REPLACE FUNCTION {q}.job_now() RETURNS timestamptz LANGUAGE sql STABLE"
        " AS $$ SELECT now() - interval '1 hour' $$",
        lambda r, t: (
            [f.name for f in r.mismatched_functions] == ["job_now"]
            and "1 hour" in (r.mismatched_functions[0].actual_body or "")
        ),
        True,
    ),
    "unexpected column": (
        "ALTER TABLE {q}.queue ADD COLUMN legacy_flag integer",
        lambda r, t: (
            [(c.table, c.unexpected_columns) for c in r.column_drift]
            == [("queue", ("legacy_flag",))]
        ),
        False,
    ),
    "missing column": (
        "ALTER TABLE {q}.instance DROP COLUMN metrics",
        lambda r, t: (
            [(c.table, c.missing_columns) for c in r.column_drift] == [("instance", ("metrics",))]
        ),
        False,
    ),
    "changed default": (
        "ALTER TABLE {q}.queue ALTER COLUMN notify SET DEFAULT true",
        lambda r, t: (
            [(m.column, m.expected) for c in r.column_drift for m in c.default_mismatches]
            == [("notify", "false")]
        ),
        True,
    ),
    "changed type": (
        "ALTER TABLE {q}.queue ALTER COLUMN retry_limit TYPE bigint",
        lambda r, t: (
            [(m.column, m.expected, m.actual) for c in r.column_drift for m in c.type_mismatches]
            == [("retry_limit", "integer", "bigint")]
        ),
        True,
    ),
    "changed nullability": (
        "ALTER TABLE {q}.queue ALTER COLUMN policy DROP NOT NULL",
        lambda r, t: (
            [
                (m.column, m.expected, m.actual)
                for c in r.column_drift
                for m in c.nullability_mismatches
            ]
            == [("policy", True, False)]
        ),
        True,
    ),
    "missing constraint": (
        "ALTER TABLE {q}.queue DROP CONSTRAINT queue_check",
        lambda r, t: (
            [(c.table, len(c.missing_constraints)) for c in r.constraint_drift] == [("queue", 1)]
        ),
        True,
    ),
    "unexpected constraint": (
        "ALTER TABLE {q}.schedule ADD CONSTRAINT mine CHECK (length(name) < 100)",
        lambda r, t: (
            [(c.table, len(c.unexpected_constraints)) for c in r.constraint_drift]
            == [("schedule", 1)]
        ),
        True,
    ),
}


@pytest.mark.parametrize("kind", sorted(DRIFTS))
async def test_each_drift_is_reported_and_its_repair_repairs_it(ctx: Context, kind: str) -> None:
    inject, found, needs_definitions = DRIFTS[kind]
    if needs_definitions and not ctx.backend.capabilities.drift_catalog:
        pytest.skip(f"{kind} needs the drift_catalog capability (rendered definitions)")
    await _queues(ctx)
    table = _job_table(ctx)
    await ctx.db.execute_script(inject.format(q=ctx.q, t=table))
    report = await detect_schema_drift(ctx)
    assert not report.ok
    assert found(report, table), report
    for statement in report.repairs():
        await ctx.db.execute_script(statement)
    repaired = await detect_schema_drift(ctx)
    assert repaired.ok, repaired


async def test_an_extra_index_is_a_warning_only(ctx: Context) -> None:
    table = _job_table(ctx)
    await ctx.db.execute_script(f"CREATE INDEX my_own ON {ctx.q}.{table} (data)")
    report = await detect_schema_drift(ctx)
    assert report.ok
    assert [(e.name, e.table) for e in report.extra_indexes] == [("my_own", table)]


async def test_an_index_an_async_migration_is_building_is_not_missing(ctx: Context) -> None:
    table = _job_table(ctx)
    await ctx.db.execute_script(f"DROP INDEX {ctx.q}.{table}_i11")
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.bam (name, version, status, table_name, command)"
        " VALUES ('rebuild', 46, 'in_progress', $1, $2)",
        [table, f"CREATE INDEX CONCURRENTLY {table}_i11 ON {ctx.q}.{table} (name)"],
    )
    report = await detect_schema_drift(ctx)
    assert report.ok and report.missing == ()
    assert [i.name for i in report.building] == [f"{table}_i11"]


async def test_a_changed_state_enum_is_reported_without_a_repair(ctx: Context) -> None:
    await ctx.db.execute_script(f"ALTER TYPE {ctx.q}.job_state ADD VALUE 'zombie'")
    report = await detect_schema_drift(ctx)
    assert not report.ok and report.enum_drift is not None
    assert report.enum_drift.actual_values[-1] == "zombie"
    assert report.repairs() == []


async def test_qcore_s_own_tables_are_never_pgboss_drift(ctx: Context) -> None:
    await ctx.db.execute_script(f"DROP TABLE {ctx.q}.qcore_job_pattern")
    await ctx.db.execute_script(f"CREATE INDEX qcore_extra ON {ctx.q}.qcore_lock (expires_on)")
    report = await detect_schema_drift(ctx)
    assert report.ok and report.extra_indexes == ()


async def test_a_partition_table_dropped_behind_its_queue_is_reported(ctx: Context) -> None:
    if not ctx.backend.schema.partitioned:
        pytest.skip("per-queue job tables need the partitioned schema shape")
    await create_queue(ctx, "own", partition=True)
    [row] = await ctx.db.execute(f"SELECT table_name FROM {ctx.q}.queue WHERE name = 'own'")
    await ctx.db.execute_script(f"DROP TABLE {ctx.q}.{row['table_name']}")
    report = await detect_schema_drift(ctx)
    assert [t.table for t in report.missing_tables] == [row["table_name"]]
    for statement in report.repairs():
        await ctx.db.execute_script(statement)
    assert (await detect_schema_drift(ctx)).ok
